//! Quorum queues' replicated state machine (issue 13): the commands that go through a
//! queue's Raft log, the deterministic state they build on every replica, the effects
//! only the leader acts on, snapshots at the release cursor, and the openraft glue.
//! Not yet wired into `queue.declare`, channels or a cluster.
//!
//! - `command`: [`Command`] (the leader's clock and an [`Op`]) and [`Response`].
//! - `state`: [`QueueState`] and `apply`: ready set by priority then id, held messages per
//!   consumer with delivery counts, TTL, length limits, delivery limit.
//! - `consumers`: who gets the next message (priorities, round robin, single active).
//! - `effect`: [`Effect`]s (deliver, dead-letter, active consumer changes).
//! - `settings`: the queue arguments the state obeys, from [`crate::queue::QueueArguments`].
//! - `snapshot`: [`StateSnapshot`] (no bodies) and the checkpoints snapshots are taken from.
//! - `raft`: the type config [`QuorumRaft`] and [`QuorumStateMachine`].
//! - `error`: [`QuorumError`].

mod command;
mod consumers;
mod effect;
mod error;
mod raft;
mod settings;
mod snapshot;
mod state;

#[cfg(test)]
mod tests;

pub use command::{Command, ConsumerId, ConsumerSpec, Dequeued, Enqueue, MessageId, Op, Response};
pub use effect::Effect;
pub use error::QuorumError;
pub use raft::{
    quorum_raft_config, AppliedEffects, QuorumRaft, QuorumSnapshotBuilder, QuorumStateMachine, SNAPSHOT_LOGS_SINCE_LAST,
};
pub use settings::{DeadLetterStrategy, Settings, DEFAULT_DELIVERY_LIMIT};
pub use snapshot::{
    Checkpoint, Checkpoints, StateSnapshot, DEFAULT_CHECKPOINT_INTERVAL_ENTRIES, MAX_PENDING_CHECKPOINTS,
    SNAPSHOT_FORMAT_VERSION,
};
pub use state::{MissingHolder, QueueState};
