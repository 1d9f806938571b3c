//! Streams with lapin: declaration rules, every `x-stream-offset` form, the offset header,
//! non-destructive reads, retention, exact tag filtering, consumer groups, and restarts.

use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::BasicProperties;
use std::time::Duration;
use warren_tests::*;

const TAG_HEADER: &str = "x-stream-filter-value";

fn stream_args(extra: &[(&str, AMQPValue)]) -> FieldTable {
    let mut entries = vec![("x-queue-type", text("stream"))];
    entries.extend(extra.iter().cloned());
    table(&entries)
}

async fn declare_stream(ch: &lapin::Channel, name: &str, extra: &[(&str, AMQPValue)]) {
    ch.queue_declare(name.into(), durable(), stream_args(extra)).await.expect("declare stream");
}

/// Publishes `bodies` with confirms, each with the given tag (if any).
async fn publish(ch: &lapin::Channel, stream: &str, bodies: &[(String, Option<&str>)]) {
    let mut confirms = Vec::new();
    for (body, tag) in bodies {
        let mut properties = BasicProperties::default();
        if let Some(tag) = tag {
            properties = properties.with_headers(table(&[(TAG_HEADER, text(tag))]));
        }
        let confirm = ch
            .basic_publish("".into(), stream.into(), BasicPublishOptions::default(), body.as_bytes(), properties)
            .await
            .expect("publish");
        confirms.push(confirm);
    }
    for confirm in confirms {
        assert!(confirm.await.expect("confirm").is_ack(), "stream publish nacked");
    }
}

fn numbered(range: std::ops::Range<u32>) -> Vec<(String, Option<&'static str>)> {
    range.map(|i| (format!("m{i}"), None)).collect()
}

/// A consumer on its own channel with prefetch `prefetch` and the given arguments.
async fn consume(
    conn: &lapin::Connection,
    stream: &str,
    prefetch: u16,
    args: FieldTable,
) -> (lapin::Channel, lapin::Consumer) {
    let ch = channel(conn).await;
    ch.basic_qos(prefetch, BasicQosOptions::default()).await.expect("qos");
    let consumer =
        ch.basic_consume(stream.into(), "".into(), BasicConsumeOptions::default(), args).await.expect("consume");
    (ch, consumer)
}

fn offset_of(delivery: &lapin::message::Delivery) -> i64 {
    let headers = delivery.properties.headers().as_ref().expect("a stream delivery carries headers");
    match headers.inner().get("x-stream-offset") {
        Some(AMQPValue::LongLongInt(offset)) => *offset,
        other => panic!("x-stream-offset header missing or not a long-long: {other:?}"),
    }
}

/// Takes `n` deliveries, acking each; returns (offset header, body).
async fn take(consumer: &mut lapin::Consumer, n: usize) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    for _ in 0..n {
        let delivery = next_delivery(consumer).await;
        out.push((offset_of(&delivery), String::from_utf8_lossy(&delivery.data).into_owned()));
        delivery.ack(BasicAckOptions::default()).await.expect("ack");
    }
    out
}

fn bodies(taken: &[(i64, String)]) -> Vec<String> {
    taken.iter().map(|(_, body)| body.clone()).collect()
}

fn expected(range: std::ops::Range<u32>) -> Vec<String> {
    range.map(|i| format!("m{i}")).collect()
}

fn offset_arg(value: AMQPValue) -> FieldTable {
    table(&[("x-stream-offset", value)])
}

