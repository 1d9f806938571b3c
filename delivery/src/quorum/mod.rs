//! Quorum queues' replicated state machine (issue 13): the commands that go through a
//! queue's Raft log, the deterministic state they build on every replica, the effects
//! only the leader acts on, snapshots at the release cursor, and the openraft glue.
//! The quorum queue kind of the queue layer runs it; this layer knows nothing of queues.
//!
//! - `command`: [`Command`] (the leader's clock and an [`Op`]) and [`Response`].
//! - `state`: [`QueueState`] and `apply`: ready set by priority then id, held messages per
//!   consumer with delivery counts, TTL, length limits, delivery limit.
//! - `consumers`: who gets the next message (priorities, round robin, single active).
//! - `effect`: [`Effect`]s (deliver, dead-letter, active consumer changes).
//! - `settings`: the queue arguments the state obeys ([`Settings`]), and [`DeadLetterStrategy`].
//! - `snapshot`: [`StateSnapshot`] (no bodies) and the checkpoints snapshots are taken from.
//! - `raft`: the type config [`QuorumRaft`] and [`QuorumStateMachine`].
//! - `group`: [`QuorumGroup`], a queue's (or a replicated stream's) group running on this node.
//! - `group_machine`: [`GroupMachine`], the state machine of either kind, as openraft runs it.
//! - `leader_changes`: [`leader_changes::LeaderChanges`], a member learning of a new leader.
//! - `proposer`: what feeds the group this node's commands, in order and batched.
//! - `no_peers`: the network of a group with no other member.
//! - `replication`: what a group needs from the cluster ([`Replication`]), and
//!   [`SingleNode`] for a broker on its own.
//! - `error`: [`QuorumError`].

mod command;
mod consumers;
mod effect;
mod error;
mod figures;
mod group;
mod group_machine;
pub mod leader_changes;
mod no_peers;
mod proposer;
mod raft;
mod replication;
mod settings;
mod snapshot;
mod state;

#[cfg(test)]
mod tests;

pub use command::{
    entry_of, message_id, Command, CommandBatch, ConsumerId, ConsumerSpec, Dequeued, Enqueue, MessageId, Op, Response,
    MAX_OPS_PER_ENTRY, QUEUE_POLICIES_GROUP_VERSION,
};
pub use effect::Effect;
pub use error::QuorumError;
pub use figures::{CommitLatency, RaftFigures};
pub use group::{holds_group, snapshot_path, GroupError, Membership, QuorumGroup, LOCAL_NODE_ID};
pub use group_machine::{GroupMachine, ReplicatedMachine};
pub use no_peers::NoPeers;
pub use proposer::{tell_followers_the_commit, ENTRIES_IN_FLIGHT};
pub use raft::{quorum_raft_config, AppliedEffects, QuorumRaft, QuorumStateMachine, SNAPSHOT_LOGS_SINCE_LAST};
pub use replication::{ClusterFuture, InitialMembers, ProposeError, Replication, SingleNode};
pub use settings::{DeadLetterStrategy, PolicySettings, Settings, DEFAULT_DELIVERY_LIMIT};
pub(crate) use snapshot::{decode_versioned, decode_whole};
pub use snapshot::{
    Checkpoint, Checkpoints, StateSnapshot, DEFAULT_CHECKPOINT_INTERVAL_ENTRIES, MAX_PENDING_CHECKPOINTS,
    SNAPSHOT_FORMAT_VERSION,
};
pub use state::{MissingHolder, QueueState};
