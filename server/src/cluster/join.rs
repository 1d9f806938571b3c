//! `join_cluster` (rabbitmqctl's verb): a node that runs on its own joins a cluster that has
//! formed, through any node of it.
//!
//! The joining node must hold nothing of its own (no queues, no exchanges but the standard
//! ones), since the cluster's definitions replace its own: RabbitMQ resets such a node;
//! Warren refuses rather than delete data. It then
//! 1. records the node it joins through as its seed (`DATA_DIR/cluster/joined-seeds`), so
//!    that it never again initializes a catalog group of its own, even after a crash;
//! 2. replaces its one-node catalog member by an empty one, which the cluster's leader
//!    fills by replication;
//! 3. dials the node it joins ([`Transport::dial_to_join`](super::Transport::dial_to_join))
//!    and asks it to take it in ([`JoinDesk`]): that node proposes an `AddNode` (name and
//!    inter-node address) to the catalog group, on which every node learns to dial the
//!    newcomer and counts it, and the group's leader makes it a learner, then a voter;
//! 4. learns the other nodes and their addresses from the answer, and records them with its
//!    seed.

use super::catalog_group::{self, CatalogSettings, CatalogStartError};
use super::nodes::Nodes;
use super::peer_address::PeerAddress;
use super::raft_router::{JoinDesk, RaftRouter};
use super::raft_rpc::raft_node_id;
use super::replication::ClusterReplication;
use super::service::{ClusterTransport, PeerRequest, PeerResponse};
use super::transport::{TransportError, JOIN_DIAL_WINDOW};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;
use warren_delivery::catalog::DefinitionOp;
use warren_delivery::quorum::{ClusterFuture, Replication};
use warren_delivery::{Broker, DEFAULT_VHOST};
use warren_storage::LogConfig;

/// The seeds a node learnt when it joined, in its data directory's cluster files.
const JOINED_SEEDS_FILE: &str = "joined-seeds";
/// How long the node joined through may take to make the newcomer a voter.
const VOTER_WAIT: Duration = Duration::from_secs(60);
/// How long the joining node waits for the answer (a little longer than [`VOTER_WAIT`]).
const JOIN_ANSWER_TIMEOUT: Duration = Duration::from_secs(75);
/// How many times the joining node asks (see [`ask_to_join`]).
const JOIN_ATTEMPTS: u32 = 3;
/// How often the node joined through looks whether the newcomer votes yet.
const VOTER_POLL: Duration = Duration::from_millis(100);

/// A join that cannot be made; the text says what to do.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// The node has no inter-node listener, so the cluster could not dial it.
    #[error("this node has no inter-node listener: start it with --cluster-listen and --cluster-secret-file")]
    NoListener,
    /// The node is in a cluster with other nodes already.
    #[error("this node is in a cluster with {0} already: a node joins from on its own")]
    AlreadyClustered(String),
    /// The node asked to join itself.
    #[error("a node cannot join itself")]
    Itself,
    /// The node holds definitions of its own.
    #[error(
        "this node holds {0} of its own, which joining would replace: join_cluster takes a node with none \
         (start it on an empty data directory)"
    )]
    NotEmpty(String),
    /// The node to join through cannot be reached or refused the connection.
    #[error("cannot connect to {0} (is it running, with the same --cluster-name and secret?)")]
    Unreachable(String),
    /// The node to join through refused or failed.
    #[error("{node} did not take this node in: {why}")]
    Refused {
        /// The node.
        node: String,
        /// Why.
        why: String,
    },
    /// The seeds file could not be read or written.
    #[error("cannot use {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The new catalog member did not start.
    #[error(transparent)]
    Catalog(#[from] CatalogStartError),
}

/// The seeds this node learnt when it joined a cluster (none if it never did).
pub fn stored_seeds(data_dir: &Path) -> Result<Vec<PeerAddress>, JoinError> {
    let path = catalog_group::cluster_dir(data_dir).join(JOINED_SEEDS_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(JoinError::Io { path, source }),
    };
    let parse = |line: &str| line.parse::<PeerAddress>().map_err(|e| std::io::Error::other(e.to_string()));
    let seeds = text.lines().filter(|l| !l.trim().is_empty()).map(parse).collect::<Result<_, _>>();
    seeds.map_err(|source| JoinError::Io { path, source })
}

/// Replaces the stored seeds with `seeds`, atomically.
fn store_seeds(data_dir: &Path, seeds: &[PeerAddress]) -> Result<(), JoinError> {
    let dir = catalog_group::cluster_dir(data_dir);
    let path = dir.join(JOINED_SEEDS_FILE);
    let io = |source| JoinError::Io { path: path.clone(), source };
    std::fs::create_dir_all(&dir).map_err(io)?;
    let text: String = seeds.iter().map(|seed| format!("{seed}\n")).collect();
    let temporary = dir.join(format!("{JOINED_SEEDS_FILE}.new"));
    std::fs::write(&temporary, text).map_err(io)?;
    std::fs::File::open(&temporary).and_then(|file| file.sync_all()).map_err(io)?;
    std::fs::rename(&temporary, &path).map_err(io)
}

