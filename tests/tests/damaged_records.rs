//! One damaged record in the middle of a durable queue's (or a stream's) log: after a
//! restart every undamaged message is delivered, exactly once and byte-exact, the damaged
//! one never is, and the queue does not stall on it.
//!
//! Each test publishes confirmed persistent 16 KiB messages to one queue of a fresh data
//! directory, stops the broker, flips one byte in the middle of the first segment, and
//! starts the broker again on that directory. Startup scans only each log's tail, so a plain
//! queue's `declare-ok` still counts the damaged message until a delivery reads it; a queue
//! whose recovery reads every message (`x-max-priority`, TTLs) counts it out at startup.
//! Either way it is recorded as settled once found, so later restarts neither count nor
//! report it again. The last test kills the real binary with SIGKILL instead, and checks
//! that the damage is logged once, as the only error, naming the segment and byte position.

use futures_util::StreamExt;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::BasicProperties;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;
use warren_tests::process::WarrenProcess;
use warren_tests::*;

const BODY_BYTES: usize = 16 * 1024;
const PERSISTENT: u8 = 2;
/// Bytes of a storage record before its payload, and where its offset field is (see
/// storage/README.md).
const RECORD_HEADER_BYTES: usize = 30;
const OFFSET_FIELD: usize = 10;

/// Message `i`: its number, then bytes that depend on it.
fn body(i: u64) -> Vec<u8> {
    let mut body = i.to_be_bytes().to_vec();
    body.extend((0..BODY_BYTES - 8).map(|j| (i as usize * 31 + j * 7) as u8));
    body
}

/// The message number of a body, checking that the body is exactly message `i`'s.
fn number_of(data: &[u8]) -> u64 {
    let i = u64::from_be_bytes(data[..8].try_into().expect("8 bytes"));
    assert!(data == body(i).as_slice(), "body of message {i} is not byte-exact");
    i
}

async fn publish_all(ch: &lapin::Channel, queue: &str, count: u64) {
    let mut confirms = Vec::new();
    for i in 0..count {
        let properties = BasicProperties::default().with_delivery_mode(PERSISTENT);
        let confirm = ch
            .basic_publish("".into(), queue.into(), BasicPublishOptions::default(), &body(i), properties)
            .await
            .expect("publish");
        confirms.push(confirm);
    }
    for confirm in confirms {
        assert!(confirm.await.expect("confirm").is_ack(), "publish nacked");
    }
}

/// The first segment of the only queue (or stream) in `data_dir`.
fn first_segment(data_dir: &Path, log_dir: &str) -> PathBuf {
    let queues = data_dir.join("vhosts").join("2f").join("queues");
    let dirs: Vec<PathBuf> =
        std::fs::read_dir(&queues).expect("queues dir").map(|e| e.expect("entry").path()).collect();
    assert_eq!(dirs.len(), 1, "one queue in {}", queues.display());
    dirs[0].join(log_dir).join(format!("{:020}.log", 0))
}

/// Where in a record the flipped byte is.
#[derive(Clone, Copy)]
enum Field {
    /// The middle of the payload: the CRC check fails.
    Payload,
    /// The record's offset field: the offset check fails.
    Offset,
}

/// Flips one byte of the record holding the middle byte of `segment`, in `field`; returns
/// the offset of that record.
fn flip_middle_record(segment: &Path, field: Field) -> u64 {
    flip_middle_record_at(segment, field).0
}

/// As [`flip_middle_record`], also returning the record's byte position.
fn flip_middle_record_at(segment: &Path, field: Field) -> (u64, usize) {
    let mut bytes = std::fs::read(segment).expect("read segment");
    let middle = bytes.len() / 2;
    let (mut at, mut offset) = (0, 0);
    let len = loop {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize + 4;
        if at + len > middle {
            break len;
        }
        at += len;
        offset += 1;
    };
    let flip = match field {
        Field::Payload => at + RECORD_HEADER_BYTES + (len - RECORD_HEADER_BYTES) / 2,
        Field::Offset => at + OFFSET_FIELD,
    };
    bytes[flip] ^= 0x20;
    std::fs::write(segment, bytes).expect("write segment");
    (offset, at)
}

async fn declare(conn: &lapin::Connection, queue: &str, arguments: FieldTable) -> u32 {
    let ch = channel(conn).await;
    ch.queue_declare(queue.into(), durable(), arguments).await.expect("declare").message_count()
}

