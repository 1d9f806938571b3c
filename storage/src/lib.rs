//! Warren's storage engine: a segmented, append-only log of records with dense u64
//! offsets, a memory-mapped sparse index and time index per segment, retention,
//! crash recovery that reads only the tail, stepping past (and reporting once) damaged
//! records found later, and group commit with a durable watermark. Also openraft's log
//! storage over the same log ([`raft::RaftLog`]), so that a Raft group's log is a segment
//! log.
//!
//! The on-disk format is specified in `storage/README.md`. Start at [`Log`].

mod alternating_file;
pub mod blocking_io;
mod config;
mod damage;
mod entry_file;
mod error;
mod file_cache;
mod flusher;
mod graveyard;
mod group_commit;
pub mod latency;
mod log;
pub mod raft;
mod reader;
mod record;
mod recovery;
mod retention;
mod segment;
mod snapshot_file;
mod sparse_index;
mod time_index;
mod truncate;
mod writeback;

pub use alternating_file::AlternatingFile;
pub use config::{
    FlushPolicy, LogConfig, DEFAULT_FLUSH_BYTES, DEFAULT_FLUSH_INTERVAL_MS, DEFAULT_INDEX_INTERVAL_BYTES,
    DEFAULT_MAX_RECORD_BYTES, DEFAULT_SEGMENT_BYTES, DEFAULT_WRITE_BUFFER_BYTES, MAX_SEGMENT_BYTES,
};
pub use damage::DamagedRange;
pub use error::{Result, StorageError};
pub use file_cache::{
    max_open_segment_files, open_segment_files, set_max_open_segment_files, DEFAULT_MAX_OPEN_SEGMENT_FILES,
};
pub use flusher::{Flusher, SHARED_FLUSHER_THREADS};
pub use log::{Log, Retention};
pub use raft::{RaftLog, RaftLogError};
pub use reader::{FilteredRead, HeaderFilter};
pub use record::{NewRecord, Record, HEADER_BYTES, MAGIC_V1};
pub use retention::RetentionOutcome;
pub use snapshot_file::SnapshotFile;
