//! Where messages are kept, behind one trait: queues, delayed exchanges and streams use it.
//!
//! A store addresses its messages by offset: dense, increasing, assigned at append. That is
//! the shape of a log, so the durable store ([`LogStore`], over a `warren-storage` log) and the
//! in-memory one here implement the same trait, and a queue's delivery logic does not know
//! which it has. How a message is laid out in a record is `codec`; reads of a durable log by
//! offset (a stream's, or a durable classic queue's) are `log_browser`.

pub(crate) mod codec;
mod commit_wait;
mod lazy_store;
pub mod log_browser;
mod log_store;
mod transient_store;

pub use commit_wait::CommitTracker;

pub use crate::message::MESSAGE_OVERHEAD_BYTES;
pub use lazy_store::LazyLogStore;
pub use log_store::{LogStore, LogStoreConfig};
pub use transient_store::{PageFile, TransientStore, TRANSIENT_MEMORY_BUDGET_BYTES};

/// How long publisher confirms take, from the first publish of a batch of frames to the
/// confirm sent for it (the protocol layer records it; the metrics show it).
pub static CONFIRM_LATENCY: warren_storage::latency::LatencyHistogram =
    warren_storage::latency::LatencyHistogram::new();

use crate::message::Message;
use std::collections::VecDeque;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use warren_storage::{Log, StorageError};

/// What kind of failure the storage below had: what an operator (and later, the broker's
/// alarms) does about it differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// No space left on the device (or the quota is exhausted).
    DiskFull,
    /// The broker may not read or write its files.
    PermissionDenied,
    /// Bytes on disk are not what was written.
    Corruption,
    /// The store was closed, or failed earlier and refuses writes.
    Closed,
    /// Any other I/O error.
    Io,
}

impl From<&StorageError> for FailureKind {
    fn from(error: &StorageError) -> Self {
        match error {
            StorageError::DiskFull { .. } => FailureKind::DiskFull,
            StorageError::PermissionDenied { .. } => FailureKind::PermissionDenied,
            StorageError::Corruption { .. } => FailureKind::Corruption,
            StorageError::Closed | StorageError::Failed(_) => FailureKind::Closed,
            _ => FailureKind::Io,
        }
    }
}

/// A message store failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The offset is not (or no longer) stored.
    #[error("no message at offset {0}")]
    Missing(u64),
    /// The storage below failed.
    #[error("message store failed: {detail}")]
    Storage {
        /// Disk full, corruption, ...
        kind: FailureKind,
        /// What failed, with the file concerned.
        detail: String,
    },
    /// The records at these offsets are damaged on disk (the storage engine reported where,
    /// once) or hold bytes that do not decode as a message: they are lost, and the store
    /// never returns them. The range holds the offset asked for and may reach beyond it.
    #[error("damaged message record(s) at offsets {}..{}; skipped", .0.start, .0.end)]
    Damaged(Range<u64>),
    /// The queue refused the message (`x-overflow: reject-publish`) when its write was
    /// applied: the publisher gets a nack.
    #[error("refused by the queue's x-overflow")]
    Refused,
}

impl From<StorageError> for StoreError {
    fn from(error: StorageError) -> Self {
        StoreError::Storage { kind: FailureKind::from(&error), detail: error.to_string() }
    }
}

impl StoreError {
    /// A file operation of the store's own (outside the log) failed on `path`.
    pub(crate) fn file(path: &Path, error: std::io::Error) -> Self {
        let kind = match error.kind() {
            std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => FailureKind::DiskFull,
            std::io::ErrorKind::PermissionDenied => FailureKind::PermissionDenied,
            _ => FailureKind::Io,
        };
        StoreError::Storage { kind, detail: format!("{}: {error}", path.display()) }
    }
}

/// The point a publisher confirm must wait for: an append made durable in a local log, or
/// writes of a quorum queue committed by its Raft group.
#[derive(Clone)]
pub struct DurableMark {
    point: Point,
}

#[derive(Clone)]
enum Point {
    /// Offsets up to this one of a local log fsynced.
    Log { log: Arc<Log>, offset: u64 },
    /// Writes `first..=last` of a quorum queue committed.
    Commit { tracker: Arc<CommitTracker>, first: u64, last: u64 },
}

impl std::fmt::Debug for DurableMark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.point {
            Point::Log { offset, .. } => f.debug_struct("DurableMark").field("offset", offset).finish_non_exhaustive(),
            Point::Commit { first, last, .. } => {
                f.debug_struct("DurableMark").field("writes", &(first..=last)).finish_non_exhaustive()
            }
        }
    }
}

impl DurableMark {
    /// The append at `offset` in `log`.
    pub(crate) fn new(log: &Arc<Log>, offset: u64) -> Self {
        DurableMark { point: Point::Log { log: Arc::clone(log), offset } }
    }

    /// Write `number` of a quorum queue, whose outcomes `tracker` learns.
    pub(crate) fn commit(tracker: &Arc<CommitTracker>, number: u64) -> Self {
        DurableMark { point: Point::Commit { tracker: Arc::clone(tracker), first: number, last: number } }
    }

    /// Folds `other` into this mark if both wait on the same log or queue (keeping the later
    /// point): one wait then covers both. False if they do not.
    pub fn absorb(&mut self, other: &DurableMark) -> bool {
        match (&mut self.point, &other.point) {
            (Point::Log { log, offset }, Point::Log { log: other_log, offset: other_offset })
                if Arc::ptr_eq(log, other_log) =>
            {
                *offset = (*offset).max(*other_offset);
                true
            }
            (
                Point::Commit { tracker, first, last },
                Point::Commit { tracker: other_tracker, first: other_first, last: other_last },
            ) if Arc::ptr_eq(tracker, other_tracker) => {
                *first = (*first).min(*other_first);
                *last = (*last).max(*other_last);
                true
            }
            _ => false,
        }
    }

