//! Quorum queue Raft groups spanning three nodes in one process, over real cluster transports
//! on 127.0.0.1: replication to every replica, failover when the leader stops, catch-up of a
//! restarted replica, two groups sharing the connections, an RPC for a group a node does not
//! run, and a minority that cannot commit.

use bytes::Bytes;
use openraft::error::RPCError;
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::VoteRequest;
use openraft::{Config, Raft, ServerState, Vote};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use warren_delivery::quorum::{
    quorum_raft_config, Command, ConsumerId, ConsumerSpec, Enqueue, Op, QuorumRaft, QuorumStateMachine, Settings,
    StateSnapshot,
};
use warren_server::cluster::service::{self, ClusterTransport};
use warren_server::cluster::{
    fit_to_transport, raft_members, raft_node_id, ClusterSecret, GroupNetwork, PeerAddress, RaftGroupId, RaftRouter,
    Transport, TransportSettings,
};
use warren_storage::raft::RaftLog;
use warren_storage::LogConfig;

const SECRET: &[u8] = b"a test secret of enough bytes";
const CLUSTER: &str = "raft-test";
const NAMES: [&str; 3] = ["warren@a", "warren@b", "warren@c"];
/// How long an election, a replication or a reconnection may take before the test fails.
const WAIT: Duration = Duration::from_secs(15);
const POLL: Duration = Duration::from_millis(20);
const CHECKPOINT_INTERVAL_ENTRIES: u64 = 16;
/// How long a write without a majority is given before it counts as not committed.
const MINORITY_WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// openraft's settings for the test groups: fast heartbeats, elections within a second.
/// These groups run without the broker's failure detector, so they keep openraft's own
/// heartbeats and election timeouts.
fn raft_config() -> Arc<Config> {
    let base = Config {
        heartbeat_interval: 100,
        election_timeout_min: 500,
        election_timeout_max: 1_000,
        enable_heartbeat: true,
        enable_elect: true,
        ..quorum_raft_config(CLUSTER).expect("valid")
    };
    Arc::new(fit_to_transport(&base).expect("valid"))
}

fn transport_settings(name: &str) -> TransportSettings {
    let mut settings = TransportSettings::new(name, CLUSTER, ClusterSecret::from_bytes(SECRET.to_vec()));
    settings.heartbeat_interval = Duration::from_millis(100);
    settings.idle_timeout = Duration::from_secs(2);
    settings.reconnect_min_backoff = Duration::from_millis(20);
    settings.reconnect_max_backoff = Duration::from_millis(200);
    settings
}

/// One replica of one group.
struct Member {
    raft: Raft<QuorumRaft>,
    machine: QuorumStateMachine,
}

/// One node: its transport, router and replicas.
struct Node {
    name: &'static str,
    dir: PathBuf,
    transport: ClusterTransport,
    router: RaftRouter,
    members: Vec<(RaftGroupId, Member)>,
}

impl Node {
    async fn start(name: &'static str, listener: TcpListener, seeds: &[PeerAddress], dir: &Path) -> Node {
        let (transport, inbox) = Transport::start(transport_settings(name), Some(listener), seeds);
        let router = RaftRouter::new();
        tokio::spawn(service::serve(inbox, router.clone()));
        Node { name, dir: dir.to_path_buf(), transport, router, members: Vec::new() }
    }

    async fn join(&mut self, group: &RaftGroupId) {
        let dir = self.dir.join(&group.0);
        let log = RaftLog::<QuorumRaft>::open(dir.join("log"), LogConfig::default()).expect("log opens");
        let (effects, _) = tokio::sync::mpsc::unbounded_channel();
        let machine = QuorumStateMachine::open(
            "test",
            dir.join("snapshot"),
            Settings::default(),
            CHECKPOINT_INTERVAL_ENTRIES,
            effects,
        )
        .expect("state machine opens");
        let network = GroupNetwork::new(self.transport.clone(), group.clone());
        let id = raft_node_id(self.name);
        let raft =
            Raft::new(id, raft_config(), network, log, warren_delivery::raft_adapter::Adapter::new(machine.clone()))
                .await
                .expect("raft starts");
        self.router.register(group.clone(), raft.clone());
        self.members.push((group.clone(), Member { raft, machine }));
    }

