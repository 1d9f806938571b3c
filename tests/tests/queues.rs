//! Queues with lapin: declare (server-named, passive, equivalence, reserved names), counts,
//! exclusive and auto-delete queues, purge, delete (if-unused, if-empty), unbind, and the
//! broker's basic.cancel when a queue is deleted under a consumer.

use std::time::Duration;

use futures_util::StreamExt;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::BasicProperties;
use warren_tests::*;

const ACCESS_REFUSED: u16 = 403;
const NOT_FOUND: u16 = 404;
const RESOURCE_LOCKED: u16 = 405;
const PRECONDITION_FAILED: u16 = 406;

async fn declare_with(ch: &lapin::Channel, name: &str, options: QueueDeclareOptions) -> lapin::Result<lapin::Queue> {
    ch.queue_declare(name.into(), options, FieldTable::default()).await
}

async fn declare(ch: &lapin::Channel, name: &str) -> lapin::Queue {
    declare_with(ch, name, QueueDeclareOptions::default())
        .await
        .unwrap_or_else(|error| panic!("declare queue {name}: {error}"))
}

async fn passive(ch: &lapin::Channel, name: &str) -> lapin::Result<lapin::Queue> {
    declare_with(ch, name, QueueDeclareOptions { passive: true, ..Default::default() }).await
}

/// Publishes through the default exchange and waits for the confirm (confirm-mode channel).
async fn publish(ch: &lapin::Channel, queue: &str, body: &[u8]) {
    publish_to(ch, "", queue, body).await;
}

async fn publish_to(ch: &lapin::Channel, exchange: &str, key: &str, body: &[u8]) {
    ch.basic_publish(exchange.into(), key.into(), BasicPublishOptions::default(), body, BasicProperties::default())
        .await
        .unwrap_or_else(|error| panic!("publish to {exchange:?} with {key:?}: {error}"))
        .await
        .unwrap_or_else(|error| panic!("confirm of publish to {exchange:?} with {key:?}: {error}"));
}

async fn publish_n(ch: &lapin::Channel, queue: &str, count: u32) {
    for i in 0..count {
        publish(ch, queue, &i.to_be_bytes()).await;
    }
}

