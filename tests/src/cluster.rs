//! A three-node cluster of real `warren` processes on 127.0.0.1 ports, for the cluster
//! tests: started from the binary, with or without a fault-injecting proxy on every link;
//! and what the cluster tests share: `warren ctl` against a node, waits, publishes with a
//! deadline.

use crate::fault_proxy::FaultProxy;
use crate::process::WarrenProcess;
use crate::{durable, table, text};
use lapin::options::{ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use std::path::Path;
use std::time::{Duration, Instant};

/// A cluster of processes, stopped when dropped.
pub struct Cluster {
    pub nodes: Vec<Option<WarrenProcess>>,
    /// Each node's data directory and command line, to restart it.
    pub starts: Vec<(std::path::PathBuf, Vec<String>)>,
    /// The proxy on each link (dialling node, dialled node), if the links are proxied.
    pub proxies: std::collections::HashMap<(usize, usize), FaultProxy>,
    /// The shared secret's file.
    pub secret: String,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // A failing test: what the nodes said (all of it under WARREN_DUMP_DIR).
            dump_logs(self);
        }
        for node in self.nodes.iter_mut().filter_map(Option::take) {
            node.kill9();
        }
    }
}

/// Ports handed out below Linux's ephemeral range (32768-60999 by default).
const FREE_PORTS: std::ops::Range<u16> = 10_000..32_000;

/// A port on 127.0.0.1 that nothing listens on, for a node started later. Taken below the
/// ephemeral range: a port the kernel picked for `bind(0)` may be handed to an outgoing
/// connection (a client, a node dialling a peer) before the node binds it. Never the same
/// port twice in one test process.
pub fn free_port() -> u16 {
    use std::sync::Mutex;
    static HANDED_OUT: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    loop {
        let port = rand::Rng::gen_range(&mut rand::thread_rng(), FREE_PORTS);
        if !handed_out.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            handed_out.push(port);
            return port;
        }
    }
}

pub const NAMES: [&str; 3] = ["warren@a", "warren@b", "warren@c"];

/// Starts three nodes whose data directories are under `dir`; with `proxied`, every link goes
/// through a [`FaultProxy`] (the node whose name sorts first dials: it is told the proxy's
/// address as its peer's).
pub async fn start_cluster(dir: &Path, proxied: bool) -> Cluster {
    start_cluster_with(dir, proxied, &[]).await
}

/// [`start_cluster`] with `extra` arguments given to every node.
pub async fn start_cluster_with(dir: &Path, proxied: bool, extra: &[&str]) -> Cluster {
    start_cluster_per_node(dir, proxied, |_| extra.iter().map(|a| a.to_string()).collect()).await
}

/// [`start_cluster`] with the arguments `extra(node)` given to each node.
pub async fn start_cluster_per_node(dir: &Path, proxied: bool, extra: impl Fn(usize) -> Vec<String>) -> Cluster {
    let secret = dir.join("secret");
    std::fs::write(&secret, "the cluster's shared secret\n").expect("secret");
    let secret = secret.to_string_lossy().to_string();
    let ports: Vec<u16> = NAMES.iter().map(|_| free_port()).collect();
    let mut proxies = std::collections::HashMap::new();
    if proxied {
        for dialler in 0..NAMES.len() {
            for (dialled, port) in ports.iter().enumerate().skip(dialler + 1) {
                let target = std::net::SocketAddr::from(([127, 0, 0, 1], *port));
                proxies.insert((dialler, dialled), FaultProxy::start(target).await.expect("proxy"));
            }
        }
    }
    let mut starts = Vec::new();
    for (me, name) in NAMES.iter().enumerate() {
        let peers: Vec<String> = (0..NAMES.len())
            .map(|other| {
                let addr = match proxies.get(&(me, other)) {
                    Some(proxy) => proxy.addr.to_string(),
                    None => format!("127.0.0.1:{}", ports[other]),
                };
                format!("{}@{addr}", NAMES[other])
            })
            .collect();
        let listen = format!("127.0.0.1:{}", ports[me]);
        let peers = peers.join(",");
        let args =
            ["--node-name", name, "--peers", &peers, "--cluster-listen", &listen, "--cluster-secret-file", &secret];
        let mut args = args.iter().map(|a| a.to_string()).collect::<Vec<String>>();
        args.extend(extra(me));
        starts.push((dir.join(name), args));
    }
    let nodes = tokio::task::block_in_place(|| starts.iter().map(|(dir, args)| Some(start_node(dir, args))).collect());
    let cluster = Cluster { nodes, starts, proxies, secret };
    tokio::task::block_in_place(|| cluster.wait_until_linked());
    cluster
}

