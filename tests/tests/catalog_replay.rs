//! A node whose definitions go through the catalog (its catalog's Raft group) syncs only the
//! catalog's log per change; the virtual hosts' journals are synced at the catalog's
//! checkpoints. These tests kill the node with SIGKILL and then cut its journals back to what
//! a power loss could have left (what the last checkpoint synced), so that the restart must
//! replay the catalog's log: every queue, binding and confirmed message comes back, and a
//! delete is never replayed over what was declared after it.

use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use warren_tests::cluster::free_port;
use warren_tests::process::WarrenProcess;

const QUEUES: usize = 20;
const PERSISTENT: u8 = 2;

/// The arguments of a node alone in its cluster (a one-member catalog group).
fn lone_node_args(dir: &Path) -> Vec<String> {
    let secret = dir.join("secret");
    std::fs::write(&secret, "the cluster's shared secret\n").expect("secret");
    let listen = format!("127.0.0.1:{}", free_port());
    let args = ["--node-name", "warren@lone", "--cluster-listen", &listen, "--cluster-secret-file"];
    let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    args.push(secret.to_string_lossy().into_owned());
    args
}

fn start(dir: &Path, args: &[String]) -> WarrenProcess {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    tokio::task::block_in_place(|| WarrenProcess::start(&dir.join("data"), &args))
}

async fn channel(node: &WarrenProcess) -> (Connection, Channel) {
    let conn = Connection::connect(&node.uri(), ConnectionProperties::default()).await.expect("connect");
    let ch = conn.create_channel().await.expect("channel");
    ch.confirm_select(ConfirmSelectOptions::default()).await.expect("confirms");
    (conn, ch)
}

fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions { durable: true, ..Default::default() }
}