#[tokio::test]
async fn declaring_a_stream_follows_rabbitmqs_rules() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let refused = [
        ("non-durable", QueueDeclareOptions::default(), stream_args(&[])),
        ("exclusive", QueueDeclareOptions { exclusive: true, ..durable() }, stream_args(&[])),
        ("auto-delete", QueueDeclareOptions { auto_delete: true, ..durable() }, stream_args(&[])),
        ("bad max-age", durable(), stream_args(&[("x-max-age", text("12"))])),
        ("zero max-age", durable(), stream_args(&[("x-max-age", text("0s"))])),
        ("bad segment size", durable(), stream_args(&[("x-stream-max-segment-size-bytes", AMQPValue::LongInt(5))])),
        ("bad max-length-bytes", durable(), stream_args(&[("x-max-length-bytes", text("big"))])),
        ("queue-only argument", durable(), stream_args(&[("x-max-priority", AMQPValue::LongInt(5))])),
    ];
    for (what, options, args) in refused {
        let ch = channel(&conn).await;
        assert_code(ch.queue_declare("s.declare".into(), options, args).await, 406, what);
    }
    let ch = channel(&conn).await;
    let args = [("x-max-age", text("7D")), ("x-max-length-bytes", AMQPValue::LongLongInt(1 << 30))];
    let ok = ch.queue_declare("s.declare".into(), durable(), stream_args(&args)).await.expect("valid stream");
    assert_eq!(ok.message_count(), 0);
    // Redeclaring with the same arguments is fine; with others it is 406, as for any queue.
    ch.queue_declare("s.declare".into(), durable(), stream_args(&args)).await.expect("equivalent redeclare");
    let other = stream_args(&[("x-max-age", text("1D"))]);
    assert_code(ch.queue_declare("s.declare".into(), durable(), other).await, 406, "different max-age");
}

#[tokio::test]
async fn each_offset_spec_starts_where_rabbitmq_starts() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    declare_stream(&ch, "s.offsets", &[]).await;
    publish(&ch, "s.offsets", &numbered(0..10)).await;

    let (_c1, mut first) = consume(&conn, "s.offsets", 100, offset_arg(text("first"))).await;
    let taken = take(&mut first, 10).await;
    assert_eq!(bodies(&taken), expected(0..10));
    assert_eq!(taken.iter().map(|(o, _)| *o).collect::<Vec<_>>(), (0..10).collect::<Vec<i64>>(), "offset headers");

    let (_c2, mut last) = consume(&conn, "s.offsets", 100, offset_arg(text("last"))).await;
    assert_eq!(take(&mut last, 1).await, vec![(9, "m9".to_string())]);
    assert_no_delivery(&mut last, 200).await;

    let (_c3, mut numeric) = consume(&conn, "s.offsets", 100, offset_arg(AMQPValue::LongLongInt(6))).await;
    assert_eq!(bodies(&take(&mut numeric, 4).await), expected(6..10));

    let (_c4, mut next) = consume(&conn, "s.offsets", 100, FieldTable::default()).await;
    let (_c5, mut beyond) = consume(&conn, "s.offsets", 100, offset_arg(AMQPValue::LongLongInt(1000))).await;
    assert_no_delivery(&mut next, 200).await;
    assert_no_delivery(&mut beyond, 50).await;
    // Caught-up consumers wait for new messages; every consumer gets them, none removes them.
    publish(&ch, "s.offsets", &numbered(10..12)).await;
    for consumer in [&mut next, &mut beyond, &mut first, &mut last, &mut numeric] {
        assert_eq!(take(consumer, 2).await, vec![(10, "m10".to_string()), (11, "m11".to_string())]);
    }
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    let held = ch.queue_declare("s.offsets".into(), passive, FieldTable::default()).await.expect("passive");
    assert_eq!(held.message_count(), 12, "acks remove nothing from a stream");
}

#[tokio::test]
async fn timestamps_and_intervals_select_by_append_time() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    declare_stream(&ch, "s.time", &[]).await;
    publish(&ch, "s.time", &numbered(0..3)).await;
    // AMQP timestamps are whole seconds: leave a clear second between the two batches.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let boundary_secs =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs() + 1;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    publish(&ch, "s.time", &numbered(3..6)).await;

    let (_c1, mut since) = consume(&conn, "s.time", 100, offset_arg(AMQPValue::Timestamp(boundary_secs))).await;
    assert_eq!(take(&mut since, 3).await, vec![(3, "m3".into()), (4, "m4".into()), (5, "m5".into())]);
    assert_no_delivery(&mut since, 200).await;

    let (_c2, mut hour) = consume(&conn, "s.time", 100, offset_arg(text("1h"))).await;
    assert_eq!(bodies(&take(&mut hour, 6).await), expected(0..6));

    let (_c3, mut future) = consume(&conn, "s.time", 100, offset_arg(AMQPValue::Timestamp(boundary_secs + 3600))).await;
    assert_no_delivery(&mut future, 200).await;
}

