//! Super streams (partitioned streams) in RabbitMQ's layout, made with `warren ctl
//! add_super_stream` and used with lapin: routing by routing key to the partition bound with
//! it, and (the extension) by header `x-partition-key` to the partition the key hashes to as
//! RabbitMQ's stream clients compute it, keeping each key's order.

use futures_util::StreamExt;
use lapin::options::*;
use lapin::BasicProperties;
use std::collections::BTreeMap;
use warren_tests::*;

fn ctl(broker: &warren_tests::TestBroker, args: &[&str]) -> (bool, String, String) {
    let url = format!("http://{}", broker.http_addr.expect("management API"));
    warren_tests::process::run_ctl(&url, args)
}

fn ok(broker: &warren_tests::TestBroker, args: &[&str]) -> String {
    let (succeeded, out, err) = ctl(broker, args);
    assert!(succeeded, "warren ctl {args:?} failed: {err}");
    out
}

/// Each queue's message count, from `list_queues`.
fn counts(broker: &warren_tests::TestBroker) -> BTreeMap<String, u64> {
    let listed = ok(broker, &["list_queues", "name", "messages"]);
    listed
        .lines()
        .skip(1)
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            Some((fields.next()?.to_string(), fields.next()?.parse().ok()?))
        })
        .collect()
}

async fn publish(ch: &lapin::Channel, exchange: &str, routing_key: &str, body: &[u8], key: Option<&str>) {
    let mut properties = BasicProperties::default();
    if let Some(key) = key {
        properties = properties.with_headers(table(&[("x-partition-key", text(key))]));
    }
    let confirm = ch
        .basic_publish(exchange.into(), routing_key.into(), BasicPublishOptions::default(), body, properties)
        .await
        .expect("publish")
        .await
        .expect("confirm");
    assert!(confirm.is_ack(), "confirmed");
}

