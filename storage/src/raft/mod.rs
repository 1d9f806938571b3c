//! openraft's log storage over the segment log: a Raft group's log *is* a warren-storage
//! [`Log`](crate::Log), one record per entry with record offset == entry index, beside a
//! small atomically replaced file holding the vote, the committed log id and the last
//! purged log id. Generic over any [`openraft::RaftTypeConfig`]: this crate never knows
//! the commands it stores.
//!
//! - `log_storage`: [`RaftLog`], implementing `RaftLogStorage` and `RaftLogReader`.
//! - `meta`: the vote / committed / last-purged file.
//! - `codec`: how entries are encoded in records.
//! - `error`: [`RaftLogError`] and its mapping into openraft's `StorageError`.

mod codec;
mod error;
mod log_storage;
mod meta;

pub use codec::{decode_payload, ENTRY_FORMAT_POSTCARD};
pub use error::RaftLogError;
pub use log_storage::{RaftLog, COMMITTED_SAVE_INTERVAL_MS, LIMITED_READ_MAX_BYTES, META_FILE_NAME};
