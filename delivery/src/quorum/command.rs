//! What goes through a quorum queue's Raft log: a [`CommandBatch`] per entry (the leader's
//! clock and the [`Op`]s proposed together, applied in order as [`Command`]s), and the
//! [`Response`] each op gets once applied. Both are serde types encoded with postcard in the
//! log; a message body is a `Bytes`, stored verbatim.
//!
//! Why batches: openraft 0.9 appends one client write at a time and waits for it to be
//! durable before the next, so one op per entry would cost an fsync (and, in a cluster, a
//! round of replication) per publish. The proposer puts every op waiting into one entry.

use crate::feature_flags::{check_group_version, GroupMachineKind, NewerVersion};
use serde::{Deserialize, Serialize};

/// A message's id: where its [`Op::Enqueue`] is in the log, [`message_id`] of its entry's
/// index and its position in the entry's batch. Ids grow with the log.
pub type MessageId = u64;

/// Bits of a [`MessageId`] that hold the position in the entry's batch.
const POSITION_BITS: u32 = 12;
/// Ops one entry carries at most.
pub const MAX_OPS_PER_ENTRY: usize = 1 << POSITION_BITS;

/// The id of the message enqueued by op `position` of the entry at `index`.
pub fn message_id(index: u64, position: usize) -> MessageId {
    (index << POSITION_BITS) | (position as u64 & (MAX_OPS_PER_ENTRY as u64 - 1))
}

/// The log index of the entry holding message `id`, and its position in the entry's batch.
pub fn entry_of(id: MessageId) -> (u64, usize) {
    (id >> POSITION_BITS, (id & (MAX_OPS_PER_ENTRY as u64 - 1)) as usize)
}

/// A consumer of a quorum queue, unique in the cluster: the channel that owns it (a node and
/// a channel id unique on that node) and its consumer tag. `basic.get` on a channel uses the
/// channel's [`ConsumerId::getter`]. Ordered by node, then channel, then tag.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ConsumerId {
    /// The node the channel is open on: only that node delivers to it.
    pub node: u64,
    /// The owning channel, unique on its node: [`Op::Down`] removes all of its consumers.
    pub channel: u64,
    /// The consumer tag (never empty for a `basic.consume` consumer).
    pub tag: String,
}

impl ConsumerId {
    /// A consumer `tag` of `channel` on `node`.
    pub fn new(node: u64, channel: u64, tag: impl Into<String>) -> Self {
        ConsumerId { node, channel, tag: tag.into() }
    }

    /// What holds the messages a channel took with `basic.get` and has not settled: the
    /// empty tag, which `basic.consume` never uses.
    pub fn getter(node: u64, channel: u64) -> Self {
        ConsumerId { node, channel, tag: String::new() }
    }

    /// Whether this is a channel's [`ConsumerId::getter`].
    pub fn is_getter(&self) -> bool {
        self.tag.is_empty()
    }
}

/// How a consumer takes messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerSpec {
    /// Messages it may hold unsettled at once (`basic.qos` prefetch-count); 0: no limit.
    pub prefetch: u32,
    /// `x-priority`: consumers of a higher priority are served first.
    pub priority: i32,
}

/// A message published to the queue (`priority` and `expiration` are read from its
/// properties).
pub type Enqueue = crate::message::WireMessage;

