//! The inter-node transport between real sockets on 127.0.0.1: meshes of two and three nodes,
//! requests both ways at once, one-way messages, reconnection after a restart, refusal of
//! peers without the secret or of another cluster, garbage and silent clients, timeouts and
//! back-pressure.

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use warren_server::cluster::{
    ClusterSecret, Inbox, Incoming, PeerAddress, Transport, TransportError, TransportSettings,
};

const SECRET: &[u8] = b"a test secret of enough bytes";
const CLUSTER: &str = "test-cluster";
const CONNECT_WITHIN: Duration = Duration::from_secs(3);

/// A request as the Raft layer will send them: tagged with a group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Request {
    Echo {
        group: u64,
        n: u64,
    },
    /// Never answered.
    Ignore,
    Note(String),
    Blob(Vec<u8>),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Response {
    from: String,
    group: u64,
    n: u64,
}

type Node = Transport<Request, Response>;

fn settings(name: &str, cluster: &str, secret: &[u8]) -> TransportSettings {
    let mut settings = TransportSettings::new(name, cluster, ClusterSecret::from_bytes(secret.to_vec()));
    settings.handshake_timeout = Duration::from_millis(500);
    settings.request_timeout = Duration::from_secs(2);
    settings.heartbeat_interval = Duration::from_millis(100);
    settings.idle_timeout = Duration::from_secs(1);
    settings.reconnect_min_backoff = Duration::from_millis(20);
    settings.reconnect_max_backoff = Duration::from_millis(200);
    settings
}

async fn listener() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    (listener, addr)
}

fn peer(name: &str, addr: SocketAddr) -> PeerAddress {
    PeerAddress { name: name.to_string(), address: addr.to_string() }
}

/// Starts a node that answers every `Echo` and forwards one-way messages to the receiver.
fn start(
    settings: TransportSettings,
    listener: TcpListener,
    peers: &[PeerAddress],
) -> (Node, mpsc::UnboundedReceiver<(String, Request)>) {
    let name = settings.identity.node_name.clone();
    let (node, inbox) = Transport::start(settings, Some(listener), peers);
    let (notes, received) = mpsc::unbounded_channel();
    tokio::spawn(answer(name, inbox, notes));
    (node, received)
}

async fn answer(name: String, mut inbox: Inbox<Request, Response>, notes: mpsc::UnboundedSender<(String, Request)>) {
    while let Some(incoming) = inbox.recv().await {
        match incoming {
            Incoming::Request(request) => {
                if let Request::Echo { group, n } = request.body {
                    let response = Response { from: name.clone(), group, n };
                    tokio::spawn(request.respond(response));
                }
            }
            Incoming::Message { from, body } => {
                let _ = notes.send((from, body));
            }
        }
    }
}

async fn echo(node: &Node, to: &str, n: u64) -> Result<Response, TransportError> {
    node.request(to, Request::Echo { group: n % 7, n }).await
}