    fn member(&self, group: &RaftGroupId) -> &Member {
        self.members.iter().find(|(g, _)| g == group).map(|(_, m)| m).expect("a member of the group")
    }

    async fn stop(self) {
        for (group, member) in &self.members {
            self.router.unregister(group);
            member.raft.shutdown().await.expect("raft shuts down");
        }
        self.transport.shutdown().await;
    }
}

/// Three nodes on free ports, each knowing the others, connected.
struct Cluster {
    addrs: Vec<SocketAddr>,
    seeds: Vec<PeerAddress>,
    dirs: Vec<tempfile::TempDir>,
    nodes: Vec<Option<Node>>,
}

impl Cluster {
    async fn start() -> Cluster {
        let (mut listeners, mut addrs) = (Vec::new(), Vec::new());
        for _ in NAMES {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            addrs.push(listener.local_addr().expect("address"));
            listeners.push(listener);
        }
        let seeds: Vec<PeerAddress> = NAMES
            .iter()
            .zip(&addrs)
            .map(|(name, addr)| PeerAddress { name: name.to_string(), address: addr.to_string() })
            .collect();
        let dirs: Vec<tempfile::TempDir> = NAMES.iter().map(|_| tempfile::tempdir().expect("tempdir")).collect();
        let mut cluster = Cluster { addrs, seeds, dirs, nodes: Vec::new() };
        for (i, listener) in listeners.into_iter().enumerate() {
            let node = Node::start(NAMES[i], listener, &cluster.seeds, cluster.dirs[i].path()).await;
            cluster.nodes.push(Some(node));
        }
        for node in cluster.nodes.iter().flatten() {
            for peer in NAMES.iter().filter(|peer| **peer != node.name) {
                assert!(node.transport.wait_connected(peer, WAIT).await, "{} never connected to {peer}", node.name);
            }
        }
        cluster
    }

    /// Starts node `i` again, on its address and directory.
    async fn restart_node(&self, i: usize) -> Node {
        let listener = TcpListener::bind(self.addrs[i]).await.expect("the stopped node's port is free again");
        Node::start(NAMES[i], listener, &self.seeds, self.dirs[i].path()).await
    }

    /// Starts a member of `group` on every node and initializes the group from node `first`.
    async fn create_group(&mut self, group: &RaftGroupId, first: usize) {
        for node in self.nodes.iter_mut().flatten() {
            node.join(group).await;
        }
        let members = raft_members(NAMES).expect("distinct ids");
        self.node(first).member(group).raft.initialize(members).await.expect("initialized");
    }

    fn node(&self, i: usize) -> &Node {
        self.nodes[i].as_ref().expect("a running node")
    }

    fn running(&self) -> impl Iterator<Item = (usize, &Node)> {
        self.nodes.iter().enumerate().filter_map(|(i, node)| node.as_ref().map(|node| (i, node)))
    }

