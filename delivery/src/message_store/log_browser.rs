//! Reading a message log by offset without consuming it: a stream's whole log, or what a
//! durable classic queue's log still holds (its persistent messages, settled ones included,
//! until their segment is deleted). The management API and UI browse and replay with this;
//! nothing it does moves a consumer, settles a message or takes a queue's lock.
//!
//! Records damaged on disk are stepped over (the log reports each damaged range once); a
//! record that passes its CRC check but does not decode as a message is skipped and reported
//! here, once per browser.

use crate::message::Message;
use crate::message_store::{codec as message_codec, StoreError};
use crate::stream::offset_spec::OffsetSpec;
use crate::stream::tag::HeaderFilter;
use crate::tag_filter::{message_tag, TagFilter};
use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use warren_storage::{Log, Record, StorageError};

/// Records one read examines at most, matching the filter or not.
const SCAN_RECORDS: usize = 1024 * 1024;

/// One message read back from a log.
#[derive(Debug, Clone)]
pub struct LogMessage {
    /// Its offset.
    pub offset: u64,
    /// When it was appended, in ms since the Unix epoch.
    pub timestamp_ms: i64,
    /// The message, as published.
    pub message: Arc<Message>,
}

/// What one read returned.
#[derive(Debug, Clone, Default)]
pub struct LogBatch {
    /// The messages, in offset order.
    pub messages: Vec<LogMessage>,
    /// Where the next read should start.
    pub next_offset: u64,
    /// The oldest offset the log holds.
    pub first_offset: u64,
    /// One past the newest offset.
    pub end_offset: u64,
}

/// Whether a log's record headers carry the messages' tag hashes (streams write them, so a
/// filtered read steps over records without decoding them; a queue's log does not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TagHeaders {
    /// Record headers carry tag hashes.
    Written,
    /// They do not: every record is decoded and its tag compared.
    Absent,
}

/// A read-only view of one message log.
#[derive(Clone)]
pub struct LogBrowser {
    log: Arc<Log>,
    tag_headers: TagHeaders,
    /// Where the log is, for reports.
    dir: PathBuf,
    /// Offsets whose records passed their CRC check but do not decode (reported once).
    undecodable: Arc<Mutex<BTreeSet<u64>>>,
}

impl std::fmt::Debug for LogBrowser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogBrowser")
            .field("dir", &self.dir)
            .field("tag_headers", &self.tag_headers)
            .finish_non_exhaustive()
    }
}

impl LogBrowser {
    /// A view of `log`, stored in `dir`.
    pub(crate) fn new(log: Arc<Log>, dir: PathBuf, tag_headers: TagHeaders) -> Self {
        LogBrowser { log, tag_headers, dir, undecodable: Arc::default() }
    }

    /// The oldest offset the log holds, and one past the newest.
    pub fn bounds(&self) -> (u64, u64) {
        (self.log.first_offset(), self.log.next_offset())
    }

    /// Where `spec` points in the log now.
    pub fn offset_of(&self, spec: OffsetSpec) -> Result<u64, StoreError> {
        spec.resolve(&self.log).map_err(StoreError::from)
    }

    /// Undecodable offsets found so far at or above `first`.
    pub(crate) fn undecodable_from(&self, first: u64) -> u64 {
        self.undecodable.lock().range(first..).count() as u64
    }

    /// Decodes a record read from the log. One that passed its CRC check but does not
    /// decode is damage of that record: reported (once) and skipped.
    pub(crate) fn decode(&self, record: Record) -> Option<Message> {
        let offset = record.offset;
        match message_codec::decode(record.payload) {
            Ok(message) => Some(message),
            Err(error) => {
                if self.undecodable.lock().insert(offset) {
                    tracing::error!(dir = %self.dir.display(), offset, %error, "stored message does not decode; skipping it");
                }
                None
            }
        }
    }

    /// Reads messages from `from` (clamped into the log): at most `max_count` messages and
    /// about `max_bytes` of payload (at least one message if any), only those `filter` wants
    /// if given.
    pub fn read(
        &self,
        from: u64,
        max_count: usize,
        max_bytes: usize,
        filter: Option<&TagFilter>,
    ) -> Result<LogBatch, StoreError> {
        let (first, end) = self.bounds();
        let mut batch = LogBatch {
            next_offset: from.clamp(first, end),
            first_offset: first,
            end_offset: end,
            ..Default::default()
        };
        if max_count == 0 {
            return Ok(batch);
        }
        let header_filter = filter.filter(|_| self.tag_headers == TagHeaders::Written).map(HeaderFilter::new);
        let admits = |flags, hash| header_filter.as_ref().is_none_or(|f| f.admits(flags, hash));
        let read = loop {
            let from = batch.next_offset;
            if from >= end {
                return Ok(batch);
            }
            match self.log.read_filtered(from, max_count, max_bytes, SCAN_RECORDS, &admits) {
                Err(StorageError::Corruption { .. }) => match self.log.skip_damage(from).map_err(StoreError::from)? {
                    Some(damaged) => batch.next_offset = damaged.next,
                    // The damage lay before `from`, whose record reads back now.
                    None => {
                        break self
                            .log
                            .read_filtered(from, max_count, max_bytes, SCAN_RECORDS, &admits)
                            .map_err(StoreError::from)?
                    }
                },
                result => break result.map_err(StoreError::from)?,
            }
        };
        batch.next_offset = read.next_offset;
        for record in read.records {
            let (offset, timestamp_ms) = (record.offset, record.timestamp_ms);
            let Some(message) = self.decode(record) else { continue };
            if filter.is_none_or(|f| f.matches(message_tag(&message))) {
                batch.messages.push(LogMessage { offset, timestamp_ms, message: Arc::new(message) });
            }
        }
        Ok(batch)
    }
}
