//! Log configuration: segment sizing, index density, flush policy, retention, and the
//! validation that keeps those values within what the on-disk formats can express.

use std::time::Duration;

use crate::error::{Result, StorageError};

/// Default segment size before rolling: 64 MiB.
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 * 1024 * 1024;
/// Default distance between sparse-index entries: 4 KiB of log.
pub const DEFAULT_INDEX_INTERVAL_BYTES: u32 = 4 * 1024;
/// Default group-commit spacing: fsyncs of one log start at least this far apart.
pub const DEFAULT_FLUSH_INTERVAL_MS: u64 = 1;
/// Default pending-bytes threshold that triggers an early group commit: 4 MiB.
pub const DEFAULT_FLUSH_BYTES: u64 = 4 * 1024 * 1024;
/// Default user-space write buffer per log: 256 KiB.
pub const DEFAULT_WRITE_BUFFER_BYTES: usize = 256 * 1024;
/// Default largest accepted payload: 16 MiB.
pub const DEFAULT_MAX_RECORD_BYTES: usize = 16 * 1024 * 1024;
/// Index positions are u32, so a segment can never be larger than this.
pub const MAX_SEGMENT_BYTES: u64 = u32::MAX as u64;

/// When appended records are forced to stable storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FlushPolicy {
    /// fsync before `append` returns; the durable offset follows every append.
    Always,
    /// Group commit: a flusher fsyncs at most every `flush_interval` or once
    /// `flush_bytes` are pending, then publishes the durable offset.
    #[default]
    Batch,
    /// Never fsync; the durable offset follows the appended offset at once and the OS
    /// writes pages back when it likes.
    Never,
    /// fsync only when asked ([`crate::Log::flush`]), and each segment as it is sealed (so a
    /// crash leaves no hole before the tail); otherwise as `Never`. For a log whose records
    /// are kept durably elsewhere until it is flushed: a replicated stream's, whose Raft log
    /// holds them until a snapshot has flushed the stream's log.
    OnFlush,
}

impl FlushPolicy {
    /// Whether appends are fsynced as the log grows (and the durable offset is a promise).
    pub fn fsyncs_appends(self) -> bool {
        matches!(self, FlushPolicy::Always | FlushPolicy::Batch)
    }

    /// Whether sealed segments, truncations, directory changes and asked-for flushes are
    /// fsynced.
    pub fn fsyncs_structure(self) -> bool {
        self != FlushPolicy::Never
    }
}

/// Configuration of one log.
#[derive(Debug, Clone)]
pub struct LogConfig {
    /// Roll to a new segment once the active one reaches this size.
    pub segment_bytes: u64,
    /// Roll once a record's timestamp is this far past the active segment's first record.
    pub segment_age: Option<Duration>,
    /// Write a sparse-index (and time-index) entry every this many bytes of log.
    pub index_interval_bytes: u32,
    /// When to fsync.
    pub flush_policy: FlushPolicy,
    /// Group-commit spacing for [`FlushPolicy::Batch`]: a log's fsyncs start at least
    /// this far apart, and the first append after a quiet spell is flushed at once. Also
    /// how long unwritten buffered bytes may sit in memory under [`FlushPolicy::Never`].
    pub flush_interval: Duration,
    /// Pending bytes that trigger a flush before `flush_interval` elapses.
    pub flush_bytes: u64,
    /// Size of the user-space write buffer; appends reach the file in chunks this big.
    pub write_buffer_bytes: usize,
    /// Largest accepted payload.
    pub max_record_bytes: usize,
    /// Delete oldest whole segments while the log is larger than this.
    pub retention_bytes: Option<u64>,
    /// Delete whole segments whose newest record is older than this.
    pub retention_age: Option<Duration>,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            segment_age: None,
            index_interval_bytes: DEFAULT_INDEX_INTERVAL_BYTES,
            flush_policy: FlushPolicy::default(),
            flush_interval: Duration::from_millis(DEFAULT_FLUSH_INTERVAL_MS),
            flush_bytes: DEFAULT_FLUSH_BYTES,
            write_buffer_bytes: DEFAULT_WRITE_BUFFER_BYTES,
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
            retention_bytes: None,
            retention_age: None,
        }
    }
}

impl LogConfig {
    /// Checks that every value is usable; `Log::open` calls this.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: &str| Err(StorageError::BadConfig(m.to_string()));
        if self.segment_bytes < 1024 || self.segment_bytes > MAX_SEGMENT_BYTES {
            return bad("segment_bytes must be within [1 KiB, 4 GiB)");
        }
        if self.index_interval_bytes == 0 {
            return bad("index_interval_bytes must be positive");
        }
        if self.max_record_bytes == 0 || self.max_record_bytes as u64 > MAX_SEGMENT_BYTES / 2 {
            return bad("max_record_bytes must be within [1, 2 GiB)");
        }
        if self.segment_age.is_some_and(|a| a.is_zero()) {
            return bad("segment_age must be positive");
        }
        if self.flush_policy == FlushPolicy::Batch && self.flush_interval.is_zero() {
            return bad("flush_interval must be positive under the batch policy");
        }
        Ok(())
    }

    /// Sparse-index capacity, in entries, for one segment: an entry needs at least
    /// `index_interval_bytes` of log, plus one for the first record and one spare.
    pub(crate) fn index_capacity_entries(&self) -> usize {
        (self.segment_bytes / u64::from(self.index_interval_bytes)) as usize + 2
    }
}