async fn consume(ch: &lapin::Channel, queue: &str, tag: &str) -> lapin::Consumer {
    ch.basic_consume(queue.into(), tag.into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .unwrap_or_else(|error| panic!("consume {queue}: {error}"))
}

async fn message_count(ch: &lapin::Channel, queue: &str) -> u32 {
    passive(ch, queue).await.unwrap_or_else(|error| panic!("passive declare of {queue}: {error}")).message_count()
}

/// Waits until a passive declare of `queue` fails with 404, for deletions the broker performs
/// on its own (auto-delete, exclusive owner gone).
async fn assert_deleted_soon(conn: &lapin::Connection, queue: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut ch = channel(conn).await;
    loop {
        match passive(&ch, queue).await {
            Err(error) if reply_code(&error) == Some(NOT_FOUND) => return,
            Err(error) => panic!("passive declare of {queue}: unexpected error {error}"),
            Ok(_) if tokio::time::Instant::now() >= deadline => panic!("queue {queue} still exists after 5 s"),
            Ok(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
        if !ch.status().connected() {
            ch = channel(conn).await;
        }
    }
}

/// Checks that the connection survived a channel error: a new channel works.
async fn assert_connection_usable(conn: &lapin::Connection) {
    let ch = channel(conn).await;
    declare_with(&ch, "", QueueDeclareOptions { exclusive: true, ..Default::default() })
        .await
        .expect("connection still usable after a channel error");
}

#[tokio::test]
async fn server_named_queue_gets_an_amq_gen_name() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    let first = declare(&ch, "").await;
    let second = declare(&ch, "").await;
    for queue in [&first, &second] {
        assert!(queue.name().as_str().starts_with("amq.gen-"), "server-named queue {:?}", queue.name());
        assert!(queue.name().as_str().len() > "amq.gen-".len());
    }
    assert_ne!(first.name(), second.name(), "each server-named queue gets its own name");

    // The name is usable like any other.
    let name = first.name().as_str();
    passive(&ch, name).await.expect("passive declare of the server-named queue");
    publish(&ch, name, b"to a generated name").await;
    let got = ch.basic_get(name.into(), BasicGetOptions { no_ack: true }).await.expect("get").expect("a message");
    assert_eq!(got.delivery.data, b"to a generated name");
    broker.shutdown().await;
}

#[tokio::test]
async fn declare_ok_reports_ready_messages_and_consumers() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    let ok = declare(&ch, "counted").await;
    assert_eq!((ok.message_count(), ok.consumer_count()), (0, 0));
    publish_n(&ch, "counted", 3).await;
    let ok = declare(&ch, "counted").await;
    assert_eq!((ok.message_count(), ok.consumer_count()), (3, 0), "redeclare");
    let ok = passive(&ch, "counted").await.expect("passive");
    assert_eq!((ok.message_count(), ok.consumer_count()), (3, 0), "passive");

    // A consumer with prefetch 1 holds one message unacked: it is no longer counted as ready.
    let consumer_ch = channel(&conn).await;
    consumer_ch.basic_qos(1, BasicQosOptions::default()).await.expect("qos");
    let mut consumer = consume(&consumer_ch, "counted", "c1").await;
    let first = next_delivery(&mut consumer).await;
    let ok = passive(&ch, "counted").await.expect("passive");
    assert_eq!((ok.message_count(), ok.consumer_count()), (2, 1), "with one unacked delivery");

    first.ack(BasicAckOptions::default()).await.expect("ack");
    next_delivery(&mut consumer).await.ack(BasicAckOptions::default()).await.expect("ack");
    next_delivery(&mut consumer).await.ack(BasicAckOptions::default()).await.expect("ack");
    let ok = passive(&ch, "counted").await.expect("passive");
    assert_eq!((ok.message_count(), ok.consumer_count()), (0, 1), "all acked");

    consumer_ch.basic_cancel("c1".into(), BasicCancelOptions::default()).await.expect("cancel");
    let ok = passive(&ch, "counted").await.expect("passive");
    assert_eq!(ok.consumer_count(), 0, "after cancel");
    broker.shutdown().await;
}

#[tokio::test]
async fn passive_declare_of_missing_queue_is_404() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    assert_code(passive(&ch, "no-such-queue").await, NOT_FOUND, "passive declare");
    assert_connection_usable(&conn).await;
    // A passive declare never creates the queue.
    let ch = channel(&conn).await;
    assert_code(passive(&ch, "no-such-queue").await, NOT_FOUND, "second passive declare");
    broker.shutdown().await;
}

#[tokio::test]
async fn redeclare_with_different_properties_is_406() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare(&ch, "plain").await;
    let ch = channel(&conn).await;
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    assert_code(declare_with(&ch, "plain", durable).await, PRECONDITION_FAILED, "redeclare as durable");
    let ch = channel(&conn).await;
    let auto_delete = QueueDeclareOptions { auto_delete: true, ..Default::default() };
    assert_code(declare_with(&ch, "plain", auto_delete).await, PRECONDITION_FAILED, "redeclare as auto-delete");

    // And the other way round: a durable queue redeclared as transient.
    let ch = channel(&conn).await;
    declare_with(&ch, "kept", durable).await.expect("declare durable");
    assert_code(declare_with(&ch, "kept", QueueDeclareOptions::default()).await, PRECONDITION_FAILED, "as transient");

    // The matching declaration is still accepted.
    let ch = channel(&conn).await;
    declare(&ch, "plain").await;
    declare_with(&ch, "kept", durable).await.expect("redeclare durable");
    broker.shutdown().await;
}

