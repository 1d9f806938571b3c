//! Quorum queues on one node, with lapin: every argument RabbitMQ's quorum queues take
//! (and the `x-max-priority` extension), confirms after the commit, `basic.get`, prefetch,
//! requeue with `x-delivery-count`, the delivery limit, dead-lettering at most and at least
//! once, TTLs, length limits, single active consumer, consumer priorities, `x-expires`,
//! purge, delete, and what a restart keeps; the extensions: tag filters and the delayed
//! exchange into a quorum queue.
//!
//! With `WARREN_CLUSTER_NODES=3` (`scripts/test.sh` runs them so too), each test runs
//! against a three-node cluster of real processes instead, through its second node: every
//! queue then has three replicas, and every confirm waits for a majority.

use futures_util::StreamExt;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, ExchangeKind};
use std::time::{Duration, Instant};
use warren_tests::*;

/// Where a test's broker runs: in this process, or a cluster of processes.
enum Target {
    Local(warren_tests::TestBroker),
    /// The cluster, and the directory its data lives in (removed when dropped).
    Cluster {
        cluster: warren_tests::cluster::Cluster,
        _dir: tempfile::TempDir,
    },
}

/// A broker for one test: see the module documentation.
async fn start_broker() -> Target {
    match std::env::var("WARREN_CLUSTER_NODES").ok().and_then(|n| n.parse::<usize>().ok()) {
        Some(nodes) if nodes > 1 => {
            let dir = tempfile::tempdir().expect("tempdir");
            let cluster = warren_tests::cluster::start_cluster(dir.path(), false).await;
            Target::Cluster { cluster, _dir: dir }
        }
        _ => Target::Local(warren_tests::start_broker().await),
    }
}

/// A connection to the broker (a cluster's second node), once it takes declares.
async fn connect(target: &Target) -> lapin::Connection {
    match target {
        Target::Local(broker) => warren_tests::connect(broker).await,
        Target::Cluster { cluster, .. } => {
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                // A declare refused while the catalog elects its first leader is a connection
                // error (541): the next try needs a new connection.
                let connection = cluster.connect(1).await;
                match takes_declares(&connection).await {
                    Ok(()) => return connection,
                    Err(_) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(200)).await,
                    Err(error) => panic!("the cluster did not form: {error}"),
                }
            }
        }
    }
}

/// Whether the cluster takes definitions (its catalog has a leader) through `connection`.
async fn takes_declares(connection: &lapin::Connection) -> Result<(), lapin::Error> {
    let ch = connection.create_channel().await?;
    let probe = ExchangeDeclareOptions { durable: true, ..Default::default() };
    ch.exchange_declare("formed".into(), ExchangeKind::Fanout, probe, FieldTable::default()).await
}

fn quorum(extra: &[(&str, AMQPValue)]) -> FieldTable {
    let mut arguments = table(extra);
    arguments.insert("x-queue-type".into(), text("quorum"));
    arguments
}

fn long(value: i64) -> AMQPValue {
    AMQPValue::LongLongInt(value)
}

async fn declare_quorum(ch: &lapin::Channel, name: &str, extra: &[(&str, AMQPValue)]) {
    ch.queue_declare(name.into(), durable(), quorum(extra)).await.expect("declare quorum queue");
}

/// Publishes `body` to `queue` and waits for the confirm; true if acked.
async fn publish_confirmed(ch: &lapin::Channel, queue: &str, body: &[u8], props: BasicProperties) -> bool {
    let confirm = ch
        .basic_publish("".into(), queue.into(), BasicPublishOptions::default(), body, props)
        .await
        .expect("publish")
        .await
        .expect("confirm");
    confirm.is_ack()
}

async fn publish_all(ch: &lapin::Channel, queue: &str, bodies: &[&[u8]]) {
    for body in bodies {
        assert!(publish_confirmed(ch, queue, body, BasicProperties::default()).await, "confirmed");
    }
}

async fn ready(conn: &lapin::Connection, queue: &str) -> u32 {
    let ch = channel(conn).await;
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    ch.queue_declare(queue.into(), passive, FieldTable::default()).await.expect("passive declare").message_count()
}

