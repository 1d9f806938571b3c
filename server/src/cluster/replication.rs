//! The cluster as the broker core sees it: [`ClusterReplication`] implements the core's
//! `Replication` (quorum queues' groups) and `CatalogForwarding` (the catalog group) over the
//! transport. It knows the nodes (this one and the seeds), chooses a new quorum queue's
//! members, starts group members on the transport with their RPCs routed by the
//! [`RaftRouter`], and hands proposals to leaders on other nodes.

use super::join::Joiner;
use super::nodes::Nodes;
use super::peer_address::PeerAddress;
use super::raft_network::GroupNetwork;
use super::raft_router::RaftRouter;
use super::raft_rpc::{fit_to_transport, raft_node_id, RaftGroupId};
use super::service::{ClusterTransport, PeerRequest, PeerResponse};
use openraft::{BasicNode, Raft};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;
use tokio::time::Instant;
use warren_delivery::catalog::{CatalogCommand, CatalogForwarding};
use warren_delivery::feature_flags::{self, NodeVersions};
use warren_delivery::queue::LeaderLocator;
use warren_delivery::quorum::{
    ClusterFuture, CommandBatch, GroupMachine, InitialMembers, ProposeError, QuorumRaft, Replication, Response,
};
use warren_delivery::raft_adapter::Adapter;
use warren_delivery::stream::StreamChunk;
use warren_storage::raft::RaftLog;

/// How long a proposal handed to another node's leader may take.
const PROPOSAL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a catching-up replica waits for another's records.
/// How long `/api/nodes` waits for a peer's figures: a page, not a proposal, waits.
const PEER_FIGURES_TIMEOUT: Duration = Duration::from_secs(2);
const STREAM_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Replicas of a quorum queue when `x-quorum-initial-group-size` is not given, at most.
const DEFAULT_GROUP_SIZE: usize = 3;
/// How long one question to a peer "have you applied this definition change?" waits: it is
/// asked again while the peer stays reachable, so a slow peer is waited for and one that goes
/// away stops being waited for within about this long (or its transport's idle timeout).
const META_APPLIED_ASK: Duration = Duration::from_millis(1_000);
/// The pause before asking again after an answer that came back early without the change
/// applied (an error), so that a peer that cannot answer is not asked in a tight loop.
const META_APPLIED_RETRY_PAUSE: Duration = Duration::from_millis(100);

/// The cluster: this node, the others, the transport between them.
pub struct ClusterReplication {
    node_name: String,
    cluster_name: String,
    nodes: Arc<Nodes>,
    transport: ClusterTransport,
    router: RaftRouter,
    /// Members the catalog group decided, until the queue's group is created.
    planned: Mutex<HashMap<(String, String), InitialMembers>>,
    /// How this node joins another cluster, once its catalog member runs.
    joiner: OnceLock<Joiner>,
}

impl std::fmt::Debug for ClusterReplication {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterReplication").field("node", &self.node_name).field("nodes", &self.nodes).finish()
    }
}

impl ClusterReplication {
    /// The cluster of `nodes` (this one named first) in `cluster_name`.
    pub fn new(cluster_name: &str, nodes: Arc<Nodes>, transport: ClusterTransport, router: RaftRouter) -> Arc<Self> {
        Arc::new(ClusterReplication {
            node_name: nodes.me().to_string(),
            cluster_name: cluster_name.to_string(),
            nodes,
            transport,
            router,
            planned: Mutex::new(HashMap::new()),
            joiner: OnceLock::new(),
        })
    }

    /// Lets `warren ctl join_cluster` act through `joiner` (once).
    pub fn set_joiner(&self, joiner: Joiner) {
        let _ = self.joiner.set(joiner);
    }

    /// Every node as a Raft member, by id.
    pub fn members(&self) -> BTreeMap<u64, BasicNode> {
        self.nodes.current().into_iter().map(|(id, name)| (id, BasicNode::new(name))).collect()
    }

    /// The cluster's nodes.
    pub fn nodes(&self) -> &Arc<Nodes> {
        &self.nodes
    }