#[tokio::test]
async fn exclusive_queue_is_locked_to_its_connection_and_dies_with_it() {
    let broker = start_broker().await;
    let owner = connect(&broker).await;
    let owner_ch = confirm_channel(&owner).await;
    declare_with(&owner_ch, "mine", QueueDeclareOptions { exclusive: true, ..Default::default() })
        .await
        .expect("declare exclusive");
    publish(&owner_ch, "mine", b"private").await;
    // The owner uses it freely, from any of its channels.
    let other_owner_ch = channel(&owner).await;
    assert_eq!(message_count(&other_owner_ch, "mine").await, 1);

    let other = connect(&broker).await;
    let ch = channel(&other).await;
    assert_code(passive(&ch, "mine").await, RESOURCE_LOCKED, "passive declare");
    let ch = channel(&other).await;
    let result =
        ch.basic_consume("mine".into(), "".into(), BasicConsumeOptions::default(), FieldTable::default()).await;
    assert_code(result, RESOURCE_LOCKED, "consume");
    let ch = channel(&other).await;
    assert_code(ch.basic_get("mine".into(), BasicGetOptions::default()).await, RESOURCE_LOCKED, "get");
    let ch = channel(&other).await;
    assert_code(ch.queue_purge("mine".into(), QueuePurgeOptions::default()).await, RESOURCE_LOCKED, "purge");
    let ch = channel(&other).await;
    assert_code(ch.queue_delete("mine".into(), QueueDeleteOptions::default()).await, RESOURCE_LOCKED, "delete");
    let ch = channel(&other).await;
    let result = ch
        .queue_bind("mine".into(), "amq.fanout".into(), "".into(), QueueBindOptions::default(), FieldTable::default())
        .await;
    assert_code(result, RESOURCE_LOCKED, "bind");
    assert_connection_usable(&other).await;

    // None of that touched the queue.
    assert_eq!(message_count(&other_owner_ch, "mine").await, 1);

    owner.close(200, "bye".into()).await.expect("close the owner");
    assert_deleted_soon(&other, "mine").await;
    // The name is free again.
    let ch = channel(&other).await;
    assert_eq!(declare(&ch, "mine").await.message_count(), 0);
    broker.shutdown().await;
}

/// RabbitMQ checks exclusivity strictly on a non-passive redeclare, before any other property:
/// another connection, or a mismatched `exclusive` flag, gets 405 RESOURCE_LOCKED, not 406.
#[tokio::test]
async fn redeclaring_with_a_different_exclusive_owner_is_405() {
    let broker = start_broker().await;
    let owner = connect(&broker).await;
    let ch = channel(&owner).await;
    let exclusive = QueueDeclareOptions { exclusive: true, ..Default::default() };
    declare_with(&ch, "mine", exclusive).await.expect("declare exclusive");
    declare(&ch, "shared").await;

    let other = connect(&broker).await;
    let ch = channel(&other).await;
    let not_exclusive = QueueDeclareOptions::default();
    assert_code(declare_with(&ch, "mine", not_exclusive).await, RESOURCE_LOCKED, "declare from another connection");
    let ch = channel(&other).await;
    assert_code(
        declare_with(&ch, "mine", exclusive).await,
        RESOURCE_LOCKED,
        "exclusive declare from another connection",
    );
    // On the owner's connection, the exclusive flag must match, too.
    let ch = channel(&owner).await;
    assert_code(declare_with(&ch, "mine", not_exclusive).await, RESOURCE_LOCKED, "owner redeclares as not exclusive");
    let ch = channel(&owner).await;
    assert_code(declare_with(&ch, "shared", exclusive).await, RESOURCE_LOCKED, "redeclare a shared queue as exclusive");
    broker.shutdown().await;
}

#[tokio::test]
async fn auto_delete_queue_goes_with_its_last_consumer() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    declare_with(&ch, "fleeting", QueueDeclareOptions { auto_delete: true, ..Default::default() })
        .await
        .expect("declare auto-delete");
    // Before it ever had a consumer, it stays, and basic.get does not count as one.
    publish(&ch, "fleeting", b"m").await;
    ch.basic_get("fleeting".into(), BasicGetOptions { no_ack: true }).await.expect("get").expect("a message");
    tokio::time::sleep(Duration::from_millis(100)).await;
    passive(&ch, "fleeting").await.expect("auto-delete queue exists before its first consumer");

    let _first = consume(&ch, "fleeting", "c1").await;
    let _second = consume(&ch, "fleeting", "c2").await;
    ch.basic_cancel("c1".into(), BasicCancelOptions::default()).await.expect("cancel c1");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let ok = passive(&ch, "fleeting").await.expect("one consumer left");
    assert_eq!(ok.consumer_count(), 1);

    ch.basic_cancel("c2".into(), BasicCancelOptions::default()).await.expect("cancel c2");
    assert_deleted_soon(&conn, "fleeting").await;
    broker.shutdown().await;
}

