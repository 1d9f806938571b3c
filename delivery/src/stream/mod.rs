//! Streams (`x-queue-type: stream`): append-only queues that keep their messages after they
//! are read. Every consumer reads by offset from where it asked to start, acks only return
//! its credit, and retention (by age and size, whole segments at a time) is what removes
//! messages. RabbitMQ's names and semantics over AMQP 0-9-1, plus Warren's extensions:
//! exact tag filtering that steps over records by their header, named consumer-group
//! offsets, and reads by offset without a consumer ([`Stream::browser`]).
//!
//! A stream owns its log and the state of its consumers behind one lock. As queues do, it
//! dispatches inline: a publish hands the new message to consumers waiting at the end of the
//! log straight from memory, and an ack or a new consumer reads on from the log.
//!
//! Records damaged on disk (found when first read: opening scans only the log's tail) are
//! stepped over by consumers and by reads without one, and no longer counted in
//! [`Stream::message_count`]; the log reports each damaged range once. A record that
//! passes its CRC check but does not decode as a message is skipped the same way and
//! reported here, once.

pub(crate) mod arguments;
mod catch_up;
mod consumer_groups;
mod cursor;
mod dedup;
mod named_offsets;
pub(crate) mod offset_spec;
mod partition_groups;
mod replica;
mod replicated_offsets;
pub(crate) mod tag;

pub use arguments::{parse_interval_ms, StreamArguments, MIN_SEGMENT_BYTES};
pub use catch_up::{StreamChunk, StreamRecord};
pub use consumer_groups::{GroupOffsets, OffsetStore, MAX_GROUP_NAME_BYTES};
pub use named_offsets::NamedOffset;
pub use offset_spec::{OffsetSpec, OFFSET_ARGUMENT};
pub use partition_groups::{GroupCoordination, GroupOp, PartitionGroups, MAX_GROUP_MEMBERS, MAX_GROUP_PARTITIONS};
pub use replica::{stream_raft_config, StreamStateMachine, MAX_CONSUMER_GROUPS, STREAM_POLICIES_GROUP_VERSION};
pub use replicated_offsets::ReplicatedOffsets;

use crate::clock::now_ms;
use crate::dedup_window::{key_in, DedupWindow};
use crate::error::{BrokerError, BrokerResult, ReplyCode};
use crate::field_value::string_of;
use crate::message::Message;
use crate::message_ref::MessageRef;
use crate::message_store::log_browser::{LogBrowser, TagHeaders};
use crate::message_store::{codec as message_codec, DurableMark, LogStoreConfig, StoreError};
use crate::queue::consumer::Consumer;
use crate::queue::{Published, Queue};
use crate::tag_filter::message_tag;
use cursor::Cursor;
use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use warren_storage::{Log, LogConfig, NewRecord, Retention};

/// The header every delivery from a stream carries: the message's offset.
pub const OFFSET_HEADER: &str = "x-stream-offset";
/// The consumer argument naming a consumer group (Warren's extension).
pub const GROUP_ARGUMENT: &str = "x-consumer-group";
/// How often a stream with `x-max-age` checks for segments to delete.
pub const RETENTION_CHECK_INTERVAL_MS: u64 = 1000;

const LOG_DIR: &str = "log";
const GROUPS_DIR: &str = "groups";

fn internal(error: impl std::fmt::Display) -> BrokerError {
    BrokerError::new(ReplyCode::InternalError, format!("stream storage failed: {error}"))
}

struct StreamState {
    cursors: Vec<Cursor>,
    groups: Box<dyn OffsetStore>,
    /// The deduplication keys appended lately (empty unless the stream deduplicates).
    dedup: DedupWindow,
    scratch: Vec<u8>,
    deleted: bool,
}

/// A consumer group of a stream, as the metrics and the API show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupLag {
    /// The group's name (`x-consumer-group`).
    pub group: String,
    /// The offset below which the group acked everything.
    pub committed: u64,
    /// One past the stream's newest offset.
    pub next: u64,
    /// Messages from the committed offset to the end.
    pub lag: u64,
}

/// A consumer attached to a stream, as the API shows it.
#[derive(Debug, Clone)]
pub struct StreamConsumer {
    /// The consumer.
    pub consumer: Arc<Consumer>,
    /// Its consumer group (`x-consumer-group`), if it belongs to one.
    pub group: Option<String>,
    /// Whether it is delivered to (in a group, one consumer at a time is).
    pub active: bool,
    /// The offset of its newest delivery, if it had one.
    pub last_delivered: Option<u64>,
}

