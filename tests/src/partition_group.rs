//! A consumer group of a super stream under test: members that consume the super stream with
//! `x-consumer-group`, record every delivery (member, partition, offset, body) and ack it; and
//! the checks of what they recorded against what was published.

use futures_util::StreamExt;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::AMQPValue;
use lapin::Connection;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One delivery to a member.
#[derive(Debug, Clone)]
pub struct Consumed {
    /// Which member.
    pub member: usize,
    /// `x-stream-partition`.
    pub partition: i64,
    /// `x-stream-offset`.
    pub offset: i64,
    /// The body: `KEY/SEQUENCE`.
    pub body: String,
    /// When it arrived.
    pub at: Instant,
}

/// What the members recorded, in arrival order.
pub type Record = Arc<Mutex<Vec<Consumed>>>;

fn long_header(delivery: &lapin::message::Delivery, name: &str) -> Option<i64> {
    match delivery.properties.headers().as_ref()?.inner().get(name)? {
        AMQPValue::LongLongInt(value) => Some(*value),
        _ => None,
    }
}

/// Consumes `super_stream` on `conn` as member `member` of `group`, from the first offset,
/// acking each delivery after recording it, until `stop` (then its connection closes, without
/// a word about what it has not acked: as a member that dies).
pub async fn run_member(
    conn: Connection,
    member: usize,
    super_stream: &str,
    group: &str,
    record: Record,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let ch = conn.create_channel().await.expect("channel");
    ch.basic_qos(20, BasicQosOptions::default()).await.expect("qos");
    let arguments =
        crate::table(&[("x-stream-offset", crate::text("first")), ("x-consumer-group", crate::text(group))]);
    let tag = format!("member-{member}");
    let mut consumer = ch
        .basic_consume(super_stream.into(), tag.as_str().into(), BasicConsumeOptions::default(), arguments)
        .await
        .expect("consume the super stream in a group");
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            next = consumer.next() => {
                let Some(Ok(delivery)) = next else { break };
                let partition = long_header(&delivery, "x-stream-partition").expect("x-stream-partition");
                let offset = long_header(&delivery, "x-stream-offset").expect("x-stream-offset");
                let body = String::from_utf8_lossy(&delivery.data).into_owned();
                record.lock().expect("record").push(Consumed { member, partition, offset, body, at: Instant::now() });
                // Slow enough that partitions are busy when members come and go.
                tokio::time::sleep(Duration::from_millis(1)).await;
                if delivery.ack(BasicAckOptions::default()).await.is_err() {
                    break;
                }
            }
        }
    }
    let _ = conn.close(320, "member stops".into()).await;
}

/// Waits until every body in `published` was recorded (at most `within`).
pub async fn wait_for_all(record: &Record, published: usize, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        let distinct: std::collections::HashSet<String> =
            record.lock().expect("record").iter().map(|c| c.body.clone()).collect();
        if distinct.len() >= published {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// What the run shows.
#[derive(Debug)]
pub struct GroupReport {
    /// Messages delivered more than once (processed twice).
    pub twice: usize,
    /// Times a partition went from one member to another.
    pub moves: usize,
}

/// Checks the record against the published bodies (`KEY/SEQUENCE`, `partition_of` a key giving
/// its partition): every message consumed; each from its key's partition; each member reads a
/// partition in offset order; each key's messages are first delivered in publish order; and a
/// partition is read by one member at a time (a member's reads of it do not interleave with
/// another's, but for deliveries the old member got before the hand-over).
pub fn check(record: &[Consumed], published: &[String], partition_of: impl Fn(&str) -> i64) -> GroupReport {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for consumed in record {
        *seen.entry(consumed.body.as_str()).or_default() += 1;
        let key = consumed.body.split('/').next().expect("KEY/SEQUENCE");
        assert_eq!(consumed.partition, partition_of(key), "{} from its key's partition", consumed.body);
    }
    let missing: Vec<&String> = published.iter().filter(|b| !seen.contains_key(b.as_str())).collect();
    assert!(missing.is_empty(), "never consumed: {} ({:?}...)", missing.len(), &missing[..missing.len().min(5)]);
    // Per key, first deliveries in publish order.
    let mut last_of_key: HashMap<&str, u64> = HashMap::new();
    let mut first_time = std::collections::HashSet::new();
    for consumed in record {
        if !first_time.insert(consumed.body.as_str()) {
            continue;
        }
        let (key, sequence) = consumed.body.split_once('/').expect("KEY/SEQUENCE");
        let sequence: u64 = sequence.parse().expect("a sequence number");
        if let Some(before) = last_of_key.insert(key, sequence) {
            assert!(before < sequence, "key {key}: {sequence} first delivered after {before}");
        }
    }
    // Per member and partition, offsets increase; per partition, members take turns.
    let mut runs: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    let mut last_offset: HashMap<(usize, i64), i64> = HashMap::new();
    for consumed in record {
        let key = (consumed.member, consumed.partition);
        if let Some(before) = last_offset.insert(key, consumed.offset) {
            assert!(before < consumed.offset || seen[consumed.body.as_str()] > 1, "member {} re-read {key:?}", key.0);
        }
        let turns = runs.entry(consumed.partition).or_default();
        if turns.last() != Some(&consumed.member) {
            turns.push(consumed.member);
        }
    }
    let moves = runs.values().map(|turns| turns.len() - 1).sum();
    GroupReport { twice: seen.values().filter(|n| **n > 1).count(), moves }
}

/// Publishes `count` keyed messages (`KEY/SEQUENCE`, 40 keys, header `x-partition-key`) to
/// `super_stream` on `ch` (in confirm mode), retrying what is not confirmed, pausing now and
/// then so that members come and go mid-stream; returns the bodies.
pub async fn publish_keyed(ch: &lapin::Channel, super_stream: &str, count: u64) -> Vec<String> {
    let mut bodies = Vec::new();
    for sequence in 0..count {
        let key = format!("key-{}", sequence % 40);
        let body = format!("{key}/{sequence}");
        let properties =
            lapin::BasicProperties::default().with_headers(crate::table(&[("x-partition-key", crate::text(&key))]));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let options = lapin::options::BasicPublishOptions::default();
            let sent = ch.basic_publish(super_stream.into(), "".into(), options, body.as_bytes(), properties.clone());
            if let Ok(sent) = sent.await {
                if let Ok(Ok(confirm)) = tokio::time::timeout(Duration::from_secs(5), sent).await {
                    if confirm.is_ack() {
                        break;
                    }
                }
            }
            assert!(Instant::now() < deadline, "{body} was not confirmed");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bodies.push(body);
        if sequence % 100 == 99 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    bodies
}
