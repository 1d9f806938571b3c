//! Publish, consume, get, ack, nack, reject, recover, QoS: the basic class with lapin.

use lapin::options::*;
use lapin::types::FieldTable;
use lapin::BasicProperties;
use warren_tests::*;

async fn declare(channel: &lapin::Channel, name: &str) {
    channel.queue_declare(name.into(), QueueDeclareOptions::default(), FieldTable::default()).await.expect("declare");
}

async fn publish(channel: &lapin::Channel, queue: &str, body: &[u8]) {
    channel
        .basic_publish("".into(), queue.into(), BasicPublishOptions::default(), body, BasicProperties::default())
        .await
        .expect("publish");
}

#[tokio::test]
async fn publish_consume_ack_in_fifo_order() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare(&ch, "fifo").await;
    for i in 0..100u32 {
        publish(&ch, "fifo", &i.to_be_bytes()).await;
    }
    let mut consumer = ch
        .basic_consume("fifo".into(), "c1".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .expect("consume");
    for i in 0..100u32 {
        let delivery = next_delivery(&mut consumer).await;
        assert_eq!(delivery.data, i.to_be_bytes());
        assert!(!delivery.redelivered);
        delivery.ack(BasicAckOptions::default()).await.expect("ack");
    }
    let ok = ch
        .queue_declare(
            "fifo".into(),
            QueueDeclareOptions { passive: true, ..Default::default() },
            FieldTable::default(),
        )
        .await
        .expect("passive");
    assert_eq!(ok.message_count(), 0);
    assert_eq!(ok.consumer_count(), 1);
    broker.shutdown().await;
}
