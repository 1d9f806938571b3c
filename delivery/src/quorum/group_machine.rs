//! The state machines a Raft group of Warren's can run, as one type for openraft: a quorum
//! queue's ([`QuorumStateMachine`]) or a replicated stream's ([`StreamStateMachine`]). Both
//! speak the same entries ([`QuorumRaft`]), so the cluster's transport, routing and proposal
//! forwarding serve either without knowing which; only the state an entry builds differs.

use super::raft::{quorum_raft_config, QuorumRaft, QuorumSnapshotBuilder, QuorumStateMachine};
use crate::stream::{StreamSnapshotBuilder, StreamStateMachine};
use openraft::storage::{RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{
    BasicNode, Config, ConfigError, LogId, OptionalSend, RaftSnapshotBuilder, StorageError, StoredMembership,
};
use std::io::Cursor;

/// A group's state machine, of either kind.
#[derive(Clone)]
pub enum GroupMachine {
    /// A quorum queue's.
    Queue(QuorumStateMachine),
    /// A replicated stream's.
    Stream(StreamStateMachine),
}

/// The snapshot builder of a [`GroupMachine`].
pub enum GroupSnapshotBuilder {
    /// A quorum queue's.
    Queue(QuorumSnapshotBuilder),
    /// A replicated stream's.
    Stream(StreamSnapshotBuilder),
}

/// A state machine a [`super::QuorumGroup`] runs: it knows what it applied, and how its group
/// should be configured.
pub trait ReplicatedMachine: Clone + Send + Sync + 'static {
    /// The last entry applied on this node.
    fn last_applied(&self) -> Option<LogId<u64>>;

    /// Entries up to `index` were in the log when the node started (see
    /// [`QuorumStateMachine::skip_effects_through`]); nothing by default.
    fn replayed_through(&self, _index: u64) {}

    /// As openraft runs it.
    fn into_group_machine(self) -> GroupMachine;
}

impl ReplicatedMachine for QuorumStateMachine {
    fn last_applied(&self) -> Option<LogId<u64>> {
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
    fn last_applied(&self) -> Option<LogId<u64>> {
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

impl RaftSnapshotBuilder<QuorumRaft> for GroupSnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<QuorumRaft>, StorageError<u64>> {
        match self {
            GroupSnapshotBuilder::Queue(builder) => builder.build_snapshot().await,
            GroupSnapshotBuilder::Stream(builder) => builder.build_snapshot().await,
        }
    }
}

impl RaftStateMachine<QuorumRaft> for GroupMachine {
    type SnapshotBuilder = GroupSnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<u64>>, StoredMembership<u64, BasicNode>), StorageError<u64>> {
        match self {
            GroupMachine::Queue(machine) => machine.applied_state().await,
            GroupMachine::Stream(machine) => machine.applied_state().await,
        }
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Vec<super::Response>>, StorageError<u64>>
    where
        I: IntoIterator<Item = openraft::Entry<QuorumRaft>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        match self {
            GroupMachine::Queue(machine) => machine.apply(entries).await,
            GroupMachine::Stream(machine) => machine.apply(entries).await,
        }
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        match self {
            GroupMachine::Queue(machine) => GroupSnapshotBuilder::Queue(machine.get_snapshot_builder().await),
            GroupMachine::Stream(machine) => GroupSnapshotBuilder::Stream(machine.get_snapshot_builder().await),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError<u64>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<u64>> {
        match self {
            GroupMachine::Queue(machine) => machine.install_snapshot(meta, snapshot).await,
            GroupMachine::Stream(machine) => machine.install_snapshot(meta, snapshot).await,
        }
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<QuorumRaft>>, StorageError<u64>> {
        match self {
            GroupMachine::Queue(machine) => machine.get_current_snapshot().await,
            GroupMachine::Stream(machine) => machine.get_current_snapshot().await,
        }
    }
}