/// The bodies of a stream from its first offset, `count` of them.
async fn read_stream(conn: &lapin::Connection, stream: &str, count: usize) -> Vec<String> {
    let ch = conn.create_channel().await.expect("channel");
    ch.basic_qos(100, BasicQosOptions::default()).await.expect("qos");
    let arguments = table(&[("x-stream-offset", text("first"))]);
    let mut consumer = ch
        .basic_consume(stream.into(), "reader".into(), BasicConsumeOptions::default(), arguments)
        .await
        .expect("consume");
    let mut bodies = Vec::new();
    while bodies.len() < count {
        let delivery = tokio::time::timeout(std::time::Duration::from_secs(5), consumer.next())
            .await
            .expect("a delivery within 5 s")
            .expect("open")
            .expect("delivery");
        bodies.push(String::from_utf8_lossy(&delivery.data).into_owned());
        delivery.ack(BasicAckOptions::default()).await.expect("ack");
    }
    bodies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_super_stream_routes_by_routing_key_and_by_partition_key_hash() {
    let broker = start_broker().await;
    ok(&broker, &["add_super_stream", "orders", "--partitions", "3"]);
    let bindings = ok(&broker, &["list_bindings", "source_name", "destination_name", "routing_key"]);
    for i in 0..3 {
        let expected = ["orders".to_string(), format!("orders-{i}"), i.to_string()];
        assert!(
            bindings.lines().any(|line| line.split_whitespace().eq(expected.iter().map(String::as_str))),
            "{bindings}"
        );
    }

    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    publish(&ch, "orders", "1", b"by routing key", None).await;
    assert_eq!(counts(&broker).get("orders-1"), Some(&1), "routing key 1 goes to partition 1");

    // Where Python's mmh3 (mmh3.hash(key, 104729, signed=False) % 3) sends these keys: the
    // partition a RabbitMQ stream client would pick. The routing key is ignored then.
    publish(&ch, "orders", "1", b"hello", Some("hello")).await;
    publish(&ch, "orders", "1", b"customer-42", Some("customer-42")).await;
    let after = counts(&broker);
    assert_eq!((after["orders-0"], after["orders-1"], after["orders-2"]), (1, 1, 1), "{after:?}");

    // Many keys: each lands where the hash says, in publish order within its key.
    for i in 0..60 {
        let key = format!("customer-{}", i % 7);
        publish(&ch, "orders", "", format!("{key}/{i}").as_bytes(), Some(&key)).await;
    }
    let mut by_partition: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for i in 0..60 {
        let key = format!("customer-{}", i % 7);
        let partition = warren_delivery::exchange::super_stream::partition_index(key.as_bytes(), 3);
        by_partition.entry(partition).or_default().push(format!("{key}/{i}"));
    }
    let before = [vec!["hello"], vec!["by routing key"], vec!["customer-42"]];
    for (partition, expected) in &by_partition {
        let stream = format!("orders-{partition}");
        let first = &before[*partition];
        let read = read_stream(&conn, &stream, first.len() + expected.len()).await;
        assert_eq!(&read[..first.len()], first.as_slice(), "{stream}");
        assert_eq!(&read[first.len()..], expected.as_slice(), "{stream}: its keys' messages, in order");
    }

    // A fourth partition, bound with the next order, takes its share of keys from then on.
    ok(&broker, &["add_partitions", "orders"]);
    let bindings = ok(&broker, &["list_bindings", "source_name", "destination_name", "routing_key", "arguments"]);
    let added = bindings.lines().find(|l| l.split_whitespace().take(3).eq(["orders", "orders-3", "3"]));
    assert!(added.is_some_and(|l| l.contains(r#""x-stream-partition-order":3"#)), "{bindings}");
    let key = (0..)
        .map(|i| format!("new-{i}"))
        .find(|key| warren_delivery::exchange::super_stream::partition_index(key.as_bytes(), 4) == 3)
        .expect("some key hashes to the fourth partition");
    publish(&ch, "orders", "", b"to the new partition", Some(&key)).await;
    assert_eq!(counts(&broker).get("orders-3"), Some(&1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_super_stream_takes_routing_keys_and_delete_super_stream_removes_it_all() {
    let broker = start_broker().await;
    ok(&broker, &["add_super_stream", "regions", "--routing-keys", "eu,us,apac", "--max-age", "7D"]);
    let queues = ok(&broker, &["list_queues", "name", "type"]);
    for name in ["regions-eu", "regions-us", "regions-apac"] {
        assert!(queues.lines().any(|l| l.split_whitespace().eq([name, "stream"])), "{queues}");
    }
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    publish(&ch, "regions", "us", b"to us", None).await;
    assert_eq!(counts(&broker).get("regions-us"), Some(&1));
    // Redeclaring a partition with other retention is refused: the arguments were applied.
    let probe = conn.create_channel().await.expect("channel");
    let other = table(&[("x-queue-type", text("stream")), ("x-max-age", text("1D"))]);
    assert_code(probe.queue_declare("regions-eu".into(), durable(), other).await, 406, "x-max-age was 7D");

    // A partition added later takes the others' arguments; a key already bound is refused.
    ok(&broker, &["add_partitions", "regions", "--routing-keys", "latam"]);
    publish(&ch, "regions", "latam", b"to latam", None).await;
    assert_eq!(counts(&broker).get("regions-latam"), Some(&1));
    let probe = conn.create_channel().await.expect("channel");
    let other = table(&[("x-queue-type", text("stream")), ("x-max-age", text("1D"))]);
    assert_code(probe.queue_declare("regions-latam".into(), durable(), other).await, 406, "x-max-age is 7D");
    let (succeeded, _, err) = ctl(&broker, &["add_partitions", "regions", "--routing-keys", "us"]);
    assert!(!succeeded && err.contains("already has a partition with routing key 'us'"), "{err}");

    ok(&broker, &["delete_super_stream", "regions"]);
    assert!(counts(&broker).is_empty(), "{:?}", counts(&broker));
    assert!(!ok(&broker, &["list_exchanges"]).contains("regions"));

    for (args, says) in [
        (&["add_super_stream", "bad", "--partitions", "0"][..], "1 to 1024 partitions"),
        (&["add_super_stream", "bad", "--routing-keys", "a,b,a"][..], "'a' is given twice"),
        (&["delete_super_stream", "amq.direct"][..], "not a super stream"),
        (&["add_partitions", "amq.direct"][..], "not a super stream"),
    ] {
        let (succeeded, _, err) = ctl(&broker, args);
        assert!(!succeeded && err.contains(says), "{args:?}: {err}");
    }
}

fn long_header(delivery: &lapin::message::Delivery, name: &str) -> Option<i64> {
    match delivery.properties.headers().as_ref()?.inner().get(name)? {
        lapin::types::AMQPValue::LongLongInt(value) => Some(*value),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consuming_a_super_stream_reads_every_partition_under_one_tag() {
    let broker = start_broker().await;
    ok(&broker, &["add_super_stream", "events", "--partitions", "3"]);
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    for i in 0..30 {
        let key = format!("user-{}", i % 5);
        publish(&ch, "events", "", format!("{key}/{i}").as_bytes(), Some(&key)).await;
    }

    let consumer_ch = conn.create_channel().await.expect("channel");
    consumer_ch.basic_qos(10, BasicQosOptions::default()).await.expect("qos");
    let arguments = table(&[("x-stream-offset", text("first"))]);
    let mut consumer = consumer_ch
        .basic_consume("events".into(), "all".into(), BasicConsumeOptions::default(), arguments)
        .await
        .expect("consume a super stream by its name");
    let mut by_partition: BTreeMap<i64, Vec<(i64, String)>> = BTreeMap::new();
    for _ in 0..30 {
        let delivery = tokio::time::timeout(std::time::Duration::from_secs(5), consumer.next())
            .await
            .expect("a delivery within 5 s")
            .expect("open")
            .expect("delivery");
        let partition = long_header(&delivery, "x-stream-partition").expect("x-stream-partition");
        let offset = long_header(&delivery, "x-stream-offset").expect("x-stream-offset");
        by_partition.entry(partition).or_default().push((offset, String::from_utf8_lossy(&delivery.data).into()));
        delivery.ack(BasicAckOptions::default()).await.expect("ack");
    }
    for (partition, read) in &by_partition {
        let offsets: Vec<i64> = read.iter().map(|(offset, _)| *offset).collect();
        assert_eq!(offsets, (0..read.len() as i64).collect::<Vec<_>>(), "partition {partition} from its first offset");
        for (_, body) in read {
            let key = body.split('/').next().expect("key");
            let expected = warren_delivery::exchange::super_stream::partition_index(key.as_bytes(), 3);
            assert_eq!(*partition, expected as i64, "{body} came from the partition its key hashes to");
        }
    }
    assert_eq!(by_partition.values().map(Vec::len).sum::<usize>(), 30);

    let listed = ok(&broker, &["list_consumers", "queue_name", "consumer_tag"]);
    let parts = listed.lines().filter(|line| line.split_whitespace().nth(1) == Some("all")).count();
    assert_eq!(parts, 3, "one consumer per partition under the tag: {listed}");

    // One cancel ends every partition's part: nothing more arrives.
    consumer_ch.basic_cancel("all".into(), BasicCancelOptions::default()).await.expect("cancel");
    publish(&ch, "events", "", b"after the cancel", Some("user-1")).await;
    let more = tokio::time::timeout(std::time::Duration::from_millis(300), consumer.next()).await;
    assert!(!matches!(more, Ok(Some(Ok(_)))), "a delivery after the cancel: {more:?}");
    let listed = ok(&broker, &["list_consumers", "queue_name", "consumer_tag"]);
    assert!(!listed.lines().any(|line| line.split_whitespace().nth(1) == Some("all")), "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_group_shares_the_partitions_and_rebalances_when_members_come_and_go() {
    use warren_tests::partition_group::*;
    let broker = start_broker().await;
    ok(&broker, &["add_super_stream", "orders", "--partitions", "6"]);
    let record: Record = Default::default();
    let mut stops = Vec::new();
    let mut members = Vec::new();
    for member in 0..3 {
        let (stop, stopping) = tokio::sync::watch::channel(false);
        let conn = connect(&broker).await;
        members.push(tokio::spawn(run_member(conn, member, "orders", "g", record.clone(), stopping)));
        stops.push(stop);
    }
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    let publisher = tokio::spawn(async move { publish_keyed(&ch, "orders", 1_500).await });
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    // Member 1 dies mid-stream (its connection closes with deliveries unacked); member 3 joins.
    stops[1].send_replace(true);
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let conn = connect(&broker).await;
    members.push(tokio::spawn(run_member(conn, 3, "orders", "g", record.clone(), stopping)));
    stops.push(stop);
    let published = publisher.await.expect("publisher");
    assert!(wait_for_all(&record, published.len(), std::time::Duration::from_secs(30)).await, "all consumed");
    let partition_of = |key: &str| warren_delivery::exchange::super_stream::partition_index(key.as_bytes(), 6) as i64;
    let recorded = record.lock().expect("record").clone();
    let report = check(&recorded, &published, partition_of);
    let readers: std::collections::BTreeSet<usize> = recorded.iter().map(|c| c.member).collect();
    assert!(readers.contains(&0) && readers.contains(&2) && readers.contains(&3), "the members shared: {readers:?}");
    eprintln!("group of 3 on 6 partitions, one died, one joined: {report:?}");
    for stop in stops {
        stop.send_replace(true);
    }
    for member in members {
        member.await.expect("member");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_kills_a_rebalance_hands_over_without_a_message_processed_twice() {
    use warren_tests::partition_group::*;
    let broker = start_broker().await;
    ok(&broker, &["add_super_stream", "calm", "--partitions", "6"]);
    let record: Record = Default::default();
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let first = tokio::spawn(run_member(connect(&broker).await, 0, "calm", "g", record.clone(), stopping.clone()));
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    let publisher = tokio::spawn(async move { publish_keyed(&ch, "calm", 1_000).await });
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    // Two members join while the first is reading every partition: half move, handed over
    // once what is in flight is settled.
    let second = tokio::spawn(run_member(connect(&broker).await, 1, "calm", "g", record.clone(), stopping.clone()));
    let third = tokio::spawn(run_member(connect(&broker).await, 2, "calm", "g", record.clone(), stopping));
    let published = publisher.await.expect("publisher");
    assert!(wait_for_all(&record, published.len(), std::time::Duration::from_secs(30)).await, "all consumed");
    let partition_of = |key: &str| warren_delivery::exchange::super_stream::partition_index(key.as_bytes(), 6) as i64;
    let recorded = record.lock().expect("record").clone();
    let report = check(&recorded, &published, partition_of);
    assert_eq!(report.twice, 0, "no message processed twice without a kill: {report:?}");
    assert!(report.moves >= 4, "partitions moved to the new members: {report:?}");
    // In the end each member reads two partitions, each partition one member.
    let last_reader: BTreeMap<i64, usize> = recorded.iter().map(|c| (c.partition, c.member)).collect();
    let mut shares: BTreeMap<usize, usize> = BTreeMap::new();
    for member in last_reader.values() {
        *shares.entry(*member).or_default() += 1;
    }
    assert_eq!(shares, BTreeMap::from([(0, 2), (1, 2), (2, 2)]), "two partitions each: {last_reader:?}");
    stop.send_replace(true);
    for member in [first, second, third] {
        member.await.expect("member");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_moves_after_the_rebalance_timeout_when_its_member_does_not_settle() {
    let broker = start_broker().await;
    ok(&broker, &["add_super_stream", "slow", "--partitions", "2"]);
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    for i in 0..20 {
        let key = format!("k{i}");
        publish(&ch, "slow", "", format!("{key}/{i}").as_bytes(), Some(&key)).await;
    }
    let group = |timeout: lapin::types::AMQPValue| {
        table(&[("x-stream-offset", text("first")), ("x-consumer-group", text("g")), ("x-rebalance-timeout", timeout)])
    };
    let refused = conn.create_channel().await.expect("channel");
    refused.basic_qos(10, BasicQosOptions::default()).await.expect("qos");
    let bad = refused.basic_consume("slow".into(), "bad".into(), BasicConsumeOptions::default(), group(text("soon")));
    assert_code(bad.await, 406, "x-rebalance-timeout must be milliseconds");

    // A takes both partitions and never settles what it gets.
    let holder = conn.create_channel().await.expect("channel");
    holder.basic_qos(100, BasicQosOptions::default()).await.expect("qos");
    let ms = |n: i64| lapin::types::AMQPValue::LongLongInt(n);
    let mut a = holder.basic_consume("slow".into(), "a".into(), Default::default(), group(ms(500))).await.expect("a");
    let mut held = 0;
    while tokio::time::timeout(std::time::Duration::from_millis(500), a.next()).await.is_ok_and(|d| d.is_some()) {
        held += 1;
    }
    assert_eq!(held, 20, "A reads both partitions");
    // B joins: one partition moves to it once A's rebalance timeout passes, and B reads that
    // partition from the group's committed offset: A's unsettled deliveries come again.
    let joined = std::time::Instant::now();
    let taker = conn.create_channel().await.expect("channel");
    taker.basic_qos(100, BasicQosOptions::default()).await.expect("qos");
    let mut b = taker.basic_consume("slow".into(), "b".into(), Default::default(), group(ms(500))).await.expect("b");
    let first = tokio::time::timeout(std::time::Duration::from_secs(5), b.next()).await.expect("B gets a partition");
    let waited = joined.elapsed();
    let first = first.expect("open").expect("delivery");
    assert!(waited >= std::time::Duration::from_millis(450), "handed over after the timeout, not before: {waited:?}");
    assert_eq!(long_header(&first, "x-stream-offset"), Some(0), "from the committed offset: nothing was settled");
}