#[tokio::test]
async fn purge_returns_the_ready_count_and_leaves_unacked_messages() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    declare(&ch, "to-purge").await;
    publish_n(&ch, "to-purge", 5).await;

    let consumer_ch = channel(&conn).await;
    consumer_ch.basic_qos(2, BasicQosOptions::default()).await.expect("qos");
    let mut consumer = consume(&consumer_ch, "to-purge", "holder").await;
    let held = [next_delivery(&mut consumer).await, next_delivery(&mut consumer).await];
    assert_eq!(held[0].data, 0u32.to_be_bytes());
    assert_eq!(held[1].data, 1u32.to_be_bytes());

    let purged = ch.queue_purge("to-purge".into(), QueuePurgeOptions::default()).await.expect("purge");
    assert_eq!(purged, 3, "only the ready messages are purged");
    assert_eq!(message_count(&ch, "to-purge").await, 0);
    assert_eq!(ch.queue_purge("to-purge".into(), QueuePurgeOptions::default()).await.expect("purge"), 0);

    // The unacked messages survive the purge: closing their channel requeues them.
    consumer_ch.close(200, "done".into()).await.expect("close consumer channel");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while message_count(&ch, "to-purge").await != 2 {
        assert!(tokio::time::Instant::now() < deadline, "unacked messages not requeued");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    for expected in [0u32, 1] {
        let got = ch.basic_get("to-purge".into(), BasicGetOptions { no_ack: true }).await.expect("get");
        let got = got.expect("a requeued message");
        assert_eq!(got.delivery.data, expected.to_be_bytes());
        assert!(got.delivery.redelivered);
    }
    broker.shutdown().await;
}

#[tokio::test]
async fn delete_returns_the_message_count() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    declare(&ch, "doomed").await;
    publish_n(&ch, "doomed", 4).await;
    let deleted = ch.queue_delete("doomed".into(), QueueDeleteOptions::default()).await.expect("delete");
    assert_eq!(deleted, 4);
    assert_code(passive(&ch, "doomed").await, NOT_FOUND, "passive declare after delete");

    // A new queue of the same name starts empty.
    let ch = channel(&conn).await;
    assert_eq!(declare(&ch, "doomed").await.message_count(), 0);
    assert_eq!(ch.queue_delete("doomed".into(), QueueDeleteOptions::default()).await.expect("delete"), 0);
    broker.shutdown().await;
}

#[tokio::test]
async fn delete_if_unused_with_a_consumer_is_406() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let consumer_ch = channel(&conn).await;
    declare(&consumer_ch, "in-use").await;
    let _consumer = consume(&consumer_ch, "in-use", "user").await;

    let if_unused = QueueDeleteOptions { if_unused: true, ..Default::default() };
    let ch = channel(&conn).await;
    assert_code(ch.queue_delete("in-use".into(), if_unused).await, PRECONDITION_FAILED, "delete if_unused");
    let ch = channel(&conn).await;
    assert_eq!(passive(&ch, "in-use").await.expect("queue survives").consumer_count(), 1);

    consumer_ch.basic_cancel("user".into(), BasicCancelOptions::default()).await.expect("cancel");
    assert_eq!(ch.queue_delete("in-use".into(), if_unused).await.expect("delete if_unused once unused"), 0);
    assert_code(passive(&ch, "in-use").await, NOT_FOUND, "passive declare after delete");
    broker.shutdown().await;
}