/// A stream's log, consumers and consumer groups.
pub struct Stream {
    dir: PathBuf,
    log: Arc<Log>,
    arguments: StreamArguments,
    state: Mutex<StreamState>,
    /// Reads without a consumer; it also decodes for the consumers (and reports, once, the
    /// records that do not decode).
    browser: LogBrowser,
    /// The consumer groups of the super stream this stream is the first partition of.
    coordination: GroupCoordination,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream").field("dir", &self.dir).finish_non_exhaustive()
    }
}

impl Stream {
    /// Opens (or creates) the stream stored in `dir`, on this node alone.
    pub fn open(dir: &Path, config: &LogStoreConfig, arguments: StreamArguments) -> Result<Self, StoreError> {
        let log = Self::open_log(dir, config, &arguments)?;
        let groups = GroupOffsets::open(&dir.join(GROUPS_DIR), config.flush_policy)?;
        let mut stream = Stream::from_parts(dir, log, arguments, Box::new(groups), GroupCoordination::local());
        if let Some(settings) = &stream.arguments.deduplication {
            stream.state.get_mut().dedup = dedup::replay(&stream.browser, settings, now_ms())?;
        }
        Ok(stream)
    }

    /// The log of the stream stored in `dir` (created if new), segmented and retained as its
    /// arguments say.
    pub fn open_log(dir: &Path, config: &LogStoreConfig, arguments: &StreamArguments) -> Result<Arc<Log>, StoreError> {
        let log_config = LogConfig {
            flush_policy: config.flush_policy,
            segment_bytes: arguments.max_segment_size_bytes.unwrap_or(config.segment_bytes),
            max_record_bytes: config.max_record_bytes,
            retention_bytes: arguments.retention.bytes,
            retention_age: arguments.retention.age,
            ..LogConfig::default()
        };
        Ok(Arc::new(Log::open(dir.join(LOG_DIR), log_config).map_err(StoreError::from)?))
    }

    /// A stream over `log` (see [`Stream::open_log`]), its groups' offsets in `groups` and its
    /// super stream groups in `coordination`: [`Stream::open`] builds one for a stream on this
    /// node; a replicated stream's replica is built from its group's parts (its state machine
    /// appends to `log`, and its publishes go through the group, never [`Stream::publish`]).
    pub fn from_parts(
        dir: &Path,
        log: Arc<Log>,
        arguments: StreamArguments,
        groups: Box<dyn OffsetStore>,
        coordination: GroupCoordination,
    ) -> Self {
        let browser = LogBrowser::new(Arc::clone(&log), dir.join(LOG_DIR), TagHeaders::Written);
        let dedup = DedupWindow::default();
        let state = StreamState { cursors: Vec::new(), groups, dedup, scratch: Vec::new(), deleted: false };
        Stream { dir: dir.to_path_buf(), log, arguments, state: Mutex::new(state), browser, coordination }
    }

    /// The consumer groups of the super stream this stream is the first partition of.
    pub fn coordination(&self) -> &GroupCoordination {
        &self.coordination
    }

    /// Its retention and segment arguments.
    pub fn arguments(&self) -> &StreamArguments {
        &self.arguments
    }

    /// What its log keeps now: its arguments' retention until a policy changes it.
    pub fn retention(&self) -> Retention {
        self.log.retention()
    }

    /// Keeps what `retention` says from now on, deleting at once the whole segments it drops
    /// (a stream on this node alone; a replicated stream's retention changes through its
    /// group, on every replica at one entry).
    pub fn set_retention(&self, retention: Retention) {
        if let Err(error) = self.log.set_retention(retention) {
            tracing::warn!(dir = %self.dir.display(), %error, "a stream could not delete the segments its new retention drops");
        }
    }

    /// Messages it holds: its offsets, less those found damaged so far.
    pub fn message_count(&self) -> u64 {
        let (first, next) = self.bounds();
        let damaged: u64 = self.log.damaged_ranges().iter().map(|r| r.records()).sum();
        let undecodable = self.browser.undecodable_from(first);
        (next - first).saturating_sub(damaged + undecodable)
    }

    /// The oldest offset it holds, and one past the newest.
    pub fn bounds(&self) -> (u64, u64) {
        self.browser.bounds()
    }

    /// Its consumer groups, by name: each with its committed offset and how many messages it
    /// has not acked yet (its lag: from the committed offset to the end).
    pub fn consumer_groups(&self) -> Vec<GroupLag> {
        let next = self.bounds().1;
        let committed = self.state.lock().groups.all();
        committed
            .into_iter()
            .filter(|(key, _)| !named_offsets::is_named(key))
            .map(|(group, committed)| GroupLag { group, committed, next, lag: next.saturating_sub(committed) })
            .collect()
    }

