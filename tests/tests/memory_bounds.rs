//! The broker's memory grows with what clients actually send and read, not with what they
//! announce or what they leave unread. Runs the real binary and watches its resident memory
//! (small scale here; the issue notes give the gigabyte figures).

use amq_protocol::frame::AMQPFrame;
use amq_protocol::protocol::{basic, AMQPClass};
use lapin::options::{BasicPublishOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
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

/// The memory a queue's transient messages may take before they are paged, as the paging
/// tests set it (`--queue-memory-budget`; the default is larger).
const BUDGET_BYTES: u64 = 16 * MIB;
const BUDGET_FLAG: [&str; 2] = ["--queue-memory-budget", "16MiB"];

/// What a broker paging a backlog may hold besides its queue's budget: the page log's write
/// buffer, read buffers, allocator slack.
const PAGED_GROWTH_MARGIN_BYTES: u64 = 64 * MIB;

/// Messages all alike: `body`, no properties.
fn plain(body: &[u8]) -> impl Fn(usize) -> (Vec<u8>, BasicProperties) + '_ {
    |_| (body.to_vec(), BasicProperties::default())
}

/// Bytes under the data directory's page logs (where queues page transient messages).
fn paged_bytes(dir: &std::path::Path) -> u64 {
    fn walk(path: &std::path::Path, in_paging: bool) -> u64 {
        let Ok(entries) = std::fs::read_dir(path) else { return 0 };
        entries
            .flatten()
            .map(|entry| {
                let path = entry.path();
                let paging = in_paging || entry.file_name() == "paging";
                match entry.metadata() {
                    Ok(meta) if meta.is_dir() => walk(&path, paging),
                    Ok(meta) if paging => meta.len(),
                    _ => 0,
                }
            })
            .sum()
    }
    walk(dir, false)
}

/// Publishes `count` transient messages to `queue`, the `n`th with the body and properties
/// `content(n)`, waiting for confirms in batches; the highest RSS seen meanwhile.
async fn publish_transient(
    process: &WarrenProcess,
    channel: &lapin::Channel,
    queue: &str,
    content: impl Fn(usize) -> (Vec<u8>, BasicProperties),
    count: usize,
) -> u64 {
    const CONFIRM_BATCH: usize = 256;
    channel.confirm_select(Default::default()).await.expect("confirm mode");
    let mut peak = 0;
    let mut pending = Vec::with_capacity(CONFIRM_BATCH);
    for n in 0..count {
        let options = BasicPublishOptions::default();
        let (body, properties) = content(n);
        let confirm =
            channel.basic_publish("".into(), queue.into(), options, &body, properties).await.expect("publish");
        pending.push(confirm);
        if pending.len() == CONFIRM_BATCH || n + 1 == count {
            for confirm in pending.drain(..) {
                assert!(confirm.await.expect("confirm").is_ack());
            }
            peak = peak.max(process.rss_bytes());
        }
    }
    peak
}