#[tokio::test]
async fn delete_if_empty_with_messages_is_406() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    declare(&ch, "not-empty").await;
    publish(&ch, "not-empty", b"still here").await;

    let if_empty = QueueDeleteOptions { if_empty: true, ..Default::default() };
    assert_code(ch.queue_delete("not-empty".into(), if_empty).await, PRECONDITION_FAILED, "delete if_empty");

    let ch = channel(&conn).await;
    assert_eq!(message_count(&ch, "not-empty").await, 1, "the refused delete kept the message");
    let got = ch.basic_get("not-empty".into(), BasicGetOptions { no_ack: true }).await.expect("get");
    assert_eq!(got.expect("a message").delivery.data, b"still here");
    assert_eq!(ch.queue_delete("not-empty".into(), if_empty).await.expect("delete if_empty once empty"), 0);
    assert_code(passive(&ch, "not-empty").await, NOT_FOUND, "passive declare after delete");
    broker.shutdown().await;
}

#[tokio::test]
async fn unbind_stops_routing() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    declare(&ch, "listener").await;
    ch.queue_bind(
        "listener".into(),
        "amq.direct".into(),
        "k".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("bind");
    ch.queue_bind(
        "listener".into(),
        "amq.direct".into(),
        "k2".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("bind");
    publish_to(&ch, "amq.direct", "k", b"bound").await;
    assert_eq!(message_count(&ch, "listener").await, 1);

    ch.queue_unbind("listener".into(), "amq.direct".into(), "k".into(), FieldTable::default()).await.expect("unbind");
    publish_to(&ch, "amq.direct", "k", b"unbound").await;
    assert_eq!(message_count(&ch, "listener").await, 1, "no routing after unbind");
    // Only that binding went: the other key and the default exchange still route.
    publish_to(&ch, "amq.direct", "k2", b"other key").await;
    publish(&ch, "listener", b"default exchange").await;
    assert_eq!(message_count(&ch, "listener").await, 3);
    broker.shutdown().await;
}

#[tokio::test]
async fn deleting_a_queue_under_a_consumer_cancels_it() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let consumer_ch = confirm_channel(&conn).await;
    declare(&consumer_ch, "pulled").await;
    let mut consumer = consume(&consumer_ch, "pulled", "victim").await;
    publish(&consumer_ch, "pulled", b"before").await;
    next_delivery(&mut consumer).await.ack(BasicAckOptions::default()).await.expect("ack");

    let ch = channel(&conn).await;
    ch.queue_delete("pulled".into(), QueueDeleteOptions::default()).await.expect("delete");

    // The broker's basic.cancel ends the consumer stream.
    match tokio::time::timeout(Duration::from_secs(5), consumer.next()).await {
        Ok(None) => {}
        Ok(Some(item)) => panic!("expected the consumer to end, got {item:?}"),
        Err(_) => panic!("consumer not cancelled within 5 s of its queue's deletion"),
    }
    // The consumer's channel and the connection stay usable.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(consumer_ch.status().connected(), "the consumer's channel must stay open");
    declare(&consumer_ch, "pulled").await;
    publish(&consumer_ch, "pulled", b"after").await;
    assert_eq!(message_count(&consumer_ch, "pulled").await, 1, "no consumer left on the new queue");
    assert_eq!(passive(&ch, "pulled").await.expect("passive").consumer_count(), 0);
    broker.shutdown().await;
}