#[tokio::test]
async fn stream_consumers_must_ack_and_have_a_prefetch_and_get_is_refused() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare_stream(&ch, "s.rules", &[]).await;

    let no_ack = BasicConsumeOptions { no_ack: true, ..Default::default() };
    ch.basic_qos(10, BasicQosOptions::default()).await.expect("qos");
    let result = ch.basic_consume("s.rules".into(), "".into(), no_ack, FieldTable::default()).await;
    assert_code(result, 406, "no-ack stream consumer");

    let ch = channel(&conn).await;
    let result =
        ch.basic_consume("s.rules".into(), "".into(), BasicConsumeOptions::default(), FieldTable::default()).await;
    assert_code(result, 406, "stream consumer without basic.qos");

    for (what, args) in [
        ("bad offset spec", offset_arg(text("middle"))),
        ("negative offset", offset_arg(AMQPValue::LongLongInt(-1))),
        ("empty group", table(&[("x-consumer-group", text(""))])),
    ] {
        let ch = channel(&conn).await;
        ch.basic_qos(10, BasicQosOptions::default()).await.expect("qos");
        let result = ch.basic_consume("s.rules".into(), "".into(), BasicConsumeOptions::default(), args).await;
        assert_code(result, 406, what);
    }

    // As RabbitMQ: a hard error, 540 NOT_IMPLEMENTED, which closes the connection.
    let ch = channel(&conn).await;
    assert_code(ch.basic_get("s.rules".into(), BasicGetOptions::default()).await, 540, "basic.get on a stream");
    assert!(!conn.status().connected(), "the connection is closed");
}

#[tokio::test]
async fn credit_bounds_deliveries_and_acks_return_it() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    declare_stream(&ch, "s.credit", &[]).await;
    publish(&ch, "s.credit", &numbered(0..20)).await;
    let (_c, mut consumer) = consume(&conn, "s.credit", 5, offset_arg(text("first"))).await;
    let mut held = Vec::new();
    for _ in 0..5 {
        held.push(next_delivery(&mut consumer).await);
    }
    assert_no_delivery(&mut consumer, 200).await;
    held[4].ack(BasicAckOptions { multiple: true }).await.expect("ack all five");
    assert_eq!(bodies(&take(&mut consumer, 15).await), expected(5..20));
}

#[tokio::test]
async fn retention_by_size_and_by_age_drops_whole_old_segments() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    let small = ("x-stream-max-segment-size-bytes", AMQPValue::LongInt(4096));
    declare_stream(&ch, "s.size", &[small.clone(), ("x-max-length-bytes", AMQPValue::LongInt(10_000))]).await;
    declare_stream(&ch, "s.age", &[small, ("x-max-age", text("1s"))]).await;
    let body = |i: u32| (format!("{i:0100}"), None);
    let messages: Vec<(String, Option<&str>)> = (0..300).map(body).collect();
    publish(&ch, "s.size", &messages).await;
    publish(&ch, "s.age", &messages).await;

    let (_c1, mut size) = consume(&conn, "s.size", 1000, offset_arg(text("first"))).await;
    let first = offset_of(&next_delivery(&mut size).await);
    assert!(first > 0, "the oldest segments went");
    assert!(first < 299, "whole segments only: more than the last message is kept, first {first}");

    // Age is checked every second; once the sealed segments are older than 1 s they go.
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let (_c2, mut age) = consume(&conn, "s.age", 1000, offset_arg(text("first"))).await;
    let first = offset_of(&next_delivery(&mut age).await);
    assert!(first > 200, "segments older than x-max-age went, first {first}");
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    let held = ch.queue_declare("s.age".into(), passive, FieldTable::default()).await.expect("passive");
    assert_eq!(held.message_count() as i64, 300 - first);
}

#[tokio::test]
async fn filters_deliver_exactly_the_matching_messages() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    declare_stream(&ch, "s.filter", &[]).await;
    let tags = [Some("red"), Some("blue"), None, Some("green")];
    let messages: Vec<(String, Option<&str>)> = (0..400).map(|i| (format!("m{i}"), tags[i % 4])).collect();
    publish(&ch, "s.filter", &messages).await;
    let wanted = |pred: &dyn Fn(Option<&str>) -> bool| -> Vec<String> {
        messages.iter().filter(|(_, t)| pred(*t)).map(|(b, _)| b.clone()).collect()
    };
    let cases: Vec<(FieldTable, Vec<String>)> = vec![
        (table(&[("x-stream-filter", text("red"))]), wanted(&|t| t == Some("red"))),
        (
            table(&[("x-stream-filter", AMQPValue::FieldArray(vec![text("red"), text("green")].into()))]),
            wanted(&|t| t == Some("red") || t == Some("green")),
        ),
        (
            table(&[("x-stream-filter", text("blue")), ("x-stream-match-unfiltered", AMQPValue::Boolean(true))]),
            wanted(&|t| t.is_none() || t == Some("blue")),
        ),
        (table(&[("x-stream-filter", text("purple"))]), Vec::new()),
    ];
    for (mut args, expected) in cases {
        args.insert("x-stream-offset".into(), text("first"));
        let (_c, mut consumer) = consume(&conn, "s.filter", 50, args).await;
        let got = bodies(&take(&mut consumer, expected.len()).await);
        assert_eq!(got, expected);
        assert_no_delivery(&mut consumer, 200).await;
    }
}

