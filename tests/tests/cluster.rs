//! A three-node cluster of real `warren` processes on 127.0.0.1: definitions made on one
//! node are known on the others once committed, and a quorum queue declared on A takes
//! publishes on B (confirmed after the commit) and delivers them to a consumer on C.

use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties, ExchangeKind};
use std::path::Path;
use std::time::{Duration, Instant};
use warren_tests::process::WarrenProcess;
use warren_tests::*;

/// A cluster of processes, stopped when dropped.
struct Cluster {
    nodes: Vec<Option<WarrenProcess>>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in self.nodes.iter_mut().filter_map(Option::take) {
            node.kill9();
        }
    }
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("address").port()
}

const NAMES: [&str; 3] = ["warren@a", "warren@b", "warren@c"];

/// Starts three nodes whose data directories are under `dir`.
fn start_cluster(dir: &Path) -> Cluster {
    let secret = dir.join("secret");
    std::fs::write(&secret, "the cluster's shared secret\n").expect("secret");
    let ports: Vec<u16> = NAMES.iter().map(|_| free_port()).collect();
    let peers: Vec<String> = NAMES.iter().zip(&ports).map(|(name, port)| format!("{name}@127.0.0.1:{port}")).collect();
    let peers = peers.join(",");
    let secret = secret.to_string_lossy().to_string();
    let nodes = NAMES
        .iter()
        .zip(&ports)
        .map(|(name, port)| {
            let listen = format!("127.0.0.1:{port}");
            let args =
                ["--node-name", name, "--peers", &peers, "--cluster-listen", &listen, "--cluster-secret-file", &secret];
            Some(WarrenProcess::start(&dir.join(name), &args))
        })
        .collect();
    Cluster { nodes }
}

impl Cluster {
    async fn connect(&self, node: usize) -> Connection {
        let uri = self.nodes[node].as_ref().expect("running").uri();
        Connection::connect(&uri, ConnectionProperties::default()).await.expect("connect")
    }
}

fn quorum() -> FieldTable {
    table(&[("x-queue-type", text("quorum"))])
}

/// Retries `declare` until the metadata group has a leader (the cluster is forming).
async fn declare_when_formed(ch: &lapin::Channel, name: &str) {
    ch.queue_declare(name.into(), durable(), quorum()).await.expect("declare on a formed cluster");
}

async fn passive_count(conn: &Connection, name: &str) -> Option<u32> {
    let ch = conn.create_channel().await.ok()?;
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    ch.queue_declare(name.into(), passive, FieldTable::default()).await.ok().map(|q| q.message_count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declare_on_a_publish_on_b_consume_on_c() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = start_cluster(dir.path());
    let a = cluster.connect(0).await;
    let ch = a.create_channel().await.expect("channel");
    declare_when_formed(&ch, "q").await;
    ch.exchange_declare(
        "x".into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions { durable: true, ..Default::default() },
        FieldTable::default(),
    )
    .await
    .expect("exchange");
    ch.queue_bind("q".into(), "x".into(), "k".into(), Default::default(), FieldTable::default()).await.expect("bind");

    // The definitions are on B and C once A's declare-ok came.
    let b = cluster.connect(1).await;
    let c = cluster.connect(2).await;
    assert_eq!(passive_count(&b, "q").await, Some(0), "the queue is known on B");
    assert_eq!(passive_count(&c, "q").await, Some(0), "the queue is known on C");

    let publisher = confirm_channel(&b).await;
    let count = 200u32;
    for i in 0..count {
        let confirm = publisher
            .basic_publish("x".into(), "k".into(), Default::default(), &i.to_be_bytes(), BasicProperties::default())
            .await
            .expect("publish")
            .await
            .expect("confirm");
        assert!(confirm.is_ack(), "message {i} confirmed");
    }

    let consumer_ch = c.create_channel().await.expect("channel");
    consumer_ch.basic_qos(50, BasicQosOptions::default()).await.expect("qos");
    let mut consumer = consumer_ch
        .basic_consume("q".into(), "c".into(), Default::default(), FieldTable::default())
        .await
        .expect("consume");
    for i in 0..count {
        let delivery = next_delivery(&mut consumer).await;
        assert_eq!(delivery.data, i.to_be_bytes(), "in publish order");
        delivery.ack(BasicAckOptions::default()).await.expect("ack");
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while passive_count(&a, "q").await != Some(0) {
        assert!(Instant::now() < deadline, "acks reached every replica");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
