//! The durable message store: a queue's persistent messages in a log, its settlements in a
//! second, small log.
//!
//! Settlement is recorded, not applied in place: the ack log holds batches of settled offsets
//! and the highest offset ever delivered. On open, the unsettled messages are the message
//! log's offsets minus the settled ones, and those at or below the delivered mark come back
//! marked redelivered. Message segments are deleted once every message in them is settled;
//! the ack log is rewritten (compacted) when it grows past a bound. Bodies are read from the
//! log when delivered; a bounded cache keeps recent appends so a consumer that keeps up never
//! reads the disk.
//!
//! A record damaged on disk (found when first read: opening scans only the log's tail) is
//! stepped over with [`Log::skip_damage`], which reports it once; a record that passes its
//! CRC check but does not decode as a message counts as damaged too, and is reported here.
//! Reads of such offsets fail with [`StoreError::Damaged`]; the queue then settles them, and
//! recovery of queues that read every message ([`LogStore::for_each_unsettled`]) settles
//! them itself, so that after a restart they are neither counted nor reported again.

use super::codec as message_codec;
use super::{Appended, DurableMark, MessageStore, StoreError};
use crate::message::Message;
use crate::message_store::log_browser::{LogBrowser, TagHeaders};
use std::collections::{BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use warren_storage::{FlushPolicy, Log, LogConfig, NewRecord, Record, StorageError};

const MESSAGES_DIR: &str = "messages";
const ACKS_DIR: &str = "acks";
const ACKS_COMPACT_DIR: &str = "acks.compact";
const ACKS_OLD_DIR: &str = "acks.old";
/// Ack-log record kinds (first payload byte).
const ACK_RECORD_SETTLED: u8 = 1;
const ACK_RECORD_DELIVERED: u8 = 2;
/// Every offset below the one recorded is settled (written by compaction, which drops the
/// settled offsets below it).
const ACK_RECORD_FIRST_LIVE: u8 = 3;
/// The ack log is compacted when it grows past this.
const ACK_LOG_COMPACT_BYTES: u64 = 8 * 1024 * 1024;
/// Segment size of ack logs: small, so compaction frees space soon.
const ACK_SEGMENT_BYTES: u64 = 4 * 1024 * 1024;
/// Memory the recent appends kept per queue may take ([`Message::memory_bytes`]: bodies,
/// properties and what each message costs besides).
const RECENT_CACHE_BYTES: usize = 8 * 1024 * 1024;
/// How much a cache miss reads ahead.
const READ_AHEAD_RECORDS: usize = 256;
const READ_AHEAD_BYTES: usize = 1024 * 1024;
/// Offsets per settled record, so that records stay well under the record size limit.
const OFFSETS_PER_ACK_RECORD: usize = 64 * 1024;

/// Settings of a queue's logs.
#[derive(Debug, Clone)]
pub struct LogStoreConfig {
    /// When appends are fsynced.
    pub flush_policy: FlushPolicy,
    /// Segment size of the message log.
    pub segment_bytes: u64,
    /// Largest message payload.
    pub max_record_bytes: usize,
    /// Memory a classic queue's transient messages may take before the rest is paged
    /// (see [`super::TransientStore`]).
    pub transient_memory_budget_bytes: usize,
}

impl LogStoreConfig {
    /// The configuration of a message log (a queue's, or a quorum queue's Raft log).
    pub fn log_config(&self) -> LogConfig {
        LogConfig {
            flush_policy: self.flush_policy,
            segment_bytes: self.segment_bytes,
            max_record_bytes: self.max_record_bytes,
            write_buffer_bytes: 64 * 1024,
            ..LogConfig::default()
        }
    }
}

impl Default for LogStoreConfig {
    fn default() -> Self {
        LogStoreConfig {
            flush_policy: FlushPolicy::Batch,
            segment_bytes: warren_storage::DEFAULT_SEGMENT_BYTES,
            max_record_bytes: 129 * 1024 * 1024,
            transient_memory_budget_bytes: super::TRANSIENT_MEMORY_BUDGET_BYTES,
        }
    }
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Messages appended recently, by offset.
#[derive(Debug, Default)]
struct RecentCache {
    base: u64,
    messages: VecDeque<Option<Arc<Message>>>,
    bytes: usize,
}

impl RecentCache {
    fn push(&mut self, offset: u64, message: Arc<Message>) {
        if self.messages.is_empty() || offset != self.base + self.messages.len() as u64 {
            self.messages.clear();
            self.bytes = 0;
            self.base = offset;
        }
        self.bytes += message.memory_bytes();
        self.messages.push_back(Some(message));
        while self.bytes > RECENT_CACHE_BYTES {
            self.pop_front();
        }
    }

    fn pop_front(&mut self) {
        if let Some(evicted) = self.messages.pop_front() {
            self.bytes -= evicted.map_or(0, |m| m.memory_bytes());
            self.base += 1;
        }
    }

    fn get(&self, offset: u64) -> Option<Arc<Message>> {
        let index = offset.checked_sub(self.base)?;
        self.messages.get(index as usize).cloned().flatten()
    }

    fn forget(&mut self, offset: u64) {
        if let Some(slot) = offset.checked_sub(self.base).and_then(|i| self.messages.get_mut(i as usize)) {
            self.bytes -= slot.take().map_or(0, |m| m.memory_bytes());
        }
        while let Some(None) = self.messages.front() {
            self.pop_front();
        }
    }
}

/// A queue's persistent messages on disk.
pub struct LogStore {
    dir: PathBuf,
    messages: Arc<Log>,
    acks: Log,
    /// Settled offsets at or above `first_live`.
    settled: BTreeSet<u64>,
    /// Every offset below it is settled.
    first_live: u64,
    delivered_up_to: Option<u64>,
    recorded_delivered_up_to: Option<u64>,
    recent: RecentCache,
    read_ahead: VecDeque<(u64, Arc<Message>)>,
    scratch: Vec<u8>,
    flush_policy: FlushPolicy,
    /// Size of the ack log right after the last compaction.
    compacted_bytes: u64,
    /// The offset of the last read that missed the caches, to tell sequential reads.
    last_miss: Option<u64>,
    /// Records found undecodable since the store was opened.
    undecodable: u64,
}

impl std::fmt::Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStore").field("dir", &self.dir).finish_non_exhaustive()
    }
}

