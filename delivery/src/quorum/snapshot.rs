//! Snapshots of a quorum queue: what one holds ([`StateSnapshot`]: the live messages'
//! metadata, the consumers and the counters, never a body), how it is encoded, and the
//! [`Checkpoints`] from which a snapshot at the release cursor is chosen. Messages waiting
//! for an at-least-once dead-letter confirm are listed too.
//!
//! A snapshot must be the state *at* its index (replaying the entries after it rebuilds
//! the rest), and it may only be taken at or below the release cursor so that purging the
//! log up to it keeps every live body. The state at the release cursor is in the past by
//! the time the cursor moves there, so the state machine keeps checkpoints (encoded states
//! taken every so many entries, more seldom as the queue grows, as RabbitMQ's quorum queues
//! do) and a snapshot is the newest checkpoint at or below the release cursor. Such a
//! checkpoint may list messages that were live then and are settled since: replaying the
//! log after it settles them again.

use super::command::MessageId;
use super::command::QUEUE_POLICIES_GROUP_VERSION;
use super::consumers::{Consumer, ConsumerKey, Consumers, Counters};
use super::error::QuorumError;
use super::settings::{PolicySettings, Settings};
use super::state::{MessageState, PendingDeadLetter, QueueState};
use crate::dedup_window::DedupEntries;
use crate::feature_flags::FIRST_MACHINE_VERSION;
use crate::raft_adapter::typ::{LogId, StoredMembership};
use crate::tag_filter::TagFilter;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// The first byte of an encoded snapshot: its format version (2: without tags and filters,
/// 3: without the deduplication window; both still read). A state at the first machine
/// version is written in this format, which every release since it reads, so that a node of
/// an earlier release can install it while a cluster is upgraded.
pub const SNAPSHOT_FORMAT_VERSION: u8 = 4;
/// The format of a snapshot of a state at a later machine version: format 4's, then the
/// version. Only nodes that know that version install one: the version moves once every
/// node does.
pub const SNAPSHOT_FORMAT_WITH_MACHINE_VERSION: u8 = 5;
/// The format of a snapshot of a state that obeys policies (machine version 2 on): format
/// 5's, then the [`PolicySettings`] in effect, which the queue's definition does not give.
pub const SNAPSHOT_FORMAT_WITH_POLICY: u8 = 6;
/// Entries between two checkpoints at least; more when the queue holds more messages (a
/// checkpoint costs time and memory in proportion to them).
pub const DEFAULT_CHECKPOINT_INTERVAL_ENTRIES: u64 = 4096;
/// Checkpoints kept waiting for the release cursor at most; when full, the newest is
/// replaced, so a message that is never settled costs at most this many.
pub const MAX_PENDING_CHECKPOINTS: usize = 4;

/// A quorum queue's state as data: what a snapshot holds. Two states are the same state
/// when their snapshots are equal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateSnapshot {
    clock_ms: u64,
    /// Every live message with its priority, size, delivery counts and holder; the ready
    /// ones (no holder) are in delivery order once sorted by priority then id.
    messages: Vec<(MessageId, MessageState)>,
    consumers: Vec<(ConsumerKey, Consumer)>,
    counters: Counters,
    /// Messages waiting for a dead-letter confirm (at-least-once).
    dead_lettering: Vec<(MessageId, PendingDeadLetter)>,
    /// The live messages' tags, for consumers with a tag filter.
    tags: Vec<(MessageId, Vec<u8>)>,
    /// The consumers' tag filters.
    filters: Vec<(ConsumerKey, TagFilter)>,
    /// The deduplication keys seen lately, oldest first.
    dedup: DedupEntries,
    /// The machine version the state applies entries with (written after the rest, in
    /// format 5 only).
    #[serde(skip, default = "first_machine_version")]
    machine_version: u16,
    /// What the policies made of the queue's settings (written after the version, in
    /// format 6 only: from the machine version that applies policies on).
    #[serde(skip)]
    policy: Option<PolicySettings>,
}

fn first_machine_version() -> u16 {
    FIRST_MACHINE_VERSION
}

/// A snapshot as format 3 wrote it: as [`StateSnapshot`] without the deduplication window.
#[derive(Debug, Deserialize)]
struct StateSnapshotV3 {
    clock_ms: u64,
    messages: Vec<(MessageId, MessageState)>,
    consumers: Vec<(ConsumerKey, Consumer)>,
    counters: Counters,
    dead_lettering: Vec<(MessageId, PendingDeadLetter)>,
    tags: Vec<(MessageId, Vec<u8>)>,
    filters: Vec<(ConsumerKey, TagFilter)>,
}