/// The side of a node of the cluster: takes joining nodes in.
pub struct Desk {
    nodes: Arc<Nodes>,
    router: RaftRouter,
}

impl Desk {
    /// Takes nodes into the cluster of `nodes`, through the catalog member `router` runs.
    pub fn new(nodes: Arc<Nodes>, router: RaftRouter) -> Arc<Self> {
        Arc::new(Desk { nodes, router })
    }

    async fn take_in(nodes: Arc<Nodes>, router: RaftRouter, node: PeerAddress) -> Result<Vec<PeerAddress>, String> {
        let catalog = router.catalog().ok_or("this node's catalog member is not running yet")?;
        let op = DefinitionOp::AddNode { name: node.name.clone(), address: node.address.clone() };
        catalog.change(DEFAULT_VHOST, op).await.map_err(|e| e.to_string())?;
        let id = raft_node_id(&node.name);
        let deadline = tokio::time::Instant::now() + VOTER_WAIT;
        while !catalog.raft().metrics().borrow().membership_config.membership().voter_ids().any(|v| v == id) {
            if tokio::time::Instant::now() > deadline {
                return Err(format!("{} did not become a member of the catalog group in {VOTER_WAIT:?}", node.name));
            }
            tokio::time::sleep(VOTER_POLL).await;
        }
        tracing::info!(node = %node, "a node joined the cluster through this one");
        Ok(nodes.addresses().into_iter().filter(|peer| peer.name != node.name).collect())
    }
}

impl JoinDesk for Desk {
    fn admit(&self, node: PeerAddress) -> ClusterFuture<Result<Vec<PeerAddress>, String>> {
        Box::pin(Desk::take_in(Arc::clone(&self.nodes), self.router.clone(), node))
    }
}

/// The side of the joining node.
#[derive(Clone)]
pub struct Joiner {
    cluster: Weak<ClusterReplication>,
    router: RaftRouter,
    broker: Weak<Broker>,
    data_dir: PathBuf,
    settings: CatalogSettings,
    log_config: LogConfig,
}

impl Joiner {
    /// Joins for `cluster`'s node, whose catalog member `router` runs over `broker`.
    pub fn new(
        cluster: &Arc<ClusterReplication>,
        router: RaftRouter,
        broker: &Arc<Broker>,
        data_dir: &Path,
        settings: &CatalogSettings,
        log_config: LogConfig,
    ) -> Self {
        Joiner {
            cluster: Arc::downgrade(cluster),
            router,
            broker: Arc::downgrade(broker),
            data_dir: data_dir.to_path_buf(),
            settings: settings.clone(),
            log_config,
        }
    }

    /// Joins the cluster of node `target`; returns the cluster's nodes, this one included.
    pub async fn join(&self, target: PeerAddress) -> Result<Vec<String>, JoinError> {
        let (Some(cluster), Some(broker)) = (self.cluster.upgrade(), self.broker.upgrade()) else {
            return Err(JoinError::Refused { node: target.name, why: "this node is stopping".into() });
        };
        let listen = cluster.transport().local_addr().ok_or(JoinError::NoListener)?;
        self.check_alone(&cluster, &target)?;
        check_empty(&broker)?;
        store_seeds(&self.data_dir, std::slice::from_ref(&target))?;
        self.replace_catalog_member(&cluster, &broker).await?;
        let me =
            PeerAddress { name: cluster.nodes().me().to_string(), address: advertised(listen, &target).to_string() };
        let others = ask_to_join(cluster.transport(), &target, me).await?;
        let seeds: Vec<PeerAddress> = std::iter::once(target).chain(others).collect();
        for seed in &seeds {
            cluster.add_node(&seed.name, &seed.address);
        }
        store_seeds(&self.data_dir, &seeds)?;
        Ok(cluster.node_names())
    }