impl LogStore {
    /// Opens (or creates) the store in `dir` and recovers its settlement state.
    pub fn open(dir: &Path, config: &LogStoreConfig) -> Result<Self, StoreError> {
        let messages = Log::open(dir.join(MESSAGES_DIR), config.log_config())?;
        let acks = open_ack_log(dir, config.flush_policy)?;
        let mut store = LogStore {
            dir: dir.to_path_buf(),
            first_live: messages.first_offset(),
            messages: Arc::new(messages),
            acks,
            settled: BTreeSet::new(),
            delivered_up_to: None,
            recorded_delivered_up_to: None,
            recent: RecentCache::default(),
            read_ahead: VecDeque::new(),
            scratch: Vec::new(),
            flush_policy: config.flush_policy,
            compacted_bytes: 0,
            last_miss: None,
            undecodable: 0,
        };
        store.replay_acks()?;
        store.advance_first_live();
        store.recorded_delivered_up_to = store.delivered_up_to;
        Ok(store)
    }

    fn replay_acks(&mut self) -> Result<(), StoreError> {
        let mut next = self.acks.first_offset();
        while next < self.acks.next_offset() {
            let records = self.acks.read(next, 1024, 4 * 1024 * 1024)?;
            let Some(last) = records.last() else { break };
            next = last.offset + 1;
            for record in records {
                self.apply_ack_record(&record.payload);
            }
        }
        Ok(())
    }