#[tokio::test]
async fn a_transient_backlog_is_paged_to_disk_and_a_purge_frees_it() {
    // 200 MB of bodies, far past the queue's memory budget.
    const MESSAGES: usize = 100_000;
    const BODY_BYTES: usize = 2048;
    let dir = tempfile::tempdir().expect("tempdir");
    let process = WarrenProcess::start(dir.path(), &BUDGET_FLAG);
    let (_connection, channel) = lapin_channel(&process).await;
    channel
        .queue_declare("purged".into(), QueueDeclareOptions::default(), FieldTable::default())
        .await
        .expect("declare");
    let before = process.rss_bytes();
    let peak = publish_transient(&process, &channel, "purged", plain(&[5u8; BODY_BYTES]), MESSAGES).await;
    let on_disk = paged_bytes(dir.path());
    assert!(on_disk > 150 * MIB, "what is past the budget should be paged: {} MiB on disk", on_disk / MIB);
    let grown = peak.saturating_sub(before);
    assert!(grown < BUDGET_BYTES + PAGED_GROWTH_MARGIN_BYTES, "a paged backlog grew RSS by {} MiB", grown / MIB);
    let purged = channel.queue_purge("purged".into(), Default::default()).await.expect("purge");
    assert_eq!(purged as usize, MESSAGES);
    tokio::time::sleep(SETTLE).await;
    let left = paged_bytes(dir.path());
    assert!(left < 64 * MIB, "{} MiB of pages left after the purge", left / MIB);
    let kept = process.rss_bytes().saturating_sub(before);
    assert!(kept < ALLOWED_GROWTH_BYTES, "{} MiB still resident after the purge", kept / MIB);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_no_ack_consumer_drains_a_gigabyte_transient_backlog_in_bounded_memory() {
    use futures_util::StreamExt;
    const MESSAGES: usize = 16 * 1024;
    const BODY_BYTES: usize = 64 * 1024;
    const RSS_BOUND_BYTES: u64 = BUDGET_BYTES + 240 * MIB;
    let dir = tempfile::tempdir().expect("tempdir");
    let process = WarrenProcess::start(dir.path(), &BUDGET_FLAG);
    let (_connection, channel) = lapin_channel(&process).await;
    channel
        .queue_declare("backlog".into(), QueueDeclareOptions::default(), FieldTable::default())
        .await
        .expect("declare");
    let peak = publish_transient(&process, &channel, "backlog", plain(&vec![3u8; BODY_BYTES]), MESSAGES).await;
    assert!(peak < RSS_BOUND_BYTES, "RSS reached {} MiB holding a 1 GiB transient backlog", peak / MIB);
    assert!(paged_bytes(dir.path()) > 900 * MIB, "what is past the budget is on disk");

    let (_consuming, consumer_channel) = lapin_channel(&process).await;
    let options = lapin::options::BasicConsumeOptions { no_ack: true, ..Default::default() };
    let mut consumer = consumer_channel
        .basic_consume("backlog".into(), "drain".into(), options, FieldTable::default())
        .await
        .expect("consume");
    let (mut received, mut bytes, mut peak) = (0usize, 0usize, 0u64);
    while received < MESSAGES {
        let delivery = tokio::time::timeout(Duration::from_secs(30), consumer.next()).await;
        let delivery = delivery.expect("a delivery within 30 s").expect("stream").expect("delivery");
        bytes += delivery.data.len();
        received += 1;
        if received % 512 == 0 {
            peak = peak.max(process.rss_bytes());
        }
    }
    assert_eq!(bytes, MESSAGES * BODY_BYTES, "every byte arrived");
    assert!(peak < RSS_BOUND_BYTES, "RSS reached {} MiB while draining", peak / MIB);
}

/// Entries in each header table of the headers test, and the bytes of each entry's value:
/// about 60 KiB of headers per message, as many small values (what a decoded table costs
/// most for) rather than one long one.
const HEADER_ENTRIES: usize = 240;
const HEADER_VALUE_BYTES: usize = 250;
/// How many different header tables the test's messages carry, in turn.
const HEADER_VARIANTS: usize = 26;

/// The properties of the headers test's messages: `HEADER_VARIANTS` tables of big headers.
fn big_headers() -> Vec<BasicProperties> {
    // Values are windows on a repeated alphabet (cheap to make in a debug build).
    let alphabet: Vec<u8> = (b'a'..=b'z').cycle().take(HEADER_VALUE_BYTES + HEADER_VARIANTS).collect();
    let variant = |v: usize| {
        let mut table = FieldTable::default();
        for entry in 0..HEADER_ENTRIES {
            let start = (v + entry) % HEADER_VARIANTS;
            let value = alphabet[start..start + HEADER_VALUE_BYTES].to_vec();
            table.insert(format!("h{entry:03}").into(), AMQPValue::LongString(value.into()));
        }
        BasicProperties::default().with_headers(table)
    };
    (0..HEADER_VARIANTS).map(variant).collect()
}

fn encoded_properties(properties: &BasicProperties) -> Vec<u8> {
    let context = amq_protocol::frame::WriteContext::from(Vec::new());
    basic::gen_properties(properties)(context).expect("encode properties").write
}

/// Takes the queue's next `count` messages with `basic.get` (no ack, asked for all at once);
/// their raw property lists and bodies.
async fn get_raw(client: &mut RawClient, queue: &str, count: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
    let get = basic::Get { queue: queue.into(), no_ack: true };
    let gets = vec![AMQPFrame::Method(1, AMQPClass::Basic(basic::AMQPMethod::Get(get))); count];
    client.send_together(&gets).await;
    let mut messages = Vec::with_capacity(count);
    for _ in 0..count {
        let (kind, _, _) = client.next_raw_frame().await.expect("get-ok");
        assert_eq!(kind, 1, "a method (get-ok, not get-empty) first");
        let (kind, _, header) = client.next_raw_frame().await.expect("content header");
        assert_eq!(kind, 2, "then the content header");
        let (kind, _, body) = client.next_raw_frame().await.expect("body");
        assert_eq!(kind, 3, "then the body");
        // Class, weight and body size come before the property list.
        messages.push((header[12..].to_vec(), body));
    }
    messages
}

#[tokio::test]
async fn message_headers_count_in_the_queue_memory_budget() {
    // Eight budgets of headers on tiny bodies: without the headers counted, none is paged.
    const MESSAGES: usize = (8 * BUDGET_BYTES as usize) / (HEADER_ENTRIES * (HEADER_VALUE_BYTES + 10));
    const GET_BATCH: usize = 64;
    let dir = tempfile::tempdir().expect("tempdir");
    let process = WarrenProcess::start(dir.path(), &BUDGET_FLAG);
    let (_connection, channel) = lapin_channel(&process).await;
    channel
        .queue_declare("headers".into(), QueueDeclareOptions::default(), FieldTable::default())
        .await
        .expect("declare");
    let variants = big_headers();
    // The body says which message it is; the headers are variant `n % HEADER_VARIANTS`.
    let content = |n: usize| ((n as u64).to_be_bytes().to_vec(), variants[n % HEADER_VARIANTS].clone());
    let before = process.rss_bytes();
    let peak = publish_transient(&process, &channel, "headers", content, MESSAGES).await;
    let grown = peak.saturating_sub(before);
    assert!(grown < BUDGET_BYTES + PAGED_GROWTH_MARGIN_BYTES, "headers grew RSS by {} MiB", grown / MIB);
    assert!(paged_bytes(dir.path()) > 4 * BUDGET_BYTES, "what is past the budget is paged");
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    let declared = channel.queue_declare("headers".into(), passive, FieldTable::default()).await.expect("passive");
    assert_eq!(declared.message_count() as usize, MESSAGES, "every message is there");

    // Every one reads back, in memory or paged, in order, with its headers byte for byte.
    let expected: Vec<Vec<u8>> = variants.iter().map(encoded_properties).collect();
    let mut client = RawClient::handshake(process.amqp_addr).await;
    client.open_channel(1).await;
    for first in (0..MESSAGES).step_by(GET_BATCH) {
        let batch = get_raw(&mut client, "headers", GET_BATCH.min(MESSAGES - first)).await;
        for (n, (properties, body)) in (first..).zip(batch) {
            assert_eq!(body, (n as u64).to_be_bytes(), "message {n} is out of place");
            assert!(properties == expected[n % HEADER_VARIANTS], "message {n}'s properties differ");
        }
    }
}
