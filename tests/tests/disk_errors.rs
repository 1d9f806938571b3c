//! Disk trouble ends in clear errors, never in lost confirmed messages or a crash.

use futures_util::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::BasicProperties;
use std::path::PathBuf;
use std::process::Command;
use warren_tests::*;

/// Space on the tiny filesystem the full-disk test writes to.
const TINY_DISK: &str = "size=3m";
const MESSAGE_BYTES: usize = 64 * 1024;

fn is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| o.stdout.starts_with(b"0\n")).unwrap_or(false)
}

/// A tmpfs of a few MiB on a fresh directory, unmounted on drop.
struct TinyDisk(tempfile::TempDir);

impl TinyDisk {
    fn mount() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let status = Command::new("mount").args(["-t", "tmpfs", "-o", TINY_DISK, "tmpfs"]).arg(dir.path()).status();
        assert!(status.is_ok_and(|s| s.success()), "mounting a tmpfs at {} failed", dir.path().display());
        TinyDisk(dir)
    }

    fn data_dir(&self) -> PathBuf {
        self.0.path().join("data")
    }
}

impl Drop for TinyDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

/// A broker whose data directory is on a tiny disk, or nothing when this is not root. The
/// disk alarm (default limit 50 MB) would block publishers before the disk fills: off, to test
/// what a store that runs out of space does.
async fn broker_on_a_tiny_disk() -> Option<(TinyDisk, TestBroker)> {
    if !is_root() {
        eprintln!("skipped: mounting a small tmpfs needs root (CI runs as root)");
        return None;
    }
    let disk = TinyDisk::mount();
    let dir = disk.data_dir();
    let broker = start_broker_with(move |config| {
        config.data_dir = dir;
        config.resource_limits.disk_free_limit_bytes = 0;
    })
    .await;
    Some((disk, broker))
}

#[tokio::test]
async fn a_full_disk_nacks_publishes_and_keeps_what_was_confirmed() {
    let Some((disk, broker)) = broker_on_a_tiny_disk().await else { return };
    let data_dir = disk.data_dir();
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    ch.confirm_select(ConfirmSelectOptions::default()).await.expect("confirms");
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    ch.queue_declare("full".into(), durable, FieldTable::default()).await.expect("declare");
    let body = vec![7u8; MESSAGE_BYTES];
    let persistent = BasicProperties::default().with_delivery_mode(2);
    let mut confirmed = 0;
    let mut refused = false;
    for _ in 0..200 {
        let outcome = ch.basic_publish("".into(), "full".into(), Default::default(), &body, persistent.clone()).await;
        match outcome {
            Ok(confirm) => match confirm.await {
                Ok(c) if c.is_ack() => confirmed += 1,
                _ => {
                    refused = true;
                    break;
                }
            },
            Err(_) => {
                refused = true;
                break;
            }
        }
    }
    assert!(refused, "a 3 MiB disk cannot take 200 x 64 KiB; the broker must refuse, not pretend");
    assert!(confirmed > 0, "some publishes fit before the disk filled");

    // The broker still serves what does not need the disk.
    let other = connect(&broker).await;
    let ch = channel(&other).await;
    ch.queue_declare("in-memory".into(), Default::default(), FieldTable::default()).await.expect("declare");
    ch.basic_publish("".into(), "in-memory".into(), Default::default(), b"fine", Default::default())
        .await
        .expect("publish");
    let got = ch.basic_get("in-memory".into(), BasicGetOptions { no_ack: true }).await.expect("get");
    assert_eq!(got.expect("message").delivery.data, b"fine");
    broker.shutdown().await;

    // Everything confirmed is still there after a restart.
    let broker = start_broker_in(&data_dir).await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    let recovered =
        ch.queue_declare("full".into(), passive, FieldTable::default()).await.expect("queue").message_count();
    assert!(recovered >= confirmed, "confirmed {confirmed}, recovered {recovered}");
    broker.shutdown().await;
}

/// Without confirms, a publish the disk cannot take closes its channel with 506
/// RESOURCE_ERROR (a channel error, as README says), not the connection: the publisher's other
/// channels, a consumer that could free the disk among them, carry on.
#[tokio::test]
async fn without_confirms_a_full_disk_closes_the_publishing_channel_not_the_connection() {
    let Some((_disk, broker)) = broker_on_a_tiny_disk().await else { return };
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    ch.queue_declare("full".into(), durable, FieldTable::default()).await.expect("declare");
    // lapin hands the close's reply code to the channel's consumers, whatever the publish
    // or declare that raced with the close returned: a consumer on the channel watches it.
    ch.queue_declare("watch".into(), Default::default(), FieldTable::default()).await.expect("declare");
    let mut watcher = ch
        .basic_consume("watch".into(), "watcher".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .expect("consume");
    let body = vec![7u8; MESSAGE_BYTES];
    let persistent = BasicProperties::default().with_delivery_mode(2);
    for _ in 0..200 {
        let publish = ch.basic_publish("".into(), "full".into(), Default::default(), &body, persistent.clone()).await;
        // A round trip, so that the close (if any) has come before the next publish.
        if publish.is_err() || ch.queue_declare("full".into(), durable, FieldTable::default()).await.is_err() {
            break;
        }
    }
    let closed = tokio::time::timeout(std::time::Duration::from_secs(5), watcher.next()).await;
    let code = match closed {
        Ok(Some(Err(error))) => reply_code(&error),
        other => panic!("the publishing channel should have closed, the watcher saw {other:?}"),
    };
    assert_eq!(code, Some(506), "a 3 MiB disk cannot take 200 x 64 KiB: the channel closes with RESOURCE_ERROR");
    assert!(conn.status().connected(), "the connection stays open");
    let other = channel(&conn).await;
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    let stored = other.queue_declare("full".into(), passive, FieldTable::default()).await.expect("another channel");
    assert!(stored.message_count() > 0, "what fit is kept");
    broker.shutdown().await;
}

#[tokio::test]
async fn an_unusable_data_directory_stops_startup_with_a_clear_error() {
    let file = tempfile::NamedTempFile::new().expect("temp file");
    let config = warren_server::Config {
        data_dir: file.path().join("data"),
        amqp_listen: ([127, 0, 0, 1], 0).into(),
        ..Default::default()
    };
    let error = match warren_server::start(config).await {
        Ok(_) => panic!("a data directory inside a regular file cannot work"),
        Err(error) => error.to_string(),
    };
    assert!(error.contains("cannot create data directory"), "{error}");
}