    fn apply_ack_record(&mut self, payload: &[u8]) {
        let Some((&kind, rest)) = payload.split_first() else { return };
        let offsets =
            rest.chunks_exact(8).map(|c| u64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]));
        match kind {
            ACK_RECORD_SETTLED => self.settled.extend(offsets.filter(|o| *o >= self.first_live)),
            ACK_RECORD_DELIVERED => self.delivered_up_to = offsets.max().max(self.delivered_up_to),
            ACK_RECORD_FIRST_LIVE => {
                if let Some(first_live) = offsets.max() {
                    self.first_live = self.first_live.max(first_live);
                    self.settled = self.settled.split_off(&self.first_live);
                }
            }
            _ => tracing::warn!(dir = %self.dir.display(), kind, "unknown ack record kind; ignored"),
        }
    }

    /// How many offsets [`LogStore::unsettled`] yields.
    pub fn unsettled_count(&self) -> usize {
        let live = self.messages.next_offset().saturating_sub(self.first_live);
        usize::try_from(live).unwrap_or(usize::MAX).saturating_sub(self.settled.len())
    }

    /// The unsettled offsets, in order: the queue's backlog after a restart.
    pub fn unsettled(&self) -> impl Iterator<Item = u64> + '_ {
        (self.first_live..self.messages.next_offset()).filter(|o| !self.settled.contains(o))
    }

    /// Reads every unsettled message once, in order, with the time it was appended: what
    /// recovery needs when a message's priority, TTL or delay matters. Damaged records are
    /// stepped over (reported once) and recorded as settled, so they are not visited, nor
    /// counted or reported again after a restart.
    pub fn for_each_unsettled(&mut self, mut visit: impl FnMut(u64, i64, Arc<Message>)) -> Result<(), StoreError> {
        let mut next = self.first_live;
        let mut damaged = Vec::new();
        while next < self.messages.next_offset() {
            let records = match self.read_log(next, READ_AHEAD_RECORDS, READ_AHEAD_BYTES) {
                Ok(records) => records,
                Err(StoreError::Damaged(offsets)) => {
                    damaged.extend(next.max(offsets.start)..offsets.end);
                    next = offsets.end.max(next + 1);
                    continue;
                }
                Err(error) => return Err(error),
            };
            let Some(last) = records.last() else { break };
            next = last.offset + 1;
            for record in records {
                if self.settled.contains(&record.offset) {
                    continue;
                }
                match message_codec::decode(record.payload) {
                    Ok(message) => visit(record.offset, record.timestamp_ms, Arc::new(message)),
                    Err(error) => {
                        self.undecodable(record.offset, error);
                        damaged.push(record.offset);
                    }
                }
            }
        }
        damaged.retain(|offset| !self.settled.contains(offset));
        if let Err(error) = self.remove(&damaged) {
            // They stay out of the queue now; the next start finds them again.
            tracing::error!(dir = %self.dir.display(), %error, "cannot record damaged messages as settled");
        }
        Ok(())
    }

    /// Reads from the message log; a read that starts at damage steps past it
    /// ([`StoreError::Damaged`] with the lost offsets).
    fn read_log(&self, offset: u64, records: usize, bytes: usize) -> Result<Vec<Record>, StoreError> {
        match self.messages.read(offset, records, bytes) {
            Err(StorageError::Corruption { .. }) => match self.messages.skip_damage(offset)? {
                Some(range) => Err(StoreError::Damaged(range.offsets())),
                // The damage lay before `offset`, which reads back now.
                None => Ok(self.messages.read(offset, records, bytes)?),
            },
            result => Ok(result?),
        }
    }

    /// Reports a record that passed its CRC check (so was stored that way) but does not
    /// decode as a message: damage of that one record.
    fn undecodable(&mut self, offset: u64, error: message_codec::DecodeError) -> StoreError {
        self.undecodable += 1;
        tracing::error!(dir = %self.dir.display(), offset, %error, "stored message does not decode; skipping it");
        StoreError::Damaged(offset..offset + 1)
    }

    /// Message records lost to damage since the store was opened: damaged on disk (see
    /// [`Log::damaged_records`]) or undecodable.
    pub fn damaged_records(&self) -> u64 {
        self.messages.damaged_records() + self.undecodable
    }

    /// Offsets at or below this were delivered before; they come back redelivered.
    pub fn delivered_up_to(&self) -> Option<u64> {
        self.delivered_up_to
    }

    /// One past the last message offset.
    pub fn next_offset(&self) -> u64 {
        self.messages.next_offset()
    }

    fn advance_first_live(&mut self) {
        let before = self.first_live;
        while self.settled.first() == Some(&self.first_live) {
            self.settled.pop_first();
            self.first_live += 1;
        }
        if self.first_live > before {
            if let Err(error) = self.messages.delete_below(self.first_live) {
                tracing::warn!(dir = %self.dir.display(), %error, "cannot delete settled segments");
            }
        }
    }

    fn append_ack_record(&mut self, kind: u8, offsets: &[u64]) -> Result<(), StoreError> {
        for chunk in offsets.chunks(OFFSETS_PER_ACK_RECORD) {
            self.scratch.clear();
            self.scratch.push(kind);
            for offset in chunk {
                self.scratch.extend_from_slice(&offset.to_be_bytes());
            }
            self.acks.append(NewRecord::new(now_ms(), &self.scratch))?;
        }
        Ok(())
    }

    fn compact_acks_if_large(&mut self) -> Result<(), StoreError> {
        // Twice the compacted size at least, so a large settled set is not rewritten per ack.
        if self.acks.size_bytes() < ACK_LOG_COMPACT_BYTES.max(2 * self.compacted_bytes) {
            return Ok(());
        }
        let compact_dir = self.dir.join(ACKS_COMPACT_DIR);
        let _ = std::fs::remove_dir_all(&compact_dir);
        // One fsync at the end (the flush below), not one per record.
        let compact = Log::open(&compact_dir, ack_log_config(FlushPolicy::Batch))?;
        let _ = std::mem::replace(&mut self.acks, compact).close();
        // The compacted log holds the whole settlement state in a few records.
        self.append_ack_record(ACK_RECORD_FIRST_LIVE, &[self.first_live])?;
        let settled: Vec<u64> = self.settled.iter().copied().collect();
        self.append_ack_record(ACK_RECORD_SETTLED, &settled)?;
        if let Some(delivered) = self.delivered_up_to {
            self.append_ack_record(ACK_RECORD_DELIVERED, &[delivered])?;
        }
        self.acks.flush()?;
        let _ = self.acks.close();
        swap_compacted_ack_log(&self.dir)?;
        self.acks = open_ack_log(&self.dir, self.flush_policy)?;
        self.compacted_bytes = self.acks.size_bytes();
        Ok(())
    }
}

