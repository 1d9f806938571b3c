//! Replicated streams on three real `warren` processes: a stream declared in a cluster has a
//! replica on each node; publishes are confirmed through its Raft group while its leader is
//! killed and restarted; every replica then holds the same records at the same offsets, byte
//! for byte; a consumer group's committed offset survives the leader's death.

use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::Connection;
use std::time::{Duration, Instant};
use warren_tests::cluster::*;
use warren_tests::*;

fn stream_args(extra: &[(&str, AMQPValue)]) -> FieldTable {
    let mut entries = vec![("x-queue-type", text("stream"))];
    entries.extend(extra.iter().cloned());
    table(&entries)
}

/// A consumer of `stream` on `conn` from offset `from`, in consumer group `group` if given.
async fn stream_consumer(conn: &Connection, stream: &str, from: i64, group: Option<&str>) -> lapin::Consumer {
    let ch = conn.create_channel().await.expect("channel");
    ch.basic_qos(500, BasicQosOptions::default()).await.expect("qos");
    let mut args = vec![("x-stream-offset", AMQPValue::LongLongInt(from))];
    if let Some(group) = group {
        args.push(("x-consumer-group", text(group)));
    }
    ch.basic_consume(stream.into(), "reader".into(), Default::default(), table(&args)).await.expect("consume")
}

/// Records read by a consumer as they come: (offset, body).
type Records = std::sync::Arc<std::sync::Mutex<Vec<(u64, Vec<u8>)>>>;

fn offset_of(delivery: &lapin::message::Delivery) -> u64 {
    let headers = delivery.properties.headers().as_ref().expect("headers");
    match headers.inner().get("x-stream-offset") {
        Some(AMQPValue::LongLongInt(offset)) => *offset as u64,
        other => panic!("no offset header: {other:?}"),
    }
}

/// Reads `count` records from the start of `stream` through `conn`: (offset, body).
async fn read_back(conn: &Connection, stream: &str, count: usize) -> Vec<(u64, Vec<u8>)> {
    let mut consumer = stream_consumer(conn, stream, 0, None).await;
    let mut records = Vec::with_capacity(count);
    while records.len() < count {
        let delivery = next_delivery(&mut consumer).await;
        records.push((offset_of(&delivery), delivery.data.clone()));
        delivery.ack(BasicAckOptions::default()).await.expect("ack");
    }
    records
}

