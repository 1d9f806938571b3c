//! The broker's memory grows with what clients actually send and read, not with what they
//! announce or what they leave unread. Runs the real binary and watches its resident memory
//! (small scale here; the issue notes give the gigabyte figures).

use amq_protocol::frame::AMQPFrame;
use amq_protocol::protocol::{basic, AMQPClass};
use lapin::options::{BasicPublishOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::BasicProperties;
use std::time::{Duration, Instant};
use warren_tests::process::WarrenProcess;
use warren_tests::raw_client::{Next, RawClient};

const MIB: u64 = 1024 * 1024;
/// How much the broker may grow under each attack: the outbox limit (4 MiB per connection),
/// socket buffers, allocator slack, with room to spare. Each attack would take hundreds of
/// MiB without the bound.
const ALLOWED_GROWTH_BYTES: u64 = 48 * MIB;
/// Time for the broker to do whatever the attack makes it do.
const SETTLE: Duration = Duration::from_secs(2);

async fn lapin_channel(process: &WarrenProcess) -> (lapin::Connection, lapin::Channel) {
    let connection =
        lapin::Connection::connect(&process.uri(), lapin::ConnectionProperties::default()).await.expect("connect");
    let channel = connection.create_channel().await.expect("channel");
    (connection, channel)
}

async fn publish(channel: &lapin::Channel, queue: &str, body: &[u8], count: usize, persistent: bool) {
    let properties = BasicProperties::default().with_delivery_mode(if persistent { 2 } else { 1 });
    channel.confirm_select(Default::default()).await.expect("confirm mode");
    for _ in 0..count {
        let confirm = channel
            .basic_publish("".into(), queue.into(), BasicPublishOptions::default(), body, properties.clone())
            .await
            .expect("publish");
        assert!(confirm.await.expect("confirm").is_ack());
    }
}

/// Reads frames until `wanted` methods matching `is_wanted` have arrived.
async fn read_until(client: &mut RawClient, wanted: usize, is_wanted: impl Fn(&AMQPClass) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = 0;
    while seen < wanted {
        assert!(Instant::now() < deadline, "only {seen} of {wanted} arrived");
        match client.next().await {
            Next::Frame(frame) => {
                if let AMQPFrame::Method(_, method) = *frame {
                    seen += usize::from(is_wanted(&method));
                }
            }
            other => panic!("after {seen} of {wanted}: {other:?}"),
        }
    }
}

fn short_str(out: &mut Vec<u8>, s: &str) {
    out.push(s.len() as u8);
    out.extend_from_slice(s.as_bytes());
}

#[tokio::test]
async fn a_partial_publish_reserves_nothing_it_has_not_received() {
    const CHANNELS: u16 = 500;
    const ANNOUNCED_BYTES: u64 = 128 * MIB;
    let dir = tempfile::tempdir().expect("tempdir");
    let process = WarrenProcess::start(dir.path(), &[]);
    let mut client = RawClient::handshake(process.amqp_addr).await;
    let before = process.rss_bytes();
    for id in 1..=CHANNELS {
        client.open_channel(id).await;
        let mut publish = vec![0, 60, 0, 40, 0, 0];
        short_str(&mut publish, "");
        short_str(&mut publish, "nowhere");
        publish.push(0);
        client.send_raw_frame(1, id, &publish).await;
        let mut header = vec![0, 60, 0, 0];
        header.extend_from_slice(&ANNOUNCED_BYTES.to_be_bytes());
        header.extend_from_slice(&[0, 0]);
        client.send_raw_frame(2, id, &header).await;
        client.send_raw_frame(3, id, b"x").await;
        client.send_raw_frame(3, id, b"y").await;
    }
    // A round trip on a new channel: everything before it was processed.
    client.open_channel(CHANNELS + 1).await;
    let grown = process.rss_bytes().saturating_sub(before);
    assert!(grown < ALLOWED_GROWTH_BYTES, "grew {} MiB for {CHANNELS} two-byte bodies", grown / MIB);
}

#[tokio::test]
async fn a_client_that_does_not_read_stops_get_and_requeue() {
    const PAIRS: u64 = 4_000;
    let dir = tempfile::tempdir().expect("tempdir");
    let process = WarrenProcess::start(dir.path(), &[]);
    let (_connection, channel) = lapin_channel(&process).await;
    channel.queue_declare("big".into(), QueueDeclareOptions::default(), FieldTable::default()).await.expect("declare");
    publish(&channel, "big", &vec![7u8; 64 * 1024], 1, false).await;
    let mut client = RawClient::handshake(process.amqp_addr).await;
    client.open_channel(1).await;
    let before = process.rss_bytes();
    // basic.get then basic.reject(requeue) of the same delivery, over and over, never reading.
    let mut frames = Vec::new();
    for tag in 1..=PAIRS {
        let get = basic::Get { queue: "big".into(), no_ack: false };
        frames.push(AMQPFrame::Method(1, AMQPClass::Basic(basic::AMQPMethod::Get(get))));
        let reject = basic::Reject { delivery_tag: tag, requeue: true };
        frames.push(AMQPFrame::Method(1, AMQPClass::Basic(basic::AMQPMethod::Reject(reject))));
    }
    client.send_together(&frames).await;
    tokio::time::sleep(SETTLE).await;
    let grown = process.rss_bytes().saturating_sub(before);
    assert!(grown < ALLOWED_GROWTH_BYTES, "grew {} MiB for a client that reads nothing", grown / MIB);
    // Reading resumes the work: every get is answered.
    read_until(&mut client, PAIRS as usize, |m| matches!(m, AMQPClass::Basic(basic::AMQPMethod::GetOk(_)))).await;
}

#[tokio::test]
async fn a_consumer_that_does_not_read_leaves_a_durable_backlog_on_disk() {
    const MESSAGES: usize = 200;
    let dir = tempfile::tempdir().expect("tempdir");
    let process = WarrenProcess::start(dir.path(), &[]);
    let (_connection, channel) = lapin_channel(&process).await;
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    channel.queue_declare("backlog".into(), durable, FieldTable::default()).await.expect("declare");
    publish(&channel, "backlog", &vec![9u8; 512 * 1024], MESSAGES, true).await;
    let mut client = RawClient::handshake(process.amqp_addr).await;
    client.open_channel(1).await;
    let before = process.rss_bytes();
    // Prefetch 0 (no limit), acks on, and the client reads nothing.
    let consume = basic::Consume { queue: "backlog".into(), consumer_tag: "c".into(), ..Default::default() };
    client.send_method(1, AMQPClass::Basic(basic::AMQPMethod::Consume(consume))).await;
    tokio::time::sleep(SETTLE).await;
    let grown = process.rss_bytes().saturating_sub(before);
    assert!(grown < ALLOWED_GROWTH_BYTES, "grew {} MiB for a consumer that reads nothing", grown / MIB);
    read_until(&mut client, MESSAGES, |m| matches!(m, AMQPClass::Basic(basic::AMQPMethod::Deliver(_)))).await;
}

#[tokio::test]
async fn a_purged_backlog_is_given_back_to_the_system() {
    const MESSAGES: usize = 100_000;
    const BODY_BYTES: usize = 2048;
    let dir = tempfile::tempdir().expect("tempdir");
    let process = WarrenProcess::start(dir.path(), &[]);
    let (_connection, channel) = lapin_channel(&process).await;
    channel
        .queue_declare("purged".into(), QueueDeclareOptions::default(), FieldTable::default())
        .await
        .expect("declare");
    let before = process.rss_bytes();
    channel.confirm_select(Default::default()).await.expect("confirm mode");
    let body = vec![5u8; BODY_BYTES];
    let mut last = None;
    for _ in 0..MESSAGES {
        let confirm = channel
            .basic_publish(
                "".into(),
                "purged".into(),
                BasicPublishOptions::default(),
                &body,
                BasicProperties::default(),
            )
            .await
            .expect("publish");
        last = Some(confirm);
    }
    assert!(last.expect("published").await.expect("confirm").is_ack());
    let held = process.rss_bytes().saturating_sub(before);
    assert!(held > 100 * MIB, "the backlog should be resident: {} MiB", held / MIB);
    let purged = channel.queue_purge("purged".into(), Default::default()).await.expect("purge");
    assert_eq!(purged as usize, MESSAGES);
    // The allocator returns what is due once a second.
    tokio::time::sleep(SETTLE).await;
    let kept = process.rss_bytes().saturating_sub(before);
    assert!(kept < ALLOWED_GROWTH_BYTES, "{} MiB still resident after the purge", kept / MIB);
}
