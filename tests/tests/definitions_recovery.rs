//! Stored definitions that cannot be read back: what the protocol accepts always comes back
//! after a restart, and a hand-damaged record is left out on its own (kept beside the
//! definitions, its data moved aside) instead of keeping the broker from starting.

use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, ExchangeKind};
use std::path::{Path, PathBuf};
use warren_tests::*;

/// The deepest nesting the protocol accepts (`warren_delivery::field_table::MAX_NESTING_DEPTH`).
const MAX_DEPTH: usize = 32;

/// Arguments `depth` levels deep: the top table, with tables nested inside it.
fn nested_arguments(depth: usize) -> FieldTable {
    let mut value = text("leaf");
    for _ in 1..depth {
        value = AMQPValue::FieldTable(table(&[("k", value)]));
    }
    table(&[("x-nested", value)])
}

async fn publish_persistent(ch: &lapin::Channel, queue: &str, bodies: &[&str]) {
    for body in bodies {
        ch.basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            body.as_bytes(),
            BasicProperties::default().with_delivery_mode(2),
        )
        .await
        .expect("publish")
        .await
        .expect("confirm");
    }
}

async fn message_count(conn: &lapin::Connection, name: &str) -> Option<u32> {
    let ch = channel(conn).await;
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    ch.queue_declare(name.into(), passive, FieldTable::default()).await.ok().map(|q| q.message_count())
}

async fn bodies(ch: &lapin::Channel, queue: &str) -> Vec<String> {
    drain(ch, queue).await.into_iter().map(|got| String::from_utf8_lossy(&got.delivery.data).into_owned()).collect()
}

fn vhost_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("vhosts").join("2f")
}

/// The names of the queue data directories.
fn queue_dirs(data_dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(vhost_dir(data_dir).join("queues")) else { return Vec::new() };
    entries.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect()
}

/// Declares a durable queue, publishes `bodies` to it (persistent, confirmed) and returns
/// the name of the data directory it got (its first persistent message creates it).
async fn declare_durable(ch: &lapin::Channel, data_dir: &Path, name: &str, bodies: &[&str]) -> String {
    let before = queue_dirs(data_dir);
    ch.queue_declare(name.into(), durable(), FieldTable::default()).await.expect("declare");
    assert_eq!(queue_dirs(data_dir), before, "a declare alone creates no file");
    publish_persistent(ch, name, bodies).await;
    let mut new: Vec<String> = queue_dirs(data_dir).into_iter().filter(|d| !before.contains(d)).collect();
    assert_eq!(new.len(), 1, "one new data directory for {name}");
    new.remove(0)
}

fn unreadable_files(data_dir: &Path) -> Vec<PathBuf> {
    let entries = std::fs::read_dir(vhost_dir(data_dir)).expect("vhost dir");
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            name.starts_with("definitions.unreadable-") && name.ends_with(".json")
        })
        .collect();
    files.sort();
    files
}

#[tokio::test]
async fn arguments_nested_as_deep_as_accepted_survive_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = start_broker_in(dir.path()).await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    let deepest = nested_arguments(MAX_DEPTH);
    ch.queue_declare("deepest".into(), durable(), deepest.clone()).await.expect("32 levels are accepted");
    publish_persistent(&ch, "deepest", &["one", "two"]).await;
    let refused = channel(&conn).await;
    let too_deep = refused.queue_declare("too-deep".into(), durable(), nested_arguments(MAX_DEPTH + 1)).await;
    assert_code(too_deep, 406, "33 levels are refused");
    broker.shutdown().await;

    let broker = start_broker_in(dir.path()).await;
    let conn = connect(&broker).await;
    assert_eq!(message_count(&conn, "deepest").await, Some(2), "the queue and its messages came back");
    let ch = channel(&conn).await;
    ch.queue_declare("deepest".into(), durable(), deepest).await.expect("the same arguments are equivalent");
    assert_eq!(bodies(&ch, "deepest").await, ["one", "two"]);
    assert!(unreadable_files(dir.path()).is_empty(), "nothing was left out");
    broker.shutdown().await;
}

/// `depth` levels of field tables as amq-protocol's serde writes them in definitions.json.
fn stored_nested(depth: usize) -> serde_json::Value {
    let mut value = serde_json::json!({ "LongString": [108, 101, 97, 102] });
    for _ in 1..depth {
        value = serde_json::json!({ "FieldTable": { "k": value } });
    }
    serde_json::json!({ "x-nested": value })
}