    /// Waits until the write is safe; an error if the log failed first, or if the queue
    /// refused a write ([`StoreError::Refused`]).
    pub async fn wait(&self) -> Result<(), StoreError> {
        match &self.point {
            Point::Log { log, offset } => Ok(log.wait_durable(*offset).await?),
            Point::Commit { tracker, first, last } => tracker.wait(*first, *last).await,
        }
    }
}

/// What an append produced.
#[derive(Debug)]
pub struct Appended {
    /// The message's offset in the store.
    pub offset: u64,
    /// What a confirm must wait for, if the store is durable.
    pub durable: Option<DurableMark>,
}

/// The storage of one queue's messages, addressed by offset.
pub trait MessageStore: Send {
    /// Stores a message; its offset is one past the previous append's.
    fn append(&mut self, message: &Arc<Message>) -> Result<Appended, StoreError>;
    /// Reads a stored, unsettled message. [`StoreError::Damaged`] if its record is damaged:
    /// the caller drops the message and settles it, so that it is not read again.
    fn read(&mut self, offset: u64) -> Result<Arc<Message>, StoreError>;
    /// Forgets settled messages; their space may be reclaimed.
    fn remove(&mut self, offsets: &[u64]) -> Result<(), StoreError>;
    /// Notes that the message at `offset` was handed to a consumer.
    fn delivered(&mut self, _offset: u64) {}
    /// Records what `delivered` noted, where the store keeps such things.
    fn sync(&mut self) -> Result<(), StoreError> {
        Ok(())
    }
    /// Bytes the store keeps on disk (0 for one kept in memory).
    fn disk_bytes(&self) -> u64 {
        0
    }
    /// Reads of the store's log by offset, if it keeps one.
    fn browser(&self) -> Option<log_browser::LogBrowser> {
        None
    }
    /// The broker is stopping: make everything stored durable.
    fn close(&mut self) -> Result<(), StoreError> {
        Ok(())
    }
    /// The queue was deleted: release the store and whatever it holds on disk.
    fn destroy(self: Box<Self>) {}
}

/// Slots an empty in-memory store may keep room for.
const EMPTY_STORE_KEEP_SLOTS: usize = 4096;

/// Messages in memory, in a ring indexed by `offset - base`.
#[derive(Debug, Default)]
pub struct MemoryStore {
    base: u64,
    slots: VecDeque<Option<Arc<Message>>>,
}

impl MessageStore for MemoryStore {
    fn append(&mut self, message: &Arc<Message>) -> Result<Appended, StoreError> {
        self.slots.push_back(Some(Arc::clone(message)));
        Ok(Appended { offset: self.base + self.slots.len() as u64 - 1, durable: None })
    }

    fn read(&mut self, offset: u64) -> Result<Arc<Message>, StoreError> {
        offset
            .checked_sub(self.base)
            .and_then(|i| self.slots.get(i as usize))
            .and_then(|slot| slot.clone())
            .ok_or(StoreError::Missing(offset))
    }

    fn remove(&mut self, offsets: &[u64]) -> Result<(), StoreError> {
        self.remove_counting(offsets.iter().copied());
        Ok(())
    }
}

impl MemoryStore {
    /// Forgets the messages at `offsets`; the memory they took ([`Message::memory_bytes`]).
    pub(crate) fn remove_counting(&mut self, offsets: impl Iterator<Item = u64>) -> usize {
        let mut memory_bytes = 0;
        for offset in offsets {
            if let Some(message) =
                offset.checked_sub(self.base).and_then(|i| self.slots.get_mut(i as usize)).and_then(Option::take)
            {
                memory_bytes += message.memory_bytes();
            }
        }
        // Settled messages at the head free their slots, as a log deletes settled segments.
        while let Some(None) = self.slots.front() {
            self.slots.pop_front();
            self.base += 1;
        }
        if self.slots.is_empty() && self.slots.capacity() > EMPTY_STORE_KEEP_SLOTS {
            // A drained or purged backlog would otherwise keep its ring allocated for good.
            self.slots = VecDeque::new();
        }
        memory_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::properties::Properties;
    use bytes::Bytes;

    fn message(body: &'static [u8]) -> Arc<Message> {
        Arc::new(Message {
            exchange: "".into(),
            routing_key: "q".into(),
            properties: Properties::empty(),
            body: Bytes::from_static(body),
        })
    }

    fn append(store: &mut MemoryStore, body: &'static [u8]) -> u64 {
        store.append(&message(body)).map(|a| a.offset).unwrap_or(u64::MAX)
    }

    #[test]
    fn offsets_are_dense_and_removal_frees_the_head() {
        let mut store = MemoryStore::default();
        assert_eq!(append(&mut store, b"a"), 0);
        assert_eq!(append(&mut store, b"b"), 1);
        assert_eq!(append(&mut store, b"c"), 2);
        store.remove(&[1]).expect("remove");
        assert_eq!(store.read(1).err(), Some(StoreError::Missing(1)));
        store.remove(&[0]).expect("remove");
        assert_eq!(store.slots.len(), 1);
        assert_eq!(store.read(2).map(|m| m.body.clone()), Ok(Bytes::from_static(b"c")));
        assert_eq!(append(&mut store, b"d"), 3);
    }
}
