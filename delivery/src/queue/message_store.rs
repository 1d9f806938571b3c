//! Where a queue keeps the bodies of its messages, behind one trait.
//!
//! A queue addresses its messages by offset: dense, increasing, assigned at append. That is the
//! shape of a log, so the durable store (a log per queue) implements this trait without the
//! queue's delivery logic changing. The in-memory store here serves transient queues.

use crate::message::Message;
use std::collections::VecDeque;
use std::sync::Arc;

/// A message store failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The offset is not (or no longer) stored.
    #[error("no message at offset {0}")]
    Missing(u64),
    /// The storage below failed (disk full, I/O error).
    #[error("message store failed: {0}")]
    Io(String),
}

/// The storage of one queue's messages, addressed by offset.
pub trait MessageStore: Send {
    /// Stores a message; returns its offset, one past the previous append's.
    fn append(&mut self, message: Arc<Message>) -> Result<u64, StoreError>;
    /// Reads a stored, unsettled message.
    fn read(&self, offset: u64) -> Result<Arc<Message>, StoreError>;
    /// Forgets a settled message; its space may be reclaimed.
    fn remove(&mut self, offset: u64);
}

/// Messages in memory, in a ring indexed by `offset - base`.
#[derive(Debug, Default)]
pub struct MemoryStore {
    base: u64,
    slots: VecDeque<Option<Arc<Message>>>,
}

impl MessageStore for MemoryStore {
    fn append(&mut self, message: Arc<Message>) -> Result<u64, StoreError> {
        self.slots.push_back(Some(message));
        Ok(self.base + self.slots.len() as u64 - 1)
    }

    fn read(&self, offset: u64) -> Result<Arc<Message>, StoreError> {
        offset
            .checked_sub(self.base)
            .and_then(|i| self.slots.get(i as usize))
            .and_then(|slot| slot.clone())
            .ok_or(StoreError::Missing(offset))
    }

    fn remove(&mut self, offset: u64) {
        let Some(index) = offset.checked_sub(self.base) else { return };
        if let Some(slot) = self.slots.get_mut(index as usize) {
            *slot = None;
        }
        // Settled messages at the head free their slots, as a log deletes settled segments.
        while let Some(None) = self.slots.front() {
            self.slots.pop_front();
            self.base += 1;
        }
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

    #[test]
    fn offsets_are_dense_and_removal_frees_the_head() {
        let mut store = MemoryStore::default();
        assert_eq!(store.append(message(b"a")), Ok(0));
        assert_eq!(store.append(message(b"b")), Ok(1));
        assert_eq!(store.append(message(b"c")), Ok(2));
        store.remove(1);
        assert_eq!(store.read(1).err(), Some(StoreError::Missing(1)));
        store.remove(0);
        assert_eq!(store.slots.len(), 1);
        assert_eq!(store.read(2).map(|m| m.body.clone()), Ok(Bytes::from_static(b"c")));
        assert_eq!(store.append(message(b"d")), Ok(3));
    }
}