/// Publishes `count` messages to a new durable queue, stops the broker, damages the first
/// segment, and starts the broker again: returns it and the damaged message's number.
async fn damaged_queue(
    dir: &Path,
    queue: &str,
    arguments: &FieldTable,
    count: u64,
    (log_dir, field): (&str, Field),
) -> (u64, warren_tests::TestBroker) {
    let broker = start_broker_in(dir).await;
    let conn = connect(&broker).await;
    assert_eq!(declare(&conn, queue, arguments.clone()).await, 0);
    publish_all(&confirm_channel(&conn).await, queue, count).await;
    broker.shutdown().await;
    let damaged = flip_middle_record(&first_segment(dir, log_dir), field);
    (damaged, start_broker_in(dir).await)
}

/// Consumes everything with acks; returns the message numbers in arrival order.
async fn consume_all(conn: &lapin::Connection, queue: &str, expected: usize, arguments: FieldTable) -> Vec<u64> {
    let ch = channel(conn).await;
    ch.basic_qos(100, BasicQosOptions::default()).await.expect("qos");
    let mut consumer =
        ch.basic_consume(queue.into(), "".into(), BasicConsumeOptions::default(), arguments).await.expect("consume");
    let mut got = Vec::new();
    while got.len() < expected {
        let delivery = next_delivery(&mut consumer).await;
        got.push(number_of(&delivery.data));
        delivery.ack(BasicAckOptions::default()).await.expect("ack");
    }
    assert_no_delivery(&mut consumer, 500).await;
    got
}

/// A payload byte of a queue's message log.
const QUEUE_PAYLOAD: (&str, Field) = ("messages", Field::Payload);

fn all_but(count: u64, damaged: u64) -> Vec<u64> {
    (0..count).filter(|&i| i != damaged).collect()
}

#[tokio::test]
async fn a_consumer_gets_every_undamaged_message_and_the_queue_ends_empty() {
    const COUNT: u64 = 2000;
    let dir = tempfile::tempdir().expect("tempdir");
    let (damaged, broker) = damaged_queue(dir.path(), "q.damaged", &FieldTable::default(), COUNT, QUEUE_PAYLOAD).await;
    let conn = connect(&broker).await;
    // Startup scans only the log's tail: the damage is found when the message is read.
    assert_eq!(declare(&conn, "q.damaged", FieldTable::default()).await, COUNT as u32);
    let got = consume_all(&conn, "q.damaged", COUNT as usize - 1, FieldTable::default()).await;
    let unique: BTreeSet<u64> = got.iter().copied().collect();
    assert_eq!(unique.len(), got.len(), "no message arrives twice");
    assert_eq!(got, all_but(COUNT, damaged), "every undamaged message, in order; the damaged one never");
    assert_eq!(declare(&conn, "q.damaged", FieldTable::default()).await, 0);
    broker.shutdown().await;

    let broker = start_broker_in(dir.path()).await;
    let conn = connect(&broker).await;
    assert_eq!(declare(&conn, "q.damaged", FieldTable::default()).await, 0, "empty after a restart");
    let get = channel(&conn).await.basic_get("q.damaged".into(), BasicGetOptions::default()).await.expect("get");
    assert!(get.is_none(), "nothing comes back");
    broker.shutdown().await;
}

#[tokio::test]
async fn basic_get_steps_over_a_damaged_message() {
    const COUNT: u64 = 300;
    let dir = tempfile::tempdir().expect("tempdir");
    let (damaged, broker) =
        damaged_queue(dir.path(), "q.get", &FieldTable::default(), COUNT, ("messages", Field::Offset)).await;
    let conn = connect(&broker).await;
    let got: Vec<u64> =
        drain(&channel(&conn).await, "q.get").await.iter().map(|m| number_of(&m.delivery.data)).collect();
    assert_eq!(got, all_but(COUNT, damaged));
    broker.shutdown().await;

    let broker = start_broker_in(dir.path()).await;
    let conn = connect(&broker).await;
    assert_eq!(declare(&conn, "q.get", FieldTable::default()).await, 0, "empty after a restart");
    broker.shutdown().await;
}