/// Declares `queue` once the catalog has a leader (a one-member group elects itself at once,
/// but the first start may answer before).
async fn declare(ch: &Channel, queue: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match ch.queue_declare(queue.into(), durable(), FieldTable::default()).await {
            Ok(_) => return,
            Err(error) => assert!(Instant::now() < deadline, "cannot declare {queue}: {error}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn publish_confirmed(ch: &Channel, exchange: &str, key: &str, body: &[u8]) {
    let persistent = BasicProperties::default().with_delivery_mode(PERSISTENT);
    let confirm = ch
        .basic_publish(
            exchange.into(),
            key.into(),
            BasicPublishOptions { mandatory: true, ..Default::default() },
            body,
            persistent,
        )
        .await
        .expect("publish")
        .await
        .expect("confirm");
    assert!(confirm.is_ack(), "publish to {exchange}/{key} confirmed");
    assert!(confirm.take_message().is_none(), "publish to {exchange}/{key} routed");
}

/// The definitions journals of the node's vhosts, with their lengths now.
fn journals(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut found = Vec::new();
    let vhosts = dir.join("data").join("vhosts");
    for vhost in std::fs::read_dir(&vhosts).expect("vhosts").flatten() {
        for file in std::fs::read_dir(vhost.path()).expect("vhost dir").flatten() {
            let name = file.file_name().to_string_lossy().into_owned();
            if name.starts_with("definitions.") && name.ends_with(".journal") {
                found.push((file.path(), file.metadata().expect("metadata").len()));
            }
        }
    }
    found
}

/// Cuts each journal back to its length in `synced`, as a power loss could have left it.
fn lose_unsynced_appends(synced: &[(PathBuf, u64)]) {
    for (path, len) in synced {
        let file = std::fs::OpenOptions::new().write(true).open(path).expect("journal");
        assert!(file.metadata().expect("metadata").len() >= *len);
        file.set_len(*len).expect("truncate");
    }
}

async fn ready_count(ch: &Channel, queue: &str) -> u32 {
    let passive = QueueDeclareOptions { passive: true, ..durable() };
    ch.queue_declare(queue.into(), passive, FieldTable::default()).await.expect("queue is there").message_count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declares_and_bindings_lost_from_the_journal_come_back_from_the_catalogs_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let args = lone_node_args(dir.path());
    let node = start(dir.path(), &args);
    let (_conn, ch) = channel(&node).await;
    declare(&ch, "first").await;
    // Nothing destroyed since the start: no checkpoint, so the journals as the start wrote
    // them are all a power loss is sure to leave.
    let synced = journals(dir.path());
    for i in 0..QUEUES {
        let queue = format!("q{i}");
        declare(&ch, &queue).await;
        let bind = QueueBindOptions::default();
        ch.queue_bind(queue.as_str().into(), "amq.direct".into(), queue.as_str().into(), bind, FieldTable::default())
            .await
            .expect("bind");
        publish_confirmed(&ch, "amq.direct", &queue, format!("m{i}").as_bytes()).await;
    }
    assert!(journals(dir.path()).iter().zip(&synced).any(|((_, now), (_, then))| now > then), "the journal grew");
    node.kill9();
    lose_unsynced_appends(&synced);

    let node = start(dir.path(), &args);
    let (_conn, ch) = channel(&node).await;
    for i in 0..QUEUES {
        let queue = format!("q{i}");
        assert_eq!(ready_count(&ch, &queue).await, 1, "{queue} is back with its confirmed message");
        publish_confirmed(&ch, "amq.direct", &queue, b"after").await;
        assert_eq!(ready_count(&ch, &queue).await, 2, "{queue} is bound again");
    }
    let got = ch.basic_get("q0".into(), BasicGetOptions { no_ack: true }).await.expect("get").expect("a message");
    assert_eq!(got.delivery.data, b"m0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_never_deletes_a_queue_declared_again_after_its_delete() {
    let dir = tempfile::tempdir().expect("tempdir");
    let args = lone_node_args(dir.path());
    let node = start(dir.path(), &args);
    let (_conn, ch) = channel(&node).await;
    declare(&ch, "again").await;
    publish_confirmed(&ch, "", "again", b"before the delete").await;
    ch.queue_delete("again".into(), QueueDeleteOptions::default()).await.expect("delete");
    // The delete was checkpointed before its -ok: the journals are synced up to it.
    let synced = journals(dir.path());
    declare(&ch, "again").await;
    publish_confirmed(&ch, "", "again", b"after the delete").await;
    node.kill9();
    lose_unsynced_appends(&synced);

    let node = start(dir.path(), &args);
    let (_conn, ch) = channel(&node).await;
    assert_eq!(ready_count(&ch, "again").await, 1, "the queue declared again, with what it took");
    let got = ch.basic_get("again".into(), BasicGetOptions { no_ack: true }).await.expect("get").expect("a message");
    assert_eq!(got.delivery.data, b"after the delete");
}

/// Stops `node` cleanly (SIGTERM) and waits for it.
fn stop(mut node: WarrenProcess) {
    node.signal("TERM");
    assert!(node.wait(Duration::from_secs(15)).success(), "a clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_alone_can_start_clustered_and_alone_again_after_clean_stops() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clustered = lone_node_args(dir.path());
    let mut expected = 0;
    for (round, args) in [Vec::new(), clustered.clone(), Vec::new()].iter().enumerate() {
        let node = start(dir.path(), args);
        let (_conn, ch) = channel(&node).await;
        let queue = format!("round{round}");
        declare(&ch, &queue).await;
        publish_confirmed(&ch, "", &queue, b"kept").await;
        expected += 1;
        for earlier in 0..=round {
            assert_eq!(ready_count(&ch, &format!("round{earlier}")).await, 1, "round {round}: round{earlier} is there");
        }
        drop(ch);
        stop(node);
    }
    assert_eq!(expected, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catalog_of_the_other_mode_left_by_a_crash_is_refused_with_what_to_do() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = start(dir.path(), &[]);
    let (_conn, ch) = channel(&node).await;
    declare(&ch, "alone").await;
    node.kill9();

    let args = lone_node_args(dir.path());
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let binary = warren_tests::process::warren_binary();
    let data_dir = dir.path().join("data");
    let output = std::process::Command::new(binary)
        .args(["--data-dir", &data_dir.to_string_lossy(), "--amqp-listen", "127.0.0.1:0", "--http-listen", "none"])
        .args(&argv)
        .output()
        .expect("run warren");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "refused: {stderr}");
    assert!(stderr.contains("running alone") && stderr.contains("start it once"), "says what to do: {stderr}");
}
