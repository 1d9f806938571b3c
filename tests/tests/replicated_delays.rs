//! Replicated delayed messages on three real `warren` processes: a durable `x-delayed-message`
//! exchange declared in a cluster keeps its pending set in a Raft group, so messages taken by
//! a node that leads the group and dies before they are due fire after the failover, on
//! another node, none before its time, none lost.

use futures_util::StreamExt;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, ExchangeKind};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use warren_tests::cluster::*;
use warren_tests::*;

/// Messages published, and the delay of the first (each next is 100 ms later).
const MESSAGES: u64 = 30;
const FIRST_DELAY_MS: u64 = 2_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_messages_due_during_a_leader_kill_fire_after_it_and_never_early() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cluster = start_cluster(dir.path(), false).await;
    let a = cluster.connect(0).await;
    let ch = a.create_channel().await.expect("channel");
    declare_when_formed(&ch, "due").await;
    let durable_exchange = ExchangeDeclareOptions { durable: true, ..Default::default() };
    let delayed = ExchangeKind::Custom("x-delayed-message".into());
    ch.exchange_declare("later".into(), delayed, durable_exchange, table(&[("x-delayed-type", text("direct"))]))
        .await
        .expect("delayed exchange");
    ch.queue_bind("due".into(), "later".into(), "k".into(), Default::default(), FieldTable::default())
        .await
        .expect("bind");

    // Published through A, which declared the exchange and so leads its group: A both took
    // the messages and would fire them. Then A dies.
    let publisher = confirm_channel(&a).await;
    let mut sent = BTreeMap::new();
    for n in 0..MESSAGES {
        let delay = FIRST_DELAY_MS + 100 * n;
        let headers = table(&[("x-delay", AMQPValue::LongLongInt(delay as i64))]);
        let properties = BasicProperties::default().with_delivery_mode(2).with_headers(headers);
        sent.insert(n, (Instant::now(), Duration::from_millis(delay)));
        let confirm = publisher
            .basic_publish("later".into(), "k".into(), Default::default(), &n.to_be_bytes(), properties)
            .await
            .expect("publish")
            .await
            .expect("confirm");
        assert!(confirm.is_ack(), "message {n} confirmed: held by a majority");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.nodes[0].take().expect("running").kill9();

    // Every message arrives at C, each no sooner than its delay after it was sent.
    let c = cluster.connect(2).await;
    let consumer_ch = c.create_channel().await.expect("channel");
    let mut consumer = consumer_ch
        .basic_consume("due".into(), "c".into(), Default::default(), FieldTable::default())
        .await
        .expect("consume");
    let mut received: BTreeMap<u64, u32> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(40);
    while received.len() < MESSAGES as usize {
        assert!(Instant::now() < deadline, "fired after the failover: {} of {MESSAGES}", received.len());
        let next = tokio::time::timeout(deadline.saturating_duration_since(Instant::now()), consumer.next()).await;
        let Ok(Some(Ok(delivery))) = next else {
            dump_warnings(&cluster);
            panic!("fired after the failover: {} of {MESSAGES}", received.len());
        };
        let n = u64::from_be_bytes(delivery.data.as_slice().try_into().expect("8 bytes"));
        let (at, delay) = sent[&n];
        assert!(at.elapsed() >= delay, "message {n} fired {:?} after it was sent, before its {delay:?}", at.elapsed());
        *received.entry(n).or_default() += 1;
        delivery.ack(BasicAckOptions::default()).await.expect("ack");
    }
    let twice = received.values().filter(|count| **count > 1).count();
    eprintln!("replicated delays: {MESSAGES} published, all fired after the leader's kill, {twice} routed twice");
}