#[tokio::test]
async fn a_damaged_queue_record_is_left_out_and_the_broker_starts_with_the_rest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = start_broker_in(dir.path()).await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    let healthy_dir = declare_durable(&ch, dir.path(), "healthy", &["h1", "h2", "h3"]).await;
    let deep_dir = declare_durable(&ch, dir.path(), "deep", &["d1", "d2"]).await;
    let odd_dir = declare_durable(&ch, dir.path(), "odd", &["o1"]).await;
    let durable_exchange = ExchangeDeclareOptions { durable: true, ..Default::default() };
    ch.exchange_declare("dx".into(), ExchangeKind::Direct, durable_exchange, FieldTable::default()).await.expect("dx");
    for queue in ["healthy", "deep"] {
        ch.queue_bind(queue.into(), "dx".into(), "k".into(), Default::default(), FieldTable::default())
            .await
            .expect("bind");
    }
    broker.shutdown().await;

    // Damage two queue records by hand: one nested 40 levels, one with a value of no known type.
    let definitions_path = vhost_dir(dir.path()).join("definitions.json");
    let mut definitions: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&definitions_path).expect("read definitions")).expect("json");
    let queues = definitions["queues"].as_array_mut().expect("queues");
    let mut damaged = Vec::new();
    for record in queues.iter_mut() {
        match record["name"].as_str() {
            Some("deep") => record["arguments"] = stored_nested(40),
            Some("odd") => record["arguments"] = serde_json::json!({ "x-odd": { "NoSuchType": 1 } }),
            _ => continue,
        }
        damaged.push(record.clone());
    }
    assert_eq!(damaged.len(), 2);
    std::fs::write(&definitions_path, serde_json::to_vec_pretty(&definitions).expect("json")).expect("write");

    let broker = start_broker_in(dir.path()).await;
    let conn = connect(&broker).await;
    assert_eq!(message_count(&conn, "healthy").await, Some(3), "the healthy queue is back with its messages");
    assert_eq!(message_count(&conn, "deep").await, None, "the record nested too deep is left out");
    assert_eq!(message_count(&conn, "odd").await, None, "the record with an unknown type is left out");
    let ch = confirm_channel(&conn).await;
    assert_eq!(bodies(&ch, "healthy").await, ["h1", "h2", "h3"]);
    publish_persistent(&ch, "healthy", &["after"]).await;
    ch.basic_publish("dx".into(), "k".into(), Default::default(), b"via dx", BasicProperties::default())
        .await
        .expect("publish")
        .await
        .expect("confirm");
    assert_eq!(bodies(&ch, "healthy").await, ["after", "via dx"], "the healthy queue's binding came back");

    // The unreadable records are kept beside the definitions, with the left-out binding.
    let files = unreadable_files(dir.path());
    assert_eq!(files.len(), 1, "{files:?}");
    let unreadable: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&files[0]).expect("read")).expect("the unreadable file is JSON");
    let left_out = unreadable["left_out"].as_array().expect("left_out");
    let entry =
        |name: &str| left_out.iter().find(|e| e["name"] == name).unwrap_or_else(|| panic!("{name}: {unreadable}"));
    for record in &damaged {
        let name = record["name"].as_str().expect("name");
        let left = entry(name);
        assert_eq!(left["kind"], "queue");
        assert_eq!(&left["record"], record, "the record as it was stored");
        assert!(left["reason"].as_str().is_some_and(|r| !r.is_empty()), "{left}");
    }
    assert!(entry("deep")["reason"].as_str().is_some_and(|r| r.contains("deeper than 32")), "{unreadable}");
    assert!(entry("odd")["reason"].as_str().is_some_and(|r| r.contains("NoSuchType")), "{unreadable}");
    assert_eq!(entry("dx -> deep")["kind"], "binding");

    // Their data is kept under the data directory, out of the way of a new declare.
    for (name, data_dir) in [("deep", &deep_dir), ("odd", &odd_dir)] {
        let moved = PathBuf::from(entry(name)["data_moved_to"].as_str().expect("data_moved_to"));
        assert!(moved.starts_with(dir.path()), "{}", moved.display());
        assert_eq!(moved.file_name().and_then(|n| n.to_str()), Some(data_dir.as_str()));
        assert!(std::fs::read_dir(&moved).expect("the data is still there").next().is_some());
    }
    assert!(!queue_dirs(dir.path()).contains(&deep_dir));
    assert!(queue_dirs(dir.path()).contains(&healthy_dir));
    let moved_deep = PathBuf::from(entry("deep")["data_moved_to"].as_str().expect("data_moved_to"));
    ch.queue_declare("deep".into(), durable(), FieldTable::default()).await.expect("declared anew");
    assert_eq!(message_count(&conn, "deep").await, Some(0));
    assert!(std::fs::read_dir(&moved_deep).expect("a new declare leaves the old data alone").next().is_some());
    broker.shutdown().await;

    // The definitions file no longer holds the left-out records: the next start is clean.
    let broker = start_broker_in(dir.path()).await;
    let conn = connect(&broker).await;
    assert_eq!(message_count(&conn, "healthy").await, Some(0));
    assert_eq!(message_count(&conn, "deep").await, Some(0));
    assert_eq!(unreadable_files(dir.path()).len(), 1, "nothing new was left out");
    broker.shutdown().await;
}