/// On the channel that deletes it, `delete-ok` comes before the `basic.cancel` of a consumer
/// that channel had on the queue, as in RabbitMQ: amqplib settles the delete only if its
/// answer comes first (its channel ignores replies once it starts closing, and a client that
/// closes on the cancel lost the delete's answer). A durable queue, so that the broker writes
/// its definitions between the two.
#[tokio::test]
async fn delete_ok_comes_before_the_cancel_of_the_deleting_channels_consumer() {
    use amq_protocol::protocol::{basic, queue, AMQPClass};
    use warren_tests::raw_client::RawClient;
    let broker = start_broker().await;
    let mut client = RawClient::handshake(broker.amqp_addr).await;
    client.open_channel(1).await;
    client.declare_queue(1, "deleted-under-me", true).await;
    let consume = basic::Consume {
        queue: "deleted-under-me".into(),
        consumer_tag: "mine".into(),
        no_local: false,
        no_ack: false,
        exclusive: false,
        nowait: false,
        arguments: FieldTable::default(),
    };
    client.send_method(1, AMQPClass::Basic(basic::AMQPMethod::Consume(consume))).await;
    client.expect_method().await;
    let delete = queue::Delete { queue: "deleted-under-me".into(), if_unused: false, if_empty: false, nowait: false };
    client.send_method(1, AMQPClass::Queue(queue::AMQPMethod::Delete(delete))).await;
    let (_, first) = client.expect_method().await;
    assert!(matches!(first, AMQPClass::Queue(queue::AMQPMethod::DeleteOk(_))), "delete-ok first, got {first:?}");
    let (_, second) = client.expect_method().await;
    assert!(
        matches!(&second, AMQPClass::Basic(basic::AMQPMethod::Cancel(c)) if c.consumer_tag.as_str() == "mine"),
        "then the cancel, got {second:?}"
    );
    broker.shutdown().await;
}

/// A client that hangs up right after its `queue.delete` (before the `delete-ok`) still has
/// the queue deleted, and the queue's consumers on other connections are told: a method the
/// broker has read runs to its end without the client that sent it.
#[tokio::test]
async fn a_delete_whose_client_hung_up_still_cancels_the_queues_consumers() {
    use amq_protocol::protocol::{queue, AMQPClass};
    use warren_tests::raw_client::RawClient;
    const ROUNDS: usize = 8;
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let consumer_ch = channel(&conn).await;
    let mut consumers = Vec::new();
    for round in 0..ROUNDS {
        let name = format!("hung-up-{round}");
        declare(&consumer_ch, &name).await;
        consumers.push((name.clone(), consume(&consumer_ch, &name, &name).await));
    }
    for (name, _) in &consumers {
        let mut client = RawClient::handshake(broker.amqp_addr).await;
        client.open_channel(1).await;
        let delete = queue::Delete { queue: name.as_str().into(), if_unused: false, if_empty: false, nowait: false };
        client.send_method(1, AMQPClass::Queue(queue::AMQPMethod::Delete(delete))).await;
        drop(client);
    }
    for (name, mut consumer) in consumers {
        match tokio::time::timeout(Duration::from_secs(5), consumer.next()).await {
            Ok(None) => {}
            Ok(Some(item)) => panic!("expected {name}'s consumer to end, got {item:?}"),
            Err(_) => panic!("{name}'s consumer not cancelled within 5 s of its deletion by a client that hung up"),
        }
        let error = passive(&channel(&conn).await, &name).await.expect_err("the queue is deleted");
        assert_eq!(reply_code(&error), Some(NOT_FOUND), "{name}: {error}");
    }
    broker.shutdown().await;
}

#[tokio::test]
async fn declaring_an_amq_prefixed_queue_is_403() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    assert_code(declare_with(&ch, "amq.foo", QueueDeclareOptions::default()).await, ACCESS_REFUSED, "declare amq.foo");
    let ch = channel(&conn).await;
    assert_code(passive(&ch, "amq.foo").await, NOT_FOUND, "amq.foo must not exist");
    assert_connection_usable(&conn).await;
    broker.shutdown().await;
}

fn args(entries: &[(&str, AMQPValue)]) -> FieldTable {
    let mut table = FieldTable::default();
    for (key, value) in entries {
        table.insert((*key).into(), value.clone());
    }
    table
}

async fn declare_args(ch: &lapin::Channel, name: &str, arguments: FieldTable) -> lapin::Result<lapin::Queue> {
    ch.queue_declare(name.into(), QueueDeclareOptions::default(), arguments).await
}

#[tokio::test]
async fn redeclare_with_a_different_x_argument_is_406() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let ttl = |millis: i32| args(&[("x-message-ttl", AMQPValue::LongInt(millis))]);
    declare_args(&ch, "ttl", ttl(1000)).await.expect("declare with x-message-ttl");
    declare_args(&ch, "ttl", ttl(1000)).await.expect("same redeclare");
    assert_code(declare_args(&ch, "ttl", ttl(2000)).await, PRECONDITION_FAILED, "another x-message-ttl");
    let ch = channel(&conn).await;
    assert_code(declare_args(&ch, "ttl", FieldTable::default()).await, PRECONDITION_FAILED, "without x-message-ttl");
    broker.shutdown().await;
}