fn ack_log_config(flush_policy: FlushPolicy) -> LogConfig {
    LogConfig { flush_policy, segment_bytes: ACK_SEGMENT_BYTES, write_buffer_bytes: 16 * 1024, ..LogConfig::default() }
}

/// Finishes (or rolls back) an interrupted compaction, then opens the ack log.
fn open_ack_log(dir: &Path, flush_policy: FlushPolicy) -> Result<Log, StoreError> {
    let (acks, compact, old) = (dir.join(ACKS_DIR), dir.join(ACKS_COMPACT_DIR), dir.join(ACKS_OLD_DIR));
    if !acks.exists() && compact.exists() {
        std::fs::rename(&compact, &acks).map_err(|e| StoreError::file(&compact, e))?;
    }
    let _ = std::fs::remove_dir_all(&compact);
    let _ = std::fs::remove_dir_all(&old);
    Ok(Log::open(acks, ack_log_config(flush_policy))?)
}

fn swap_compacted_ack_log(dir: &Path) -> Result<(), StoreError> {
    let (acks, compact, old) = (dir.join(ACKS_DIR), dir.join(ACKS_COMPACT_DIR), dir.join(ACKS_OLD_DIR));
    std::fs::rename(&acks, &old).map_err(|e| StoreError::file(&acks, e))?;
    std::fs::rename(&compact, &acks).map_err(|e| StoreError::file(&compact, e))?;
    std::fs::remove_dir_all(&old).map_err(|e| StoreError::file(&old, e))
}

impl MessageStore for LogStore {
    fn disk_bytes(&self) -> u64 {
        self.messages.size_bytes() + self.acks.size_bytes()
    }

    fn browser(&self) -> Option<LogBrowser> {
        let dir = self.dir.join(MESSAGES_DIR);
        Some(LogBrowser::new(Arc::clone(&self.messages), dir, TagHeaders::Absent))
    }

    fn append(&mut self, message: &Arc<Message>) -> Result<Appended, StoreError> {
        self.scratch.clear();
        message_codec::encode(message, &mut self.scratch);
        let record = NewRecord { timestamp_ms: now_ms(), tag_hash: 0, flags: 0, payload: &self.scratch };
        let offset = self.messages.append(record)?;
        self.recent.push(offset, Arc::clone(message));
        let durable = DurableMark::new(&self.messages, offset);
        Ok(Appended { offset, durable: Some(durable) })
    }

