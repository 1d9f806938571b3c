//! Reading a queue's log by offset without a consumer (the pull API the management API and
//! UI use): bounds by count and bytes, clamping, exact tag filtering, and reads that survive a
//! reopen of the broker; for streams, and for the persistent messages of a durable classic
//! queue, whose log records carry no tag hashes.

use amq_protocol::protocol::basic::{gen_properties, AMQPProperties};
use amq_protocol::types::{AMQPValue, FieldTable, LongString, ShortString};
use bytes::Bytes;
use std::path::Path;
use std::sync::Arc;
use warren_delivery::message_store::log_browser::LogBatch;
use warren_delivery::message_store::LogStoreConfig;
use warren_delivery::tag_filter::TAG_HEADER;
use warren_delivery::ConsumerOptions;
use warren_delivery::{Broker, ConnectionId, Message, Properties, Queue, QueueDefinition};

const STREAM: &str = "events";
const MESSAGES: u64 = 1000;

fn properties(tag: Option<&str>) -> Properties {
    let mut props = AMQPProperties::default().with_delivery_mode(2);
    if let Some(tag) = tag {
        let mut headers = FieldTable::default();
        headers.insert(ShortString::from(TAG_HEADER), AMQPValue::LongString(LongString::from(tag)));
        props = props.with_headers(headers);
    }
    let encoded = gen_properties(&props)(amq_protocol::frame::WriteContext::from(Vec::new())).expect("encodes");
    Properties::decode(Bytes::from(encoded.write)).expect("valid properties")
}

/// Message `i` is tagged "hot" when i % 10 == 3, untagged when i % 10 == 0, "cold" otherwise.
fn tag_of(i: u64) -> Option<&'static str> {
    match i % 10 {
        3 => Some("hot"),
        0 => None,
        _ => Some("cold"),
    }
}

fn open(dir: &Path) -> (Arc<Broker>, Arc<Queue>) {
    open_kind(dir, "stream")
}

/// A broker in `dir` with a durable queue of `kind` (`stream` or `classic`) named [`STREAM`].
fn open_kind(dir: &Path, kind: &str) -> (Arc<Broker>, Arc<Queue>) {
    let broker = Broker::open(dir, LogStoreConfig::default()).expect("broker opens");
    let vhost = broker.vhost("/").expect("default vhost");
    let mut arguments = FieldTable::default();
    arguments.insert(ShortString::from("x-queue-type"), AMQPValue::LongString(LongString::from(kind)));
    let definition =
        QueueDefinition { name: STREAM.into(), durable: true, exclusive_owner: None, auto_delete: false, arguments };
    let queue = vhost.declare_queue(definition, ConnectionId(1)).expect("declares").queue;
    (broker, queue)
}

fn publish_all(broker: &Broker) {
    let vhost = broker.vhost("/").expect("default vhost");
    for i in 0..MESSAGES {
        let message = Message {
            exchange: "".into(),
            routing_key: STREAM.into(),
            properties: properties(tag_of(i)),
            body: Bytes::from(format!("m{i}")),
        };
        vhost.publish("", Arc::new(message)).expect("routes");
    }
}

fn filter(tags: &[&str], match_unfiltered: bool) -> warren_delivery::tag_filter::TagFilter {
    let mut arguments = FieldTable::default();
    let array = tags.iter().map(|t| AMQPValue::LongString(LongString::from(*t))).collect::<Vec<_>>();
    arguments.insert(ShortString::from("x-stream-filter"), AMQPValue::FieldArray(array.into()));
    arguments.insert(ShortString::from("x-stream-match-unfiltered"), AMQPValue::Boolean(match_unfiltered));
    let options = ConsumerOptions { arguments, ..Default::default() };
    options.parse_priority_and_filter().expect("valid filter").1.expect("a filter")
}

fn offsets(batch: &LogBatch) -> Vec<u64> {
    batch.messages.iter().map(|m| m.offset).collect()
}

/// Reads everything from `from` in batches of `count`, with `filter`.
fn read_all(queue: &Queue, count: usize, filter: Option<&warren_delivery::tag_filter::TagFilter>) -> Vec<u64> {
    let stream = queue.browser().expect("a stream keeps a log");
    let mut out = Vec::new();
    let mut from = 0;
    loop {
        let batch = stream.read(from, count, usize::MAX, filter).expect("reads");
        out.extend(offsets(&batch));
        if batch.next_offset == batch.end_offset {
            return out;
        }
        assert!(batch.next_offset > from, "a read makes progress");
        from = batch.next_offset;
    }
}