    /// The consumers attached, in the order they came.
    pub fn consumers(&self) -> Vec<StreamConsumer> {
        let state = self.state.lock();
        let consumer = |cursor: &Cursor| StreamConsumer {
            consumer: Arc::clone(&cursor.consumer),
            group: cursor.group.clone(),
            active: cursor.delivering(),
            last_delivered: cursor.last_delivered,
        };
        state.cursors.iter().map(consumer).collect()
    }

    /// Bytes the stream keeps on disk.
    pub fn disk_bytes(&self) -> u64 {
        self.log.size_bytes()
    }

    /// Consumers attached.
    pub fn consumer_count(&self) -> usize {
        self.state.lock().cursors.len()
    }

    /// Deliveries sent and not yet acked, over all consumers.
    pub fn unacked_count(&self) -> u32 {
        self.state.lock().cursors.iter().map(|c| c.consumer.unacked()).sum()
    }

    /// Appends a message; consumers waiting at the end of the log get it at once. The
    /// confirm waits for the returned mark (the fsync that covers the message).
    pub fn publish(&self, queue: &Arc<Queue>, message: &Arc<Message>) -> Result<Published, StoreError> {
        let mut state = self.state.lock();
        if state.deleted {
            return Ok(Published::Stored(None));
        }
        let now = now_ms();
        let dedup = self.arguments.deduplication.as_ref();
        let key = dedup.and_then(|settings| key_in(&message.properties, settings));
        if let (Some(key), Some(settings)) = (&key, dedup) {
            if state.dedup.contains(key, now, settings) {
                crate::dedup_window::note_dropped();
                // Dropped; its confirm waits for what is appended so far, the first copy included.
                let newest = self.log.next_offset().checked_sub(1);
                return Ok(Published::Stored(newest.map(|offset| DurableMark::new(&self.log, offset))));
            }
        }
        let (flags, tag_hash) = tag::header_fields(message_tag(message));
        let state = &mut *state;
        state.scratch.clear();
        message_codec::encode(message, &mut state.scratch);
        let record = NewRecord { timestamp_ms: now as i64, tag_hash, flags, payload: &state.scratch };
        let offset = self.log.append(record).map_err(StoreError::from)?;
        if let (Some(key), Some(settings)) = (key, dedup) {
            state.dedup.insert(key, now, settings);
        }
        for cursor in state.cursors.iter_mut() {
            if cursor.delivering() && cursor.waits_at(offset) && cursor.consumer.has_credit() {
                cursor.step_over(offset);
                if cursor.consumer.wants(message) {
                    deliver(cursor, queue, offset, Message::clone(message));
                }
            }
        }
        Ok(Published::Stored(Some(DurableMark::new(&self.log, offset))))
    }

    /// Delivers to every active consumer what its credit allows, reading from the log.
    pub fn dispatch(&self, queue: &Arc<Queue>) {
        let mut state = self.state.lock();
        for cursor in state.cursors.iter_mut().filter(|c| c.delivering()) {
            self.feed(cursor, queue);
        }
    }

    fn feed(&self, cursor: &mut Cursor, queue: &Arc<Queue>) {
        while cursor.consumer.has_credit() {
            let Some(record) = cursor.pop() else {
                match cursor.fill(&self.log) {
                    Ok(true) => continue,
                    Ok(false) => return,
                    Err(error) => {
                        tracing::error!(dir = %self.dir.display(), %error, "cannot read the stream; delivery paused");
                        return;
                    }
                }
            };
            let offset = record.offset;
            let Some(message) = self.browser.decode(record) else { continue };
            // The header hash let it through; the tag itself decides (no false positives).
            if cursor.consumer.wants(&message) {
                deliver(cursor, queue, offset, message);
            }
        }
    }

