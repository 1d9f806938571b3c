//! Transient messages: kept in memory up to a budget per queue, paged to a log on disk past
//! it, so that a long transient backlog costs disk, not RAM (as RabbitMQ's classic queues v2
//! and LavinMQ do). The page log is not fsynced and does not outlive the broker: its
//! directory is created on the first page and removed with the queue, and every page
//! directory is removed at start ([`crate::definitions::VhostStorage::prepare_dirs`]).
//!
//! One offset space covers both halves: offsets with [`PAGED_BIT`] set are the page log's.

use super::{Appended, LogStore, LogStoreConfig, MemoryStore, MessageStore, StoreError};
use crate::message::Message;
use std::path::PathBuf;
use std::sync::Arc;

/// Memory one queue's transient messages may take by default (see [`Message::memory_bytes`]:
/// bodies, properties with their headers, and what each message costs besides); the rest is
/// paged. Large enough that a queue whose consumers run a few seconds behind a fast publisher
/// is not paged (the fanout benchmark: about a million 16-byte messages, 340 MB, per queue;
/// paging them cost 14% of its throughput at a 256 MiB budget), small enough that a flood into
/// a queue nobody reads stays under 1 GB of RSS.
pub const TRANSIENT_MEMORY_BUDGET_BYTES: usize = 512 * 1024 * 1024;
/// Marks the offsets of paged messages (within the offset bits a queue keeps).
const PAGED_BIT: u64 = 1 << 54;

/// Where a queue may page, and how its page log is configured.
#[derive(Debug, Clone)]
pub struct PageFile {
    /// The page log's directory (created when first needed).
    pub dir: PathBuf,
    /// The log's settings (its flush policy is overridden: pages are never fsynced).
    pub config: LogStoreConfig,
}

/// A queue's transient messages.
#[derive(Debug, Default)]
pub struct TransientStore {
    memory: MemoryStore,
    /// Memory the messages in `memory` take ([`Message::memory_bytes`] each).
    resident_bytes: usize,
    /// Where to page; `None`: never page (a broker without a data directory).
    page_file: Option<PageFile>,
    pages: Option<LogStore>,
    /// Reused by `remove`: the page log's offsets of a settlement.
    scratch: Vec<u64>,
}

impl TransientStore {
    /// A store that pages into `page_file`, if given.
    pub fn new(page_file: Option<PageFile>) -> Self {
        TransientStore { page_file, ..TransientStore::default() }
    }

    /// Memory the messages held in memory take.
    pub fn resident_bytes(&self) -> usize {
        self.resident_bytes
    }

    /// Whether `offset` is a paged message's.
    fn is_paged(offset: u64) -> bool {
        offset & PAGED_BIT != 0
    }

    fn pages(&mut self) -> Result<&mut LogStore, StoreError> {
        if self.pages.is_none() {
            let Some(page_file) = &self.page_file else { return Err(StoreError::Missing(0)) };
            if page_file.dir.exists() {
                std::fs::remove_dir_all(&page_file.dir).map_err(|e| StoreError::file(&page_file.dir, e))?;
            }
            let config =
                LogStoreConfig { flush_policy: warren_storage::FlushPolicy::Never, ..page_file.config.clone() };
            self.pages = Some(LogStore::open(&page_file.dir, &config)?);
        }
        self.pages.as_mut().ok_or(StoreError::Missing(0))
    }

    /// Empties the store and removes its page log (the queue was deleted or purged of all).
    pub fn clear(&mut self) {
        self.memory = MemoryStore::default();
        self.resident_bytes = 0;
        if let Some(pages) = self.pages.take() {
            Box::new(pages).destroy();
        }
    }
}

impl MessageStore for TransientStore {
    fn append(&mut self, message: &Arc<Message>) -> Result<Appended, StoreError> {
        let size = message.memory_bytes();
        let budget = self.page_file.as_ref().map(|page_file| page_file.config.transient_memory_budget_bytes);
        if budget.is_some_and(|budget| self.resident_bytes + size > budget) {
            let appended = self.pages()?.append(message)?;
            // Transient: nothing waits for the page log's disk.
            return Ok(Appended { offset: appended.offset | PAGED_BIT, durable: None });
        }
        self.resident_bytes += size;
        self.memory.append(message)
    }

    fn read(&mut self, offset: u64) -> Result<Arc<Message>, StoreError> {
        if Self::is_paged(offset) {
            return match &mut self.pages {
                Some(pages) => pages.read(offset & !PAGED_BIT),
                None => Err(StoreError::Missing(offset)),
            };
        }
        self.memory.read(offset)
    }

    fn remove(&mut self, offsets: &[u64]) -> Result<(), StoreError> {
        let resident = offsets.iter().copied().filter(|o| !Self::is_paged(*o));
        let removed_bytes = self.memory.remove_counting(resident);
        self.resident_bytes = self.resident_bytes.saturating_sub(removed_bytes);
        let Some(pages) = &mut self.pages else { return Ok(()) };
        self.scratch.clear();
        self.scratch.extend(offsets.iter().filter(|o| Self::is_paged(**o)).map(|o| o & !PAGED_BIT));
        if self.scratch.is_empty() {
            return Ok(());
        }
        pages.remove(&self.scratch)?;
        // A drained page log goes at once, active segment and all (the next page makes a new one).
        if pages.unsettled_count() == 0 {
            if let Some(pages) = self.pages.take() {
                Box::new(pages).destroy();
            }
        }
        Ok(())
    }

