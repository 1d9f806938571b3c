//! The state machines a Raft group of Warren's can run, as one type: a quorum queue's
//! ([`QuorumStateMachine`]) or a replicated stream's ([`StreamStateMachine`]). Both speak the
//! same entries ([`QuorumRaft`]), so the cluster's transport, routing and proposal forwarding
//! serve either without knowing which; only the state an entry builds differs.

use super::raft::{quorum_raft_config, QuorumRaft, QuorumStateMachine};
use super::Response;
use crate::raft_adapter::typ::{Entry, LogId, StoredMembership};
use crate::raft_adapter::{MachineError, MachineSnapshot, SnapshotTaking, StateMachine};
use crate::stream::StreamStateMachine;
use openraft::{Config, ConfigError};

/// A group's state machine, of either kind.
#[derive(Clone)]
pub enum GroupMachine {
    /// A quorum queue's.
    Queue(QuorumStateMachine),
    /// A replicated stream's.
    Stream(StreamStateMachine),
}

/// A state machine a [`super::QuorumGroup`] runs: it knows what it applied, and how its group
/// should be configured.
pub trait ReplicatedMachine: Clone + Send + Sync + 'static {
    /// The last entry applied on this node.
    fn last_applied(&self) -> Option<LogId>;

    /// Entries up to `index` were in the log when the node started (see
    /// [`QuorumStateMachine::skip_effects_through`]); nothing by default.
    fn replayed_through(&self, _index: u64) {}

    /// As the group runs it.
    fn into_group_machine(self) -> GroupMachine;
}

impl ReplicatedMachine for QuorumStateMachine {
    fn last_applied(&self) -> Option<LogId> {
        QuorumStateMachine::last_applied(self)
    }

    fn replayed_through(&self, index: u64) {
        self.skip_effects_through(index);
    }

    fn into_group_machine(self) -> GroupMachine {
        GroupMachine::Queue(self)
    }
}

impl ReplicatedMachine for StreamStateMachine {
    fn last_applied(&self) -> Option<LogId> {
        StreamStateMachine::last_applied(self)
    }

    fn into_group_machine(self) -> GroupMachine {
        GroupMachine::Stream(self)
    }
}

impl GroupMachine {
    /// openraft's configuration for the group (before the transport fits it).
    pub fn raft_config(&self, cluster_name: &str) -> Result<Config, Box<ConfigError>> {
        match self {
            GroupMachine::Queue(_) => quorum_raft_config(cluster_name),
            GroupMachine::Stream(_) => crate::stream::stream_raft_config(cluster_name),
        }
    }

    /// The replicated stream's machine, if it is one (its log serves other replicas'
    /// catch-up).
    pub fn as_stream(&self) -> Option<&StreamStateMachine> {
        match self {
            GroupMachine::Stream(machine) => Some(machine),
            GroupMachine::Queue(_) => None,
        }
    }
}

impl StateMachine<QuorumRaft> for GroupMachine {
    fn applied_state(&self) -> (Option<LogId>, StoredMembership) {
        match self {
            GroupMachine::Queue(machine) => machine.applied_state(),
            GroupMachine::Stream(machine) => machine.applied_state(),
        }
    }

    fn apply(&self, entries: Vec<Entry<QuorumRaft>>) -> Result<Vec<Vec<Response>>, MachineError> {
        match self {
            GroupMachine::Queue(machine) => machine.apply(entries),
            GroupMachine::Stream(machine) => machine.apply(entries),
        }
    }

    fn take_snapshot(&self) -> SnapshotTaking {
        match self {
            GroupMachine::Queue(machine) => machine.take_snapshot(),
            GroupMachine::Stream(machine) => machine.take_snapshot(),
        }
    }

    async fn install(&self, snapshot: MachineSnapshot) -> Result<(), MachineError> {
        match self {
            GroupMachine::Queue(machine) => machine.install(snapshot).await,
            GroupMachine::Stream(machine) => machine.install(snapshot).await,
        }
    }

    fn current_snapshot(&self) -> Result<Option<MachineSnapshot>, MachineError> {
        match self {
            GroupMachine::Queue(machine) => machine.current_snapshot(),
            GroupMachine::Stream(machine) => machine.current_snapshot(),
        }
    }
}
