//! Security issue #28, item 7: silent sockets flooding the inter-node port must neither keep
//! a real peer out nor flood the log.
//!
//! 200 sockets from 127.0.0.2 connect to a node's cluster port, say nothing, and reconnect as
//! soon as they are closed, for several seconds; meanwhile a real peer (with the secret)
//! dials from 127.0.0.1. The node runs with the production settings. The peer must be
//! admitted within 5 s (a generous bound: on loopback it takes milliseconds), and the node
//! must log only a handful of warning lines. Linux only: elsewhere 127.0.0.2 is not routed
//! to loopback by default.
#![cfg(target_os = "linux")]

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::task::JoinSet;
use warren_server::cluster::{ClusterSecret, PeerAddress, Transport, TransportSettings};

const SECRET: &[u8] = b"a test secret of enough bytes";
const CLUSTER: &str = "test-cluster";
/// Silent sockets kept open at once.
const ATTACKERS: usize = 200;
/// The source address of the silent sockets (the peer dials from 127.0.0.1).
const ATTACKER_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
/// How long the flood runs before the peer starts dialling, so that it meets full slots.
const FLOOD_HEAD_START_MS: u64 = 1_500;
/// How long the flood runs in all, at least.
const FLOOD_MS: u64 = 5_000;
/// The bound on the peer's admission.
const ADMIT_WITHIN_MS: u64 = 5_000;
/// Most warning lines the whole run may log.
const MAX_WARNING_LINES: usize = 20;

type Node = Transport<(), ()>;

/// Log lines, as the fmt subscriber writes them.
#[derive(Clone, Default)]
struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl Write for LogBuffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogBuffer {
    fn lines(&self) -> Vec<String> {
        let bytes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(&bytes).lines().map(str::to_string).collect()
    }
}

/// Captures every warning (and error) of the process, whatever thread logs it.
fn capture_warnings() -> LogBuffer {
    let buffer = LogBuffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber of this test binary");
    buffer
}

/// One silent socket from [`ATTACKER_IP`]: connects, says nothing, reconnects once closed.
/// Counts its connections in `connections`.
async fn silent_socket(target: SocketAddr, connections: Arc<AtomicU64>) {
    let mut buf = [0u8; 64];
    loop {
        match connect_from(ATTACKER_IP, target).await {
            Ok(mut stream) => {
                connections.fetch_add(1, Ordering::Relaxed);
                while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
            }
            // Out of ports or descriptors for a moment: try again, without spinning.
            Err(_) => tokio::time::sleep(Duration::from_millis(1)).await,
        }
    }
}

/// A connection to `target` from `source` (any port).
async fn connect_from(source: Ipv4Addr, target: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((source, 0)))?;
    socket.connect(target).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_sockets_from_one_address_neither_keep_a_peer_out_nor_flood_the_log() {
    let warnings = capture_warnings();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let target = listener.local_addr().expect("address");
    let secret = || ClusterSecret::from_bytes(SECRET.to_vec());
    let (b, _b_inbox) = Node::start(TransportSettings::new("warren@b", CLUSTER, secret()), Some(listener), &[]);
    let flood_started = Instant::now();
    let mut flood = JoinSet::new();
    let connections = Arc::new(AtomicU64::new(0));
    for _ in 0..ATTACKERS {
        flood.spawn(silent_socket(target, Arc::clone(&connections)));
    }
    tokio::time::sleep(Duration::from_millis(FLOOD_HEAD_START_MS)).await;

    // warren@a sorts first, so it dials b (from 127.0.0.1).
    let dialling = Instant::now();
    let b_address = PeerAddress { name: "warren@b".to_string(), address: target.to_string() };
    let (a, _a_inbox) = Node::start(TransportSettings::new("warren@a", CLUSTER, secret()), None, &[b_address]);
    let admitted = b.wait_connected("warren@a", Duration::from_millis(ADMIT_WITHIN_MS)).await;
    let admission = dialling.elapsed();
    let remaining = Duration::from_millis(FLOOD_MS).saturating_sub(flood_started.elapsed());
    tokio::time::sleep(remaining).await;
    flood.abort_all();
    tokio::join!(a.shutdown(), b.shutdown());

    let lines = warnings.lines();
    eprintln!(
        "{ATTACKERS} silent sockets, {} connections in {:?}: peer admitted: {admitted}, after {admission:?}; \
         {} warning lines",
        connections.load(Ordering::Relaxed),
        flood_started.elapsed(),
        lines.len()
    );
    for line in lines.iter().take(MAX_WARNING_LINES) {
        eprintln!("  {line}");
    }
    assert!(admitted, "the peer was not admitted within {ADMIT_WITHIN_MS} ms");
    assert!(lines.len() <= MAX_WARNING_LINES, "{} warning lines logged", lines.len());
}
