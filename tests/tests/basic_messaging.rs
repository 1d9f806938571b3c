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

fn opts_no_ack() -> BasicConsumeOptions {
    BasicConsumeOptions { no_ack: true, ..Default::default() }
}

async fn consume(channel: &lapin::Channel, queue: &str, tag: &str) -> lapin::Consumer {
    channel
        .basic_consume(queue.into(), tag.into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .expect("consume")
}

async fn get(channel: &lapin::Channel, queue: &str) -> Option<lapin::message::BasicGetMessage> {
    channel.basic_get(queue.into(), BasicGetOptions::default()).await.expect("get")
}

async fn ready_count(channel: &lapin::Channel, queue: &str) -> u32 {
    channel
        .queue_declare(queue.into(), QueueDeclareOptions { passive: true, ..Default::default() }, FieldTable::default())
        .await
        .expect("passive declare")
        .message_count()
}

#[tokio::test]
async fn consumers_share_a_queue_round_robin() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare(&ch, "rr").await;
    let mut a = ch.basic_consume("rr".into(), "a".into(), opts_no_ack(), FieldTable::default()).await.expect("a");
    let mut b = ch.basic_consume("rr".into(), "b".into(), opts_no_ack(), FieldTable::default()).await.expect("b");
    for i in 0..6u8 {
        publish(&ch, "rr", &[i]).await;
    }
    for i in 0..3u8 {
        assert_eq!(next_delivery(&mut a).await.data, [2 * i]);
        assert_eq!(next_delivery(&mut b).await.data, [2 * i + 1]);
    }
    broker.shutdown().await;
}

#[tokio::test]
async fn prefetch_limits_unacked_deliveries_per_consumer() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare(&ch, "prefetch").await;
    ch.basic_qos(2, BasicQosOptions::default()).await.expect("qos");
    for i in 0..5u8 {
        publish(&ch, "prefetch", &[i]).await;
    }
    let mut consumer = consume(&ch, "prefetch", "c").await;
    let first = next_delivery(&mut consumer).await;
    let second = next_delivery(&mut consumer).await;
    assert_no_delivery(&mut consumer, 300).await;
    first.ack(BasicAckOptions::default()).await.expect("ack");
    assert_eq!(next_delivery(&mut consumer).await.data, [2]);
    assert_no_delivery(&mut consumer, 300).await;
    second.ack(BasicAckOptions::default()).await.expect("ack");
    assert_eq!(next_delivery(&mut consumer).await.data, [3]);
    broker.shutdown().await;
}

#[tokio::test]
async fn global_qos_limits_the_whole_channel() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare(&ch, "g1").await;
    declare(&ch, "g2").await;
    ch.basic_qos(3, BasicQosOptions { global: true }).await.expect("qos");
    for i in 0..5u8 {
        publish(&ch, "g1", &[i]).await;
        publish(&ch, "g2", &[i]).await;
    }
    let mut c1 = consume(&ch, "g1", "c1").await;
    let mut c2 = consume(&ch, "g2", "c2").await;
    let mut held = Vec::new();
    for _ in 0..3 {
        tokio::select! {
            d = next_delivery(&mut c1) => held.push(d),
            d = next_delivery(&mut c2) => held.push(d),
        }
    }
    assert_no_delivery(&mut c1, 200).await;
    assert_no_delivery(&mut c2, 200).await;
    held.remove(0).ack(BasicAckOptions::default()).await.expect("ack");
    tokio::select! {
        _ = next_delivery(&mut c1) => {},
        _ = next_delivery(&mut c2) => {},
    }
    broker.shutdown().await;
}

#[tokio::test]
async fn get_returns_messages_then_get_empty() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare(&ch, "get").await;
    publish(&ch, "get", b"one").await;
    publish(&ch, "get", b"two").await;
    let first = get(&ch, "get").await.expect("first");
    assert_eq!(first.delivery.data, b"one");
    assert_eq!(first.message_count, 1);
    first.delivery.ack(BasicAckOptions::default()).await.expect("ack");
    let second = ch.basic_get("get".into(), BasicGetOptions { no_ack: true }).await.expect("get").expect("second");
    assert_eq!((second.delivery.data.as_slice(), second.message_count), (&b"two"[..], 0));
    assert!(get(&ch, "get").await.is_none(), "get-empty");
    broker.shutdown().await;
}

#[tokio::test]
async fn nack_with_requeue_puts_the_message_back_at_its_place() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare(&ch, "requeue").await;
    for i in 1..=5u8 {
        publish(&ch, "requeue", &[i]).await;
    }
    let _one = get(&ch, "requeue").await.expect("1");
    let two = get(&ch, "requeue").await.expect("2");
    let _three = get(&ch, "requeue").await.expect("3");
    two.delivery.nack(BasicNackOptions { requeue: true, multiple: false }).await.expect("nack");
    let again = get(&ch, "requeue").await.expect("2 again");
    assert_eq!(again.delivery.data, [2]);
    assert!(again.delivery.redelivered);
    let four = get(&ch, "requeue").await.expect("4");
    assert_eq!((four.delivery.data.as_slice(), four.delivery.redelivered), (&[4u8][..], false));
    broker.shutdown().await;
}