/// Waits until node `node`'s copy of `stream` holds every message of `confirmed` (numbered
/// bodies), at most 30 s; returns how many records it holds then. Counting is not enough: a
/// publish that was nacked may be stored too (its outcome is unknown), so the count can reach
/// the number confirmed before the last confirmed records are there.
async fn wait_for_every_confirmed(cluster: &Cluster, node: usize, stream: &str, confirmed: &[u64]) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let held = wait_for_count(cluster, node, stream, confirmed.len() as u32).await;
        let conn = cluster.connect(node).await;
        let records = read_back(&conn, stream, held as usize).await;
        let stored: std::collections::HashSet<u64> =
            records.iter().map(|(_, body)| u64::from_be_bytes(body.as_slice().try_into().expect("8 bytes"))).collect();
        if confirmed.iter().all(|n| stored.contains(n)) || Instant::now() > deadline {
            return held;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until node `node` reports `stream` holding at least `count` messages; returns them.
async fn wait_for_count(cluster: &Cluster, node: usize, stream: &str, count: u32) -> u32 {
    let conn = cluster.connect(node).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let held = passive_count(&conn, stream).await.unwrap_or(0);
        if held >= count {
            return held;
        }
        assert!(Instant::now() < deadline, "node {node} holds {held} of {count} records of {stream}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replicated_stream_confirms_through_a_leader_kill_and_every_replica_reads_the_same_bytes() {
    // `WARREN_FAILOVER_ROUNDS` (scripts/soak-cluster.sh) runs more, from `WARREN_FAILOVER_SEED`.
    let (first, rounds) = failover_rounds();
    for seed in first..first + rounds {
        eprintln!(
            "replicated stream failover, seed {seed} (replay: WARREN_FAILOVER_SEED={seed} WARREN_FAILOVER_ROUNDS=1)"
        );
        stream_failover_round(seed, Fault::KillLeader).await;
    }
}

/// One seeded round of each other fault on a replicated stream (see the quorum queues' rounds
/// in `cluster.rs`): every confirmed message stored, replicas identical, the window printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replicated_stream_loses_nothing_confirmed_under_every_fault() {
    for (seed, fault) in other_fault_rounds("stream") {
        stream_failover_round(seed, fault).await;
    }
}

/// One round: a publisher on B, the leader (A) killed after a seeded delay, restarted after a
/// seeded outage; then every replica is read back.
/// How many times the live reader of a failover round subscribes again after its consumer
/// was cancelled or its channel closed.
const MAX_RESUMES: usize = 5;

async fn stream_failover_round(seed: u64, fault: Fault) {
    let mut random = seeded(seed);
    let (kill_after_ms, outage_ms) = (1_000 + random(2_000), 2_000 + random(3_000));
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cluster = start_cluster(dir.path(), fault != Fault::KillLeader).await;
    let a = cluster.connect(0).await;
    let ch = a.create_channel().await.expect("channel");
    ch.queue_declare("s".into(), durable(), stream_args(&[])).await.expect("declare on a formed cluster");

    // A publisher on B (a follower: its proposals go to A, which declared and leads), and a
    // consumer on C reading as the stream grows, through the kill.
    let (stop, publishing) = tokio::sync::watch::channel(false);
    let publisher = tokio::spawn(publish_numbered(cluster.connect(1).await, "s", 50, publishing));
    let reader_conn = cluster.connect(2).await;
    let mut reader = stream_consumer(&reader_conn, "s", 0, None).await;
    let live_read: Records = Default::default();
    let into = std::sync::Arc::clone(&live_read);
    // Why the live consumer ended each time, if it did (printed: on a replica's node it
    // should read straight through, and an end is worth a look even when nothing is lost).
    let resumed: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
    let resumes = std::sync::Arc::clone(&resumed);
    let live = tokio::spawn(async move {
        use futures_util::StreamExt;
        loop {
            match reader.next().await {
                Some(Ok(delivery)) => {
                    into.lock().expect("read").push((offset_of(&delivery), delivery.data.clone()));
                    let _ = delivery.ack(BasicAckOptions::default()).await;
                }
                // Cancelled (basic.cancel) or its channel closed: a client resumes after the
                // last offset it read, as #16 allows of a failover.
                ended if resumes.lock().expect("resumes").len() < MAX_RESUMES => {
                    resumes.lock().expect("resumes").push(format!("{ended:?}"));
                    let from = into.lock().expect("read").last().map_or(0, |(offset, _)| offset + 1);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    reader = stream_consumer(&reader_conn, "s", from as i64, None).await;
                }
                _ => return,
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(kill_after_ms)).await;
    let fault_at = Instant::now();
    fault.inject(&mut cluster);
    tokio::time::sleep(Duration::from_millis(outage_ms)).await;
    if fault != Fault::KillLeader {
        fault.repair(&mut cluster);
        tokio::time::sleep(Duration::from_millis(1_000)).await;
    }
    stop.send_replace(true);
    let published = publisher.await.expect("publisher");
    let window = published.longest_wait_since(fault_at);
    eprintln!("fault {} window {:.3} s (replicated stream, seed {seed})", fault.name(), window.as_secs_f64());
    let after_kill = published.confirmed.iter().filter(|n| **n > published.confirmed.len() as u64 / 2).count();
    assert!(published.confirmed.len() > 100, "the load ran: {} confirmed", published.confirmed.len());
    assert!(after_kill > 0, "publishes were confirmed after the leader died");

    // The killed node comes back and catches up; then every replica has the same stream.
    if fault == Fault::KillLeader {
        fault.repair(&mut cluster);
    }
    let held = wait_for_every_confirmed(&cluster, 1, "s", &published.confirmed).await;
    for node in [0, 2] {
        wait_for_count(&cluster, node, "s", held).await;
    }
    let mut copies = Vec::new();
    for node in 0..3 {
        let conn = cluster.connect(node).await;
        copies.push(read_back(&conn, "s", held as usize).await);
    }
    let offsets: Vec<u64> = copies[0].iter().map(|(offset, _)| *offset).collect();
    assert_eq!(offsets, (0..u64::from(held)).collect::<Vec<_>>(), "offsets are dense from 0");
    assert!(
        copies[1] == copies[0] && copies[2] == copies[0],
        "every replica holds the same records at the same offsets"
    );
    let stored: std::collections::BTreeSet<u64> =
        copies[0].iter().map(|(_, body)| u64::from_be_bytes(body.as_slice().try_into().expect("8 bytes"))).collect();
    let lost: Vec<u64> = published.confirmed.iter().copied().filter(|n| !stored.contains(n)).collect();
    if !lost.is_empty() {
        dump_warnings(&cluster);
    }
    assert!(lost.is_empty(), "confirmed but not in the stream: {lost:?}");
    assert!(stored.iter().all(|n| *n <= published.highest), "nothing invented");
    // The consumer on C read on through the leader's death: everything, in offset order.
    let deadline = Instant::now() + Duration::from_secs(20);
    while live_read.lock().expect("read").len() < held as usize && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let reader_ended = live.is_finished();
    live.abort();
    let read = live_read.lock().expect("read").clone();
    let first_difference = read.iter().zip(&copies[2]).position(|(live, stored)| live != stored);
    if read.len() < held as usize || first_difference.is_some() {
        dump_warnings(&cluster);
    }
    assert!(
        read.len() >= held as usize && first_difference.is_none(),
        "C's consumer read it all, in order: {} of {held} read (its consumer {}, resumed {} times), first \
         difference at {:?} (read {:?}, stored {:?})",
        read.len(),
        if reader_ended { "had ended" } else { "was still open" },
        resumed.lock().expect("resumes").len(),
        first_difference,
        first_difference.map(|i| read[i].0),
        first_difference.map(|i| copies[2][i].0),
    );
    eprintln!(
        "replicated stream: {} confirmed, {} unconfirmed, {} stored on each of 3 replicas, C's consumer ended {:?}",
        published.confirmed.len(),
        published.unconfirmed.len(),
        held,
        resumed.lock().expect("resumes")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_group_resumes_from_its_committed_offset_after_the_leader_dies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cluster = start_cluster(dir.path(), false).await;
    let a = cluster.connect(0).await;
    let ch = a.create_channel().await.expect("channel");
    ch.queue_declare("g".into(), durable(), stream_args(&[])).await.expect("declare on a formed cluster");
    let publisher = confirm_channel(&a).await;
    for n in 0..300u64 {
        assert_eq!(publish_within(&publisher, "g", &n.to_be_bytes(), Duration::from_secs(10)).await, Some(true));
    }
    // (A follower on a busy machine may apply the last of them a while after their confirms.)
    wait_for_count(&cluster, 1, "g", 300).await;

    // A member of group G on B reads and acks the first 120, then leaves.
    let b = cluster.connect(1).await;
    let mut member = stream_consumer(&b, "g", 0, Some("G")).await;
    for expected in 0..120u64 {
        let delivery = next_delivery(&mut member).await;
        assert_eq!(offset_of(&delivery), expected);
        delivery.ack(BasicAckOptions::default()).await.expect("ack");
    }
    b.close(200, "done".into()).await.expect("close");
    tokio::time::sleep(Duration::from_millis(500)).await;

    // The leader (A) dies; a member of G on C starts where the group committed.
    cluster.nodes[0].take().expect("running").kill9();
    let c = cluster.connect(2).await;
    let mut member = stream_consumer(&c, "g", 0, Some("G")).await;
    // The consumer starts once C's replica has what the new leader committed: after the
    // election, which a loaded machine can make slow.
    let delivery = next_delivery_within(&mut member, Duration::from_secs(30)).await;
    assert_eq!(offset_of(&delivery), 120, "resumed at the group's committed offset, on another node");
    assert_eq!(delivery.data, 120u64.to_be_bytes());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_back_after_the_log_was_purged_catches_up_from_another_replicas_segments() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cluster = start_cluster(dir.path(), false).await;
    let a = cluster.connect(0).await;
    let ch = a.create_channel().await.expect("channel");
    ch.queue_declare("c".into(), durable(), stream_args(&[])).await.expect("declare on a formed cluster");
    let c = cluster.connect(2).await;
    assert_eq!(passive_count(&c, "c").await, Some(0), "C has its replica");
    drop(c);
    cluster.nodes[2].take().expect("running").kill9();

    // One entry per publish (each waits for its confirm): snapshots are taken while C is
    // away, and B, a follower, purges its Raft log behind them. (The leader keeps what a
    // replica it still sends to needs.)
    let publisher = confirm_channel(&a).await;
    let count = 3_000u64;
    for n in 0..count {
        let body = format!("record {n:05} {}", "x".repeat((n % 97) as usize));
        assert_eq!(publish_within(&publisher, "c", body.as_bytes(), Duration::from_secs(10)).await, Some(true));
    }
    let on_a = read_back(&a, "c", count as usize).await;
    drop(a);
    // A dies; C comes back: B leads, and has only a snapshot and the log after it to give.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    cluster.nodes[0].take().expect("running").kill9();
    cluster.restart(2);
    wait_for_count(&cluster, 2, "c", count as u32).await;
    let on_c = read_back(&cluster.connect(2).await, "c", count as usize).await;
    assert!(on_c == on_a, "C holds what A held, at the same offsets");
    let log = cluster.nodes[2].as_ref().expect("running").log_lines().join("\n");
    if std::env::var("WARREN_DUMP_DIR").is_ok() {
        dump_warnings(&cluster);
    }
    assert!(log.contains("caught up from another replica"), "C installed a snapshot and fetched the records");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_a_replica_is_served_through_the_transport() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = start_cluster(dir.path(), false).await;
    let a = cluster.connect(0).await;
    let ch = a.create_channel().await.expect("channel");
    let two = stream_args(&[("x-initial-cluster-size", AMQPValue::LongUInt(2))]);
    ch.queue_declare("two".into(), durable(), two).await.expect("declare on a formed cluster");
    // Replicas on A (the declaring node) and one other; whichever node has none forwards.
    let node = node_without_replica(&cluster, "two");
    let conn = cluster.connect(node).await;
    let publisher = confirm_channel(&conn).await;
    for n in 0..100u64 {
        assert_eq!(publish_within(&publisher, "two", &n.to_be_bytes(), Duration::from_secs(10)).await, Some(true));
    }
    let records = read_back(&conn, "two", 100).await;
    let bodies: Vec<Vec<u8>> = (0..100u64).map(|n| n.to_be_bytes().to_vec()).collect();
    assert_eq!(records.iter().map(|(_, body)| body.clone()).collect::<Vec<_>>(), bodies);
}

/// Whether node `node` lists `stream` in `state` ("running": a replica; "remote": a stand-in).
fn listed_in_state(cluster: &Cluster, node: usize, stream: &str, state: &str) -> bool {
    let listed = ctl(cluster, node, &["list_queues", "name", "state"]);
    listed.lines().any(|line| line.split_whitespace().eq([stream, state]))
}

/// The node that holds no replica of `stream` (it lists it as a stand-in), once one does: a
/// declare's `-ok` waits for the other nodes a while only, and a loaded node may be later.
fn node_without_replica(cluster: &Cluster, stream: &str) -> usize {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let without: Vec<usize> =
            (0..NAMES.len()).filter(|node| listed_in_state(cluster, *node, stream, "remote")).collect();
        match without[..] {
            [node] => return node,
            _ if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            _ => panic!("one node of three has no replica of {stream}: {without:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deduplication_on_a_replicated_stream_recognises_a_retry_after_the_leader_dies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cluster = start_cluster(dir.path(), false).await;
    let a = cluster.connect(0).await;
    let arguments = stream_args(&[
        ("x-message-deduplication", AMQPValue::Boolean(true)),
        ("x-cache-size", AMQPValue::LongLongInt(1000)),
    ]);
    let ch = a.create_channel().await.expect("channel");
    ch.queue_declare("d".into(), durable(), arguments).await.expect("declare on a formed cluster");
    let b = cluster.connect(1).await;
    let publisher = confirm_channel(&b).await;
    for key in 0..50 {
        publish_keyed_until_confirmed(&publisher, "d", key, &cluster).await;
    }
    // A (the leader) dies; the publisher sends the 50 again, as one that lost its confirms
    // would, and 10 new ones: the window is replicated state, so the new leader knows them.
    cluster.nodes[0].take().expect("running").kill9();
    for key in 0..60 {
        publish_keyed_until_confirmed(&publisher, "d", key, &cluster).await;
    }
    wait_for_count(&cluster, 2, "d", 60).await;
    let on_c = read_back(&cluster.connect(2).await, "d", 60).await;
    let keys: Vec<u64> =
        on_c.iter().map(|(_, body)| u64::from_be_bytes(body.as_slice().try_into().expect("8"))).collect();
    assert_eq!(keys, (0..60).collect::<Vec<u64>>(), "each key once, in publish order");
    assert_eq!(passive_count(&cluster.connect(1).await, "d").await, Some(60), "and no more");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_group_across_nodes_survives_a_member_nodes_death_and_takes_a_new_member() {
    use warren_tests::partition_group::*;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cluster = start_cluster(dir.path(), false).await;
    // Wait for the cluster to form before the partitions are declared.
    let a = cluster.connect(0).await;
    let probe = a.create_channel().await.expect("channel");
    probe.queue_declare("formed".into(), durable(), stream_args(&[])).await.expect("declare on a formed cluster");
    ctl(&cluster, 0, &["add_super_stream", "orders", "--partitions", "6"]);

    // One member on each node.
    let record: Record = Default::default();
    let mut stops = Vec::new();
    let mut members = Vec::new();
    for member in 0..3 {
        let (stop, stopping) = tokio::sync::watch::channel(false);
        let conn = cluster.connect(member).await;
        members.push(tokio::spawn(run_member(conn, member, "orders", "g", record.clone(), stopping)));
        stops.push(stop);
    }
    let publisher_ch = confirm_channel(&a).await;
    let publisher = tokio::spawn(async move { publish_keyed(&publisher_ch, "orders", 1_500).await });
    tokio::time::sleep(Duration::from_millis(1_500)).await;

    // C dies, and its member with it; a new member joins on B.
    let killed_at = Instant::now();
    cluster.nodes[2].take().expect("running").kill9();
    let (stop, stopping) = tokio::sync::watch::channel(false);
    members.push(tokio::spawn(run_member(cluster.connect(1).await, 3, "orders", "g", record.clone(), stopping)));
    stops.push(stop);
    let published = publisher.await.expect("publisher");
    if !wait_for_all(&record, published.len(), Duration::from_secs(60)).await {
        dump_warnings(&cluster);
        panic!("not every message was consumed");
    }
    let partition_of = |key: &str| warren_delivery::exchange::super_stream::partition_index(key.as_bytes(), 6) as i64;
    let recorded = record.lock().expect("record").clone();
    let report = check(&recorded, &published, partition_of);
    // How long the dead member's partitions waited for another member.
    let orphaned: std::collections::BTreeSet<i64> =
        recorded.iter().filter(|c| c.member == 2 && c.at < killed_at).map(|c| c.partition).collect();
    let resumed = orphaned
        .iter()
        .filter_map(|p| recorded.iter().find(|c| c.partition == *p && c.member != 2 && c.at > killed_at))
        .map(|c| c.at.duration_since(killed_at))
        .max();
    eprintln!(
        "group of 3 on 6 partitions across 3 nodes, a member's node killed, one member added: {report:?}; \
         the dead member's partitions {orphaned:?} read again after {resumed:?}"
    );
    for stop in stops {
        stop.send_replace(true);
    }
    for member in members {
        let _ = member.await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_applies_on_every_replica() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = start_cluster(dir.path(), false).await;
    let a = cluster.connect(0).await;
    let arguments = stream_args(&[
        ("x-max-length-bytes", AMQPValue::LongLongInt(20_000)),
        ("x-stream-max-segment-size-bytes", AMQPValue::LongLongInt(4_096)),
    ]);
    let ch = a.create_channel().await.expect("channel");
    ch.queue_declare("kept".into(), durable(), arguments).await.expect("declare on a formed cluster");
    let publisher = confirm_channel(&a).await;
    for n in 0..400u64 {
        let body = [n.to_be_bytes().as_slice(), &[b'x'; 200]].concat();
        assert_eq!(publish_within(&publisher, "kept", &body, Duration::from_secs(10)).await, Some(true));
    }
    // Every replica deleted its oldest segments: its first offset is past 0, and it holds
    // about what x-max-length-bytes allows, ending at the same last offset.
    for node in 0..3 {
        let conn = cluster.connect(node).await;
        let held = wait_for_count(&cluster, node, "kept", 1).await;
        assert!(held < 200, "node {node} keeps {held} of 400 records");
        let mut consumer = stream_consumer(&conn, "kept", 0, None).await;
        let first = next_delivery(&mut consumer).await;
        assert!(offset_of(&first) >= 200, "node {node} starts at {}", offset_of(&first));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_member_needs_a_replica_of_every_partition_on_its_node() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = start_cluster(dir.path(), false).await;
    let a = cluster.connect(0).await;
    let ch = a.create_channel().await.expect("channel");
    // A super stream made with plain methods: partition 0 on every node, partition 1 on two.
    ch.queue_declare("parts-0".into(), durable(), stream_args(&[])).await.expect("declare on a formed cluster");
    let two = stream_args(&[("x-initial-cluster-size", AMQPValue::LongUInt(2))]);
    ch.queue_declare("parts-1".into(), durable(), two).await.expect("declare");
    let super_stream = table(&[("x-super-stream", AMQPValue::Boolean(true))]);
    let options = ExchangeDeclareOptions { durable: true, ..Default::default() };
    ch.exchange_declare("parts".into(), lapin::ExchangeKind::Direct, options, super_stream).await.expect("exchange");
    for p in 0..2i64 {
        let order = table(&[("x-stream-partition-order", AMQPValue::LongLongInt(p))]);
        let queue = format!("parts-{p}");
        ch.queue_bind(queue.as_str().into(), "parts".into(), p.to_string().as_str().into(), Default::default(), order)
            .await
            .expect("bind");
    }
    let without = node_without_replica(&cluster, "parts-1");
    let conn = cluster.connect(without).await;
    let member = conn.create_channel().await.expect("channel");
    member.basic_qos(10, BasicQosOptions::default()).await.expect("qos");
    let group = table(&[("x-consumer-group", text("g"))]);
    let refused = member.basic_consume("parts".into(), "m".into(), Default::default(), group).await;
    assert_code(refused, 540, "a member needs every partition's replica on its node");
    // (540 is a connection error.) Without a group, the node reads the partition it lacks
    // through the transport.
    let conn = cluster.connect(without).await;
    let reader = conn.create_channel().await.expect("channel");
    reader.basic_qos(10, BasicQosOptions::default()).await.expect("qos");
    reader.basic_consume("parts".into(), "r".into(), Default::default(), FieldTable::default()).await.expect("consume");
}

/// Waits until `node` lists `stream` in `state` (see [`listed_in_state`]).
async fn wait_for_state(cluster: &Cluster, node: usize, stream: &str, state: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !listed_in_state(cluster, node, stream, state) {
        assert!(Instant::now() < deadline, "node {node} never listed {stream} {state}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `stream_status`'s members, once it knows a writer: (role, node).
async fn stream_status(cluster: &Cluster, node: usize, stream: &str) -> Vec<(String, String)> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = ctl(cluster, node, &["stream_status", stream]);
        let roles = status.lines().filter_map(|line| line.split_once(": "));
        let members: Vec<(String, String)> = roles
            .filter(|(role, _)| ["writer", "replica"].contains(role))
            .map(|(role, node)| (role.into(), node.into()))
            .collect();
        if members.iter().any(|(role, node)| role == "writer" && node != "(none known)") {
            return members;
        }
        assert!(Instant::now() < deadline, "no writer known on node {node}: {status}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_replica_and_delete_replica_move_a_stream_between_nodes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cluster = start_cluster(dir.path(), false).await;
    let a = cluster.connect(0).await;
    let ch = a.create_channel().await.expect("channel");
    let two = stream_args(&[("x-initial-cluster-size", AMQPValue::LongUInt(2))]);
    ch.queue_declare("moved".into(), durable(), two).await.expect("declare on a formed cluster");
    let new = node_without_replica(&cluster, "moved");
    assert_eq!(stream_status(&cluster, 0, "moved").await.len(), 2, "two replicas to begin with");

    // One entry per publish: the group snapshots (every 1,024 entries) and purges its log
    // behind, so the new replica catches up from a snapshot and another replica's segments.
    let publisher = confirm_channel(&a).await;
    let count = 2_500u64;
    for n in 0..count {
        let body = format!("record {n:05} {}", "y".repeat((n % 89) as usize));
        assert_eq!(publish_within(&publisher, "moved", body.as_bytes(), Duration::from_secs(10)).await, Some(true));
    }
    let on_a = read_back(&a, "moved", count as usize).await;

    ctl(&cluster, 0, &["add_replica", "moved", NAMES[new]]);
    wait_for_state(&cluster, new, "moved", "running").await;
    wait_for_count(&cluster, new, "moved", count as u32).await;
    let on_new = read_back(&cluster.connect(new).await, "moved", count as usize).await;
    assert!(on_new == on_a, "the new replica holds what A holds, at the same offsets");
    let log = cluster.nodes[new].as_ref().expect("running").log_lines().join("\n");
    assert!(log.contains("caught up from another replica"), "it installed a snapshot and fetched the records");
    let members = stream_status(&cluster, new, "moved").await;
    assert_eq!(members.len(), 3, "{members:?}");
    assert!(members.iter().any(|(_, node)| node == NAMES[new]), "{members:?}");

    // A's replica leaves (the writer hands over if it led): A forwards from then on.
    ctl(&cluster, new, &["delete_replica", "moved", NAMES[0]]);
    wait_for_state(&cluster, 0, "moved", "remote").await;
    let members = stream_status(&cluster, new, "moved").await;
    assert_eq!(members.len(), 2, "{members:?}");
    assert!(members.iter().all(|(_, node)| node != NAMES[0]), "{members:?}");
    let publisher = confirm_channel(&cluster.connect(0).await).await;
    for n in count..count + 100 {
        let body = format!("record {n:05} after");
        assert_eq!(publish_within(&publisher, "moved", body.as_bytes(), Duration::from_secs(10)).await, Some(true));
    }
    let all = read_back(&cluster.connect(new).await, "moved", count as usize + 100).await;
    assert!(all[..count as usize] == on_a[..], "the first records are unchanged");
    assert!(all.iter().enumerate().all(|(i, (offset, _))| *offset == i as u64), "offsets stay dense");
    // A remembers across a restart that it only forwards.
    cluster.nodes[0].take().expect("running").kill9();
    cluster.restart(0);
    wait_for_state(&cluster, 0, "moved", "remote").await;
    let through_a = read_back(&cluster.connect(0).await, "moved", count as usize + 100).await;
    assert!(through_a == all, "A, restarted, reads the stream through the transport");

    // The verbs name what they act on.
    let missing = try_ctl(&cluster, 0, &["stream_status", "amq.rabbitmq.none"]);
    assert!(missing.is_err(), "no such stream: {missing:?}");
    let ch = cluster.connect(0).await.create_channel().await.expect("channel");
    ch.queue_declare("classic".into(), durable(), FieldTable::default()).await.expect("a classic queue");
    let refused = try_ctl(&cluster, 0, &["add_replica", "classic", NAMES[1]]).expect_err("a classic queue");
    assert!(refused.contains("not a quorum queue or a replicated stream"), "{refused}");
    let refused = try_ctl(&cluster, 0, &["stream_status", "classic"]).expect_err("a classic queue");
    assert!(refused.contains("'classic' is not a stream"), "{refused}");
    let refused = try_ctl(&cluster, 0, &["add_replica", "moved", "warren@nowhere"]).expect_err("an unknown node");
    assert!(refused.contains("warren@nowhere is not a node of this cluster"), "{refused}");
}
