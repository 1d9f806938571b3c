//! Errors of the Raft log storage, and their mapping into openraft's `StorageError`
//! with the subject (vote, logs, one log entry, the store) and verb (read, write, delete)
//! of the operation that failed. openraft treats any of them as fatal for the node.

use std::path::PathBuf;

use openraft::{AnyError, ErrorSubject, ErrorVerb, NodeId, StorageIOError};

use crate::error::StorageError;

/// Everything that can go wrong in [`RaftLog`](crate::raft::RaftLog).
#[derive(Debug, thiserror::Error)]
pub enum RaftLogError {
    /// The segment log failed (I/O, disk full, damage, closed, failed earlier).
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// An entry could not be serialized.
    #[error("cannot encode the Raft entry at index {index}: {source}")]
    Encode {
        /// The entry's index.
        index: u64,
        /// What the encoder said.
        #[source]
        source: postcard::Error,
    },
    /// A record does not hold a well-formed entry (unknown encoding, bad bytes, or an
    /// entry whose index is not the record's offset).
    #[error("the record at offset {index} is not a valid Raft entry: {reason}")]
    Decode {
        /// The record's offset (the entry's expected index).
        index: u64,
        /// What did not check out.
        reason: String,
    },
    /// An appended entry does not continue the log: Raft logs have no holes.
    #[error("Raft entry {index} does not continue the log, whose next index is {expected}")]
    NotContiguous {
        /// The entry's index.
        index: u64,
        /// The index the log expected.
        expected: u64,
    },
    /// A truncation below the purge point: purged entries are committed and applied.
    #[error("cannot truncate the Raft log at {index}: entries up to {last_purged} are purged")]
    TruncatePurged {
        /// Where the truncation was asked for.
        index: u64,
        /// The last purged index.
        last_purged: u64,
    },
    /// The file holding the vote, committed and purged log ids is unreadable. Opening
    /// refuses to guess a vote (that could vote twice in one term).
    #[error("the Raft state file {path} is unreadable: {reason}")]
    BadMeta {
        /// The file.
        path: PathBuf,
        /// What did not check out.
        reason: String,
    },
}

impl RaftLogError {
    /// This error as openraft's, about `subject` (or the one entry the error names) while
    /// doing `verb`.
    pub(crate) fn into_raft<NID: NodeId>(
        self,
        subject: ErrorSubject<NID>,
        verb: ErrorVerb,
    ) -> openraft::StorageError<NID> {
        let subject = match &self {
            RaftLogError::Encode { index, .. }
            | RaftLogError::Decode { index, .. }
            | RaftLogError::NotContiguous { index, .. } => ErrorSubject::LogIndex(*index),
            _ => subject,
        };
        StorageIOError::new(subject, verb, AnyError::new(&self)).into()
    }

    /// This error as the `io::Error` openraft's append callback takes.
    pub(crate) fn into_io(self) -> std::io::Error {
        std::io::Error::other(self)
    }
}
