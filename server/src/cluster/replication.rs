//! The cluster as the broker core sees it: [`ClusterReplication`] implements the core's
//! `Replication` (quorum queues' groups) and `MetaForwarding` (the metadata group) over the
//! transport. It knows the nodes (this one and the seeds), chooses a new quorum queue's
//! members, starts group members on the transport with their RPCs routed by the
//! [`RaftRouter`], and hands proposals to leaders on other nodes.

use super::raft_network::GroupNetwork;
use super::raft_router::RaftRouter;
use super::raft_rpc::{fit_to_transport, raft_node_id, RaftGroupId};
use super::service::{ClusterTransport, PeerRequest, PeerResponse};
use openraft::{BasicNode, Raft};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use warren_delivery::metadata::{MetaCommand, MetaForwarding};
use warren_delivery::queue::LeaderLocator;
use warren_delivery::quorum::{
    quorum_raft_config, ClusterFuture, CommandBatch, InitialMembers, ProposeError, QuorumRaft, QuorumStateMachine,
    Replication, Response,
};
use warren_storage::raft::RaftLog;

/// How long a proposal handed to another node's leader may take.
const PROPOSAL_TIMEOUT: Duration = Duration::from_secs(10);
/// Replicas of a quorum queue when `x-quorum-initial-group-size` is not given, at most.
const DEFAULT_GROUP_SIZE: usize = 3;

/// The cluster: this node, its seeds, the transport between them.
pub struct ClusterReplication {
    node_name: String,
    cluster_name: String,
    /// Every node by Raft id: this one and the seeds.
    nodes: BTreeMap<u64, String>,
    transport: ClusterTransport,
    router: RaftRouter,
    /// Members the metadata group decided, until the queue's group is created.
    planned: Mutex<HashMap<(String, String), InitialMembers>>,
    /// Seeds that left the cluster (`forget_cluster_node`): no longer counted.
    forgotten: Mutex<BTreeSet<u64>>,
}

impl std::fmt::Debug for ClusterReplication {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterReplication").field("node", &self.node_name).field("nodes", &self.nodes).finish()
    }
}

impl ClusterReplication {
    /// The cluster of `node_name` and `peers` (node names) in `cluster_name`.
    pub fn new(
        node_name: &str,
        cluster_name: &str,
        peers: &[String],
        transport: ClusterTransport,
        router: RaftRouter,
    ) -> Arc<Self> {
        let nodes = std::iter::once(node_name)
            .chain(peers.iter().map(String::as_str))
            .map(|n| (raft_node_id(n), n.to_string()));
        Arc::new(ClusterReplication {
            node_name: node_name.to_string(),
            cluster_name: cluster_name.to_string(),
            nodes: nodes.collect(),
            transport,
            router,
            planned: Mutex::new(HashMap::new()),
            forgotten: Mutex::new(BTreeSet::new()),
        })
    }

    /// The nodes of the cluster by Raft id: this one and the seeds not forgotten.
    fn current_nodes(&self) -> impl Iterator<Item = (u64, &String)> {
        let forgotten = self.forgotten.lock().unwrap_or_else(PoisonError::into_inner).clone();
        self.nodes.iter().filter(move |(id, _)| !forgotten.contains(id)).map(|(id, name)| (*id, name))
    }

    /// Every node as a Raft member, by id.
    pub fn members(&self) -> BTreeMap<u64, BasicNode> {
        self.current_nodes().map(|(id, name)| (id, BasicNode::new(name))).collect()
    }

    /// The node names, sorted.
    pub fn node_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.current_nodes().map(|(_, name)| name.clone()).collect();
        names.sort();
        names
    }

    /// Starts the failure detector (see [`super::failure_detector`]).
    pub fn watch_peers(&self) {
        let nodes = self.nodes.clone();
        tokio::spawn(super::failure_detector::run(self.transport.clone(), self.router.clone(), nodes));
    }

    /// The transport.
    pub fn transport(&self) -> &ClusterTransport {
        &self.transport
    }

    /// Of `names`, the node leading the fewest of the groups this node runs a member of
    /// (this node on a tie, then the first by name).
    fn least_leading(&self, names: &[String]) -> String {
        let mut leading: BTreeMap<u64, usize> = names.iter().map(|n| (raft_node_id(n), 0)).collect();
        for (_, raft) in self.router.members() {
            if let Some(leader) = raft.metrics().borrow().current_leader {
                *leading.entry(leader).or_default() += 1;
            }
        }
        let count = |name: &String| leading.get(&raft_node_id(name)).copied().unwrap_or(0);
        let fewest = names.iter().map(count).min().unwrap_or(0);
        if names.iter().any(|n| *n == self.node_name && count(n) == fewest) {
            return self.node_name.clone();
        }
        names.iter().find(|n| count(n) == fewest).cloned().unwrap_or_else(|| self.node_name.clone())
    }

    fn node_name_of(&self, id: u64) -> Result<String, String> {
        self.nodes.get(&id).cloned().ok_or_else(|| format!("no node has Raft id {id}"))
    }
}

impl Replication for ClusterReplication {
    fn node_id(&self) -> u64 {
        raft_node_id(&self.node_name)
    }