impl From<StateSnapshotV3> for StateSnapshot {
    fn from(v3: StateSnapshotV3) -> Self {
        let StateSnapshotV3 { clock_ms, messages, consumers, counters, dead_lettering, tags, filters } = v3;
        StateSnapshot {
            clock_ms,
            messages,
            consumers,
            counters,
            dead_lettering,
            tags,
            filters,
            dedup: DedupEntries::default(),
            machine_version: FIRST_MACHINE_VERSION,
            policy: None,
        }
    }
}

/// A snapshot as format 2 wrote it: as [`StateSnapshot`] without tags and filters.
#[derive(Debug, Deserialize)]
struct StateSnapshotV2 {
    clock_ms: u64,
    messages: Vec<(MessageId, MessageState)>,
    consumers: Vec<(ConsumerKey, Consumer)>,
    counters: Counters,
    dead_lettering: Vec<(MessageId, PendingDeadLetter)>,
}

impl From<StateSnapshotV2> for StateSnapshot {
    fn from(v2: StateSnapshotV2) -> Self {
        let StateSnapshotV2 { clock_ms, messages, consumers, counters, dead_lettering } = v2;
        StateSnapshot::from(StateSnapshotV3 {
            clock_ms,
            messages,
            consumers,
            counters,
            dead_lettering,
            tags: Vec::new(),
            filters: Vec::new(),
        })
    }
}

impl StateSnapshot {
    /// The snapshot of `state`.
    pub fn of(state: &QueueState) -> Self {
        let parts = state.parts();
        let consumers = parts
            .consumers
            .iter()
            .map(|(key, consumer)| {
                let mut consumer = consumer.clone();
                consumer.held.clear();
                (key, consumer)
            })
            .collect();
        StateSnapshot {
            clock_ms: parts.clock_ms,
            messages: parts.messages.iter().map(|(id, m)| (*id, *m)).collect(),
            consumers,
            counters: parts.consumers.counters(),
            dead_lettering: parts.dead_lettering.iter().map(|(id, pending)| (*id, *pending)).collect(),
            tags: parts.tags.iter().map(|(id, tag)| (*id, tag.clone())).collect(),
            filters: parts.consumers.filters().iter().map(|(key, f)| (*key, f.clone())).collect(),
            dedup: parts.dedup.entries(),
            machine_version: parts.machine_version,
            policy: (parts.machine_version >= QUEUE_POLICIES_GROUP_VERSION).then(|| state.settings().policy),
        }
    }

    /// The state this snapshot holds, obeying `settings` (the queue's own arguments) as the
    /// policies in the snapshot changed them.
    pub fn restore(self, mut settings: Settings) -> Result<QueueState, QuorumError> {
        if let Some(policy) = self.policy {
            settings.policy = policy;
        }
        let consumers = Consumers::restore(self.consumers, self.counters, self.filters);
        let messages = self.messages.into_iter().collect();
        let dead_lettering = self.dead_lettering.into_iter().collect();
        let tags = self.tags.into_iter().collect();
        let state =
            QueueState::from_parts(settings, self.clock_ms, messages, consumers, dead_lettering, tags, self.dedup)?;
        Ok(state.at_machine_version(self.machine_version))
    }

    /// Messages the snapshot lists.
    pub fn message_count(&self) -> usize {
        self.messages.len()
    }

    /// The machine version the state applies entries with.
    pub fn machine_version(&self) -> u16 {
        self.machine_version
    }

    /// The format byte, then postcard: format 4 at the first machine version, 5 (with the
    /// version) past it, 6 (with the version and the policy) from the version that applies
    /// policies on.
    pub fn encode(&self) -> Result<Vec<u8>, QuorumError> {
        let encoded = match self.policy {
            Some(policy) => {
                postcard::to_extend(&(self, self.machine_version, policy), vec![SNAPSHOT_FORMAT_WITH_POLICY])
            }
            None if self.machine_version == FIRST_MACHINE_VERSION => {
                postcard::to_extend(self, vec![SNAPSHOT_FORMAT_VERSION])
            }
            None => postcard::to_extend(&(self, self.machine_version), vec![SNAPSHOT_FORMAT_WITH_MACHINE_VERSION]),
        };
        encoded.map_err(QuorumError::Encode)
    }