    /// Attaches a consumer at the offset its arguments name (or where its group stopped).
    /// Stream consumers must ack (no `no-ack`) and have a prefetch, as in RabbitMQ (406).
    pub fn add_consumer(&self, consumer: Arc<Consumer>) -> BrokerResult<()> {
        if consumer.no_ack() {
            return Err(BrokerError::precondition_failed(
                "stream consumers must acknowledge: consume with no-ack=false (acks return credit; they remove nothing)",
            ));
        }
        if consumer.prefetch() == 0 {
            return Err(BrokerError::precondition_failed(
                "stream consumers need a prefetch count: send basic.qos (global=false) with a non-zero prefetch \
                 before basic.consume",
            ));
        }
        let arguments = consumer.arguments().inner();
        let spec = OffsetSpec::parse(arguments.get(OFFSET_ARGUMENT))?;
        let group = group_of(&consumer)?;
        // A part of a super stream consumer in a group reads when the group gives it the
        // partition (`partition_groups`).
        let assigned = group.is_some() && consumer.partition().is_some();
        let mut state = self.state.lock();
        if state.deleted {
            return Err(BrokerError::not_found("the stream was deleted"));
        }
        let (first, next) = self.bounds();
        let committed = group.as_deref().and_then(|g| state.groups.get(g));
        let start = match committed {
            Some(offset) => offset.clamp(first, next),
            None => spec.resolve(&self.log).map_err(internal)?,
        };
        let active = !assigned && (group.is_none() || !state.cursors.iter().any(|c| !c.assigned && c.group == group));
        let mut cursor = Cursor::new(consumer, start, group, active);
        cursor.assigned = assigned;
        state.cursors.push(cursor);
        Ok(())
    }

    /// A super stream's group gives this partition to `consumer` (one of its parts): it reads
    /// from the group's committed offset, or from where the last owner released it if that is
    /// later (without either, from where its `x-stream-offset` put it). False if it is gone.
    pub fn take_partition(&self, consumer: &Arc<Consumer>, released_at: Option<u64>) -> bool {
        let mut state = self.state.lock();
        let state = &mut *state;
        let Some(cursor) = state.cursors.iter_mut().find(|c| Arc::ptr_eq(&c.consumer, consumer)) else { return false };
        if cursor.active {
            return true;
        }
        let committed = cursor.group.as_deref().and_then(|g| state.groups.get(g));
        if let Some(start) = committed.max(released_at) {
            let (first, next) = self.browser.bounds();
            cursor.seek(start.max(first).min(next.max(start)));
        }
        cursor.active = true;
        cursor.paused = false;
        true
    }

    /// Whether `consumer` is attached (not cancelled, its channel open).
    pub fn is_attached(&self, consumer: &Arc<Consumer>) -> bool {
        self.state.lock().cursors.iter().any(|c| Arc::ptr_eq(&c.consumer, consumer))
    }

    /// The partition moves from `consumer`: nothing more is delivered to it; its deliveries
    /// in flight still count when settled. Returns how many it has in flight.
    pub fn pause_partition(&self, consumer: &Arc<Consumer>) -> u32 {
        let mut state = self.state.lock();
        if let Some(cursor) = state.cursors.iter_mut().find(|c| Arc::ptr_eq(&c.consumer, consumer)) {
            cursor.paused = true;
        }
        consumer.unacked()
    }

    /// `consumer` gives the partition up: what it settled is committed, what it did not is
    /// for the next owner to read again (a settle after this counts for nothing). Returns
    /// where the next owner starts.
    pub fn release_partition(&self, consumer: &Arc<Consumer>) -> Option<u64> {
        let mut state = self.state.lock();
        let state = &mut *state;
        let cursor = state.cursors.iter_mut().find(|c| Arc::ptr_eq(&c.consumer, consumer))?;
        if !cursor.active {
            return None;
        }
        let committed = cursor.committed();
        if let Some(group) = cursor.group.as_deref() {
            self.commit(state.groups.as_mut(), group, committed);
        }
        cursor.active = false;
        cursor.paused = false;
        Some(committed)
    }

    /// Detaches a consumer; returns true if none is left. When the active consumer of a
    /// group leaves, the group's committed offset is stored and the next member takes over
    /// from it (what the leaver had not acked comes again).
    pub fn remove_consumer(&self, consumer: &Arc<Consumer>) -> bool {
        let mut state = self.state.lock();
        let state = &mut *state;
        let Some(index) = state.cursors.iter().position(|c| Arc::ptr_eq(&c.consumer, consumer)) else {
            return state.cursors.is_empty();
        };
        let cursor = state.cursors.remove(index);
        if let (true, Some(group)) = (cursor.assigned, cursor.group.as_deref()) {
            if cursor.active {
                self.commit(state.groups.as_mut(), group, cursor.committed());
            }
            // The first partition keeps the super stream's groups: the member leaves them.
            if consumer.partition() == Some(0) {
                let member = self.coordination.member(consumer);
                self.coordination.change(GroupOp::Leave { group: group.to_string(), member });
            }
        } else if let (true, Some(group)) = (cursor.active, cursor.group.as_deref()) {
            self.commit(state.groups.as_mut(), group, cursor.committed());
            let resume = state.groups.get(group).unwrap_or_else(|| cursor.committed());
            if let Some(next) = state.cursors.iter_mut().find(|c| !c.assigned && c.group.as_deref() == Some(group)) {
                next.active = true;
                next.seek(resume);
            }
        }
        state.cursors.is_empty()
    }