/// Polls `queue`'s ready count until it is `want`, for at most 5 s.
async fn wait_ready(conn: &lapin::Connection, queue: &str, want: u32) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let seen = ready(conn, queue).await;
        if seen == want {
            return;
        }
        assert!(Instant::now() < deadline, "{queue}: {seen} ready, expected {want}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn header<'a>(props: &'a BasicProperties, name: &str) -> Option<&'a AMQPValue> {
    props.headers().as_ref().and_then(|h| h.inner().get(name))
}

/// The `reason` of the newest `x-death` entry.
fn death_reason(props: &BasicProperties) -> Option<String> {
    let Some(AMQPValue::FieldArray(deaths)) = header(props, "x-death") else { return None };
    let Some(AMQPValue::FieldTable(newest)) = deaths.as_slice().first() else { return None };
    match newest.inner().get("reason") {
        Some(AMQPValue::LongString(reason)) => Some(reason.to_string()),
        _ => None,
    }
}

/// A fanout dead-letter exchange `dlx` bound to a classic queue `dlq`.
async fn dead_letter_setup(ch: &lapin::Channel) {
    ch.exchange_declare("dlx".into(), ExchangeKind::Fanout, Default::default(), FieldTable::default())
        .await
        .expect("dlx");
    ch.queue_declare("dlq".into(), durable(), FieldTable::default()).await.expect("dlq");
    ch.queue_bind("dlq".into(), "dlx".into(), "".into(), Default::default(), FieldTable::default())
        .await
        .expect("bind");
}