    /// The node names, sorted.
    pub fn node_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.nodes.current().into_values().collect();
        names.sort();
        names
    }

    /// Starts the failure detector (see [`super::failure_detector`]).
    pub fn watch_peers(&self) {
        let nodes = Arc::clone(&self.nodes);
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
        self.nodes.name_of(id).ok_or_else(|| format!("no node has Raft id {id}"))
    }

    /// Changes the catalog group's voters to the nodes counted now, if this node leads it
    /// (a joined node first becomes a learner and catches up).
    fn update_catalog_voters(&self, joined: Option<u64>) {
        let Some(catalog) = self.router.catalog() else { return };
        let raft = catalog.raft().clone();
        if raft.metrics().borrow().current_leader != Some(self.node_id()) {
            return;
        }
        let members = self.members();
        let voters: BTreeSet<u64> = members.keys().copied().collect();
        let learner = joined.and_then(|id| Some((id, members.get(&id)?.clone())));
        tokio::spawn(async move {
            if let Some((id, node)) = learner {
                if let Err(error) = raft.add_learner(id, node, true).await {
                    tracing::warn!(node_id = id, %error, "cannot add a joining node to the catalog group");
                    return;
                }
            }
            match raft.change_membership(voters.clone(), false).await {
                Ok(_) => tracing::info!(?voters, "the catalog group's voters changed"),
                Err(error) => tracing::warn!(%error, "cannot change the catalog group's voters"),
            }
        });
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
        machine: GroupMachine,
    ) -> ClusterFuture<Result<Raft<QuorumRaft>, String>> {
        let (group, id) = (RaftGroupId::new(group), self.node_id());
        let network = GroupNetwork::new(self.transport.clone(), group.clone());
        let router = self.router.clone();
        let config = machine
            .raft_config(&self.cluster_name)
            .map_err(|e| e.to_string())
            .and_then(|c| fit_to_transport(&c).map_err(|e| e.to_string()));
        if let Some(stream) = machine.as_stream() {
            router.register_stream(group.clone(), stream.clone());
        }
        Box::pin(async move {
            let raft = Raft::new(id, Arc::new(config?), network, log, Adapter::new(machine))
                .await
                .map_err(|e| e.to_string())?;
            router.register(group, raft.clone());
            Ok(raft)
        })
    }

    /// The node is no longer counted; if this node leads the catalog group, it removes the
    /// node from the group.
    fn forget_node(&self, id: u64) {
        self.nodes.forget(id);
        self.update_catalog_voters(None);
    }

    /// The node is counted and dialled; if this node leads the catalog group, it makes the
    /// node a member of the group.
    fn add_node(&self, name: &str, address: &str) {
        let node = PeerAddress { name: name.to_string(), address: address.to_string() };
        if self.nodes.add(&node) {
            tracing::info!(node = %node, "a node joined the cluster");
        }
        self.transport.add_peer(&node);
        self.update_catalog_voters(Some(raft_node_id(name)));
    }

    fn is_node_up(&self, id: u64) -> bool {
        id == self.node_id()
            || self.nodes.name_of(id).is_some_and(|name| self.transport.connected_peers().contains(&name))
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
    fn read_stream(
        &self,
        node: u64,
        group: &str,
        from: u64,
        max_bytes: u32,
    ) -> ClusterFuture<Result<StreamChunk, String>> {
        let node = self.node_name_of(node);
        let request = PeerRequest::ReadStream { group: RaftGroupId::new(group), from, max_bytes };
        let transport = self.transport.clone();
        Box::pin(async move {
            match transport.request_within(&node?, request, STREAM_READ_TIMEOUT).await.map_err(|e| e.to_string())? {
                PeerResponse::StreamRead(result) => result,
                other => Err(format!("unexpected answer to a stream read: {other:?}")),
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
        self.nodes.current().into_iter().find(|(_, n)| n == name).map(|(id, _)| id)
    }

    fn local_node(&self) -> String {
        self.node_name.clone()
    }

    fn cluster_name(&self) -> String {
        self.cluster_name.clone()
    }

    fn machine_versions(&self) -> ClusterFuture<Vec<NodeVersions>> {
        let (transport, me, nodes) = (self.transport.clone(), self.node_name.clone(), self.node_names());
        Box::pin(async move {
            let asked = nodes.into_iter().map(|node| {
                let transport = transport.clone();
                let local = node == me;
                async move {
                    if local {
                        return NodeVersions { node, known: Ok(feature_flags::known_versions()) };
                    }
                    let answer = transport.request_within(&node, PeerRequest::MachineVersions, PROPOSAL_TIMEOUT).await;
                    let known = match answer {
                        Ok(PeerResponse::MachineVersions(known)) => Ok(known),
                        Ok(other) => Err(format!("unexpected answer: {other:?}")),
                        Err(error) => Err(error.to_string()),
                    };
                    NodeVersions { node, known }
                }
            });
            futures_util::future::join_all(asked).await
        })
    }

    fn peer_figures(&self) -> ClusterFuture<Vec<(String, Result<warren_webui::NodeFigures, String>)>> {
        let transport = self.transport.clone();
        let connected = transport.connected_peers();
        let peers: Vec<String> = self.node_names().into_iter().filter(|n| connected.contains(n)).collect();
        Box::pin(async move {
            let asked = peers.into_iter().map(|node| {
                let transport = transport.clone();
                async move {
                    let answer = transport.request_within(&node, PeerRequest::NodeFigures, PEER_FIGURES_TIMEOUT).await;
                    let figures = match answer {
                        Ok(PeerResponse::NodeFigures(Some(figures))) => Ok(*figures),
                        Ok(PeerResponse::NodeFigures(None)) => Err("its management API is not running".to_string()),
                        Ok(other) => Err(format!("unexpected answer: {other:?}")),
                        Err(error) => Err(error.to_string()),
                    };
                    (node, figures)
                }
            });
            futures_util::future::join_all(asked).await
        })
    }

    fn join_cluster(&self, target: &str) -> ClusterFuture<Result<Vec<String>, String>> {
        let target = target.parse::<PeerAddress>().map_err(|e| format!("{e} (give the node as name@host:port)"));
        let Some(joiner) = self.joiner.get() else {
            return Box::pin(async { Err("this node's catalog member is not running yet".to_string()) });
        };
        let joiner = joiner.clone();
        Box::pin(async move { joiner.join(target?).await.map_err(|e| e.to_string()) })
    }
}

/// A node on its own, as the management API shows it.
#[derive(Debug)]
pub struct OneNode {
    /// Its name.
    pub node: String,
    /// Its cluster's name (a cluster of one).
    pub cluster: String,
}

impl warren_webui::ClusterView for OneNode {
    fn nodes(&self) -> Vec<warren_webui::NodeStatus> {
        vec![warren_webui::NodeStatus { name: self.node.clone(), running: true, kind: "disc" }]
    }

    fn node_id(&self, name: &str) -> Option<u64> {
        (name == self.node).then(|| raft_node_id(name))
    }

    fn local_node(&self) -> String {
        self.node.clone()
    }

    fn cluster_name(&self) -> String {
        self.cluster.clone()
    }
}

impl CatalogForwarding for ClusterReplication {
    fn propose_to(&self, leader: u64, command: CatalogCommand) -> ClusterFuture<Result<u64, String>> {
        let node = self.node_name_of(leader);
        let transport = self.transport.clone();
        Box::pin(async move {
            let request = PeerRequest::ProposeMeta { command };
            match transport.request_within(&node?, request, PROPOSAL_TIMEOUT).await.map_err(|e| e.to_string())? {
                PeerResponse::MetaProposed(result) => result,
                other => Err(format!("unexpected answer to a catalog proposal: {other:?}")),
            }
        })
    }

    fn applied_on_peers(&self, index: u64, within: Duration) -> ClusterFuture<()> {
        let transport = self.transport.clone();
        Box::pin(async move {
            let deadline = Instant::now() + within;
            let asks = transport.connected_peers().into_iter().map(|peer| {
                let transport = transport.clone();
                async move { wait_until_applied_on(&transport, &peer, index, deadline).await }
            });
            futures_util::future::join_all(asks).await;
        })
    }

    fn read_index_of(&self, leader: u64) -> ClusterFuture<Result<u64, String>> {
        let node = self.node_name_of(leader);
        let transport = self.transport.clone();
        Box::pin(async move {
            let request = PeerRequest::MetaReadIndex;
            match transport.request_within(&node?, request, PROPOSAL_TIMEOUT).await.map_err(|e| e.to_string())? {
                PeerResponse::MetaReadIndex(result) => result,
                other => Err(format!("unexpected answer to a read index request: {other:?}")),
            }
        })
    }
}

/// Waits until `peer` has applied the catalog entry at `index`, for as long as it is
/// reachable, and at most until `deadline`.
async fn wait_until_applied_on(transport: &ClusterTransport, peer: &str, index: u64, deadline: Instant) {
    loop {
        let now = Instant::now();
        let window = META_APPLIED_ASK.min(deadline.saturating_duration_since(now));
        let within_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
        let request = PeerRequest::MetaApplied { index, within_ms };
        // The peer waits `window` for its own apply; the request allows for the round trip.
        let answer = transport.request_within(peer, request, window * 2).await;
        if matches!(answer, Ok(PeerResponse::MetaApplied(true))) {
            return;
        }
        if !transport.connected_peers().iter().any(|connected| connected == peer) {
            tracing::debug!(%peer, index, "a peer left before it applied a definition change; not waited for");
            return;
        }
        if Instant::now() >= deadline {
            tracing::warn!(%peer, index, "a reachable peer has not applied a definition change in time; answered anyway");
            return;
        }
        if now.elapsed() < window {
            tokio::time::sleep(META_APPLIED_RETRY_PAUSE).await;
        }
    }
}
