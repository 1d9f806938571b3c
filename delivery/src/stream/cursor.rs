//! A stream consumer's place in the stream: the next offset to read, a few records read
//! ahead, its tag filter as record-header hashes, and (in a consumer group) the deliveries
//! it has not settled yet, which hold the group's committed offset back. Records damaged on
//! disk are stepped over: they are never delivered, and the committed offset moves past them.

use super::tag::HeaderFilter;
use crate::queue::consumer::Consumer;
use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;
use warren_storage::{Log, Record, StorageError};

/// Records read per refill.
const READ_RECORDS: usize = 256;
/// Payload bytes read per refill.
const READ_BYTES: usize = 64 * 1024;
/// Records a filtered refill may step over before it returns (bounds the time spent under
/// the stream's lock when few records match).
const SCAN_RECORDS: usize = 64 * 1024;

/// One consumer reading a stream.
#[derive(Debug)]
pub(crate) struct Cursor {
    pub(crate) consumer: Arc<Consumer>,
    /// The next offset to read from the log: past everything buffered.
    next: u64,
    buffer: VecDeque<Record>,
    filter: Option<HeaderFilter>,
    /// `x-consumer-group`, if it belongs to one.
    pub(crate) group: Option<String>,
    /// Whether it receives messages (in a group, only one consumer at a time does).
    pub(crate) active: bool,
    /// Whether the super stream's consumer group decides `active` (see
    /// `super::partition_groups`), rather than this stream.
    pub(crate) assigned: bool,
    /// Whether deliveries are held back while its partition is handed over (settles still count).
    pub(crate) paused: bool,
    /// Offsets delivered and not yet settled (kept for groups only).
    outstanding: BTreeSet<u64>,
    /// The offset of the newest delivery, if any (what the API shows as the consumer's offset).
    pub(crate) last_delivered: Option<u64>,
}

impl Cursor {
    pub(crate) fn new(consumer: Arc<Consumer>, start: u64, group: Option<String>, active: bool) -> Self {
        let filter = consumer.filter().map(HeaderFilter::new);
        Cursor {
            consumer,
            next: start,
            buffer: VecDeque::new(),
            filter,
            group,
            active,
            assigned: false,
            paused: false,
            outstanding: BTreeSet::new(),
            last_delivered: None,
        }
    }

    /// Whether it is delivered to now.
    pub(crate) fn delivering(&self) -> bool {
        self.active && !self.paused
    }

    /// Whether nothing is buffered and the next record to read is `offset`.
    pub(crate) fn waits_at(&self, offset: u64) -> bool {
        self.buffer.is_empty() && self.next == offset
    }

    /// Moves past a record handed over without reading the log (it was just published).
    pub(crate) fn step_over(&mut self, offset: u64) {
        self.next = offset + 1;
    }

    /// Starts reading at `offset` again, forgetting what was read ahead and delivered.
    pub(crate) fn seek(&mut self, offset: u64) {
        self.buffer.clear();
        self.outstanding.clear();
        self.next = offset;
    }

    /// The next buffered record.
    pub(crate) fn pop(&mut self) -> Option<Record> {
        self.buffer.pop_front()
    }

    /// Reads more records into the buffer; false when the cursor is at the end of the log.
    /// Damaged records are stepped over ([`Log::skip_damage`] reports them, once per log).
    pub(crate) fn fill(&mut self, log: &Log) -> Result<bool, StorageError> {
        // Retention may have deleted what the cursor had not reached yet.
        self.next = self.next.max(log.first_offset());
        if self.next >= log.next_offset() {
            return Ok(false);
        }
        let records = match self.read(log) {
            Err(StorageError::Corruption { .. }) => match log.skip_damage(self.next)? {
                Some(damaged) => {
                    self.next = damaged.next;
                    return Ok(true);
                }
                // The damage lay before `next`, whose record reads back now.
                None => self.read(log)?,
            },
            result => result?,
        };
        self.buffer.extend(records);
        Ok(true)
    }

    /// Reads the next records from `next` on, and moves `next` past them.
    fn read(&mut self, log: &Log) -> Result<Vec<Record>, StorageError> {
        Ok(match &self.filter {
            None => {
                let records = log.read(self.next, READ_RECORDS, READ_BYTES)?;
                if let Some(last) = records.last() {
                    self.next = last.offset + 1;
                }
                records
            }
            Some(filter) => {
                let admits = |flags, tag_hash| filter.admits(flags, tag_hash);
                let read = log.read_filtered(self.next, READ_RECORDS, READ_BYTES, SCAN_RECORDS, &admits)?;
                self.next = read.next_offset;
                read.records
            }
        })
    }

    /// Records a delivery, which holds the group's committed offset back until settled.
    pub(crate) fn delivered(&mut self, offset: u64) {
        self.last_delivered = Some(offset);
        if self.group.is_some() {
            self.outstanding.insert(offset);
        }
    }

    /// Records settled deliveries.
    pub(crate) fn settled(&mut self, offsets: &[u64]) {
        for offset in offsets {
            self.outstanding.remove(offset);
        }
    }

    /// Everything below this offset was delivered and settled, or stepped over.
    pub(crate) fn committed(&self) -> u64 {
        let position = self.buffer.front().map_or(self.next, |r| r.offset);
        self.outstanding.first().map_or(position, |o| (*o).min(position))
    }
}