async fn get(ch: &lapin::Channel, queue: &str) -> Option<lapin::message::BasicGetMessage> {
    ch.basic_get(queue.into(), BasicGetOptions::default()).await.expect("basic.get")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_queue_must_be_durable_and_neither_exclusive_nor_auto_delete() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    for (what, options) in [
        ("non-durable", QueueDeclareOptions::default()),
        ("exclusive", QueueDeclareOptions { durable: true, exclusive: true, ..Default::default() }),
        ("auto-delete", QueueDeclareOptions { durable: true, auto_delete: true, ..Default::default() }),
    ] {
        let ch = channel(&conn).await;
        let declared = ch.queue_declare("q".into(), options, quorum(&[])).await;
        assert_code(declared, 406, what);
    }
    let ch = channel(&conn).await;
    let dlx = ch.queue_declare("q".into(), durable(), quorum(&[("x-overflow", text("reject-publish-dlx"))])).await;
    assert_code(dlx, 406, "reject-publish-dlx is not offered by quorum queues, as in RabbitMQ");
    let ch = channel(&conn).await;
    let strategy =
        ch.queue_declare("q".into(), durable(), quorum(&[("x-dead-letter-strategy", text("sometimes"))])).await;
    assert_code(strategy, 406, "an unknown dead-letter strategy");
    let ch = channel(&conn).await;
    declare_quorum(&ch, "q", &[("x-quorum-initial-group-size", long(3))]).await;
    let other_kind = ch.queue_declare("q".into(), durable(), FieldTable::default()).await;
    assert_code(other_kind, 406, "redeclared as a classic queue");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_filter_consumer_gets_exactly_the_matching_messages() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    ch.confirm_select(ConfirmSelectOptions::default()).await.expect("confirms");
    declare_quorum(&ch, "tagged", &[]).await;
    for (body, tag) in [("r1", Some("red")), ("plain", None), ("b1", Some("blue")), ("r2", Some("red"))] {
        let headers = tag.map(|t| table(&[("x-stream-filter-value", text(t))])).unwrap_or_default();
        assert!(
            publish_confirmed(&ch, "tagged", body.as_bytes(), BasicProperties::default().with_headers(headers)).await
        );
    }
    let consumer_ch = channel(&conn).await;
    consumer_ch.basic_qos(10, BasicQosOptions::default()).await.expect("qos");
    let filtered = table(&[("x-stream-filter", text("red"))]);
    let mut red =
        consumer_ch.basic_consume("tagged".into(), "red".into(), Default::default(), filtered).await.expect("consume");
    for want in ["r1", "r2"] {
        let delivery = next_delivery(&mut red).await;
        assert_eq!(delivery.data, want.as_bytes(), "only red, in order");
        delivery.ack(BasicAckOptions::default()).await.expect("ack");
    }
    wait_ready(&conn, "tagged", 2).await;
    let left: Vec<Vec<u8>> = [get(&ch, "tagged").await, get(&ch, "tagged").await]
        .into_iter()
        .map(|m| m.expect("a message nobody filtered for").delivery.data)
        .collect();
    assert_eq!(left, [b"plain".to_vec(), b"b1".to_vec()], "the others stayed in the queue, in order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_are_confirmed_and_got_in_order_and_requeued_in_place_with_a_delivery_count() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    declare_quorum(&ch, "q", &[]).await;
    publish_all(&ch, "q", &[b"one", b"two", b"three"]).await;
    assert_eq!(ready(&conn, "q").await, 3);

    let first = get(&ch, "q").await.expect("a message");
    assert_eq!(first.delivery.data, b"one");
    assert!(!first.delivery.redelivered);
    assert_eq!(first.message_count, 2, "messages left after it");
    assert_eq!(header(&first.delivery.properties, "x-delivery-count"), None, "first delivery");
    first.delivery.nack(BasicNackOptions { requeue: true, ..Default::default() }).await.expect("nack");

    let again = get(&ch, "q").await.expect("the same message, back in place");
    assert_eq!(again.delivery.data, b"one");
    assert!(again.delivery.redelivered);
    assert_eq!(header(&again.delivery.properties, "x-delivery-count"), Some(&long(1)));
    again.delivery.ack(BasicAckOptions::default()).await.expect("ack");
    let second = get(&ch, "q").await.expect("two");
    assert_eq!(second.delivery.data, b"two");
    second.delivery.ack(BasicAckOptions::default()).await.expect("ack");
    let third = ch.basic_get("q".into(), BasicGetOptions { no_ack: true }).await.expect("get").expect("three");
    assert_eq!(third.delivery.data, b"three");
    assert!(get(&ch, "q").await.is_none(), "empty");
    wait_ready(&conn, "q", 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_get_what_their_prefetch_allows_and_more_as_they_ack() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    declare_quorum(&ch, "q", &[]).await;
    let bodies: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i]).collect();
    for body in &bodies {
        assert!(publish_confirmed(&ch, "q", body, BasicProperties::default()).await);
    }
    let consumer_ch = channel(&conn).await;
    consumer_ch.basic_qos(3, BasicQosOptions::default()).await.expect("qos");
    let mut consumer = consumer_ch
        .basic_consume("q".into(), "c".into(), Default::default(), FieldTable::default())
        .await
        .expect("consume");
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(next_delivery(&mut consumer).await);
    }
    assert_no_delivery(&mut consumer, 300).await;
    let mut seen: Vec<Vec<u8>> = held.iter().map(|d| d.data.clone()).collect();
    for delivery in held {
        delivery.ack(BasicAckOptions::default()).await.expect("ack");
    }
    while seen.len() < bodies.len() {
        let delivery = next_delivery(&mut consumer).await;
        seen.push(delivery.data.clone());
        delivery.ack(BasicAckOptions::default()).await.expect("ack");
    }
    assert_eq!(seen, bodies, "in publish order");
    wait_ready(&conn, "q", 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_delivery_limit_a_message_is_dead_lettered_with_reason_delivery_limit() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    dead_letter_setup(&ch).await;
    declare_quorum(&ch, "q", &[("x-delivery-limit", long(2)), ("x-dead-letter-exchange", text("dlx"))]).await;
    publish_all(&ch, "q", &[b"poison"]).await;
    let mut consumer =
        ch.basic_consume("q".into(), "c".into(), Default::default(), FieldTable::default()).await.expect("consume");
    for expected_count in [None, Some(long(1)), Some(long(2))] {
        let delivery = next_delivery(&mut consumer).await;
        assert_eq!(header(&delivery.properties, "x-delivery-count").cloned(), expected_count);
        delivery.nack(BasicNackOptions { requeue: true, ..Default::default() }).await.expect("nack");
    }
    assert_no_delivery(&mut consumer, 300).await;
    wait_ready(&conn, "dlq", 1).await;
    let dead = get(&ch, "dlq").await.expect("dead letter");
    assert_eq!(dead.delivery.data, b"poison");
    assert_eq!(death_reason(&dead.delivery.properties).as_deref(), Some("delivery_limit"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_and_expired_messages_are_dead_lettered() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    dead_letter_setup(&ch).await;
    declare_quorum(&ch, "q", &[("x-dead-letter-exchange", text("dlx"))]).await;
    publish_all(&ch, "q", &[b"rejected"]).await;
    let got = get(&ch, "q").await.expect("message");
    got.delivery.reject(BasicRejectOptions { requeue: false }).await.expect("reject");
    wait_ready(&conn, "dlq", 1).await;
    let dead = get(&ch, "dlq").await.expect("dead letter");
    assert_eq!(death_reason(&dead.delivery.properties).as_deref(), Some("rejected"));
    dead.delivery.ack(BasicAckOptions::default()).await.expect("ack");

    let expiring = BasicProperties::default().with_expiration("50".into());
    assert!(publish_confirmed(&ch, "q", b"expired", expiring).await);
    wait_ready(&conn, "dlq", 1).await;
    let dead = get(&ch, "dlq").await.expect("dead letter");
    assert_eq!(dead.delivery.data, b"expired");
    assert_eq!(death_reason(&dead.delivery.properties).as_deref(), Some("expired"));
    wait_ready(&conn, "q", 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_ttl_expires_ready_messages() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    declare_quorum(&ch, "q", &[("x-message-ttl", long(100))]).await;
    publish_all(&ch, "q", &[b"a", b"b"]).await;
    wait_ready(&conn, "q", 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn length_limits_drop_the_head_or_refuse_the_publish() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    declare_quorum(&ch, "drop", &[("x-max-length", long(2))]).await;
    publish_all(&ch, "drop", &[b"1", b"2", b"3"]).await;
    let kept: Vec<Vec<u8>> = drain(&ch, "drop").await.into_iter().map(|m| m.delivery.data).collect();
    assert_eq!(kept, [b"2".to_vec(), b"3".to_vec()], "the oldest went");

    declare_quorum(&ch, "refuse", &[("x-max-length-bytes", long(10)), ("x-overflow", text("reject-publish"))]).await;
    assert!(publish_confirmed(&ch, "refuse", b"12345678", BasicProperties::default()).await);
    assert!(!publish_confirmed(&ch, "refuse", b"too much", BasicProperties::default()).await, "nacked");
    assert_eq!(ready(&conn, "refuse").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priorities_are_strict_levels_on_quorum_queues_too() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    declare_quorum(&ch, "q", &[("x-max-priority", AMQPValue::ShortShortUInt(10))]).await;
    for (body, priority) in [(b"low" as &[u8], 1u8), (b"high", 9), (b"mid", 5), (b"none", 0)] {
        assert!(publish_confirmed(&ch, "q", body, BasicProperties::default().with_priority(priority)).await);
    }
    let order: Vec<Vec<u8>> = drain(&ch, "q").await.into_iter().map(|m| m.delivery.data).collect();
    assert_eq!(order, [b"high".to_vec(), b"mid".to_vec(), b"low".to_vec(), b"none".to_vec()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_active_consumer_takes_everything_until_it_goes() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    declare_quorum(&ch, "q", &[("x-single-active-consumer", AMQPValue::Boolean(true))]).await;
    let first_ch = channel(&conn).await;
    let mut first = first_ch
        .basic_consume("q".into(), "first".into(), Default::default(), FieldTable::default())
        .await
        .expect("first");
    let second_ch = channel(&conn).await;
    let mut second = second_ch
        .basic_consume("q".into(), "second".into(), Default::default(), FieldTable::default())
        .await
        .expect("second");
    publish_all(&ch, "q", &[b"a", b"b"]).await;
    for expected in [b"a", b"b"] {
        let delivery = next_delivery(&mut first).await;
        assert_eq!(delivery.data, expected);
        delivery.ack(BasicAckOptions::default()).await.expect("ack");
    }
    assert_no_delivery(&mut second, 200).await;
    first_ch.close(200, "bye".into()).await.expect("close");
    publish_all(&ch, "q", &[b"c"]).await;
    assert_eq!(next_delivery(&mut second).await.data, b"c");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_higher_priority_consumer_is_served_first() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    declare_quorum(&ch, "q", &[]).await;
    let low_ch = channel(&conn).await;
    let mut low =
        low_ch.basic_consume("q".into(), "low".into(), Default::default(), FieldTable::default()).await.expect("low");
    let high_ch = channel(&conn).await;
    let arguments = table(&[("x-priority", AMQPValue::LongInt(10))]);
    let mut high = high_ch.basic_consume("q".into(), "high".into(), Default::default(), arguments).await.expect("high");
    publish_all(&ch, "q", &[b"a", b"b", b"c"]).await;
    for _ in 0..3 {
        next_delivery(&mut high).await;
    }
    assert_no_delivery(&mut low, 200).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_removes_ready_messages_and_delete_cancels_consumers() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    declare_quorum(&ch, "q", &[]).await;
    publish_all(&ch, "q", &[b"1", b"2", b"3"]).await;
    assert_eq!(ch.queue_purge("q".into(), QueuePurgeOptions::default()).await.expect("purge"), 3);
    assert_eq!(ready(&conn, "q").await, 0);
    let consumer_ch = channel(&conn).await;
    let mut consumer = consumer_ch
        .basic_consume("q".into(), "c".into(), Default::default(), FieldTable::default())
        .await
        .expect("consume");
    publish_all(&ch, "q", &[b"4"]).await;
    next_delivery(&mut consumer).await;
    ch.queue_delete("q".into(), QueueDeleteOptions::default()).await.expect("delete");
    let ended = tokio::time::timeout(Duration::from_secs(5), consumer.next()).await.expect("cancelled in time");
    assert!(ended.is_none(), "the consumer is cancelled by the broker");
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    assert_code(channel(&conn).await.queue_declare("q".into(), passive, FieldTable::default()).await, 404, "deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unused_queue_expires() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare_quorum(&ch, "q", &[("x-expires", long(200))]).await;
    // A passive declare uses the queue too, so the check waits past the expiry first.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    assert_code(channel(&conn).await.queue_declare("q".into(), passive, FieldTable::default()).await, 404, "expired");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_once_dead_lettering_keeps_a_message_until_its_target_has_it() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    let arguments = [
        ("x-dead-letter-exchange", text("dlx")),
        ("x-dead-letter-strategy", text("at-least-once")),
        ("x-overflow", text("reject-publish")),
    ];
    declare_quorum(&ch, "q", &arguments).await;
    publish_all(&ch, "q", &[b"kept"]).await;
    let got = get(&ch, "q").await.expect("message");
    got.delivery.reject(BasicRejectOptions { requeue: false }).await.expect("reject");
    // No dead-letter exchange yet: the message waits in the source.
    tokio::time::sleep(Duration::from_millis(300)).await;
    dead_letter_setup(&ch).await;
    wait_ready(&conn, "dlq", 1).await;
    let dead = get(&ch, "dlq").await.expect("dead letter");
    assert_eq!(dead.delivery.data, b"kept");
    assert_eq!(death_reason(&dead.delivery.properties).as_deref(), Some("rejected"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_keeps_every_message_and_redelivers_the_unacked_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = start_broker_in(dir.path()).await;
    let conn = warren_tests::connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    declare_quorum(&ch, "q", &[("x-delivery-limit", long(5))]).await;
    publish_all(&ch, "q", &[b"acked", b"held", b"ready"]).await;
    get(&ch, "q").await.expect("acked").delivery.ack(BasicAckOptions::default()).await.expect("ack");
    let held = get(&ch, "q").await.expect("held");
    assert_eq!(held.delivery.data, b"held");
    broker.shutdown().await;
    drop(conn);

    let broker = start_broker_in(dir.path()).await;
    let conn = warren_tests::connect(&broker).await;
    let ch = channel(&conn).await;
    wait_ready(&conn, "q", 2).await;
    let first = get(&ch, "q").await.expect("held, again");
    assert_eq!(first.delivery.data, b"held");
    assert!(first.delivery.redelivered);
    let second = get(&ch, "q").await.expect("ready");
    assert_eq!(second.delivery.data, b"ready");
    assert!(!second.delivery.redelivered);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_delayed_exchange_delivers_into_a_quorum_queue_when_due() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    ch.confirm_select(ConfirmSelectOptions::default()).await.expect("confirms");
    let delayed = ExchangeKind::Custom("x-delayed-message".into());
    let durable_exchange = ExchangeDeclareOptions { durable: true, ..Default::default() };
    ch.exchange_declare("later".into(), delayed, durable_exchange, table(&[("x-delayed-type", text("direct"))]))
        .await
        .expect("declare the delayed exchange");
    declare_quorum(&ch, "due", &[]).await;
    ch.queue_bind("due".into(), "later".into(), "k".into(), Default::default(), FieldTable::default())
        .await
        .expect("bind");
    let props = BasicProperties::default().with_delivery_mode(2).with_headers(table(&[("x-delay", long(400))]));
    let confirm = ch.basic_publish("later".into(), "k".into(), Default::default(), b"when due", props).await;
    assert!(confirm.expect("publish").await.expect("confirm").is_ack(), "held durably, confirmed");
    assert_eq!(ready(&conn, "due").await, 0, "not in the queue before its delay");
    wait_ready(&conn, "due", 1).await;
    let message = get(&ch, "due").await.expect("the delayed message");
    assert_eq!(message.delivery.data, b"when due");
}

/// Properties with header `name` set to `key` (a deduplication key).
fn keyed(name: &str, key: &str) -> BasicProperties {
    BasicProperties::default().with_headers(table(&[(name, text(key))]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deduplication_drops_a_message_whose_key_was_seen_and_still_confirms_it() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let refusing = channel(&conn).await;
    let on = quorum(&[("x-message-deduplication", AMQPValue::Boolean(true))]);
    assert_code(refusing.queue_declare("dedup".into(), durable(), on).await, 406, "deduplication needs x-cache-size");

    let ch = confirm_channel(&conn).await;
    declare_quorum(&ch, "dedup", &[("x-message-deduplication", AMQPValue::Boolean(true)), ("x-cache-size", long(100))])
        .await;
    let header = "x-deduplication-header";
    for (body, key) in [(b"a1", "a"), (b"b1", "b"), (b"a2", "a"), (b"c1", "c"), (b"b2", "b")] {
        assert!(publish_confirmed(&ch, "dedup", body, keyed(header, key)).await, "every publish is confirmed");
    }
    assert!(publish_confirmed(&ch, "dedup", b"n1", BasicProperties::default()).await);
    assert!(publish_confirmed(&ch, "dedup", b"n2", BasicProperties::default()).await, "no key, no deduplication");
    let kept: Vec<Vec<u8>> = drain(&ch, "dedup").await.into_iter().map(|m| m.delivery.data).collect();
    assert_eq!(kept, [b"a1".to_vec(), b"b1".to_vec(), b"c1".to_vec(), b"n1".to_vec(), b"n2".to_vec()]);
    assert!(publish_confirmed(&ch, "dedup", b"a3", keyed(header, "a")).await);
    assert_eq!(ready(&conn, "dedup").await, 0, "a key consumed is still in the window");

    // LavinMQ's argument names the header; and the window forgets a key after x-cache-ttl.
    let arguments = [
        ("x-message-deduplication", AMQPValue::Boolean(true)),
        ("x-cache-size", long(100)),
        ("x-cache-ttl", long(300)),
        ("x-deduplication-header", text("order-id")),
    ];
    declare_quorum(&ch, "orders", &arguments).await;
    assert!(publish_confirmed(&ch, "orders", b"1", keyed("order-id", "o-1")).await);
    assert!(publish_confirmed(&ch, "orders", b"1 again", keyed("order-id", "o-1")).await);
    assert!(publish_confirmed(&ch, "orders", b"other header", keyed(header, "o-1")).await);
    wait_ready(&conn, "orders", 2).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(publish_confirmed(&ch, "orders", b"1 later", keyed("order-id", "o-1")).await);
    wait_ready(&conn, "orders", 3).await;
}

/// As RabbitMQ 4: a delivery left unacked past the consumer timeout closes its channel, and
/// the message comes back counting one failed delivery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_past_the_consumer_timeout_comes_back_with_a_failed_delivery_counted() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    declare_quorum(&ch, "slow", &[("x-consumer-timeout", long(1_000))]).await;
    publish_all(&ch, "slow", &[b"held"]).await;

    let holder = channel(&conn).await;
    holder.basic_qos(1, BasicQosOptions::default()).await.expect("qos");
    let mut consumer = holder
        .basic_consume("slow".into(), "".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .expect("consume");
    next_delivery(&mut consumer).await;
    let mut watcher = close_watcher(&holder).await;
    assert_eq!(channel_close_code(&mut watcher).await, Some(406));

    wait_ready(&conn, "slow", 1).await;
    let again = get(&ch, "slow").await.expect("the message, back");
    assert_eq!(again.delivery.data, b"held");
    assert_eq!(header(&again.delivery.properties, "x-delivery-count"), Some(&long(1)));
}