async fn assert_echoes(from: &Node, to: &str, count: u64) {
    let calls = (0..count).map(|n| echo(from, to, n));
    let responses = futures_util::future::join_all(calls).await;
    for (n, response) in (0..count).zip(responses) {
        let response = response.unwrap_or_else(|e| panic!("{} -> {to} request {n}: {e}", from.node_name()));
        assert_eq!(response, Response { from: to.to_string(), group: n % 7, n });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_exchange_requests_both_ways_at_once() {
    let ((la, aa), (lb, ab)) = (listener().await, listener().await);
    let (a, _) = start(settings("warren@a", CLUSTER, SECRET), la, &[peer("warren@b", ab)]);
    let (b, mut b_notes) = start(settings("warren@b", CLUSTER, SECRET), lb, &[peer("warren@a", aa)]);
    assert!(a.wait_connected("warren@b", CONNECT_WITHIN).await, "a never connected to b");
    assert!(b.wait_connected("warren@a", CONNECT_WITHIN).await, "b never saw a");
    tokio::join!(assert_echoes(&a, "warren@b", 300), assert_echoes(&b, "warren@a", 300));
    a.send("warren@b", Request::Note("hello".into())).await.expect("one-way");
    let note = tokio::time::timeout(CONNECT_WITHIN, b_notes.recv()).await.expect("note in time");
    assert_eq!(note, Some(("warren@a".to_string(), Request::Note("hello".into()))));
    assert_eq!(a.connected_peers(), ["warren@b"]);
    assert_eq!(b.connected_peers(), ["warren@a"]);
    tokio::join!(a.shutdown(), b.shutdown());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_form_a_mesh_from_a_shared_seed_list() {
    let ls = [listener().await, listener().await, listener().await];
    let names = ["warren@a", "warren@b", "warren@c"];
    let seeds: Vec<PeerAddress> = names.iter().zip(&ls).map(|(name, (_, addr))| peer(name, *addr)).collect();
    let mut nodes = Vec::new();
    for (name, (listener, _)) in names.iter().zip(ls) {
        nodes.push(start(settings(name, CLUSTER, SECRET), listener, &seeds).0);
    }
    for node in &nodes {
        for other in names.iter().filter(|n| **n != node.node_name()) {
            assert!(
                node.wait_connected(other, CONNECT_WITHIN).await,
                "{} never connected to {other}",
                node.node_name()
            );
        }
    }
    let mut exchanges = Vec::new();
    for node in &nodes {
        for other in names.iter().filter(|n| **n != node.node_name()) {
            exchanges.push(assert_echoes(node, other, 100));
        }
    }
    futures_util::future::join_all(exchanges).await;
    for node in &nodes {
        assert_eq!(node.connected_peers().len(), 2, "{}", node.node_name());
    }
    futures_util::future::join_all(nodes.iter().map(|node| node.shutdown())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dialler_reconnects_after_the_peer_restarts() {
    let ((la, _), (lb, ab)) = (listener().await, listener().await);
    let (a, _) = start(settings("warren@a", CLUSTER, SECRET), la, &[peer("warren@b", ab)]);
    let (b, _) = start(settings("warren@b", CLUSTER, SECRET), lb, &[]);
    assert!(a.wait_connected("warren@b", CONNECT_WITHIN).await);
    assert_echoes(&a, "warren@b", 10).await;
    b.shutdown().await;
    wait_disconnected(&a, "warren@b").await;
    assert!(matches!(echo(&a, "warren@b", 1).await, Err(TransportError::NotConnected(_))));
    let lb = TcpListener::bind(ab).await.expect("rebind the same port");
    let (b, _) = start(settings("warren@b", CLUSTER, SECRET), lb, &[]);
    assert!(a.wait_connected("warren@b", CONNECT_WITHIN).await, "a did not reconnect");
    assert!(b.wait_connected("warren@a", CONNECT_WITHIN).await);
    tokio::join!(assert_echoes(&a, "warren@b", 10), assert_echoes(&b, "warren@a", 10));
    tokio::join!(a.shutdown(), b.shutdown());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_dialler_is_accepted_again() {
    let ((la, _), (lb, ab)) = (listener().await, listener().await);
    let (b, _) = start(settings("warren@b", CLUSTER, SECRET), lb, &[]);
    let (a, _) = start(settings("warren@a", CLUSTER, SECRET), la, &[peer("warren@b", ab)]);
    assert!(b.wait_connected("warren@a", CONNECT_WITHIN).await);
    a.shutdown().await;
    wait_disconnected(&b, "warren@a").await;
    let (la2, _) = listener().await;
    let (a2, _) = start(settings("warren@a", CLUSTER, SECRET), la2, &[peer("warren@b", ab)]);
    assert!(b.wait_connected("warren@a", CONNECT_WITHIN).await, "b did not take the restarted a");
    assert!(a2.wait_connected("warren@b", CONNECT_WITHIN).await);
    tokio::join!(assert_echoes(&b, "warren@a", 10), assert_echoes(&a2, "warren@b", 10));
    assert_eq!(b.connected_peers(), ["warren@a"]);
    tokio::join!(a2.shutdown(), b.shutdown());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_without_the_secret_or_of_another_cluster_are_refused() {
    for (secret, cluster) in [(&b"another secret of enough bytes"[..], CLUSTER), (SECRET, "other-cluster")] {
        let ((la, _), (lb, ab)) = (listener().await, listener().await);
        let (a, _) = start(settings("warren@a", cluster, secret), la, &[peer("warren@b", ab)]);
        let (b, _) = start(settings("warren@b", CLUSTER, SECRET), lb, &[]);
        assert!(!b.wait_connected("warren@a", Duration::from_millis(600)).await, "{cluster}: intruder admitted");
        assert!(a.connected_peers().is_empty() && b.connected_peers().is_empty());
        tokio::join!(a.shutdown(), b.shutdown());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_silent_clients_are_disconnected_and_the_node_keeps_serving() {
    let ((la, _), (lb, ab)) = (listener().await, listener().await);
    let (b, _) = start(settings("warren@b", CLUSTER, SECRET), lb, &[]);
    // An announced frame far beyond the handshake limit: refused before anything is buffered.
    expect_closed(ab, &[0xff, 0xff, 0xff, 0xff, 1, 2, 3]).await;
    // A well-framed message that is not a handshake.
    expect_closed(ab, &[0, 0, 0, 5, 0xde, 0xad, 0xbe, 0xef, 0x99]).await;
    // An AMQP client knocking at the wrong port.
    expect_closed(ab, b"AMQP\x00\x00\x09\x01").await;
    // A client that says nothing: closed after the handshake timeout.
    expect_closed(ab, &[]).await;
    let (a, _) = start(settings("warren@a", CLUSTER, SECRET), la, &[peer("warren@b", ab)]);
    assert!(a.wait_connected("warren@b", CONNECT_WITHIN).await, "the node stopped serving after garbage");
    assert_echoes(&a, "warren@b", 5).await;
    tokio::join!(a.shutdown(), b.shutdown());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_request_times_out_and_the_connection_lives_on() {
    let ((la, _), (lb, ab)) = (listener().await, listener().await);
    let (a, _) = start(settings("warren@a", CLUSTER, SECRET), la, &[peer("warren@b", ab)]);
    let (b, _) = start(settings("warren@b", CLUSTER, SECRET), lb, &[]);
    assert!(a.wait_connected("warren@b", CONNECT_WITHIN).await);
    let timeout = Duration::from_millis(200);
    let result = a.request_within("warren@b", Request::Ignore, timeout).await;
    assert!(matches!(result, Err(TransportError::Timeout { .. })), "{result:?}");
    assert!(matches!(a.request("warren@z", Request::Ignore).await, Err(TransportError::NotConnected(_))));
    assert_echoes(&a, "warren@b", 5).await;
    tokio::join!(a.shutdown(), b.shutdown());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_does_not_read_makes_senders_wait_not_memory_grow() {
    let ((la, _), (lb, ab)) = (listener().await, listener().await);
    let mut a_settings = settings("warren@a", CLUSTER, SECRET);
    a_settings.request_timeout = Duration::from_millis(300);
    let (a, _) = start(a_settings, la, &[peer("warren@b", ab)]);
    let mut b_settings = settings("warren@b", CLUSTER, SECRET);
    b_settings.inbox_capacity = 1;
    b_settings.idle_timeout = Duration::from_secs(10);
    // b's inbox is never read: its reader stops, then TCP, then a's budget fills up.
    let (b, _b_inbox) = Transport::<Request, Response>::start(b_settings, Some(lb), &[]);
    assert!(a.wait_connected("warren@b", CONNECT_WITHIN).await);
    let blob = vec![7u8; 1 << 20];
    let mut sent_mib = 0;
    let outcome = loop {
        match a.send("warren@b", Request::Blob(blob.clone())).await {
            Ok(()) if sent_mib < 256 => sent_mib += 1,
            other => break other,
        }
    };
    assert!(matches!(outcome, Err(TransportError::Timeout { .. })), "after {sent_mib} MiB: {outcome:?}");
    assert!(sent_mib < 128, "{sent_mib} MiB were buffered");
    tokio::join!(a.shutdown(), b.shutdown());
}

async fn wait_disconnected(node: &Node, peer: &str) {
    let deadline = tokio::time::Instant::now() + CONNECT_WITHIN;
    while node.connected_peers().iter().any(|p| p == peer) {
        assert!(tokio::time::Instant::now() < deadline, "{} still connected to {peer}", node.node_name());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Connects, writes `bytes`, and expects the node to close the connection within 2 s.
async fn expect_closed(addr: SocketAddr, bytes: &[u8]) {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.write_all(bytes).await.expect("write");
    let mut buf = vec![0u8; 4096];
    let closed = tokio::time::timeout(Duration::from_secs(2), async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "connection that sent {bytes:?} was not closed");
}