    /// Deliveries of `consumer` were settled. Nothing is removed or requeued in a stream;
    /// the consumer gets its credit back. In a consumer group, acked and rejected deliveries
    /// let the committed offset move past them, while `requeued` ones (nack or reject with
    /// requeue) hold it back: the group reads them again from the committed offset when its
    /// next consumer starts.
    pub fn settle(&self, queue: &Arc<Queue>, consumer: Option<&Arc<Consumer>>, offsets: &[u64], requeued: bool) {
        let mut state = self.state.lock();
        let state = &mut *state;
        let found = consumer.and_then(|c| state.cursors.iter_mut().find(|cur| Arc::ptr_eq(&cur.consumer, c)));
        if let Some(cursor) = found.filter(|c| c.active && !requeued) {
            cursor.settled(offsets);
            if let Some(group) = cursor.group.as_deref() {
                self.commit(state.groups.as_mut(), group, cursor.committed());
            }
        }
        for cursor in state.cursors.iter_mut().filter(|c| c.delivering()) {
            self.feed(cursor, queue);
        }
    }

    fn commit(&self, groups: &mut dyn OffsetStore, group: &str, offset: u64) {
        if let Err(error) = groups.commit(group, offset) {
            tracing::error!(dir = %self.dir.display(), group, %error, "cannot store a consumer group's offset");
        }
    }

    /// Reads of the stream by offset without a consumer (the management API and UI browse
    /// with it).
    pub fn browser(&self) -> &LogBrowser {
        &self.browser
    }

    /// Applies `x-max-age` and `x-max-length-bytes` now (they also apply at each segment roll).
    pub fn enforce_retention(&self) {
        if let Err(error) = self.log.enforce_retention() {
            tracing::error!(dir = %self.dir.display(), %error, "cannot apply the stream's retention");
        }
    }

    /// Makes everything durable (the broker is stopping).
    pub fn close(&self) {
        let state = self.state.lock();
        if let Err(error) = self.log.close().map_err(StoreError::from).and_then(|()| state.groups.close()) {
            tracing::error!(dir = %self.dir.display(), %error, "cannot close the stream");
        }
    }

    /// The stream was deleted: detaches its consumers (returned for cancelling) and removes
    /// its files.
    pub fn destroy(&self) -> Vec<Arc<Consumer>> {
        let mut state = self.state.lock();
        state.deleted = true;
        let consumers = state.cursors.drain(..).map(|c| c.consumer).collect();
        let _ = self.log.close();
        let _ = state.groups.close();
        if let Err(error) = std::fs::remove_dir_all(&self.dir) {
            tracing::warn!(dir = %self.dir.display(), %error, "cannot remove a deleted stream's files");
        }
        consumers
    }
}

/// Hands one message to a cursor's consumer, stamped with its offset.
fn deliver(cursor: &mut Cursor, queue: &Arc<Queue>, offset: u64, mut message: Message) {
    match message.properties.with_long_long_header(OFFSET_HEADER, offset as i64) {
        Ok(properties) => message.properties = properties,
        Err(error) => tracing::warn!(offset, %error, "cannot add the offset header; delivering without it"),
    }
    cursor.delivered(offset);
    let consumer = Arc::clone(&cursor.consumer);
    consumer.session().push(&consumer, queue, MessageRef::new(offset, offset, false, 0), false, Arc::new(message));
}

/// The consumer group `consumer` asks to be in (`x-consumer-group`), if any; 406 for a name
/// that is not one.
pub(crate) fn group_of(consumer: &Consumer) -> BrokerResult<Option<String>> {
    parse_group(consumer.arguments().inner().get(GROUP_ARGUMENT))
}

fn parse_group(value: Option<&amq_protocol::types::AMQPValue>) -> BrokerResult<Option<String>> {
    let Some(value) = value else { return Ok(None) };
    let name = string_of(value).and_then(|b| std::str::from_utf8(b).ok());
    match name {
        Some(name) if !name.is_empty() && name.len() <= MAX_GROUP_NAME_BYTES => Ok(Some(name.to_string())),
        _ => Err(BrokerError::precondition_failed(format!(
            "invalid consumer arg '{GROUP_ARGUMENT}': expected a group name of 1 to {MAX_GROUP_NAME_BYTES} bytes, \
             got {value:?}"
        ))),
    }
}