#[tokio::test]
async fn reject_without_requeue_drops_and_ack_multiple_settles_all_below() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare(&ch, "settle").await;
    for i in 1..=4u8 {
        publish(&ch, "settle", &[i]).await;
    }
    let one = get(&ch, "settle").await.expect("1");
    one.delivery.reject(BasicRejectOptions { requeue: false }).await.expect("reject");
    let _two = get(&ch, "settle").await.expect("2");
    let three = get(&ch, "settle").await.expect("3");
    ch.basic_ack(three.delivery.delivery_tag, BasicAckOptions { multiple: true }).await.expect("ack multiple");
    ch.basic_recover(BasicRecoverOptions { requeue: true }).await.expect("recover");
    let four = get(&ch, "settle").await.expect("4");
    assert_eq!(four.delivery.data, [4]);
    assert!(get(&ch, "settle").await.is_none(), "1 rejected, 2 and 3 acked: nothing comes back");
    broker.shutdown().await;
}

#[tokio::test]
async fn recover_redelivers_every_unacked_message() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare(&ch, "recover").await;
    publish(&ch, "recover", b"a").await;
    publish(&ch, "recover", b"b").await;
    let mut consumer = consume(&ch, "recover", "c").await;
    next_delivery(&mut consumer).await;
    next_delivery(&mut consumer).await;
    ch.basic_recover(BasicRecoverOptions { requeue: true }).await.expect("recover");
    for body in [b"a", b"b"] {
        let d = next_delivery(&mut consumer).await;
        assert_eq!((d.data.as_slice(), d.redelivered), (&body[..], true));
    }
    broker.shutdown().await;
}

/// RabbitMQ never implemented recover without requeue: 540 NOT_IMPLEMENTED closes the
/// connection, and what was unacked goes back to the queue.
#[tokio::test]
async fn recover_without_requeue_is_540_and_closes_the_connection() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare(&ch, "no-requeue").await;
    publish(&ch, "no-requeue", b"a").await;
    let mut consumer = consume(&ch, "no-requeue", "c").await;
    next_delivery(&mut consumer).await;
    assert_code(ch.basic_recover(BasicRecoverOptions { requeue: false }).await, 540, "recover requeue=false");
    assert!(!conn.status().connected(), "the connection is closed");

    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let back = ch.basic_get("no-requeue".into(), BasicGetOptions { no_ack: true }).await.expect("get");
    assert_eq!(back.map(|m| m.delivery.data), Some(b"a".to_vec()), "the unacked message was requeued");
    broker.shutdown().await;
}

#[tokio::test]
async fn unacked_messages_return_in_order_when_their_channel_closes() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let first = channel(&conn).await;
    declare(&first, "close-requeue").await;
    for i in 1..=4u8 {
        publish(&first, "close-requeue", &[i]).await;
    }
    for _ in 0..3 {
        get(&first, "close-requeue").await.expect("get");
    }
    first.close(200, "bye".into()).await.expect("close");
    let second = channel(&conn).await;
    let mut consumer = consume(&second, "close-requeue", "c").await;
    for (body, redelivered) in [(1u8, true), (2, true), (3, true), (4, false)] {
        let d = next_delivery(&mut consumer).await;
        assert_eq!((d.data.as_slice(), d.redelivered), (&[body][..], redelivered));
    }
    let other = connect(&broker).await;
    let third = channel(&other).await;
    let _taken = consume(&third, "close-requeue", "x").await;
    broker.shutdown().await;
}

#[tokio::test]
async fn unacked_messages_return_when_the_connection_closes() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare(&ch, "conn-requeue").await;
    publish(&ch, "conn-requeue", b"m").await;
    let mut consumer = consume(&ch, "conn-requeue", "c").await;
    next_delivery(&mut consumer).await;
    conn.close(200, "bye".into()).await.expect("close");
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let got = get(&ch, "conn-requeue").await.expect("requeued");
    assert!(got.delivery.redelivered);
    broker.shutdown().await;
}

#[tokio::test]
async fn publisher_confirms_ack_every_publish() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare(&ch, "confirms").await;
    ch.confirm_select(ConfirmSelectOptions::default()).await.expect("confirm.select");
    let mut pending = Vec::new();
    for i in 0..1000u32 {
        let confirm = ch
            .basic_publish(
                "".into(),
                "confirms".into(),
                BasicPublishOptions::default(),
                &i.to_be_bytes(),
                BasicProperties::default(),
            )
            .await
            .expect("publish");
        pending.push(confirm);
    }
    for confirm in pending {
        assert!(confirm.await.expect("confirmation").is_ack());
    }
    assert_eq!(ready_count(&ch, "confirms").await, 1000);
    broker.shutdown().await;
}