    fn disk_bytes(&self) -> u64 {
        self.pages.as_ref().map_or(0, MessageStore::disk_bytes)
    }

    fn destroy(mut self: Box<Self>) {
        self.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::properties::Properties;
    use bytes::Bytes;

    fn message(size: usize) -> Arc<Message> {
        Arc::new(Message {
            exchange: "".into(),
            routing_key: "q".into(),
            properties: Properties::empty(),
            body: Bytes::from(vec![7u8; size]),
        })
    }

    #[test]
    fn past_the_budget_messages_are_paged_and_read_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        const BUDGET_BYTES: usize = 4 * 1024 * 1024;
        let config = LogStoreConfig { transient_memory_budget_bytes: BUDGET_BYTES, ..LogStoreConfig::default() };
        let page_file = PageFile { dir: dir.path().join("pages"), config };
        let mut store = TransientStore::new(Some(page_file));
        let size = 64 * 1024;
        let count = 2 * BUDGET_BYTES / size;
        let offsets: Vec<u64> = (0..count).map(|_| store.append(&message(size)).expect("append").offset).collect();
        assert!(store.resident_bytes() <= BUDGET_BYTES);
        let paged = offsets.iter().filter(|o| TransientStore::is_paged(**o)).count();
        assert!(paged >= count / 2 - 1, "{paged} of {count} paged");
        assert!(store.disk_bytes() > 0);
        for offset in &offsets {
            assert_eq!(store.read(*offset).expect("read").body.len(), size);
        }
        store.remove(&offsets).expect("remove");
        assert_eq!(store.resident_bytes(), 0);
        assert!(!dir.path().join("pages").exists(), "a drained page log is removed");
        // Room again in memory: the next message stays there.
        let next = store.append(&message(size)).expect("append").offset;
        assert!(!TransientStore::is_paged(next));
        for _ in 0..count {
            store.append(&message(size)).expect("append");
        }
        assert!(dir.path().join("pages").exists(), "paging again");
        Box::new(store).destroy();
        assert!(!dir.path().join("pages").exists(), "the page log goes with the queue");
    }

    /// A message with a tiny body and a headers table of `entries` values of `value_bytes`.
    fn message_with_headers(entries: usize, value_bytes: usize) -> Arc<Message> {
        use amq_protocol::protocol::basic::{gen_properties, AMQPProperties};
        use amq_protocol::types::{AMQPValue, FieldTable};
        let mut headers = FieldTable::default();
        for entry in 0..entries {
            headers.insert(format!("h{entry}").into(), AMQPValue::LongString(vec![b'v'; value_bytes].into()));
        }
        let props = AMQPProperties::default().with_headers(headers);
        let raw = gen_properties(&props)(amq_protocol::frame::WriteContext::from(Vec::new())).map(|c| c.write);
        let properties = Properties::decode(Bytes::from(raw.expect("encodes"))).expect("valid properties");
        Arc::new(Message { exchange: "".into(), routing_key: "q".into(), properties, body: Bytes::from_static(b"x") })
    }

    #[test]
    fn properties_count_in_the_budget_and_big_ones_are_paged() {
        let dir = tempfile::tempdir().expect("tempdir");
        const BUDGET_BYTES: usize = 4 * 1024 * 1024;
        let config = LogStoreConfig { transient_memory_budget_bytes: BUDGET_BYTES, ..LogStoreConfig::default() };
        let mut store = TransientStore::new(Some(PageFile { dir: dir.path().join("pages"), config }));
        // About 60 KiB of headers on a one-byte body; twice the budget of raw headers alone.
        let message = message_with_headers(240, 250);
        let count = 2 * BUDGET_BYTES / message.properties.raw().len();
        let offsets: Vec<u64> = (0..count).map(|_| store.append(&message).expect("append").offset).collect();
        assert!(store.resident_bytes() <= BUDGET_BYTES);
        assert!(store.resident_bytes() + message.memory_bytes() > BUDGET_BYTES, "memory is used up to the budget");
        let resident = offsets.iter().filter(|o| !TransientStore::is_paged(**o)).count();
        assert_eq!(resident, store.resident_bytes() / message.memory_bytes());
        assert!(resident < count / 2, "only {resident} of {count} fit: headers count, decoded too");
        for offset in [offsets[0], offsets[count - 1]] {
            assert_eq!(store.read(offset).expect("read").properties.raw(), message.properties.raw());
        }
        store.remove(&offsets).expect("remove");
        assert_eq!(store.resident_bytes(), 0, "what was counted in is counted out");
    }

    #[test]
    fn without_a_page_file_everything_stays_in_memory() {
        let mut store = TransientStore::new(None);
        for _ in 0..3 {
            let offset = store.append(&message(TRANSIENT_MEMORY_BUDGET_BYTES / 2)).expect("append").offset;
            assert!(!TransientStore::is_paged(offset));
        }
    }
}