    /// The first leader is this node (`client-local`) or the node leading the fewest quorum
    /// queues that this node knows of (`balanced`; this node on a tie), followed by the
    /// nodes after it in name order.
    fn initial_members(&self, vhost: &str, queue: &str, size: Option<u64>, locator: LeaderLocator) -> InitialMembers {
        if let Some(planned) =
            self.planned.lock().unwrap_or_else(PoisonError::into_inner).remove(&(vhost.to_string(), queue.to_string()))
        {
            return planned;
        }
        let names = self.node_names();
        let leader = match locator {
            LeaderLocator::ClientLocal => self.node_name.clone(),
            LeaderLocator::Balanced => self.least_leading(&names),
        };
        let first = names.iter().position(|n| *n == leader).unwrap_or(0);
        let size = size.map_or(DEFAULT_GROUP_SIZE, |s| usize::try_from(s).unwrap_or(usize::MAX)).clamp(1, names.len());
        let members = (0..size)
            .map(|i| &names[(first + i) % names.len()])
            .map(|name| (raft_node_id(name), BasicNode::new(name)))
            .collect();
        InitialMembers { leader: raft_node_id(&leader), members }
    }

    fn plan_members(&self, vhost: &str, queue: &str, members: InitialMembers) {
        self.planned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert((vhost.to_string(), queue.to_string()), members);
    }

    fn start_member(
        &self,
        group: &str,
        log: RaftLog<QuorumRaft>,
        machine: QuorumStateMachine,
    ) -> ClusterFuture<Result<Raft<QuorumRaft>, String>> {
        let (group, id) = (RaftGroupId::new(group), self.node_id());
        let network = GroupNetwork::new(self.transport.clone(), group.clone());
        let router = self.router.clone();
        let config = quorum_raft_config(&self.cluster_name)
            .map_err(|e| e.to_string())
            .and_then(|c| fit_to_transport(&c).map_err(|e| e.to_string()));
        Box::pin(async move {
            let raft = Raft::new(id, Arc::new(config?), network, log, machine).await.map_err(|e| e.to_string())?;
            router.register(group, raft.clone());
            Ok(raft)
        })
    }

    /// The node is no longer counted; if this node leads the metadata group, it removes the
    /// node from the group.
    fn forget_node(&self, id: u64) {
        self.forgotten.lock().unwrap_or_else(PoisonError::into_inner).insert(id);
        let Some(metadata) = self.router.metadata() else { return };
        let raft = metadata.raft().clone();
        if raft.metrics().borrow().current_leader != Some(self.node_id()) {
            return;
        }
        let voters: BTreeSet<u64> = self.members().into_keys().collect();
        tokio::spawn(async move {
            match raft.change_membership(voters, false).await {
                Ok(_) => tracing::info!(node_id = id, "a forgotten node left the metadata group"),
                Err(error) => {
                    tracing::warn!(node_id = id, %error, "cannot remove a forgotten node from the metadata group")
                }
            }
        });
    }

    fn is_node_up(&self, id: u64) -> bool {
        id == self.node_id()
            || self.nodes.get(&id).is_some_and(|name| self.transport.connected_peers().iter().any(|p| p == name))
    }

    fn stop_member(&self, group: &str) {
        self.router.unregister(&RaftGroupId::new(group));
    }

    fn propose_to(
        &self,
        leader: u64,
        group: &str,
        batch: CommandBatch,
    ) -> ClusterFuture<Result<Vec<Response>, ProposeError>> {
        let node = match self.node_name_of(leader) {
            Ok(node) => node,
            Err(why) => return Box::pin(async move { Err(ProposeError::Failed(why)) }),
        };
        if !self.transport.connected_peers().contains(&node) {
            // Not sent: the batch goes back to be proposed again (the leader may change).
            return Box::pin(async move { Err(ProposeError::NotSent(batch)) });
        }
        let request = PeerRequest::Propose { group: RaftGroupId::new(group), batch };
        let transport = self.transport.clone();
        Box::pin(async move {
            let answer = transport.request_within(&node, request, PROPOSAL_TIMEOUT).await;
            match answer.map_err(|e| ProposeError::Failed(e.to_string()))? {
                PeerResponse::Proposed(result) => result.map_err(ProposeError::Failed),
                other => Err(ProposeError::Failed(format!("unexpected answer to a proposal: {other:?}"))),
            }
        })
    }
}

/// The nodes as the management API shows them: this one, and the seeds, running if
/// connected.
impl warren_webui::ClusterView for ClusterReplication {
    fn nodes(&self) -> Vec<warren_webui::NodeStatus> {
        let connected = self.transport.connected_peers();
        self.node_names()
            .into_iter()
            .map(|name| {
                let running = name == self.node_name || connected.contains(&name);
                warren_webui::NodeStatus { name, running, kind: "disc" }
            })
            .collect()
    }

    fn node_id(&self, name: &str) -> Option<u64> {
        self.current_nodes().find(|(_, n)| *n == name).map(|(id, _)| id)
    }

    fn local_node(&self) -> String {
        self.node_name.clone()
    }
}

/// A node on its own, as the management API shows it.
#[derive(Debug)]
pub struct OneNode(pub String);

impl warren_webui::ClusterView for OneNode {
    fn nodes(&self) -> Vec<warren_webui::NodeStatus> {
        vec![warren_webui::NodeStatus { name: self.0.clone(), running: true, kind: "disc" }]
    }

    fn node_id(&self, name: &str) -> Option<u64> {
        (name == self.0).then(|| raft_node_id(name))
    }

    fn local_node(&self) -> String {
        self.0.clone()
    }
}

impl MetaForwarding for ClusterReplication {
    fn propose_to(&self, leader: u64, command: MetaCommand) -> ClusterFuture<Result<u64, String>> {
        let node = self.node_name_of(leader);
        let transport = self.transport.clone();
        Box::pin(async move {
            let request = PeerRequest::ProposeMeta { command };
            match transport.request_within(&node?, request, PROPOSAL_TIMEOUT).await.map_err(|e| e.to_string())? {
                PeerResponse::MetaProposed(result) => result,
                other => Err(format!("unexpected answer to a metadata proposal: {other:?}")),
            }
        })
    }
}