fn group(name: &str, from: &str) -> FieldTable {
    table(&[("x-consumer-group", text(name)), ("x-stream-offset", text(from))])
}

#[tokio::test]
async fn a_consumer_group_resumes_where_it_stopped_and_one_member_consumes_at_a_time() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    declare_stream(&ch, "s.group", &[]).await;
    publish(&ch, "s.group", &numbered(0..10)).await;

    // Resume after a consumer restart: 0..4 acked, then the channel closes.
    let (c1, mut member) = consume(&conn, "s.group", 100, group("g", "first")).await;
    assert_eq!(bodies(&take(&mut member, 4).await), expected(0..4));
    c1.close(200, "done".into()).await.expect("close");
    let (c2, mut member) = consume(&conn, "s.group", 100, group("g", "first")).await;
    assert_eq!(bodies(&take(&mut member, 2).await), expected(4..6));

    // Takeover: a second member waits; when the first leaves with m6 unacked, it gets m6 on.
    let (_c3, mut standby) = consume(&conn, "s.group", 100, group("g", "first")).await;
    let unacked = next_delivery(&mut member).await;
    assert_eq!(unacked.data, b"m6");
    assert_no_delivery(&mut standby, 200).await;
    c2.close(200, "leaving".into()).await.expect("close");
    assert_eq!(bodies(&take(&mut standby, 4).await), expected(6..10));

    // Another group reads independently, from its own start.
    let (_c4, mut other) = consume(&conn, "s.group", 100, group("h", "first")).await;
    assert_eq!(bodies(&take(&mut other, 10).await), expected(0..10));
    // A new group with no commit starts at its x-stream-offset.
    let (_c5, mut fresh) = consume(&conn, "s.group", 100, group("k", "last")).await;
    assert_eq!(bodies(&take(&mut fresh, 1).await), expected(9..10));
}

#[tokio::test]
async fn streams_and_group_offsets_survive_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = start_broker_in(dir.path()).await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    declare_stream(&ch, "s.restart", &[]).await;
    let tags = [Some("a"), None];
    let messages: Vec<(String, Option<&str>)> = (0..20).map(|i| (format!("m{i}"), tags[i % 2])).collect();
    publish(&ch, "s.restart", &messages).await;
    let (_c, mut member) = consume(&conn, "s.restart", 100, group("g", "first")).await;
    assert_eq!(bodies(&take(&mut member, 7).await), expected(0..7));
    conn.close(200, "bye".into()).await.expect("close");
    broker.shutdown().await;

    let broker = start_broker_in(dir.path()).await;
    let conn = connect(&broker).await;
    let (_c, mut member) = consume(&conn, "s.restart", 100, group("g", "first")).await;
    assert_eq!(bodies(&take(&mut member, 13).await), expected(7..20));
    let (_c, mut all) = consume(&conn, "s.restart", 100, offset_arg(text("first"))).await;
    let taken = take(&mut all, 20).await;
    assert_eq!(taken.last(), Some(&(19, "m19".to_string())));
    // Tags survive too: the filter still selects exactly the tagged half.
    let mut args = table(&[("x-stream-filter", text("a"))]);
    args.insert("x-stream-offset".into(), text("first"));
    let (_c, mut tagged) = consume(&conn, "s.restart", 100, args).await;
    let even: Vec<String> = (0..20).step_by(2).map(|i| format!("m{i}")).collect();
    assert_eq!(bodies(&take(&mut tagged, 10).await), even);
    // New messages keep their offsets dense after the restart.
    let ch = confirm_channel(&conn).await;
    publish(&ch, "s.restart", &numbered(20..21)).await;
    assert_eq!(take(&mut all, 1).await, vec![(20, "m20".to_string())]);
    broker.shutdown().await;
}

