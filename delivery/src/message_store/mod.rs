//! Where messages are kept, behind one trait: queues, delayed exchanges and streams use it.
//!
//! A store addresses its messages by offset: dense, increasing, assigned at append. That is
//! the shape of a log, so the durable store ([`LogStore`], over a `warren-storage` log) and the
//! in-memory one here implement the same trait, and a queue's delivery logic does not know
//! which it has. How a message is laid out in a record is `codec`.

pub(crate) mod codec;
mod log_store;

pub use log_store::{LogStore, LogStoreConfig};

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

/// The point a publisher confirm must wait for: an append made durable.
#[derive(Clone)]
pub struct DurableMark {
    log: Arc<Log>,
    offset: u64,
}

impl std::fmt::Debug for DurableMark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DurableMark").field("offset", &self.offset).finish_non_exhaustive()
    }
}

impl DurableMark {
    /// The append at `offset` in `log`.
    pub(crate) fn new(log: &Arc<Log>, offset: u64) -> Self {
        DurableMark { log: Arc::clone(log), offset }
    }

    /// Folds `other` into this mark if both wait on the same log (keeping the later point):
    /// one wait then covers both. False if they are in different logs.
    pub fn absorb(&mut self, other: &DurableMark) -> bool {
        if !Arc::ptr_eq(&self.log, &other.log) {
            return false;
        }
        self.offset = self.offset.max(other.offset);
        true
    }

    /// Waits until the append is durable; an error if the log failed first.
    pub async fn wait(&self) -> Result<(), StoreError> {
        Ok(self.log.wait_durable(self.offset).await?)
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
        for &offset in offsets {
            if let Some(slot) = offset.checked_sub(self.base).and_then(|i| self.slots.get_mut(i as usize)) {
                *slot = None;
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
        Ok(())
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
