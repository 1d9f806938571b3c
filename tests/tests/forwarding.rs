//! Queues used from nodes they do not live on, in a three-node cluster of real processes: a
//! classic queue lives on the node it was declared on, a quorum queue on its members, and a
//! client on any other node publishes to, gets from, consumes from, acks, nacks and purges it
//! through its own node, as RabbitMQ's clients expect of any node of a cluster.

use futures_util::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection};
use std::time::{Duration, Instant};
use warren_tests::cluster::start_cluster;
use warren_tests::*;

/// Declares `name` on `conn` with `arguments`, retrying while the cluster forms.
async fn declare(conn: &Connection, name: &str, arguments: FieldTable) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ch = conn.create_channel().await.expect("channel");
        match ch.queue_declare(name.into(), durable(), arguments.clone()).await {
            Ok(_) => return,
            // Refused while the cluster forms (no metadata leader yet).
            Err(_) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(200)).await,
            Err(error) => panic!("declare {name}: {error}"),
        }
    }
}

/// Publishes `bodies` to `queue` through the default exchange with confirms; whether each was
/// acked.
async fn publish_confirmed(conn: &Connection, queue: &str, bodies: impl Iterator<Item = Vec<u8>>) -> Vec<bool> {
    let ch = confirm_channel(conn).await;
    let mut confirms = Vec::new();
    for body in bodies {
        let persistent = BasicProperties::default().with_delivery_mode(2);
        let publish = ch.basic_publish("".into(), queue.into(), Default::default(), &body, persistent).await;
        confirms.push(publish.expect("publish"));
    }
    let mut acked = Vec::new();
    for confirm in confirms {
        acked.push(confirm.await.expect("confirm").is_ack());
    }
    acked
}

