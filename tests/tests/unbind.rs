//! Unbinding with lapin, as RabbitMQ answers it: unbinding what is not bound succeeds, and so
//! does unbinding from or to an exchange or queue that does not exist, so that clients can
//! tear down after auto-delete queues and exchanges have already gone. Only an existing binding
//! to another connection's exclusive queue is refused (405).

use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, ExchangeKind};
use warren_tests::*;

const RESOURCE_LOCKED: u16 = 405;

async fn declare_queue(ch: &lapin::Channel, name: &str, options: QueueDeclareOptions) {
    ch.queue_declare(name.into(), options, FieldTable::default())
        .await
        .unwrap_or_else(|error| panic!("declare queue {name}: {error}"));
}

async fn declare_exchange(ch: &lapin::Channel, name: &str) {
    ch.exchange_declare(name.into(), ExchangeKind::Direct, ExchangeDeclareOptions::default(), FieldTable::default())
        .await
        .unwrap_or_else(|error| panic!("declare exchange {name}: {error}"));
}

async fn unbind_queue(ch: &lapin::Channel, queue: &str, exchange: &str) -> lapin::Result<()> {
    ch.queue_unbind(queue.into(), exchange.into(), "k".into(), FieldTable::default()).await
}

async fn unbind_exchange(ch: &lapin::Channel, destination: &str, source: &str) -> lapin::Result<()> {
    let options = ExchangeUnbindOptions::default();
    ch.exchange_unbind(destination.into(), source.into(), "k".into(), options, FieldTable::default()).await
}

/// The channel is still open: a synchronous method on it succeeds.
async fn assert_channel_open(ch: &lapin::Channel) {
    declare_queue(ch, "still-open", QueueDeclareOptions::default()).await;
}

#[tokio::test]
async fn unbinding_a_binding_that_does_not_exist_succeeds() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare_queue(&ch, "q", QueueDeclareOptions::default()).await;
    declare_exchange(&ch, "x").await;
    declare_exchange(&ch, "y").await;
    unbind_queue(&ch, "q", "x").await.expect("queue.unbind of a binding never made");
    unbind_exchange(&ch, "y", "x").await.expect("exchange.unbind of a binding never made");
    assert_channel_open(&ch).await;
    broker.shutdown().await;
}

#[tokio::test]
async fn queue_unbind_succeeds_when_the_queue_or_the_exchange_is_gone() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare_queue(&ch, "q", QueueDeclareOptions::default()).await;
    declare_exchange(&ch, "x").await;
    unbind_queue(&ch, "never-declared", "x").await.expect("unbind of a missing queue");
    unbind_queue(&ch, "q", "never-declared").await.expect("unbind from a missing exchange");
    unbind_queue(&ch, "never-declared", "never-declared-either").await.expect("both missing");

    // The usual teardown: the queue was bound, then went (auto-delete) before the unbind.
    ch.queue_bind("q".into(), "x".into(), "k".into(), QueueBindOptions::default(), FieldTable::default())
        .await
        .expect("bind");
    ch.queue_delete("q".into(), QueueDeleteOptions::default()).await.expect("delete q");
    unbind_queue(&ch, "q", "x").await.expect("unbind after the queue went");
    assert_channel_open(&ch).await;
    broker.shutdown().await;
}

#[tokio::test]
async fn exchange_unbind_succeeds_when_either_exchange_is_gone() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare_exchange(&ch, "x").await;
    unbind_exchange(&ch, "never-declared", "x").await.expect("missing destination");
    unbind_exchange(&ch, "x", "never-declared").await.expect("missing source");
    unbind_exchange(&ch, "never-declared", "never-declared-either").await.expect("both missing");
    assert_channel_open(&ch).await;
    broker.shutdown().await;
}

#[tokio::test]
async fn unbind_removes_an_existing_binding() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    declare_queue(&ch, "q", QueueDeclareOptions::default()).await;
    declare_exchange(&ch, "x").await;
    ch.queue_bind("q".into(), "x".into(), "k".into(), QueueBindOptions::default(), FieldTable::default())
        .await
        .expect("bind");
    unbind_queue(&ch, "q", "x").await.expect("unbind");
    unbind_queue(&ch, "q", "x").await.expect("unbind again");
    ch.basic_publish("x".into(), "k".into(), BasicPublishOptions::default(), b"unrouted", BasicProperties::default())
        .await
        .expect("publish")
        .await
        .expect("confirm");
    assert!(drain(&ch, "q").await.is_empty(), "nothing routed after the unbind");
    broker.shutdown().await;
}

#[tokio::test]
async fn unbinding_another_connections_exclusive_queue_is_405() {
    let broker = start_broker().await;
    let (owner, other) = (connect(&broker).await, connect(&broker).await);
    let owner_ch = channel(&owner).await;
    let exclusive = QueueDeclareOptions { exclusive: true, ..Default::default() };
    declare_queue(&owner_ch, "mine", exclusive).await;
    owner_ch
        .queue_bind("mine".into(), "amq.direct".into(), "k".into(), QueueBindOptions::default(), FieldTable::default())
        .await
        .expect("bind");
    let other_ch = channel(&other).await;
    assert_code(unbind_queue(&other_ch, "mine", "amq.direct").await, RESOURCE_LOCKED, "unbind another's queue");
    unbind_queue(&owner_ch, "mine", "amq.direct").await.expect("the owner may unbind");
    broker.shutdown().await;
}