#[tokio::test]
async fn redeclare_ignores_arguments_rabbitmq_does_not_check() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare_args(&ch, "loose", args(&[("x-custom", AMQPValue::LongInt(1))])).await.expect("declare");
    declare_args(&ch, "loose", FieldTable::default()).await.expect("redeclare without an uninterpreted argument");
    declare_args(&ch, "loose", args(&[("x-custom", AMQPValue::LongInt(2))])).await.expect("with another value");

    // x-message-ttl is compared, but as a number: a 32-bit and a 64-bit 1000 are the same.
    declare_args(&ch, "ttl-width", args(&[("x-message-ttl", AMQPValue::LongInt(1000))])).await.expect("declare");
    declare_args(&ch, "ttl-width", args(&[("x-message-ttl", AMQPValue::LongLongInt(1000))]))
        .await
        .expect("redeclare with a wider integer of the same value");
    broker.shutdown().await;
}

#[tokio::test]
async fn purge_of_a_missing_queue_is_404() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    assert_code(ch.queue_purge("no-such-queue".into(), QueuePurgeOptions::default()).await, NOT_FOUND, "purge");
    assert_connection_usable(&conn).await;
    broker.shutdown().await;
}

#[tokio::test]
async fn deleting_a_missing_queue_is_ok() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    // RabbitMQ's queue.delete is idempotent.
    let deleted = ch.queue_delete("never-declared".into(), QueueDeleteOptions::default()).await.expect("delete");
    assert_eq!(deleted, 0);
    declare(&ch, "once").await;
    ch.queue_delete("once".into(), QueueDeleteOptions::default()).await.expect("delete");
    assert_eq!(ch.queue_delete("once".into(), QueueDeleteOptions::default()).await.expect("delete again"), 0);
    broker.shutdown().await;
}

#[tokio::test]
async fn empty_queue_name_means_the_last_declared_queue() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    // Before any declare on the channel, "" names nothing.
    assert_code(ch.queue_purge("".into(), QueuePurgeOptions::default()).await, NOT_FOUND, "purge \"\" first");

    let ch = confirm_channel(&conn).await;
    let name = declare(&ch, "").await.name().to_string();
    // queue.bind with "" binds the last declared queue; with an empty key too, the key is its name.
    ch.queue_bind("".into(), "amq.direct".into(), "".into(), QueueBindOptions::default(), FieldTable::default())
        .await
        .expect("bind \"\"");
    publish_to(&ch, "amq.direct", &name, b"by queue name").await;
    publish_to(&ch, "amq.direct", "", b"empty key").await;
    assert_eq!(passive(&ch, "").await.expect("passive \"\"").message_count(), 1);
    assert_eq!(ch.queue_purge("".into(), QueuePurgeOptions::default()).await.expect("purge \"\""), 1);
    assert_eq!(ch.queue_delete("".into(), QueueDeleteOptions::default()).await.expect("delete \"\""), 0);
    assert_code(passive(&ch, &name).await, NOT_FOUND, "the server-named queue was deleted");
    broker.shutdown().await;
}

#[tokio::test]
async fn auto_delete_queue_goes_when_its_consumers_channel_closes() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare_with(&ch, "fleeting", QueueDeclareOptions { auto_delete: true, ..Default::default() })
        .await
        .expect("declare auto-delete");
    let consumer_ch = channel(&conn).await;
    let _consumer = consume(&consumer_ch, "fleeting", "c").await;
    assert_eq!(passive(&ch, "fleeting").await.expect("passive").consumer_count(), 1);
    consumer_ch.close(200, "bye".into()).await.expect("close the consumer's channel");
    assert_deleted_soon(&conn, "fleeting").await;
    broker.shutdown().await;
}