#[tokio::test]
async fn deleting_a_stream_cancels_its_consumers_and_removes_it() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    declare_stream(&ch, "s.delete", &[]).await;
    publish(&ch, "s.delete", &numbered(0..3)).await;
    let (_c, mut consumer) = consume(&conn, "s.delete", 10, offset_arg(text("first"))).await;
    assert_eq!(bodies(&take(&mut consumer, 3).await), expected(0..3));
    let deleted = ch.queue_delete("s.delete".into(), QueueDeleteOptions::default()).await.expect("delete");
    assert_eq!(deleted, 3);
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    let ch = channel(&conn).await;
    assert_code(ch.queue_declare("s.delete".into(), passive, FieldTable::default()).await, 404, "deleted stream");
    // Redeclared, it starts empty at offset 0.
    let ch = confirm_channel(&conn).await;
    declare_stream(&ch, "s.delete", &[]).await;
    publish(&ch, "s.delete", &numbered(7..8)).await;
    let (_c, mut consumer) = consume(&conn, "s.delete", 10, offset_arg(text("first"))).await;
    assert_eq!(take(&mut consumer, 1).await, vec![(0, "m7".to_string())]);
}

/// Publishes `body` with deduplication key `key` (header x-deduplication-header); true if
/// the confirm is an ack.
async fn publish_keyed(ch: &lapin::Channel, stream: &str, body: &str, key: &str) -> bool {
    let properties = BasicProperties::default().with_headers(table(&[("x-deduplication-header", text(key))]));
    let confirm = ch
        .basic_publish("".into(), stream.into(), BasicPublishOptions::default(), body.as_bytes(), properties)
        .await
        .expect("publish");
    confirm.await.expect("confirm").is_ack()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deduplicating_stream_appends_each_key_once_and_remembers_its_keys_across_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = start_broker_in(dir.path()).await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    let dedup = [("x-message-deduplication", AMQPValue::Boolean(true)), ("x-cache-size", AMQPValue::LongInt(100))];
    declare_stream(&ch, "s.dedup", &dedup).await;
    for (body, key) in [("a1", "a"), ("b1", "b"), ("a2", "a"), ("c1", "c"), ("b2", "b")] {
        assert!(publish_keyed(&ch, "s.dedup", body, key).await, "every publish is confirmed");
    }
    publish(&ch, "s.dedup", &numbered(0..2)).await;
    let (_c, mut all) = consume(&conn, "s.dedup", 100, offset_arg(text("first"))).await;
    let expected: Vec<(i64, String)> =
        ["a1", "b1", "c1", "m0", "m1"].iter().enumerate().map(|(i, b)| (i as i64, b.to_string())).collect();
    assert_eq!(take(&mut all, 5).await, expected, "each key once, offsets dense");
    let metrics = warren_tests::http::Api::new(broker.http_addr.expect("management API")).get_text("/metrics");
    let dropped = metrics
        .lines()
        .find_map(|line| line.strip_prefix("warren_deduplicated_messages_total "))
        .and_then(|value| value.trim().parse::<f64>().ok());
    assert!(dropped.is_some_and(|n| n >= 2.0), "the two duplicates are counted: {dropped:?}");
    conn.close(200, "bye".into()).await.expect("close");
    broker.shutdown().await;

    // The window is replayed from the log: a retry after the restart is still dropped.
    let broker = start_broker_in(dir.path()).await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    assert!(publish_keyed(&ch, "s.dedup", "a3", "a").await);
    assert!(publish_keyed(&ch, "s.dedup", "d1", "d").await);
    let (_c, mut all) = consume(&conn, "s.dedup", 100, offset_arg(text("first"))).await;
    let taken = take(&mut all, 6).await;
    assert_eq!(taken.last(), Some(&(5, "d1".to_string())), "only the new key was appended: {taken:?}");

    let refused = channel(&conn).await;
    let unbounded = stream_args(&[("x-message-deduplication", AMQPValue::Boolean(true))]);
    assert_code(refused.queue_declare("s.unbounded".into(), durable(), unbounded).await, 406, "needs x-cache-size");
    broker.shutdown().await;
}