    /// Waits until the running members of `group` agree on a running leader; its index.
    async fn leader(&self, group: &RaftGroupId) -> usize {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Some(leader) = self.agreed_leader(group) {
                return leader;
            }
            assert!(tokio::time::Instant::now() < deadline, "no leader of {group} within {WAIT:?}");
            tokio::time::sleep(POLL).await;
        }
    }

    fn agreed_leader(&self, group: &RaftGroupId) -> Option<usize> {
        let mut views = self.running().map(|(_, node)| node.member(group).raft.metrics().borrow().current_leader);
        let first = views.next()??;
        if !views.all(|view| view == Some(first)) {
            return None;
        }
        let (i, node) = self.running().find(|(_, node)| raft_node_id(node.name) == first)?;
        let metrics = node.member(group).raft.metrics().borrow().clone();
        (metrics.state == ServerState::Leader).then_some(i)
    }

    /// Commits `count` enqueues on the leader, node `leader`; the messages' ids.
    async fn enqueue(&self, group: &RaftGroupId, leader: usize, count: usize, tag: &str) -> Vec<u64> {
        let mut ids = Vec::new();
        for n in 0..count {
            ids.push(self.write(group, leader, message(&format!("{tag} {n}"))).await);
        }
        ids
    }

    /// Commits `op` on the leader, node `leader`; its log index.
    async fn write(&self, group: &RaftGroupId, leader: usize, op: Op) -> u64 {
        let raft = &self.node(leader).member(group).raft;
        let written = raft.client_write(Command::new(1_000, op.clone()).into()).await;
        written.unwrap_or_else(|e| panic!("{op:?} not committed: {e}")).log_id.index
    }

    /// Waits until every running member of `group` holds `ready` messages in the same state.
    async fn converged(&self, group: &RaftGroupId, ready: u64) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let states: Vec<(u64, StateSnapshot)> = self
                .running()
                .map(|(_, node)| node.member(group).machine.read(|s| (s.ready_count(), StateSnapshot::of(s))))
                .collect();
            if states.iter().all(|state| state.0 == ready && state.1 == states[0].1) {
                return;
            }
            let counts: Vec<u64> = states.iter().map(|state| state.0).collect();
            assert!(
                tokio::time::Instant::now() < deadline,
                "{group}: ready counts {counts:?}, want {ready} everywhere"
            );
            tokio::time::sleep(POLL).await;
        }
    }

    async fn stop(&mut self, i: usize) {
        if let Some(node) = self.nodes[i].take() {
            node.stop().await;
        }
    }

    async fn stop_all(&mut self) {
        for i in 0..self.nodes.len() {
            self.stop(i).await;
        }
    }
}