/// One operation on the queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Op {
    /// Publish a message; its id is this entry's index (a replicated stream appends it at its
    /// next offset).
    Enqueue(Enqueue),
    /// Attach a consumer, or change the spec of an attached one (its messages stay).
    Checkout {
        /// Who.
        consumer: ConsumerId,
        /// Prefetch and priority.
        spec: ConsumerSpec,
    },
    /// `basic.cancel`: no more deliveries; what it holds stays until settled or returned.
    Cancel {
        /// Who.
        consumer: ConsumerId,
    },
    /// The channel closed (or its node left): its consumers go and what they hold returns
    /// to the queue, each return counting as a failed delivery.
    Down {
        /// The channel's node.
        node: u64,
        /// The channel.
        channel: u64,
    },
    /// `basic.get`: take the next ready message, held by the channel's getter unless
    /// `settle` (no-ack) removes it at once.
    Dequeue {
        /// The getting channel's [`ConsumerId::getter`].
        consumer: ConsumerId,
        /// Whether it is settled as taken (`no-ack`).
        settle: bool,
    },
    /// Ack: the messages leave the queue.
    Settle {
        /// Who holds them.
        consumer: ConsumerId,
        /// Which.
        ids: Vec<MessageId>,
    },
    /// Nack/reject with requeue: back in place, one more failed delivery each (past the
    /// delivery limit, dead-lettered or dropped with reason `delivery_limit`).
    Return {
        /// Who holds them.
        consumer: ConsumerId,
        /// Which.
        ids: Vec<MessageId>,
    },
    /// Nack/reject without requeue: dead-lettered (reason `rejected`) or dropped.
    Discard {
        /// Who holds them.
        consumer: ConsumerId,
        /// Which.
        ids: Vec<MessageId>,
    },
    /// At-least-once dead-lettering: the dead-letter target confirmed these messages, which
    /// now leave the queue (ids not waiting are ignored).
    DeadLettered {
        /// Which.
        ids: Vec<MessageId>,
    },
    /// `queue.purge`: every ready message goes (held ones stay).
    Purge,
    /// Time passed: ready messages whose TTL ran out by the command's time expire. (Every
    /// command expires what is due; this one only carries the time.)
    Expire,
    /// A [`Op::Checkout`] of a consumer that takes only the messages its tag filter
    /// (`x-stream-filter`) matches. (A variant of its own, last, so that logs written before
    /// it existed still decode.)
    CheckoutFiltered {
        /// Who.
        consumer: ConsumerId,
        /// Prefetch and priority.
        spec: ConsumerSpec,
        /// The tags it wants.
        filter: crate::tag_filter::TagFilter,
    },
    /// A replicated stream's consumer group `group` has settled everything below `offset`
    /// (`x-consumer-group`): its members resume there, on whichever replica they read. A
    /// quorum queue has no groups and ignores it.
    CommitOffset {
        /// The group's name.
        group: String,
        /// The group's committed offset: the first it has not settled.
        offset: u64,
    },
    /// A read barrier: applied, it answers a replicated stream's next offset
    /// ([`Response::NextOffset`]), so that a replica knows how far it must have applied to be
    /// as new as the leader was. A quorum queue ignores it.
    Sync,
    /// A change to the consumer groups of the super stream whose first partition this
    /// replicated stream is. A quorum queue ignores it.
    Group(crate::stream::GroupOp),
    /// The group's state machine moves to machine `version`
    /// ([`crate::feature_flags::GroupMachineKind`]): the entries after it are applied with that
    /// version's semantics. A node that does not know the version stops the group here. (Last,
    /// so that logs written before it existed still decode.)
    SetMachineVersion {
        /// The new version.
        version: u16,
    },
    /// The policies that apply to the queue changed: from here on it obeys `settings` (machine
    /// version [`QUEUE_POLICIES_GROUP_VERSION`] on). Proposed by the group's leader, so that
    /// every replica applies a policy change at the same entry. A replicated stream ignores it.
    ApplyPolicy {
        /// What the queue's arguments and the policies resolve to.
        settings: super::PolicySettings,
    },
    /// The policies that apply to a replicated stream changed its retention: from here on its
    /// log keeps what `retention` says (machine version
    /// [`STREAM_POLICIES_GROUP_VERSION`](crate::stream::STREAM_POLICIES_GROUP_VERSION) on).
    /// Proposed by the group's leader, so that every replica deletes by the same limits. A
    /// quorum queue ignores it.
    ApplyRetention {
        /// What the stream's arguments and the policies resolve to.
        retention: warren_storage::Retention,
    },
}

/// The group machine version from which quorum queues obey policies ([`Op::ApplyPolicy`]).
pub const QUEUE_POLICIES_GROUP_VERSION: u16 = 2;

impl Op {
    /// The machine version this op moves to, if it is [`Op::SetMachineVersion`].
    pub fn machine_version(&self) -> Option<u16> {
        match self {
            Op::SetMachineVersion { version } => Some(*version),
            _ => None,
        }
    }
}

/// A command: the leader's clock when it proposed it, and the operation.
///
/// `at_ms` (milliseconds since the Unix epoch) is the only time apply ever sees: it is the
/// publish time of an [`Op::Enqueue`] and what TTLs are measured against. The queue's clock
/// never goes back: a command older than one applied before counts as that one's time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Command {
    /// The proposing leader's clock, in ms since the Unix epoch.
    pub at_ms: u64,
    /// What to do.
    pub op: Op,
}

impl Command {
    /// `op` at `at_ms`.
    pub fn new(at_ms: u64, op: Op) -> Self {
        Command { at_ms, op }
    }
}

/// What one Raft entry carries: ops proposed together, applied in order, all at the proposing
/// leader's clock `at_ms` (see [`Command`]). At most [`MAX_OPS_PER_ENTRY`] ops.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommandBatch {
    /// The proposing leader's clock, in ms since the Unix epoch.
    pub at_ms: u64,
    /// What to do, in order.
    pub ops: Vec<Op>,
}

impl CommandBatch {
    /// Refuses the batch if it moves `machine` to a version this node does not know: applied
    /// with semantics this release does not know, its replica would diverge from the others.
    pub fn check_machine_version(&self, machine: GroupMachineKind) -> Result<(), NewerVersion> {
        self.ops.iter().filter_map(Op::machine_version).try_for_each(|version| check_group_version(machine, version))
    }
}

impl From<Command> for CommandBatch {
    fn from(command: Command) -> Self {
        CommandBatch { at_ms: command.at_ms, ops: vec![command.op] }
    }
}

/// What [`Op::Dequeue`] took.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dequeued {
    /// The message (read its body from the log at this index).
    pub id: MessageId,
    /// Failed deliveries so far (`x-delivery-count`).
    pub delivery_count: u32,
    /// Whether it was delivered before.
    pub redelivered: bool,
    /// Ready messages left after it (`basic.get-ok` message-count).
    pub ready_after: u64,
}

/// The result of applying one entry, returned to whoever proposed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// Applied; nothing to report (also the response to Raft's own entries).
    Done,
    /// The message was queued with this id: confirm it.
    Enqueued(MessageId),
    /// `x-overflow` refused the message: nack it.
    Rejected,
    /// Deduplication dropped the message (its key was seen within the window): confirm it,
    /// so that the publisher does not retry.
    Duplicate,
    /// `basic.get`: the message taken, or `None` if none was ready.
    Dequeued(Option<Dequeued>),
    /// `queue.purge`: how many ready messages went.
    Purged(u64),
    /// [`Op::Sync`] on a replicated stream: its next offset then.
    NextOffset(u64),
}
