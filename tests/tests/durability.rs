//! What survives a clean restart: durable definitions and persistent messages in durable
//! queues, with acked messages gone and unacked ones back, redelivered, in queue order.

use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, ExchangeKind};
use warren_tests::*;

const PERSISTENT: u8 = 2;
const TRANSIENT: u8 = 1;

async fn publish(ch: &lapin::Channel, exchange: &str, key: &str, body: &[u8], mode: u8) {
    ch.basic_publish(
        exchange.into(),
        key.into(),
        BasicPublishOptions::default(),
        body,
        BasicProperties::default().with_delivery_mode(mode),
    )
    .await
    .expect("publish")
    .await
    .expect("confirm");
}

async fn exists_queue(conn: &lapin::Connection, name: &str) -> Option<u32> {
    let ch = channel(conn).await;
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    ch.queue_declare(name.into(), passive, FieldTable::default()).await.ok().map(|q| q.message_count())
}

async fn exists_exchange(conn: &lapin::Connection, name: &str) -> bool {
    let ch = channel(conn).await;
    let passive = ExchangeDeclareOptions { passive: true, ..Default::default() };
    ch.exchange_declare(name.into(), ExchangeKind::Direct, passive, FieldTable::default()).await.is_ok()
}

/// Bodies and redelivered flags of every ready message.
async fn redelivery_flags(ch: &lapin::Channel, queue: &str) -> Vec<(Vec<u8>, bool)> {
    drain(ch, queue).await.into_iter().map(|got| (got.delivery.data, got.delivery.redelivered)).collect()
}

#[tokio::test]
async fn durable_things_survive_a_restart_and_transient_things_do_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = start_broker_in(dir.path()).await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    ch.confirm_select(ConfirmSelectOptions::default()).await.expect("confirms");
    let durable_exchange = ExchangeDeclareOptions { durable: true, ..Default::default() };
    ch.exchange_declare("dx".into(), ExchangeKind::Direct, durable_exchange, FieldTable::default()).await.expect("dx");
    ch.exchange_declare("tx".into(), ExchangeKind::Direct, Default::default(), FieldTable::default())
        .await
        .expect("tx");
    ch.queue_declare("dq".into(), durable(), FieldTable::default()).await.expect("dq");
    ch.queue_declare("tq".into(), Default::default(), FieldTable::default()).await.expect("tq");
    let exclusive = QueueDeclareOptions { durable: true, exclusive: true, ..Default::default() };
    ch.queue_declare("eq".into(), exclusive, FieldTable::default()).await.expect("eq");
    ch.queue_bind("dq".into(), "dx".into(), "k".into(), Default::default(), FieldTable::default()).await.expect("bind");
    for i in 1..=6u8 {
        publish(&ch, "", "dq", &[i], if i % 3 == 0 { TRANSIENT } else { PERSISTENT }).await;
    }
    publish(&ch, "", "tq", b"gone", PERSISTENT).await;
    // Take 1 and 2 (acked) and 4 (left unacked); 3 is transient and taken with them.
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(ch.basic_get("dq".into(), BasicGetOptions::default()).await.expect("get").expect("message"));
    }
    for got in &held[..3] {
        got.delivery.ack(BasicAckOptions::default()).await.expect("ack");
    }
    broker.shutdown().await;

    let broker = start_broker_in(dir.path()).await;
    let conn = connect(&broker).await;
    assert!(exists_exchange(&conn, "dx").await, "durable exchange survives");
    assert!(!exists_exchange(&conn, "tx").await, "transient exchange is gone");
    assert_eq!(exists_queue(&conn, "tq").await, None, "transient queue is gone");
    assert_eq!(exists_queue(&conn, "eq").await, None, "exclusive queue is gone");
    assert_eq!(exists_queue(&conn, "dq").await, Some(2), "4 (unacked) and 5; 6 was transient");
    let ch = channel(&conn).await;
    let got = redelivery_flags(&ch, "dq").await;
    assert_eq!(got, vec![(vec![4], true), (vec![5], false)]);
    ch.confirm_select(ConfirmSelectOptions::default()).await.expect("confirms");
    publish(&ch, "dx", "k", b"via binding", PERSISTENT).await;
    assert_eq!(redelivery_flags(&ch, "dq").await, vec![(b"via binding".to_vec(), false)], "the binding survived");
    broker.shutdown().await;

    let broker = start_broker_in(dir.path()).await;
    let conn = connect(&broker).await;
    assert_eq!(exists_queue(&conn, "dq").await, Some(0), "what was acked stays acked across restarts");
    broker.shutdown().await;
}

#[tokio::test]
async fn persistent_and_transient_messages_keep_one_queue_order() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    ch.confirm_select(ConfirmSelectOptions::default()).await.expect("confirms");
    ch.queue_declare("mixed".into(), durable(), FieldTable::default()).await.expect("declare");
    for i in 0..20u8 {
        publish(&ch, "", "mixed", &[i], if i % 2 == 0 { PERSISTENT } else { TRANSIENT }).await;
    }
    let mut consumer =
        ch.basic_consume("mixed".into(), "c".into(), Default::default(), FieldTable::default()).await.expect("consume");
    // Every fifth message is sent back once; each comes back redelivered, in queue order.
    let (mut first_time, mut again) = (Vec::new(), Vec::new());
    while first_time.len() + again.len() < 24 {
        let delivery = next_delivery(&mut consumer).await;
        let body = delivery.data[0];
        if delivery.redelivered {
            again.push(body);
            delivery.ack(BasicAckOptions::default()).await.expect("ack");
        } else if body % 5 == 0 {
            first_time.push(body);
            delivery.nack(BasicNackOptions { requeue: true, ..Default::default() }).await.expect("nack");
        } else {
            first_time.push(body);
            delivery.ack(BasicAckOptions::default()).await.expect("ack");
        }
    }
    assert_eq!(first_time, (0..20).collect::<Vec<u8>>());
    let mut sorted = again.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, vec![0, 5, 10, 15]);
    broker.shutdown().await;
}

#[tokio::test]
async fn deleting_a_durable_queue_removes_it_for_good() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = start_broker_in(dir.path()).await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    ch.confirm_select(ConfirmSelectOptions::default()).await.expect("confirms");
    ch.queue_declare("doomed".into(), durable(), FieldTable::default()).await.expect("declare");
    publish(&ch, "", "doomed", b"x", PERSISTENT).await;
    ch.queue_delete("doomed".into(), Default::default()).await.expect("delete");
    ch.queue_declare("doomed".into(), durable(), FieldTable::default()).await.expect("redeclare");
    assert_eq!(exists_queue(&conn, "doomed").await, Some(0), "a redeclared queue starts empty");
    ch.queue_delete("doomed".into(), Default::default()).await.expect("delete");
    broker.shutdown().await;
    let broker = start_broker_in(dir.path()).await;
    let conn = connect(&broker).await;
    assert_eq!(exists_queue(&conn, "doomed").await, None);
    let queues_dir = dir.path().join("vhosts").join("2f").join("queues");
    let left = std::fs::read_dir(&queues_dir).map(|d| d.count()).unwrap_or(0);
    assert_eq!(left, 0, "the deleted queue's files are gone");
    broker.shutdown().await;
}