    /// Refuses a node whose catalog group has voters besides itself, and a join of itself.
    fn check_alone(&self, cluster: &ClusterReplication, target: &PeerAddress) -> Result<(), JoinError> {
        let me = cluster.node_id();
        if target.name == cluster.nodes().me() {
            return Err(JoinError::Itself);
        }
        // Seeds from --peers mean a cluster of its own, formed or forming (those of an earlier
        // join_cluster that did not finish do not count).
        let joined: Vec<String> = stored_seeds(&self.data_dir)?.into_iter().map(|seed| seed.name).collect();
        let seeded: Vec<String> = cluster.nodes().peers().into_values().filter(|n| !joined.contains(n)).collect();
        if !seeded.is_empty() {
            return Err(JoinError::AlreadyClustered(seeded.join(", ")));
        }
        let Some(catalog) = self.router.catalog() else { return Ok(()) };
        let metrics = catalog.raft().metrics().borrow().clone();
        let others: Vec<String> = metrics
            .membership_config
            .membership()
            .voter_ids()
            .filter(|id| *id != me)
            .map(|id| cluster.nodes().name_of(id).unwrap_or_else(|| format!("node {id}")))
            .collect();
        if others.is_empty() {
            Ok(())
        } else {
            Err(JoinError::AlreadyClustered(others.join(", ")))
        }
    }

    /// Stops this node's catalog member, removes its files, and starts an empty one that
    /// never initializes a group: the cluster's leader fills it.
    async fn replace_catalog_member(
        &self,
        cluster: &Arc<ClusterReplication>,
        broker: &Arc<Broker>,
    ) -> Result<(), JoinError> {
        if let Some(old) = self.router.catalog() {
            if let Err(error) = old.raft().shutdown().await {
                tracing::warn!(%error, "the catalog member replaced by join_cluster stopped uncleanly");
            }
        }
        catalog_group::remove_member_files(&self.data_dir).map_err(|(path, source)| JoinError::Io { path, source })?;
        let initialize = false;
        catalog_group::start(
            cluster,
            &self.router,
            broker,
            &self.data_dir,
            &self.settings,
            self.log_config.clone(),
            initialize,
        )
        .await?;
        Ok(())
    }
}

/// Connects to `target` and asks it to take `me` in; answers the other nodes it names. The
/// question is asked again if its connection goes: taking the newcomer in makes `target`
/// dial it when its name sorts first, and that connection replaces the one the question
/// went on (asking twice is harmless: a node already in is only confirmed).
async fn ask_to_join(
    transport: &ClusterTransport,
    target: &PeerAddress,
    me: PeerAddress,
) -> Result<Vec<PeerAddress>, JoinError> {
    let refused = |why: String| JoinError::Refused { node: target.name.clone(), why };
    transport.dial_to_join(target);
    for attempt in 1..=JOIN_ATTEMPTS {
        if !transport.wait_connected(&target.name, JOIN_DIAL_WINDOW).await {
            return Err(JoinError::Unreachable(target.to_string()));
        }
        let question = PeerRequest::Join { node: me.clone() };
        match transport.request_within(&target.name, question, JOIN_ANSWER_TIMEOUT).await {
            Ok(PeerResponse::Joined(answer)) => return answer.map_err(refused),
            Ok(other) => return Err(refused(format!("unexpected answer: {other:?}"))),
            Err(TransportError::Disconnected(_)) if attempt < JOIN_ATTEMPTS => {
                tracing::debug!(node = %target, "the connection went while joining; asking again");
            }
            Err(error) => return Err(refused(error.to_string())),
        }
    }
    Err(refused("the connection kept going while joining".into()))
}

/// Refuses a broker that holds queues or exchanges of its own.
fn check_empty(broker: &Broker) -> Result<(), JoinError> {
    let (mut queues, mut exchanges) = (0, 0);
    for vhost in broker.vhosts() {
        queues += vhost.queues().len();
        exchanges += vhost.exchanges().iter().filter(|e| !e.name().is_empty() && !e.name().starts_with("amq.")).count();
    }
    match (queues, exchanges) {
        (0, 0) => Ok(()),
        (queues, 0) => Err(JoinError::NotEmpty(format!("{queues} queue(s)"))),
        (0, exchanges) => Err(JoinError::NotEmpty(format!("{exchanges} exchange(s)"))),
        (queues, exchanges) => Err(JoinError::NotEmpty(format!("{queues} queue(s) and {exchanges} exchange(s)"))),
    }
}

/// The address other nodes dial this one at: the listener's, with an unspecified IP
/// (`0.0.0.0`) replaced by the one this host reaches `target` from.
fn advertised(listen: SocketAddr, target: &PeerAddress) -> SocketAddr {
    if !listen.ip().is_unspecified() {
        return listen;
    }
    let outgoing = || -> Option<IpAddr> {
        let remote = target.address.to_socket_addrs().ok()?.next()?;
        let bind: SocketAddr = if remote.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { ([0u16; 8], 0).into() };
        let socket = UdpSocket::bind(bind).ok()?;
        // A UDP connect sends nothing: it only asks the routing table for the source address.
        socket.connect(remote).ok()?;
        Some(socket.local_addr().ok()?.ip())
    };
    SocketAddr::new(outgoing().unwrap_or(listen.ip()), listen.port())
}