#[tokio::test]
async fn mandatory_unroutable_messages_come_back_with_312() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    ch.confirm_select(ConfirmSelectOptions::default()).await.expect("confirm.select");
    let confirm = ch
        .basic_publish(
            "amq.direct".into(),
            "nowhere".into(),
            BasicPublishOptions { mandatory: true, ..Default::default() },
            b"lost",
            BasicProperties::default(),
        )
        .await
        .expect("publish")
        .await
        .expect("confirmation");
    assert!(confirm.is_ack());
    let returned = confirm.take_message().expect("basic.return");
    assert_eq!(returned.reply_code, 312);
    assert_eq!(returned.routing_key.as_str(), "nowhere");
    assert_eq!(returned.data, b"lost");
    broker.shutdown().await;
}

#[tokio::test]
async fn publishing_to_a_missing_exchange_is_404() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    ch.confirm_select(ConfirmSelectOptions::default()).await.expect("confirm.select");
    let outcome = ch
        .basic_publish("no-such".into(), "k".into(), BasicPublishOptions::default(), b"x", BasicProperties::default())
        .await;
    let error = match outcome {
        Ok(confirm) => confirm.await.expect_err("channel closed with 404"),
        Err(error) => error,
    };
    assert_eq!(reply_code(&error), Some(404), "{error}");
    broker.shutdown().await;
}

#[tokio::test]
async fn transactions_commit_and_roll_back_publishes_and_acks() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare(&ch, "tx").await;
    ch.tx_select().await.expect("tx.select");
    publish(&ch, "tx", b"rolled back").await;
    ch.tx_rollback().await.expect("rollback");
    assert_eq!(ready_count(&ch, "tx").await, 0);
    publish(&ch, "tx", b"committed").await;
    assert_eq!(ready_count(&ch, "tx").await, 0, "not visible before commit");
    ch.tx_commit().await.expect("commit");
    assert_eq!(ready_count(&ch, "tx").await, 1);
    let got = get(&ch, "tx").await.expect("message");
    ch.basic_ack(got.delivery.delivery_tag, BasicAckOptions::default()).await.expect("ack");
    ch.tx_rollback().await.expect("rollback the ack");
    ch.basic_recover(BasicRecoverOptions { requeue: true }).await.expect("recover");
    assert_eq!(ready_count(&ch, "tx").await, 1, "the rolled-back ack left it unacked");
    let got = get(&ch, "tx").await.expect("message");
    ch.basic_ack(got.delivery.delivery_tag, BasicAckOptions::default()).await.expect("ack");
    ch.tx_commit().await.expect("commit the ack");
    ch.basic_recover(BasicRecoverOptions { requeue: true }).await.expect("recover");
    assert_eq!(ready_count(&ch, "tx").await, 0);
    broker.shutdown().await;
}

#[tokio::test]
async fn commit_without_select_is_406() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let error = ch.tx_commit().await.expect_err("not transactional");
    assert_eq!(reply_code(&error), Some(406));
    broker.shutdown().await;
}

#[tokio::test]
async fn properties_and_headers_of_every_type_round_trip() {
    use lapin::types::{AMQPValue, ByteArray, DecimalValue, FieldArray, LongString};
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare(&ch, "props").await;
    let mut nested = FieldTable::default();
    nested.insert("inner".into(), AMQPValue::LongString(LongString::from("deep")));
    let mut array = FieldArray::default();
    array.push(AMQPValue::LongInt(1));
    array.push(AMQPValue::FieldTable(nested.clone()));
    let mut headers = FieldTable::default();
    for (k, v) in [
        ("bool", AMQPValue::Boolean(true)),
        ("i8", AMQPValue::ShortShortInt(-8)),
        ("u8", AMQPValue::ShortShortUInt(8)),
        ("i16", AMQPValue::ShortInt(-16)),
        ("i32", AMQPValue::LongInt(-32)),
        ("u32", AMQPValue::LongUInt(32)),
        ("i64", AMQPValue::LongLongInt(-64)),
        ("f32", AMQPValue::Float(1.5)),
        ("f64", AMQPValue::Double(2.25)),
        ("decimal", AMQPValue::DecimalValue(DecimalValue { scale: 2, value: 12345 })),
        ("string", AMQPValue::LongString(LongString::from("text"))),
        ("array", AMQPValue::FieldArray(array)),
        ("timestamp", AMQPValue::Timestamp(1_700_000_000)),
        ("table", AMQPValue::FieldTable(nested)),
        ("bytes", AMQPValue::ByteArray(ByteArray::from(vec![0u8, 1, 255]))),
        ("void", AMQPValue::Void),
    ] {
        headers.insert(k.into(), v);
    }
    let props = BasicProperties::default()
        .with_content_type("application/json".into())
        .with_content_encoding("gzip".into())
        .with_headers(headers)
        .with_delivery_mode(2)
        .with_priority(3)
        .with_correlation_id("corr".into())
        .with_reply_to("reply".into())
        .with_expiration("60000".into())
        .with_message_id("id-1".into())
        .with_timestamp(1_700_000_001)
        .with_type("kind".into())
        .with_user_id("guest".into())
        .with_app_id("app".into())
        .with_cluster_id("cluster".into());
    ch.basic_publish("".into(), "props".into(), BasicPublishOptions::default(), b"{}", props.clone())
        .await
        .expect("publish");
    let got = get(&ch, "props").await.expect("message");
    assert_eq!(got.delivery.properties, props);
    broker.shutdown().await;
}