    /// Reads what [`StateSnapshot::encode`] wrote (or formats 2 and 3 did).
    pub fn decode(bytes: &[u8]) -> Result<Self, QuorumError> {
        match bytes.split_first() {
            Some((2, rest)) => decode_whole::<StateSnapshotV2>(rest).map(StateSnapshot::from),
            Some((3, rest)) => decode_whole::<StateSnapshotV3>(rest).map(StateSnapshot::from),
            Some((&SNAPSHOT_FORMAT_WITH_MACHINE_VERSION, rest)) => {
                let (snapshot, machine_version) = decode_whole::<(StateSnapshot, u16)>(rest)?;
                Ok(StateSnapshot { machine_version, ..snapshot })
            }
            Some((&SNAPSHOT_FORMAT_WITH_POLICY, rest)) => {
                let (snapshot, machine_version, policy) = decode_whole::<(StateSnapshot, u16, PolicySettings)>(rest)?;
                Ok(StateSnapshot { machine_version, policy: Some(policy), ..snapshot })
            }
            _ => decode_versioned(bytes, SNAPSHOT_FORMAT_VERSION),
        }
    }
}

/// The first byte of a snapshot file (a snapshot's Raft metadata beside its encoded state):
/// its format version, which does not change with the state's.
pub const SAVED_SNAPSHOT_FORMAT_VERSION: u8 = 2;

/// Decodes version byte `version` then a whole postcard value.
pub(crate) fn decode_versioned<T: for<'de> Deserialize<'de>>(bytes: &[u8], version: u8) -> Result<T, QuorumError> {
    match bytes.split_first() {
        Some((&found, rest)) if found == version => decode_whole(rest),
        Some((&version, _)) => Err(QuorumError::Version(version)),
        None => Err(QuorumError::Trailing(0)),
    }
}

/// Decodes a whole postcard value: bytes left over are an error.
pub(crate) fn decode_whole<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, QuorumError> {
    match postcard::take_from_bytes(bytes) {
        Ok((value, [])) => Ok(value),
        Ok((_, trailing)) => Err(QuorumError::Trailing(trailing.len())),
        Err(error) => Err(QuorumError::Decode(error)),
    }
}

/// The state after one entry, encoded, with the Raft state a snapshot there needs.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    /// The entry it follows.
    pub log_id: LogId,
    /// The membership in force then.
    pub membership: StoredMembership,
    /// The encoded [`StateSnapshot`].
    pub data: Bytes,
}

/// Checkpoints waiting for the release cursor to reach them.
#[derive(Debug)]
pub struct Checkpoints {
    interval_entries: u64,
    pending: VecDeque<Checkpoint>,
    /// Index of the last checkpoint taken.
    last_taken: Option<u64>,
}

impl Checkpoints {
    /// One checkpoint every `interval_entries` entries at least.
    pub fn new(interval_entries: u64) -> Self {
        Checkpoints { interval_entries: interval_entries.max(1), pending: VecDeque::new(), last_taken: None }
    }

    /// Whether to take one after entry `index`, with `live` messages in the queue.
    pub fn due(&self, index: u64, live: u64) -> bool {
        self.last_taken.is_none_or(|last| index >= last.saturating_add(self.interval_entries.max(live)))
    }

    /// Keeps `checkpoint` (replacing the newest one if as many as allowed are waiting).
    pub fn push(&mut self, checkpoint: Checkpoint) {
        self.last_taken = Some(checkpoint.log_id.index);
        if self.pending.len() >= MAX_PENDING_CHECKPOINTS {
            self.pending.pop_back();
        }
        self.pending.push_back(checkpoint);
    }

    /// The newest checkpoint at or below `release_cursor`, dropping older ones.
    pub fn take_usable(&mut self, release_cursor: u64) -> Option<Checkpoint> {
        let mut usable = None;
        while self.pending.front().is_some_and(|c| c.log_id.index <= release_cursor) {
            usable = self.pending.pop_front();
        }
        usable
    }

    /// Forgets every checkpoint (a snapshot was installed over the state).
    pub fn clear(&mut self) {
        self.pending.clear();
        self.last_taken = None;
    }

    /// Checkpoints waiting.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether none is waiting.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}