    fn read(&mut self, offset: u64) -> Result<Arc<Message>, StoreError> {
        if let Some(message) = self.recent.get(offset) {
            return Ok(message);
        }
        if let Ok(i) = self.read_ahead.binary_search_by_key(&offset, |(o, _)| *o) {
            return Ok(Arc::clone(&self.read_ahead[i].1));
        }
        // Read ahead only when reads go in order (a backlog draining); a random read (a
        // delayed message falling due) takes just its record.
        let follows = |last: u64| offset == last + 1;
        let sequential =
            self.last_miss.is_some_and(follows) || self.read_ahead.back().is_some_and(|(o, _)| follows(*o));
        self.last_miss = Some(offset);
        let (records, bytes) = if sequential { (READ_AHEAD_RECORDS, READ_AHEAD_BYTES) } else { (1, 0) };
        let records = self.read_log(offset, records, bytes)?;
        self.read_ahead.clear();
        for record in records {
            let at = record.offset;
            match message_codec::decode(record.payload) {
                Ok(message) => self.read_ahead.push_back((at, Arc::new(message))),
                // Read ahead: reported when it is read itself.
                Err(_) if at != offset => {}
                Err(error) => return Err(self.undecodable(at, error)),
            }
        }
        match self.read_ahead.front() {
            Some((first, message)) if *first == offset => Ok(Arc::clone(message)),
            _ => Err(StoreError::Missing(offset)),
        }
    }

    fn delivered(&mut self, offset: u64) {
        self.delivered_up_to = self.delivered_up_to.max(Some(offset));
    }

    fn sync(&mut self) -> Result<(), StoreError> {
        if self.delivered_up_to > self.recorded_delivered_up_to {
            if let Some(delivered) = self.delivered_up_to {
                self.append_ack_record(ACK_RECORD_DELIVERED, &[delivered])?;
            }
            self.recorded_delivered_up_to = self.delivered_up_to;
        }
        Ok(())
    }

    fn remove(&mut self, offsets: &[u64]) -> Result<(), StoreError> {
        if offsets.is_empty() {
            return Ok(());
        }
        self.append_ack_record(ACK_RECORD_SETTLED, offsets)?;
        for &offset in offsets {
            self.recent.forget(offset);
            if offset >= self.first_live {
                self.settled.insert(offset);
            }
        }
        self.advance_first_live();
        self.compact_acks_if_large()
    }

    fn close(&mut self) -> Result<(), StoreError> {
        self.sync()?;
        self.messages.close()?;
        Ok(self.acks.close()?)
    }

    fn destroy(self: Box<Self>) {
        let _ = self.messages.close();
        let _ = self.acks.close();
        if let Err(error) = std::fs::remove_dir_all(&self.dir) {
            tracing::warn!(dir = %self.dir.display(), %error, "cannot remove a deleted queue's files");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::properties::Properties;
    use bytes::Bytes;

    /// A message with a tiny body and a property list of `len` bytes: one long-string header.
    fn message_with_properties(len: usize) -> Arc<Message> {
        let value_len = len - 2 - 4 - 3 - 4;
        let mut raw = vec![0x20, 0x00];
        raw.extend_from_slice(&((3 + 4 + value_len) as u32).to_be_bytes());
        raw.extend_from_slice(&[1, b'k', b'S']);
        raw.extend_from_slice(&(value_len as u32).to_be_bytes());
        raw.resize(len, b'v');
        let properties = Properties::decode(Bytes::from(raw)).expect("valid properties");
        Arc::new(Message { exchange: "".into(), routing_key: "q".into(), properties, body: Bytes::from_static(b"x") })
    }

    #[test]
    fn the_recent_cache_counts_properties() {
        let message = message_with_properties(64 * 1024);
        assert!(message.memory_bytes() > 64 * 1024);
        let mut cache = RecentCache::default();
        let appended = 4 * RECENT_CACHE_BYTES / message.memory_bytes();
        for offset in 0..appended as u64 {
            cache.push(offset, Arc::clone(&message));
        }
        assert!(cache.bytes <= RECENT_CACHE_BYTES);
        assert_eq!(cache.messages.len(), RECENT_CACHE_BYTES / message.memory_bytes());
        assert!(cache.get(appended as u64 - 1).is_some() && cache.get(0).is_none(), "the oldest went first");
        for offset in 0..appended as u64 {
            cache.forget(offset);
        }
        assert_eq!((cache.bytes, cache.messages.len()), (0, 0));
    }
}
