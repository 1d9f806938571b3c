//! What a quorum queue's Raft group needs from the cluster it runs in, as a trait the layer
//! above implements ([`Replication`]): this node's id, the members of a new group, starting
//! this node's member on the cluster's network (and routing the group's incoming RPCs to it),
//! and handing a batch of commands to the leader when it is on another node. A broker on its
//! own uses [`SingleNode`]: one member, no network.

use super::command::{CommandBatch, Response};
use super::group::LOCAL_NODE_ID;
use super::group_machine::GroupMachine;
use super::no_peers::NoPeers;
use super::raft::QuorumRaft;
use crate::queue::LeaderLocator;
use crate::raft_adapter::Adapter;
use crate::stream::StreamChunk;
use openraft::{BasicNode, Raft};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use warren_storage::raft::RaftLog;

/// A future that the cluster layer returns.
pub type ClusterFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// The initializing member named when none is: no node has this id.
const JOINING_LEADER: u64 = u64::MAX;

/// Who a new group's members are, and which of them initializes it (and so leads first).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InitialMembers {
    /// The member that initializes the group.
    pub leader: u64,
    /// Every member, by Raft id.
    pub members: BTreeMap<u64, BasicNode>,
}

impl InitialMembers {
    /// A node joining a running group (`add_member`): it initializes nothing, and waits for
    /// the group's leader to add it.
    pub fn joining() -> Self {
        InitialMembers { leader: JOINING_LEADER, members: BTreeMap::new() }
    }

    /// The members `ids` of a group that formed already (a node catching up from the
    /// catalog's snapshot): nobody initializes it, and a member among them waits for the
    /// group's leader.
    pub fn formed(ids: impl IntoIterator<Item = u64>) -> Self {
        let members = ids.into_iter().map(|id| (id, BasicNode::default())).collect();
        InitialMembers { leader: JOINING_LEADER, members }
    }

    /// Whether these are [`InitialMembers::joining`]'s.
    pub fn is_joining(&self) -> bool {
        self.leader == JOINING_LEADER && self.members.is_empty()
    }

    /// The members' ids, the first leader first.
    pub fn ids_leader_first(&self) -> Vec<u64> {
        let others = self.members.keys().copied().filter(|id| *id != self.leader);
        self.members.keys().copied().filter(|id| *id == self.leader).chain(others).collect()
    }
}

/// Why a batch handed to another node's leader has no responses.
#[derive(Debug)]
pub enum ProposeError {
    /// It was not sent (no connection to the leader's node): nothing of it was applied, and
    /// it is given back to be proposed again.
    NotSent(CommandBatch),
    /// It was sent and its fate is unknown (the leader died, or lost its leadership).
    Failed(String),
}

impl std::fmt::Display for ProposeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProposeError::NotSent(_) => f.write_str("the leader's node is not connected"),
            ProposeError::Failed(why) => f.write_str(why),
        }
    }
}

/// The cluster as a quorum queue's group sees it.
pub trait Replication: Send + Sync + std::fmt::Debug + 'static {
    /// This node's Raft id.
    fn node_id(&self) -> u64;

    /// The members of the group of a new quorum queue `queue` in `vhost`, asked for
    /// `x-quorum-initial-group-size` (`None`: the default, min(3, nodes)), its first leader
    /// placed by `x-queue-leader-locator`.
    fn initial_members(&self, vhost: &str, queue: &str, size: Option<u64>, locator: LeaderLocator) -> InitialMembers;

    /// Starts this node's member of `group` over `log` and `machine` and routes the group's
    /// RPCs to it.
    fn start_member(
        &self,
        group: &str,
        log: RaftLog<QuorumRaft>,
        machine: GroupMachine,
    ) -> ClusterFuture<Result<Raft<QuorumRaft>, String>>;

    /// The catalog group decided the members of quorum queue `queue` in `vhost`: the next
    /// [`Replication::initial_members`] for it answers them.
    fn plan_members(&self, _vhost: &str, _queue: &str, _members: InitialMembers) {}

    /// Whether node `id` is reachable now (this node always is).
    fn is_node_up(&self, _id: u64) -> bool {
        true
    }

    /// Node `id` left the cluster (`forget_cluster_node`, applied by the catalog group, or
    /// remembered from before a restart): new queues no longer place members on it.
    fn forget_node(&self, _id: u64) {}

    /// Node `name`, its inter-node listener at `address`, joined the cluster (`join_cluster`,
    /// applied by the catalog group, or remembered from before a restart).
    fn add_node(&self, _name: &str, _address: &str) {}

    /// This node's member of `group` stopped: its RPCs are no longer routed here.
    fn stop_member(&self, group: &str);

    /// Submits `batch` to the member of `group` on node `leader` (which leads the group);
    /// returns the responses of its ops once applied there.
    fn propose_to(
        &self,
        leader: u64,
        group: &str,
        batch: CommandBatch,
    ) -> ClusterFuture<Result<Vec<Response>, ProposeError>>;
    /// Reads the records of replicated stream `group` from offset `from` on, about
    /// `max_bytes` of them, from its replica on node `node` (a replica catching up after a
    /// snapshot asks another for what it lacks).
    fn read_stream(
        &self,
        node: u64,
        group: &str,
        from: u64,
        max_bytes: u32,
    ) -> ClusterFuture<Result<StreamChunk, String>> {
        let why = format!("cannot read {group} from node {node}: this node has no peers");
        let _ = (from, max_bytes);
        Box::pin(async move { Err(why) })
    }
}

/// A broker on its own: every group has one member, this node.
#[derive(Debug, Clone, Copy, Default)]
pub struct SingleNode;

impl SingleNode {
    /// As the replication of a broker's queues.
    pub fn shared() -> Arc<dyn Replication> {
        Arc::new(SingleNode)
    }
}

/// The Raft cluster name of a single node's groups.
const LOCAL_CLUSTER_NAME: &str = "warren";

impl Replication for SingleNode {
    fn node_id(&self) -> u64 {
        LOCAL_NODE_ID
    }

    fn initial_members(&self, _vhost: &str, _queue: &str, _size: Option<u64>, _: LeaderLocator) -> InitialMembers {
        InitialMembers { leader: LOCAL_NODE_ID, members: BTreeMap::from([(LOCAL_NODE_ID, BasicNode::new("local"))]) }
    }

    fn start_member(
        &self,
        _group: &str,
        log: RaftLog<QuorumRaft>,
        machine: GroupMachine,
    ) -> ClusterFuture<Result<Raft<QuorumRaft>, String>> {
        Box::pin(async move {
            let config = machine.raft_config(LOCAL_CLUSTER_NAME).map_err(|e| e.to_string())?;
            Raft::new(LOCAL_NODE_ID, Arc::new(config), NoPeers, log, Adapter::new(machine))
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn stop_member(&self, _group: &str) {}

    fn propose_to(
        &self,
        leader: u64,
        _group: &str,
        _batch: CommandBatch,
    ) -> ClusterFuture<Result<Vec<Response>, ProposeError>> {
        let why = format!("node {leader} is not this node, and this node has no peers");
        Box::pin(async move { Err(ProposeError::Failed(why)) })
    }
}