#[tokio::test]
async fn large_bodies_are_split_by_frame_max_and_reassembled() {
    // 8192 is the smallest frame_max lapin accepts.
    let broker = start_broker_with(|c| c.protocol.frame_max = 8192).await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare(&ch, "large").await;
    let body: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    publish(&ch, "large", &body).await;
    let mut consumer = consume(&ch, "large", "c").await;
    assert_eq!(next_delivery(&mut consumer).await.data, body);
    broker.shutdown().await;
}

#[tokio::test]
async fn bodies_over_the_maximum_are_406() {
    let broker = start_broker_with(|c| c.protocol.max_message_bytes = 1000).await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare(&ch, "big").await;
    ch.confirm_select(ConfirmSelectOptions::default()).await.expect("confirm.select");
    let outcome = ch
        .basic_publish(
            "".into(),
            "big".into(),
            BasicPublishOptions::default(),
            &[0u8; 2000],
            BasicProperties::default(),
        )
        .await;
    let error = match outcome {
        Ok(confirm) => confirm.await.expect_err("refused"),
        Err(error) => error,
    };
    assert_eq!(reply_code(&error), Some(406), "{error}");
    let ch = channel(&conn).await;
    assert_eq!(ready_count(&ch, "big").await, 0);
    broker.shutdown().await;
}

#[tokio::test]
async fn acking_an_unknown_delivery_tag_is_406() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare(&ch, "acks").await;
    // The broker's channel.close arrives asynchronously; a consumer on the channel sees it with
    // its reply code (a call made meanwhile may fail with lapin's "Closing" state instead).
    let mut consumer = consume(&ch, "acks", "watch").await;
    ch.basic_ack(99, BasicAckOptions::default()).await.expect("sent");
    use futures_util::StreamExt;
    let closed = tokio::time::timeout(std::time::Duration::from_secs(5), consumer.next()).await;
    match closed {
        Ok(Some(Err(error))) => assert_eq!(reply_code(&error), Some(406), "{error}"),
        other => panic!("expected the channel to close with 406, got {other:?}"),
    }
    broker.shutdown().await;
}

#[tokio::test]
async fn cancel_stops_deliveries_and_exclusive_consumers_exclude_others() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare(&ch, "cancel").await;
    let mut consumer = ch
        .basic_consume(
            "cancel".into(),
            "only".into(),
            BasicConsumeOptions { exclusive: true, ..Default::default() },
            FieldTable::default(),
        )
        .await
        .expect("exclusive consume");
    let other = channel(&conn).await;
    let error = other
        .basic_consume("cancel".into(), "second".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .expect_err("exclusive");
    assert_eq!(reply_code(&error), Some(403));
    ch.basic_cancel("only".into(), BasicCancelOptions::default()).await.expect("cancel");
    publish(&ch, "cancel", b"after").await;
    assert_no_delivery(&mut consumer, 300).await;
    assert_eq!(ready_count(&ch, "cancel").await, 1);
    broker.shutdown().await;
}

#[tokio::test]
async fn server_generated_consumer_tags_and_no_ack_consumers() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare(&ch, "noack").await;
    let mut consumer =
        ch.basic_consume("noack".into(), "".into(), opts_no_ack(), FieldTable::default()).await.expect("consume");
    assert!(consumer.tag().as_str().starts_with("amq.ctag-"), "{}", consumer.tag());
    publish(&ch, "noack", b"fire and forget").await;
    assert_eq!(next_delivery(&mut consumer).await.data, b"fire and forget");
    ch.basic_cancel(consumer.tag(), BasicCancelOptions::default()).await.expect("cancel");
    assert_eq!(ready_count(&ch, "noack").await, 0, "no-ack deliveries are settled on sending");
    broker.shutdown().await;
}
