//! Replaying a stream of 1,000,000 100-byte messages from the start: every message, versus
//! only the 1% whose tag a filter wants. The filtered replay steps over the other records by
//! their header (flags and tag hash) without checking, copying or decoding their payloads.
//!
//! `cargo bench -p warren-delivery --bench stream_replay`; set `WARREN_BENCH_DIR` to put the
//! stream on a given file system (default: the system's temporary directory).

use amq_protocol::protocol::basic::{gen_properties, AMQPProperties};
use amq_protocol::types::{AMQPValue, FieldTable, LongString, ShortString};
use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::sync::Arc;
use warren_delivery::message_store::LogStoreConfig;
use warren_delivery::tag_filter::{TagFilter, TAG_HEADER};
use warren_delivery::ConsumerOptions;
use warren_delivery::{Broker, ConnectionId, Message, Properties, Queue, QueueDefinition};
use warren_storage::FlushPolicy;

// The broker's allocator, so that read buffers cost what they cost in `warren`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const MESSAGES: u64 = 1_000_000;
const BODY_BYTES: usize = 100;
/// One message in this many carries the wanted tag.
const MATCH_EVERY: u64 = 100;
const READ_COUNT: usize = 1000;

fn tagged(tag: &str) -> Properties {
    let mut headers = FieldTable::default();
    headers.insert(ShortString::from(TAG_HEADER), AMQPValue::LongString(LongString::from(tag)));
    let props = AMQPProperties::default().with_delivery_mode(2).with_headers(headers);
    let encoded = gen_properties(&props)(amq_protocol::frame::WriteContext::from(Vec::new())).expect("encodes");
    Properties::decode(Bytes::from(encoded.write)).expect("valid properties")
}

fn filled_stream(dir: &std::path::Path) -> (Arc<Broker>, Arc<Queue>) {
    let config = LogStoreConfig { flush_policy: FlushPolicy::Never, ..LogStoreConfig::default() };
    let broker = Broker::open(dir, config).expect("broker opens");
    let vhost = broker.vhost("/").expect("default vhost");
    let mut arguments = FieldTable::default();
    arguments.insert(ShortString::from("x-queue-type"), AMQPValue::LongString(LongString::from("stream")));
    let definition =
        QueueDefinition { name: "replay".into(), durable: true, exclusive_owner: None, auto_delete: false, arguments };
    let queue = vhost.declare_queue(definition, ConnectionId(1)).expect("declares").queue;
    let (hot, cold) = (tagged("hot"), tagged("cold"));
    let body = Bytes::from(vec![b'x'; BODY_BYTES]);
    for i in 0..MESSAGES {
        let properties = if i % MATCH_EVERY == 0 { hot.clone() } else { cold.clone() };
        let message = Message { exchange: "".into(), routing_key: "replay".into(), properties, body: body.clone() };
        vhost.publish("", Arc::new(message)).expect("routes");
    }
    (broker, queue)
}

fn hot_filter() -> TagFilter {
    let mut arguments = FieldTable::default();
    arguments.insert(ShortString::from("x-stream-filter"), AMQPValue::LongString(LongString::from("hot")));
    let options = ConsumerOptions { arguments, ..Default::default() };
    options.parse_priority_and_filter().expect("valid").1.expect("a filter")
}

/// Reads the whole stream from offset 0; returns the messages read.
fn replay(queue: &Queue, filter: Option<&TagFilter>) -> u64 {
    let stream = queue.browser().expect("a stream keeps a log");
    let (mut from, mut read) = (0, 0);
    loop {
        let batch = stream.read(from, READ_COUNT, usize::MAX, filter).expect("reads");
        read += batch.messages.len() as u64;
        if batch.next_offset == batch.end_offset {
            return read;
        }
        from = batch.next_offset;
    }
}

fn bench(c: &mut Criterion) {
    let base = std::env::var_os("WARREN_BENCH_DIR").map_or_else(std::env::temp_dir, Into::into);
    let dir = tempfile::tempdir_in(base).expect("bench dir");
    let (broker, queue) = filled_stream(dir.path());
    assert_eq!(replay(&queue, None), MESSAGES);
    assert_eq!(replay(&queue, Some(&hot_filter())), MESSAGES / MATCH_EVERY);
    let mut group = c.benchmark_group("stream_replay_1M");
    group.sample_size(10);
    group.throughput(Throughput::Elements(MESSAGES));
    group.bench_function("full", |b| b.iter(|| replay(&queue, None)));
    let filter = hot_filter();
    group.bench_function("filtered_1_percent", |b| b.iter(|| replay(&queue, Some(&filter))));
    group.finish();
    broker.close();
}

criterion_group!(benches, bench);
criterion_main!(benches);