#[test]
fn reads_by_offset_within_count_and_byte_bounds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (broker, queue) = open(dir.path());
    publish_all(&broker);
    let stream = queue.browser().expect("a stream keeps a log");

    let batch = stream.read(0, 10, usize::MAX, None).expect("reads");
    assert_eq!(offsets(&batch), (0..10).collect::<Vec<_>>());
    assert_eq!((batch.next_offset, batch.first_offset, batch.end_offset), (10, 0, MESSAGES));
    assert_eq!(&batch.messages[3].message.body[..], b"m3");
    assert!(batch.messages[3].timestamp_ms > 0);

    // About 3 bodies' worth of bytes (payloads hold exchange, key and properties too).
    let small = stream.read(500, 100, 1, None).expect("reads");
    assert_eq!(offsets(&small), vec![500], "at least one message, then the byte bound");

    let past_end = stream.read(MESSAGES + 50, 10, usize::MAX, None).expect("clamped");
    assert!(past_end.messages.is_empty());
    assert_eq!(past_end.next_offset, MESSAGES);

    assert_eq!(read_all(&queue, 64, None), (0..MESSAGES).collect::<Vec<_>>());
    broker.close();
}

#[test]
fn filtered_reads_return_exactly_the_matching_messages() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (broker, queue) = open(dir.path());
    publish_all(&broker);
    let hot: Vec<u64> = (0..MESSAGES).filter(|i| tag_of(*i) == Some("hot")).collect();
    assert_eq!(read_all(&queue, 7, Some(&filter(&["hot"], false))), hot);
    let hot_or_untagged: Vec<u64> = (0..MESSAGES).filter(|i| matches!(tag_of(*i), Some("hot") | None)).collect();
    assert_eq!(read_all(&queue, 50, Some(&filter(&["hot"], true))), hot_or_untagged);
    assert_eq!(read_all(&queue, 50, Some(&filter(&["absent"], false))), Vec::<u64>::new());
    let stream = queue.browser().expect("a stream keeps a log");
    let batch = stream.read(0, 5, usize::MAX, Some(&filter(&["hot"], false))).expect("reads");
    assert_eq!(offsets(&batch), vec![3, 13, 23, 33, 43]);
    assert_eq!(batch.next_offset, 44, "continues right after the last match");
    broker.close();
}

#[test]
fn a_reopened_stream_reads_the_same() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (broker, _) = open(dir.path());
    publish_all(&broker);
    broker.close();
    drop(broker);
    let broker = Broker::open(dir.path(), LogStoreConfig::default()).expect("reopens");
    let queue = broker.vhost("/").expect("vhost").queue(STREAM).expect("the stream was recovered");
    assert_eq!(queue.message_count() as u64, MESSAGES);
    let hot: Vec<u64> = (0..MESSAGES).filter(|i| tag_of(*i) == Some("hot")).collect();
    assert_eq!(read_all(&queue, 100, Some(&filter(&["hot"], false))), hot);
    broker.close();
}

#[test]
fn a_durable_classic_queue_log_reads_by_offset_and_tag() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (broker, queue) = open_kind(dir.path(), "classic");
    publish_all(&broker);
    assert_eq!(read_all(&queue, 64, None), (0..MESSAGES).collect::<Vec<_>>());
    assert_eq!(queue.message_count() as u64, MESSAGES, "browsing consumed nothing");
    let hot_or_untagged: Vec<u64> = (0..MESSAGES).filter(|i| matches!(tag_of(*i), Some("hot") | None)).collect();
    assert_eq!(read_all(&queue, 50, Some(&filter(&["hot"], true))), hot_or_untagged);
    let batch = queue.browser().expect("a durable queue keeps a log").read(0, 3, usize::MAX, None).expect("reads");
    assert_eq!(&batch.messages[2].message.body[..], b"m2");
    broker.close();
    drop(broker);

    let broker = Broker::open(dir.path(), LogStoreConfig::default()).expect("reopens");
    let queue = broker.vhost("/").expect("vhost").queue(STREAM).expect("the queue was recovered");
    let hot: Vec<u64> = (0..MESSAGES).filter(|i| tag_of(*i) == Some("hot")).collect();
    assert_eq!(read_all(&queue, 100, Some(&filter(&["hot"], false))), hot);
    broker.close();
}

#[test]
fn a_transient_queue_keeps_no_log_to_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Broker::open(dir.path(), LogStoreConfig::default()).expect("broker opens");
    let vhost = broker.vhost("/").expect("default vhost");
    let definition = QueueDefinition {
        name: "transient".into(),
        durable: false,
        exclusive_owner: None,
        auto_delete: false,
        arguments: FieldTable::default(),
    };
    let queue = vhost.declare_queue(definition, ConnectionId(1)).expect("declares").queue;
    assert!(queue.browser().is_none());
    broker.close();
}
