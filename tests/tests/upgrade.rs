//! Upgrading in place: this build starts on a data directory written by an earlier release
//! (`tests/fixtures/`, see its README) and finds every user, permission, vhost, exchange,
//! queue, binding and message in it, then restarts on what it wrote itself.

use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use std::path::Path;
use warren_tests::*;

/// The data directory Warren 0.1.0 wrote (before the definitions journal and lazily created
/// queue files).
const RELEASE_0_1_DATA_DIR: &str = "fixtures/data-dir-0.1.0.tar.gz";

fn unpack(archive: &str, into: &Path) {
    let archive = Path::new(env!("CARGO_MANIFEST_DIR")).join(archive);
    let status =
        std::process::Command::new("tar").arg("xzf").arg(&archive).arg("-C").arg(into).status().expect("tar runs");
    assert!(status.success(), "cannot unpack {}", archive.display());
}

async fn connect_as(broker: &TestBroker, user: &str, password: &str, vhost: &str) -> lapin::Result<Connection> {
    let uri = format!("amqp://{user}:{password}@{}/{}", broker.amqp_addr, vhost.replace('/', "%2f"));
    Connection::connect(&uri, ConnectionProperties::default()).await
}

async fn count(conn: &Connection, queue: &str) -> u32 {
    let ch = channel(conn).await;
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    match ch.queue_declare(queue.into(), passive, FieldTable::default()).await {
        Ok(declared) => declared.message_count(),
        Err(error) => panic!("queue '{queue}' is missing: {error}"),
    }
}

async fn get_body(ch: &lapin::Channel, queue: &str) -> Option<String> {
    let got = ch.basic_get(queue.into(), BasicGetOptions { no_ack: true }).await.expect("basic.get")?;
    Some(String::from_utf8_lossy(&got.delivery.data).into_owned())
}

async fn publish_confirmed(ch: &lapin::Channel, exchange: &str, key: &str, body: &str) {
    let persistent = BasicProperties::default().with_delivery_mode(2);
    let confirm = ch
        .basic_publish(exchange.into(), key.into(), BasicPublishOptions::default(), body.as_bytes(), persistent)
        .await
        .expect("publish")
        .await
        .expect("confirm");
    assert!(confirm.is_ack(), "{exchange}/{key} was not confirmed");
}

/// The queues of vhost `shop` with their message counts, in the fixture's order.
async fn shop_counts(admin: &Connection) -> Vec<u32> {
    let mut counts = Vec::new();
    for queue in ["orders.eu", "orders.us", "audit", "ledger", "history"] {
        counts.push(count(admin, queue).await);
    }
    counts
}

/// The catalog's last snapshot index on `broker`, once it took one (waits at most 10 s).
async fn catalog_snapshot_index(broker: &TestBroker) -> u64 {
    let api = warren_tests::http::Api::new(broker.http_addr.expect("the management API listens"));
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let nodes = api.get("/api/nodes");
        assert_eq!(nodes.status, 200, "{:?}", nodes.body);
        let index = nodes.body[0]["metadata_store"]["snapshot_index"].as_u64().unwrap_or(0);
        if index > 0 || tokio::time::Instant::now() > deadline {
            return index;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_directory_of_release_0_1_starts_with_every_user_binding_and_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    unpack(RELEASE_0_1_DATA_DIR, dir.path());
    let data_dir = dir.path().join("data");
    let broker = start_broker_in(&data_dir).await;
    // The catalog takes over what the release's files held: they are its first snapshot.
    assert!(catalog_snapshot_index(&broker).await > 0, "the first start snapshots the catalog it took over");

    // Users, passwords, vhosts and permissions.
    let admin = connect_as(&broker, "admin", "admin-secret", "shop").await.expect("admin logs in to shop");
    let alice = connect_as(&broker, "alice", "fixture-secret", "shop").await.expect("alice logs in to shop");
    assert!(connect_as(&broker, "alice", "wrong", "shop").await.is_err(), "a wrong password is refused");
    assert!(connect_as(&broker, "alice", "fixture-secret", "/").await.is_err(), "alice has no access to /");
    let refused = channel(&alice).await;
    let declare = refused.queue_declare("not-orders".into(), durable(), FieldTable::default()).await;
    assert!(declare.is_err(), "alice may configure only ^orders");

    // Queues of every kind with their messages, in order.
    assert_eq!(shop_counts(&admin).await, [2, 1, 3, 2, 3]);
    let ch = channel(&alice).await;
    assert_eq!(get_body(&ch, "orders.eu").await.as_deref(), Some("order eu.1"));
    assert_eq!(get_body(&ch, "ledger").await.as_deref(), Some("entry 1"));

    // Bindings, queue to exchange to exchange to queue and stream.
    ch.confirm_select(ConfirmSelectOptions::default()).await.expect("confirms");
    publish_confirmed(&ch, "orders", "eu.3", "order eu.3").await;
    assert_eq!(shop_counts(&admin).await, [2, 1, 4, 1, 4]);

    // The default vhost: a binding from a standard exchange, and a queue that held nothing.
    let guest = connect_as(&broker, "guest", "guest", "/").await.expect("guest logs in");
    let plain = channel(&guest).await;
    plain.confirm_select(ConfirmSelectOptions::default()).await.expect("confirms");
    publish_confirmed(&plain, "amq.direct", "plain-key", "second").await;
    assert_eq!(get_body(&plain, "plain").await.as_deref(), Some("plain message"));
    assert_eq!(count(&guest, "idle").await, 0);
    drop((admin, alice, guest));
    broker.shutdown().await;

    // Again, on what this build wrote.
    let broker = start_broker_in(&data_dir).await;
    let admin = connect_as(&broker, "admin", "admin-secret", "shop").await.expect("admin logs in again");
    assert_eq!(shop_counts(&admin).await, [2, 1, 4, 1, 4]);
    let guest = connect_as(&broker, "guest", "guest", "/").await.expect("guest logs in again");
    assert_eq!(get_body(&channel(&guest).await, "plain").await.as_deref(), Some("second"));
    broker.shutdown().await;
}