/// Uses `queue` (which lives on node 0 only) from nodes 1 and 2.
async fn use_from_other_nodes(cluster: &warren_tests::cluster::Cluster, queue: &str) {
    let (b, c) = (cluster.connect(1).await, cluster.connect(2).await);
    let count = 300u32;
    let acked = publish_confirmed(&b, queue, (0..count).map(|i| i.to_be_bytes().to_vec())).await;
    assert!(acked.iter().all(|a| *a), "every publish from B confirmed");
    // A declare's -ok waits for the other nodes 2 s at most: a loaded C may learn of it later.
    wait_until_known(&c, queue).await;
    assert_eq!(ready_on(&c, queue).await, count, "a passive declare on C counts what the home node holds");

    // basic.get from C, a nack with requeue, and the same message again, redelivered.
    let getter = c.create_channel().await.expect("channel");
    let first = getter.basic_get(queue.into(), BasicGetOptions::default()).await.expect("get").expect("a message");
    assert_eq!(first.delivery.data, 0u32.to_be_bytes());
    assert!(!first.delivery.redelivered);
    assert_eq!(first.message_count, count - 1, "the message count is the home node's");
    first.delivery.nack(BasicNackOptions { requeue: true, ..Default::default() }).await.expect("nack");
    let again = getter.basic_get(queue.into(), BasicGetOptions::default()).await.expect("get").expect("a message");
    assert_eq!(again.delivery.data, 0u32.to_be_bytes(), "requeued in place");
    assert!(again.delivery.redelivered, "and marked redelivered");
    again.delivery.ack(BasicAckOptions::default()).await.expect("ack");

    // A consumer on C with a prefetch gets the rest in order.
    let ch = c.create_channel().await.expect("channel");
    ch.basic_qos(20, BasicQosOptions::default()).await.expect("qos");
    let mut consumer =
        ch.basic_consume(queue.into(), "c".into(), Default::default(), FieldTable::default()).await.expect("consume");
    for i in 1..count {
        let delivery = next_delivery(&mut consumer).await;
        assert_eq!(delivery.data, i.to_be_bytes(), "in publish order");
        delivery.ack(BasicAckOptions::default()).await.expect("ack");
    }
    ch.basic_cancel("c".into(), BasicCancelOptions::default()).await.expect("cancel");

    // Acks reached the home node: the queue is empty there.
    let a = cluster.connect(0).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while ready_on(&a, queue).await != 0 {
        assert!(Instant::now() < deadline, "the acks from C reached the queue's home");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // queue.purge from B answers what the home node removed.
    let acked = publish_confirmed(&c, queue, (0..5u32).map(|i| i.to_be_bytes().to_vec())).await;
    assert!(acked.iter().all(|a| *a));
    let purger = b.create_channel().await.expect("channel");
    assert_eq!(purger.queue_purge(queue.into(), QueuePurgeOptions::default()).await.expect("purge"), 5);
    assert_eq!(ready_on(&a, queue).await, 0);
}

/// Waits until `conn`'s node knows `queue` (a passive declare finds it).
async fn wait_until_known(conn: &Connection, queue: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    loop {
        let ch = conn.create_channel().await.expect("channel");
        match ch.queue_declare(queue.into(), passive, FieldTable::default()).await {
            Ok(_) => return,
            Err(error) if Instant::now() > deadline => panic!("{queue} never known: {error}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

async fn ready_on(conn: &Connection, queue: &str) -> u32 {
    let ch = conn.create_channel().await.expect("channel");
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    ch.queue_declare(queue.into(), passive, FieldTable::default()).await.expect("passive declare").message_count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_classic_queue_is_used_from_every_node() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = start_cluster(dir.path(), false).await;
    let a = cluster.connect(0).await;
    declare(&a, "classic-on-a", FieldTable::default()).await;
    use_from_other_nodes(&cluster, "classic-on-a").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_queue_is_used_from_nodes_that_hold_no_replica() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = start_cluster(dir.path(), false).await;
    let a = cluster.connect(0).await;
    let one_replica = table(&[
        ("x-queue-type", text("quorum")),
        ("x-quorum-initial-group-size", lapin::types::AMQPValue::LongInt(1)),
    ]);
    declare(&a, "quorum-on-a", one_replica).await;
    use_from_other_nodes(&cluster, "quorum-on-a").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_home_node_dies_consumers_are_cancelled_and_publishes_nacked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cluster = start_cluster(dir.path(), false).await;
    let a = cluster.connect(0).await;
    declare(&a, "lives-on-a", FieldTable::default()).await;
    let b = cluster.connect(1).await;
    let ch = b.create_channel().await.expect("channel");
    let mut consumer = ch
        .basic_consume("lives-on-a".into(), "watcher".into(), Default::default(), FieldTable::default())
        .await
        .expect("consume");
    let acked = publish_confirmed(&b, "lives-on-a", std::iter::once(b"before".to_vec())).await;
    assert_eq!(acked, [true]);
    let delivery = next_delivery(&mut consumer).await;
    assert_eq!(delivery.data, b"before");
    delivery.ack(BasicAckOptions::default()).await.expect("ack");

    if let Some(node) = cluster.nodes[0].take() {
        node.kill9();
    }
    // The consumer is cancelled (basic.cancel): its stream ends.
    let ended = tokio::time::timeout(Duration::from_secs(10), consumer.next()).await.expect("the consumer ends");
    assert!(ended.is_none(), "no delivery after the home node died: {ended:?}");
    // A publish to it is nacked, never silently dropped.
    let acked = publish_confirmed(&b, "lives-on-a", std::iter::once(b"after".to_vec())).await;
    assert_eq!(acked, [false], "a publish to a queue whose node is down is nacked");
    // And a new consumer is refused with RabbitMQ's 404.
    let ch = b.create_channel().await.expect("channel");
    let refused =
        ch.basic_consume("lives-on-a".into(), "again".into(), Default::default(), FieldTable::default()).await;
    assert_code(refused, 404, "consume on a queue whose home node is down");

    // Once the node is back, the queue is reachable again, its message count intact.
    cluster.restart(0);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ch = b.create_channel().await.expect("channel");
        if let Ok(Some(_)) | Ok(None) = ch.basic_get("lives-on-a".into(), BasicGetOptions { no_ack: true }).await {
            break;
        }
        assert!(Instant::now() < deadline, "the queue is reachable again from B");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_is_read_by_offset_from_another_node() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = start_cluster(dir.path(), false).await;
    let a = cluster.connect(0).await;
    declare(&a, "stream-on-a", table(&[("x-queue-type", text("stream"))])).await;
    let b = cluster.connect(1).await;
    let acked = publish_confirmed(&b, "stream-on-a", (0..10u8).map(|i| vec![i])).await;
    assert!(acked.iter().all(|a| *a));

    let c = cluster.connect(2).await;
    let ch = c.create_channel().await.expect("channel");
    ch.basic_qos(100, BasicQosOptions::default()).await.expect("qos");
    let from_offset_4 = table(&[("x-stream-offset", lapin::types::AMQPValue::LongLongInt(4))]);
    let mut consumer = ch
        .basic_consume("stream-on-a".into(), "reader".into(), Default::default(), from_offset_4)
        .await
        .expect("consume");
    for i in 4..10u8 {
        let delivery = next_delivery(&mut consumer).await;
        assert_eq!(delivery.data, [i], "read from offset 4 on, in order");
        let headers = delivery.properties.headers().clone().unwrap_or_default();
        let offset = headers.inner().get("x-stream-offset").cloned();
        assert_eq!(offset, Some(lapin::types::AMQPValue::LongLongInt(i64::from(i))), "with its offset");
        delivery.ack(BasicAckOptions::default()).await.expect("ack");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_the_home_node_refuses_is_a_channel_error_before_any_consume_ok() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = start_cluster(dir.path(), false).await;
    let a = cluster.connect(0).await;
    declare(&a, "owned", FieldTable::default()).await;
    let on_a = a.create_channel().await.expect("channel");
    let exclusive = BasicConsumeOptions { exclusive: true, ..Default::default() };
    let _owner =
        on_a.basic_consume("owned".into(), "owner".into(), exclusive, FieldTable::default()).await.expect("consume");
    // From B the home node refuses a second consumer: 403, as RabbitMQ answers on one node.
    let b = cluster.connect(1).await;
    let on_b = b.create_channel().await.expect("channel");
    let refused = on_b.basic_consume("owned".into(), "second".into(), Default::default(), FieldTable::default()).await;
    assert_code(refused, 403, "a consumer of a queue with an exclusive consumer on its home node");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_no_ack_consumer_that_does_not_read_holds_its_home_node_back() {
    use amq_protocol::frame::AMQPFrame;
    use amq_protocol::protocol::{basic, AMQPClass};
    use warren_tests::raw_client::{Next, RawClient};
    const MESSAGES: usize = 2_000;
    const MIB: u64 = 1024 * 1024;
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = start_cluster(dir.path(), false).await;
    let a = cluster.connect(0).await;
    declare(&a, "flood", FieldTable::default()).await;
    let acked = publish_confirmed(&a, "flood", (0..MESSAGES).map(|_| vec![5u8; 64 * 1024])).await;
    assert!(acked.iter().all(|a| *a), "the backlog is stored on A");

    // A client of B consumes with no-ack and reads nothing.
    let b = cluster.nodes[1].as_ref().expect("running");
    let mut client = RawClient::handshake(b.amqp_addr).await;
    client.open_channel(1).await;
    let before = b.rss_bytes();
    let consume =
        basic::Consume { queue: "flood".into(), consumer_tag: "slow".into(), no_ack: true, ..Default::default() };
    client.send_method(1, AMQPClass::Basic(basic::AMQPMethod::Consume(consume))).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let grown = b.rss_bytes().saturating_sub(before);
    assert!(grown < 48 * MIB, "B grew {} MiB for a consumer that reads nothing", grown / MIB);
    let left = ready_on(&a, "flood").await;
    assert!(left as usize > MESSAGES / 2, "the home node held its messages back: {left} of {MESSAGES} left");

    // consume-ok first; then, read, every message arrives.
    let (_, first) = client.expect_method().await;
    assert!(matches!(first, AMQPClass::Basic(basic::AMQPMethod::ConsumeOk(_))), "consume-ok first: {first:?}");
    let mut delivered = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while delivered < MESSAGES {
        assert!(Instant::now() < deadline, "{delivered} of {MESSAGES} delivered");
        match client.next().await {
            Next::Frame(frame) => {
                if let AMQPFrame::Method(_, AMQPClass::Basic(basic::AMQPMethod::Deliver(_))) = *frame {
                    delivered += 1;
                }
            }
            other => panic!("after {delivered} deliveries: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_its_home_node_expires_is_gone_from_every_node() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = start_cluster(dir.path(), false).await;
    let a = cluster.connect(0).await;
    let expires = table(&[("x-expires", lapin::types::AMQPValue::LongInt(300))]);
    declare(&a, "fleeting", expires).await;
    // Unused on A for 300 ms: deleted through the catalog group, so B's stand-in goes too.
    // While B still had one, a publish there would be forwarded and nacked (no queue on A);
    // with none, it is unroutable, and confirmed (returned, being mandatory).
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let b = cluster.connect(1).await;
    let on_b = confirm_channel(&b).await;
    let mandatory = BasicPublishOptions { mandatory: true, ..Default::default() };
    let confirm = on_b
        .basic_publish("".into(), "fleeting".into(), mandatory, b"late", BasicProperties::default())
        .await
        .expect("publish")
        .await
        .expect("confirm");
    assert!(confirm.is_ack(), "no queue is left on B to forward to: {confirm:?}");
    assert!(confirm.take_message().is_some_and(|m| m.reply_code == 312), "returned as unroutable");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn if_unused_and_if_empty_are_the_home_nodes_to_judge() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = start_cluster(dir.path(), false).await;
    let a = cluster.connect(0).await;
    declare(&a, "busy", FieldTable::default()).await;
    let on_a = a.create_channel().await.expect("channel");
    let _consumer = on_a.basic_consume("busy".into(), "here".into(), Default::default(), FieldTable::default()).await;
    declare(&a, "full", FieldTable::default()).await;
    assert_eq!(publish_confirmed(&a, "full", std::iter::once(b"kept".to_vec())).await, [true]);

    // B's stand-ins know of no consumer and no message; A's queues have them.
    let b = cluster.connect(1).await;
    let if_unused = QueueDeleteOptions { if_unused: true, ..Default::default() };
    let refused = b.create_channel().await.expect("channel").queue_delete("busy".into(), if_unused).await;
    assert_code(refused, 406, "a queue with a consumer on its home node is in use");
    let if_empty = QueueDeleteOptions { if_empty: true, ..Default::default() };
    let refused = b.create_channel().await.expect("channel").queue_delete("full".into(), if_empty).await;
    assert_code(refused, 406, "a queue with a message on its home node is not empty");
    // Both are still there, from B too.
    assert_eq!(ready_on(&b, "full").await, 1);
    assert_eq!(publish_confirmed(&b, "busy", std::iter::once(b"still".to_vec())).await, [true]);
}