pub fn start_node(dir: &Path, args: &[String]) -> WarrenProcess {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    WarrenProcess::start(dir, &args)
}

impl Cluster {
    /// Waits until every running node sees every other as running (their links are up) and
    /// the metadata group has committed on every node (it elected a leader), so that a change
    /// made right after the start is waited for on every node, as a change on a formed cluster
    /// is; a node that is not linked yet counts as unreachable.
    pub fn wait_until_linked(&self) {
        let running: Vec<&WarrenProcess> = self.nodes.iter().flatten().collect();
        let deadline = Instant::now() + Duration::from_secs(30);
        for node in &running {
            let Some(addr) = node.http_addr else { continue };
            let api = crate::http::Api::new(addr);
            loop {
                let answer = api.get("/api/nodes");
                let nodes = answer.body.as_array().cloned().unwrap_or_default();
                let up = nodes.iter().filter(|n| n["running"] == true).count();
                if up >= running.len() {
                    break;
                }
                assert!(Instant::now() < deadline, "the nodes did not link up: {:?}", answer.body);
                std::thread::sleep(Duration::from_millis(50));
            }
            while metadata_commit_index(&api) < 1 {
                assert!(Instant::now() < deadline, "the metadata group committed nothing on {addr}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// Starts node `node` again on its data directory.
    pub fn restart(&mut self, node: usize) {
        let (dir, args) = &self.starts[node];
        self.nodes[node] = Some(tokio::task::block_in_place(|| start_node(dir, args)));
    }

    /// Starts node `name` on its own (an inter-node listener and the secret, no peers), its
    /// data directory under `dir`; returns its index.
    pub fn start_lone(&mut self, dir: &Path, name: &str) -> usize {
        let listen = format!("127.0.0.1:{}", free_port());
        let args = ["--node-name", name, "--cluster-listen", &listen, "--cluster-secret-file", &self.secret];
        self.starts.push((dir.join(name), args.iter().map(|a| a.to_string()).collect()));
        self.nodes.push(None);
        let node = self.nodes.len() - 1;
        self.restart(node);
        node
    }

    /// Node `node` as `join_cluster` names it: `name@host:port` of its inter-node listener.
    pub fn cluster_address(&self, node: usize) -> String {
        let args = &self.starts[node].1;
        let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
        format!("{}@{}", value("--node-name").unwrap_or_default(), value("--cluster-listen").unwrap_or_default())
    }

    /// Cuts every link of node `node` (it needs proxied links).
    pub fn isolate(&self, node: usize) {
        for ((dialler, dialled), proxy) in &self.proxies {
            if *dialler == node || *dialled == node {
                proxy.cut();
            }
        }
    }

    /// Cuts the links between nodes `a` and `b` only (they need proxied links).
    pub fn cut_between(&self, a: usize, b: usize) {
        for ((dialler, dialled), proxy) in &self.proxies {
            if (*dialler, *dialled) == (a, b) || (*dialler, *dialled) == (b, a) {
                proxy.cut();
            }
        }
    }

    /// Black-holes every link of node `node` (it needs proxied links): its bytes are held,
    /// nothing is closed.
    pub fn black_hole(&self, node: usize) {
        for ((dialler, dialled), proxy) in &self.proxies {
            if *dialler == node || *dialled == node {
                proxy.black_hole();
            }
        }
    }

    /// Pauses node `node`'s process (SIGSTOP): a hung node, whose sockets stay open.
    pub fn pause(&self, node: usize) {
        self.nodes[node].as_ref().expect("running").signal("STOP");
    }

    /// Resumes node `node`'s process (SIGCONT).
    pub fn resume(&self, node: usize) {
        self.nodes[node].as_ref().expect("running").signal("CONT");
    }

    /// Heals every link.
    pub fn heal(&self) {
        self.proxies.values().for_each(FaultProxy::heal);
    }

    pub async fn connect(&self, node: usize) -> Connection {
        let uri = self.nodes[node].as_ref().expect("running").uri();
        Connection::connect(&uri, ConnectionProperties::default()).await.expect("connect")
    }
}

pub fn quorum() -> FieldTable {
    table(&[("x-queue-type", text("quorum"))])
}

/// Retries `declare` until the catalog group has a leader (the cluster is forming).
pub async fn declare_when_formed(ch: &lapin::Channel, name: &str) {
    ch.queue_declare(name.into(), durable(), quorum()).await.expect("declare on a formed cluster");
}

/// Waits up to 10 s until queue `name` holds `count` messages, as `conn` sees it; `what` names
/// the wait in the failure.
pub async fn await_count(conn: &Connection, name: &str, count: u32, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while passive_count(conn, name).await != Some(count) {
        assert!(Instant::now() < deadline, "{what}: queue {name} never held {count}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub async fn passive_count(conn: &Connection, name: &str) -> Option<u32> {
    let ch = conn.create_channel().await.ok()?;
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    ch.queue_declare(name.into(), passive, FieldTable::default()).await.ok().map(|q| q.message_count())
}

/// Prints the warnings and errors every node logged (for a failing test), and how each node
/// sees queue "q"'s group.
pub fn dump_warnings(cluster: &Cluster) {
    dump_logs(cluster);
    // How each running node sees queue "q"'s group, for the diagnosis.
    for i in (0..cluster.nodes.len()).filter(|i| cluster.nodes[*i].is_some()) {
        let status = tokio::task::block_in_place(|| try_ctl(cluster, i, &["quorum_status", "q"]));
        eprintln!("node {i} quorum_status q: {status:?}");
    }
}

/// Prints the warnings and errors every running node logged; `WARREN_DUMP_DIR=dir` keeps each
/// node's whole log there.
fn dump_logs(cluster: &Cluster) {
    for (i, node) in cluster.nodes.iter().enumerate() {
        let lines = node.as_ref().map(|n| n.log_lines()).unwrap_or_default();
        // `WARREN_DUMP_DIR=dir` keeps each node's whole log for a diagnosis.
        if let Ok(dir) = std::env::var("WARREN_DUMP_DIR") {
            let _ = std::fs::write(std::path::Path::new(&dir).join(format!("node{i}.log")), lines.join("\n"));
        }
        for line in lines {
            if line.contains("WARN") || line.contains("ERROR") {
                eprintln!("node {i}: {line}");
            }
        }
    }
}

/// Publishes `body` to `queue` and waits up to `within` for its confirm: `Some(acked)`, or
/// `None` if none came.
pub async fn publish_within(ch: &lapin::Channel, queue: &str, body: &[u8], within: Duration) -> Option<bool> {
    let sent =
        ch.basic_publish("".into(), queue.into(), Default::default(), body, BasicProperties::default()).await.ok()?;
    match tokio::time::timeout(within, sent).await {
        Ok(Ok(confirm)) => Some(confirm.is_ack()),
        Ok(Err(_)) => Some(false),
        Err(_) => None,
    }
}

/// Runs `warren ctl` against node `node`'s management API; returns its output.
pub fn ctl(cluster: &Cluster, node: usize, args: &[&str]) -> String {
    try_ctl(cluster, node, args).unwrap_or_else(|error| panic!("warren ctl {args:?}: {error}"))
}

/// Runs `warren ctl`; its output, or what it printed when it failed.
pub fn try_ctl(cluster: &Cluster, node: usize, args: &[&str]) -> Result<String, String> {
    let http = cluster.nodes[node].as_ref().and_then(|n| n.http_addr).expect("management API");
    let output = std::process::Command::new(crate::process::warren_binary())
        .arg("ctl")
        .args(["--node", &format!("http://{http}")])
        .args(args)
        .output()
        .expect("run warren ctl");
    let text = String::from_utf8_lossy(&output.stdout).to_string();
    match output.status.success() {
        true => Ok(text),
        false => Err(format!("{text}{}", String::from_utf8_lossy(&output.stderr))),
    }
}

/// Polls `warren ctl quorum_status` on `node` until `done` holds of its output.
pub async fn wait_for_status(cluster: &Cluster, node: usize, queue: &str, what: &str, done: impl Fn(&str) -> bool) {
    wait_for_ctl_status(cluster, node, "quorum_status", queue, what, done).await
}

/// Polls `warren ctl VERB QUEUE` (`quorum_status`, `stream_status`) on `node` until `done`
/// holds of its output.
pub async fn wait_for_ctl_status(
    cluster: &Cluster,
    node: usize,
    verb: &str,
    queue: &str,
    what: &str,
    done: impl Fn(&str) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = tokio::task::block_in_place(|| ctl(cluster, node, &[verb, queue]));
        if done(&status) {
            return;
        }
        if Instant::now() > deadline {
            dump_warnings(cluster);
            panic!("{what}: {status}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A fault the failover rounds inject. The queue's leader is node 0 (A, which declared it),
/// the publisher's node is 1 (B), and the follower the follower faults hit is 2 (C).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// kill -9 of the leader; restarted on repair.
    KillLeader,
    /// SIGSTOP of the leader (a hung node); SIGCONT on repair.
    PauseLeader,
    /// Every link of the leader closed; healed on repair.
    IsolateLeader,
    /// Every link of the leader black-holed (bytes held, nothing closed); healed on repair.
    BlackHoleLeader,
    /// Every link of a follower closed; healed on repair (the leader should not change).
    IsolateFollower,
    /// The link between the leader and one follower closed; healed on repair (the leader
    /// should not change).
    CutLeaderFromFollower,
}

impl Fault {
    /// Every fault, in the order the rounds run them.
    pub const ALL: [Fault; 6] = [
        Fault::KillLeader,
        Fault::PauseLeader,
        Fault::IsolateLeader,
        Fault::BlackHoleLeader,
        Fault::IsolateFollower,
        Fault::CutLeaderFromFollower,
    ];

    /// Its name in the rounds' report lines (`scripts/soak-cluster.sh` groups by it).
    pub fn name(self) -> &'static str {
        match self {
            Fault::KillLeader => "kill-leader",
            Fault::PauseLeader => "pause-leader",
            Fault::IsolateLeader => "isolate-leader",
            Fault::BlackHoleLeader => "black-hole-leader",
            Fault::IsolateFollower => "isolate-follower",
            Fault::CutLeaderFromFollower => "cut-leader-from-follower",
        }
    }

    /// Injects it into `cluster` (started with proxied links).
    pub fn inject(self, cluster: &mut Cluster) {
        match self {
            Fault::KillLeader => cluster.nodes[0].take().expect("running").kill9(),
            Fault::PauseLeader => cluster.pause(0),
            Fault::IsolateLeader => cluster.isolate(0),
            Fault::BlackHoleLeader => cluster.black_hole(0),
            Fault::IsolateFollower => cluster.isolate(2),
            Fault::CutLeaderFromFollower => cluster.cut_between(0, 2),
        }
    }

    /// Undoes it: restarts, resumes or heals.
    pub fn repair(self, cluster: &mut Cluster) {
        match self {
            Fault::KillLeader => cluster.restart(0),
            Fault::PauseLeader => cluster.resume(0),
            _ => cluster.heal(),
        }
    }
}

/// What a publisher learned: the sequence numbers confirmed and those nacked or lost with
/// their connection.
#[derive(Debug, Default)]
pub struct Published {
    /// Confirmed (acked).
    pub confirmed: Vec<u64>,
    /// When each confirm came, in the order of `confirmed`.
    pub confirmed_at: Vec<Instant>,
    /// Nacked, or lost with the connection or a timeout.
    pub unconfirmed: Vec<u64>,
    /// The highest number published.
    pub highest: u64,
}

impl Published {
    /// The longest time without a confirm from `since` (a fault) to the last confirm: how
    /// long the fault stopped the publisher's progress.
    pub fn longest_wait_since(&self, since: Instant) -> Duration {
        let after = self.confirmed_at.iter().filter(|at| **at >= since);
        let (longest, _) = after
            .fold((Duration::ZERO, since), |(longest, previous), at| (longest.max(at.duration_since(previous)), *at));
        longest
    }
}

/// How long the load's publisher waits for one confirm.
pub const CONFIRM_WAIT: Duration = Duration::from_secs(15);

/// Publishes numbered messages to `queue` in windows of `window`, with confirms, until `stop`
/// says so; a failed publish (its node or leader gone) counts as unconfirmed.
pub async fn publish_numbered(
    conn: Connection,
    queue: &str,
    window: u64,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Published {
    let mut published = Published::default();
    let Ok(ch) = conn.create_channel().await else { return published };
    if ch.confirm_select(ConfirmSelectOptions::default()).await.is_err() {
        return published;
    }
    let mut next = 0u64;
    while !*stop.borrow() {
        let mut pending = Vec::new();
        for _ in 0..window {
            let sent = ch
                .basic_publish(
                    "".into(),
                    queue.into(),
                    Default::default(),
                    &next.to_be_bytes(),
                    BasicProperties::default(),
                )
                .await;
            pending.push((next, sent));
            published.highest = next;
            next += 1;
        }
        for (number, sent) in pending {
            let confirmed = match sent {
                // A confirm that does not come (a group that could not form before its
                // initializer died waits for it to return) counts as not confirmed.
                Ok(confirm) => {
                    tokio::time::timeout(CONFIRM_WAIT, confirm).await.is_ok_and(|c| c.is_ok_and(|c| c.is_ack()))
                }
                Err(_) => false,
            };
            if confirmed {
                published.confirmed.push(number);
                published.confirmed_at.push(Instant::now());
            } else {
                published.unconfirmed.push(number);
            }
        }
        if published.unconfirmed.len() > 100_000 {
            break;
        }
    }
    published
}

/// Publishes `key`'s message (its body the key, its deduplication header `key-KEY`) until it
/// is confirmed, as a publisher that lost its confirms retries.
pub async fn publish_keyed_until_confirmed(ch: &lapin::Channel, queue: &str, key: u64, cluster: &Cluster) {
    let properties =
        BasicProperties::default().with_headers(table(&[("x-deduplication-header", text(&format!("key-{key}")))]));
    let deadline = Instant::now() + Duration::from_secs(30);
    let body = key.to_be_bytes();
    loop {
        let sent = ch.basic_publish("".into(), queue.into(), Default::default(), &body, properties.clone());
        if let Ok(sent) = sent.await {
            if let Ok(Ok(confirm)) = tokio::time::timeout(Duration::from_secs(5), sent).await {
                if confirm.is_ack() {
                    return;
                }
            }
        }
        if Instant::now() > deadline {
            dump_warnings(cluster);
            panic!("message {key} was not confirmed");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Failover rounds run by the test: `WARREN_FAILOVER_ROUNDS` (the soak script sets many),
/// from seed `WARREN_FAILOVER_SEED` on.
pub fn failover_rounds() -> (u64, u64) {
    let var = |name: &str, default: u64| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    (var("WARREN_FAILOVER_SEED", 1), var("WARREN_FAILOVER_ROUNDS", 2))
}

/// The rounds of the "every fault" tests: each fault but kill -9 (which has rounds of its
/// own), for half of [`failover_rounds`]' seeds rounded up (the soak script asks for twice
/// the rounds it wants of each). Prints how to replay each round as it is taken.
pub fn other_fault_rounds(what: &'static str) -> impl Iterator<Item = (u64, Fault)> {
    let (first, rounds) = failover_rounds();
    let faults = Fault::ALL.into_iter().filter(|f| *f != Fault::KillLeader);
    let all = (first..first + rounds.div_ceil(2)).flat_map(move |seed| faults.clone().map(move |f| (seed, f)));
    all.inspect(move |(seed, fault)| {
        let replay = format!("WARREN_FAILOVER_SEED={seed} WARREN_FAILOVER_ROUNDS=1");
        eprintln!("{} {what} round, seed {seed} (replay: {replay})", fault.name());
    })
}

/// A small deterministic generator (xorshift64*), so that a failing seed can be replayed.
pub fn seeded(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    move |bound| {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D) % bound.max(1)
    }
}

/// The metadata group's commit index on the node `api` talks to (0 until its group has a
/// leader that committed), from its Raft metrics.
fn metadata_commit_index(api: &crate::http::Api) -> u64 {
    const SERIES: &str = "rabbitmq_raft_log_commit_index{vhost=\"\",queue=\"metadata\"} ";
    let scrape = api.get_text("/metrics/per-object");
    scrape.lines().find_map(|line| line.strip_prefix(SERIES)?.trim().parse::<f64>().ok()).map_or(0, |v| v as u64)
}
