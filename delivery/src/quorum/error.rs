//! [`QuorumError`]: what can go wrong with a quorum queue's snapshots.

use super::state::MissingHolder;

/// A snapshot could not be encoded, decoded, restored or stored.
#[derive(Debug, thiserror::Error)]
pub enum QuorumError {
    /// Encoding failed.
    #[error("cannot encode a quorum-queue snapshot: {0}")]
    Encode(postcard::Error),
    /// The bytes are not a snapshot.
    #[error("cannot decode a quorum-queue snapshot: {0}")]
    Decode(postcard::Error),
    /// Bytes follow the snapshot (or there are none at all).
    #[error("a quorum-queue snapshot has {0} unexpected trailing bytes (or is empty)")]
    Trailing(usize),
    /// A format this build does not know.
    #[error("unknown quorum-queue snapshot format version {0}")]
    Version(u8),
    /// The snapshot is inconsistent.
    #[error("inconsistent quorum-queue snapshot: {0}")]
    Inconsistent(#[from] MissingHolder),
    /// The snapshot file could not be read or written.
    #[error("quorum-queue snapshot file: {0}")]
    Storage(#[from] warren_storage::StorageError),
}