fn message(body: &str) -> Op {
    Op::Enqueue(Enqueue {
        exchange: String::new(),
        routing_key: "q".into(),
        properties: Bytes::from_static(&[0, 0]),
        body: Bytes::copy_from_slice(body.as_bytes()),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_replicates_fails_over_and_a_restarted_replica_catches_up() {
    let mut cluster = Cluster::start().await;
    let group = RaftGroupId::new("queue/%2f/orders");
    cluster.create_group(&group, 0).await;
    let leader = cluster.leader(&group).await;
    cluster.enqueue(&group, leader, 40, "before").await;
    cluster.converged(&group, 40).await;

    cluster.stop(leader).await;
    let successor = cluster.leader(&group).await;
    assert_ne!(successor, leader);
    cluster.enqueue(&group, successor, 25, "after").await;
    cluster.converged(&group, 65).await;

    let mut restarted = cluster.restart_node(leader).await;
    restarted.join(&group).await;
    cluster.nodes[leader] = Some(restarted);
    cluster.converged(&group, 65).await;
    let leader = cluster.leader(&group).await;
    cluster.enqueue(&group, leader, 5, "rejoined").await;
    cluster.converged(&group, 70).await;
    cluster.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_groups_share_the_connections_and_unknown_groups_are_reported() {
    let mut cluster = Cluster::start().await;
    let (first, second) = (RaftGroupId::new("queue/%2f/a"), RaftGroupId::new("queue/%2f/b"));
    cluster.create_group(&first, 0).await;
    cluster.create_group(&second, 2).await;
    let (first_leader, second_leader) = (cluster.leader(&first).await, cluster.leader(&second).await);
    tokio::join!(
        cluster.enqueue(&first, first_leader, 30, "first"),
        cluster.enqueue(&second, second_leader, 12, "second"),
    );
    cluster.converged(&first, 30).await;
    cluster.converged(&second, 12).await;

    let transport = cluster.node(0).transport.clone();
    let mut network: GroupNetwork = GroupNetwork::new(transport, RaftGroupId::new("queue/%2f/nowhere"));
    let target = raft_node_id(NAMES[1]);
    let mut client = network.new_client(target, &openraft::BasicNode::new(NAMES[1])).await;
    let vote = VoteRequest::new(Vote::new(1, raft_node_id(NAMES[0])), None);
    match client.vote(vote, RPCOption::new(Duration::from_secs(2))).await {
        Err(RPCError::Unreachable(error)) => {
            assert!(error.to_string().contains("runs no member of Raft group queue/%2f/nowhere"), "{error}");
        }
        other => panic!("a vote for an unknown group: {other:?}"),
    }
    cluster.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_majority_cannot_commit() {
    let mut cluster = Cluster::start().await;
    let group = RaftGroupId::new("queue/%2f/minority");
    cluster.create_group(&group, 1).await;
    let leader = cluster.leader(&group).await;
    cluster.enqueue(&group, leader, 3, "majority").await;
    cluster.converged(&group, 3).await;

    for i in (0..NAMES.len()).filter(|i| *i != leader) {
        cluster.stop(i).await;
    }
    let raft = &cluster.node(leader).member(&group).raft;
    let write = raft.client_write(Command::new(2_000, message("alone")).into());
    match tokio::time::timeout(MINORITY_WRITE_TIMEOUT, write).await {
        Err(_elapsed) => {}
        Ok(Err(_refused)) => {}
        Ok(Ok(written)) => panic!("committed without a majority at {}", written.log_id),
    }
    let machine = &cluster.node(leader).member(&group).machine;
    assert_eq!(machine.read(|s| s.ready_count()), 3, "nothing applied without a majority");
    cluster.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_behind_the_purged_log_installs_a_snapshot() {
    let mut cluster = Cluster::start().await;
    let group = RaftGroupId::new("queue/%2f/snapshot");
    cluster.create_group(&group, 0).await;
    let leader = cluster.leader(&group).await;
    cluster.enqueue(&group, leader, 2, "seen").await;
    cluster.converged(&group, 2).await;
    let behind = (leader + 1) % NAMES.len();
    cluster.stop(behind).await;

    // Everything up to here settled, then a few live messages: the release cursor moves
    // past the entries the stopped replica lacks, and the log is purged up to it.
    let consumer = ConsumerId::new(0, 1, "c");
    cluster
        .write(
            &group,
            leader,
            Op::Checkout { consumer: consumer.clone(), spec: ConsumerSpec { prefetch: 0, priority: 0 } },
        )
        .await;
    let settled = cluster.enqueue(&group, leader, 40, "settled").await;
    cluster.write(&group, leader, Op::Cancel { consumer: consumer.clone() }).await;
    let held = cluster.node(leader).member(&group).machine.read(|s| s.held_by(&consumer));
    assert_eq!(held.len(), 42, "the consumer took every message");
    cluster.write(&group, leader, Op::Settle { consumer, ids: held }).await;
    cluster.enqueue(&group, leader, 5, "live").await;
    let raft = &cluster.node(leader).member(&group).raft;
    raft.trigger().snapshot().await.expect("triggered");
    let purged = raft
        .wait(Some(WAIT))
        .metrics(|m| m.purged.is_some_and(|p| p.index > settled[0]), "a purge past the stopped replica's log")
        .await
        .expect("purged");
    assert!(purged.snapshot.is_some());

    let mut restarted = cluster.restart_node(behind).await;
    restarted.join(&group).await;
    cluster.nodes[behind] = Some(restarted);
    cluster.converged(&group, 5).await;
    let machine = &cluster.node(behind).member(&group).machine;
    assert!(machine.snapshot_index().is_some_and(|index| index > settled[0]), "caught up from a snapshot");
    cluster.stop_all().await;
}