#[tokio::test]
async fn a_queue_whose_recovery_reads_every_message_counts_the_damaged_one_out() {
    const COUNT: u64 = 300;
    let dir = tempfile::tempdir().expect("tempdir");
    let arguments = table(&[("x-max-priority", AMQPValue::ShortShortUInt(5))]);
    let (damaged, broker) = damaged_queue(dir.path(), "q.prio", &arguments, COUNT, QUEUE_PAYLOAD).await;
    let conn = connect(&broker).await;
    assert_eq!(declare(&conn, "q.prio", arguments.clone()).await, COUNT as u32 - 1, "found at startup");
    broker.shutdown().await;

    // Recorded as settled: the next restart does not count it (or read it) again.
    let broker = start_broker_in(dir.path()).await;
    let conn = connect(&broker).await;
    assert_eq!(declare(&conn, "q.prio", arguments.clone()).await, COUNT as u32 - 1);
    let got = consume_all(&conn, "q.prio", COUNT as usize - 1, FieldTable::default()).await;
    assert_eq!(got, all_but(COUNT, damaged));
    broker.shutdown().await;
}

#[tokio::test]
async fn a_stream_consumer_from_first_gets_every_undamaged_message_in_order() {
    const COUNT: u64 = 400;
    let dir = tempfile::tempdir().expect("tempdir");
    // 1 MiB segments: the damaged first segment is sealed.
    let arguments = table(&[
        ("x-queue-type", text("stream")),
        ("x-stream-max-segment-size-bytes", AMQPValue::LongLongInt(1024 * 1024)),
    ]);
    let (damaged, broker) = damaged_queue(dir.path(), "s.damaged", &arguments, COUNT, ("log", Field::Payload)).await;
    let conn = connect(&broker).await;
    assert_eq!(declare(&conn, "s.damaged", arguments.clone()).await, COUNT as u32, "not read yet");
    let from_first = table(&[("x-stream-offset", text("first"))]);
    for _ in 0..2 {
        let got = consume_all(&conn, "s.damaged", COUNT as usize - 1, from_first.clone()).await;
        assert_eq!(got, all_but(COUNT, damaged), "every undamaged message, in order; the damaged one never");
    }
    assert_eq!(declare(&conn, "s.damaged", arguments.clone()).await, COUNT as u32 - 1, "counted out once found");
    // The stream still takes messages, and a consumer waiting at its end gets them.
    let ch = channel(&conn).await;
    ch.basic_qos(10, BasicQosOptions::default()).await.expect("qos");
    let next = table(&[("x-stream-offset", text("next"))]);
    let mut consumer =
        ch.basic_consume("s.damaged".into(), "".into(), BasicConsumeOptions::default(), next).await.expect("consume");
    publish_all(&confirm_channel(&conn).await, "s.damaged", 1).await;
    match tokio::time::timeout(Duration::from_secs(5), consumer.next()).await {
        Ok(Some(Ok(delivery))) => assert_eq!(number_of(&delivery.data), 0),
        other => panic!("expected the new message, got {other:?}"),
    }
    broker.shutdown().await;
}

#[tokio::test]
async fn after_sigkill_the_damage_is_logged_once_and_every_undamaged_message_arrives() {
    const COUNT: u64 = 1000;
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = WarrenProcess::start(dir.path(), &[]);
    let props = lapin::ConnectionProperties::default();
    let conn = lapin::Connection::connect(&broker.uri(), props.clone()).await.expect("connect");
    assert_eq!(declare(&conn, "q.killed", FieldTable::default()).await, 0);
    publish_all(&confirm_channel(&conn).await, "q.killed", COUNT).await;
    broker.kill9();
    let segment = first_segment(dir.path(), "messages");
    let (damaged, position) = flip_middle_record_at(&segment, Field::Offset);

    let broker = WarrenProcess::start(dir.path(), &[]);
    let conn = lapin::Connection::connect(&broker.uri(), props).await.expect("connect");
    assert_eq!(declare(&conn, "q.killed", FieldTable::default()).await, COUNT as u32);
    let got = consume_all(&conn, "q.killed", COUNT as usize - 1, FieldTable::default()).await;
    assert_eq!(got, all_but(COUNT, damaged));
    assert_eq!(declare(&conn, "q.killed", FieldTable::default()).await, 0);
    let errors: Vec<String> = broker.log_lines().into_iter().filter(|line| line.contains("ERROR")).collect();
    assert_eq!(errors.len(), 1, "one error line, for the damage: {errors:#?}");
    assert!(errors[0].contains(&segment.display().to_string()), "names the segment: {}", errors[0]);
    assert!(errors[0].contains(&format!("position={position}")), "names the byte position: {}", errors[0]);
    broker.kill9();
}
