//! Typed errors for the storage engine: every failure the disk can cause maps to a
//! variant here, so callers can tell "disk full" from "corrupt segment" from "bad config".

use std::io;
use std::path::{Path, PathBuf};

/// Result alias used throughout the crate.
pub type Result<T> = std::result::Result<T, StorageError>;

/// Everything that can go wrong in the storage engine.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The filesystem has no space left (ENOSPC) or the quota is exhausted.
    #[error("disk full while writing {path}")]
    DiskFull {
        /// File being written.
        path: PathBuf,
        /// Underlying OS error.
        #[source]
        source: io::Error,
    },
    /// The process may not read or write a file or directory.
    #[error("permission denied on {path}")]
    PermissionDenied {
        /// File or directory concerned.
        path: PathBuf,
        /// Underlying OS error.
        #[source]
        source: io::Error,
    },
    /// Any other I/O failure.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// File or directory concerned.
        path: PathBuf,
        /// Underlying OS error.
        #[source]
        source: io::Error,
    },
    /// Bytes on disk are not a valid record where one must be.
    #[error("corruption in segment {path} at byte {position}: {reason}")]
    Corruption {
        /// Segment (`.log`) file holding the damage.
        path: PathBuf,
        /// Byte position of the damaged record within that file.
        position: u64,
        /// What check failed.
        reason: String,
    },
    /// The configuration is inconsistent or out of range.
    #[error("bad storage config: {0}")]
    BadConfig(String),
    /// An offset outside the log's retained range was requested.
    #[error("offset {offset} out of range: log holds [{first}, {next})")]
    OffsetOutOfRange {
        /// Offset asked for.
        offset: u64,
        /// First retained offset.
        first: u64,
        /// Next offset to be assigned (one past the last record).
        next: u64,
    },
    /// A record's payload exceeds `LogConfig::max_record_bytes`.
    #[error("record of {len} bytes exceeds the limit of {max} bytes")]
    RecordTooLarge {
        /// Payload length.
        len: usize,
        /// Configured limit.
        max: usize,
    },
    /// The log was closed.
    #[error("log is closed")]
    Closed,
    /// An earlier write or fsync failed; the log refuses further writes because the
    /// state of the page cache can no longer be trusted (see "fsyncgate").
    #[error("log failed earlier and accepts no more writes: {0}")]
    Failed(String),
}

impl StorageError {
    /// Classifies an OS error on `path` into the matching variant.
    pub(crate) fn from_io(path: &Path, source: io::Error) -> Self {
        let path = path.to_path_buf();
        match source.kind() {
            io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded => StorageError::DiskFull { path, source },
            io::ErrorKind::PermissionDenied => StorageError::PermissionDenied { path, source },
            _ => StorageError::Io { path, source },
        }
    }

    /// Builds a corruption error for `path` at `position`.
    pub(crate) fn corruption(path: &Path, position: u64, reason: impl Into<String>) -> Self {
        StorageError::Corruption { path: path.to_path_buf(), position, reason: reason.into() }
    }
}

/// Adds the path to an `io::Result`, classifying the error.
pub(crate) trait IoContext<T> {
    fn at(self, path: &Path) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn at(self, path: &Path) -> Result<T> {
        self.map_err(|e| StorageError::from_io(path, e))
    }
}
