//! Channels and malformed input: errors close the right scope with the right code, the server
//! never panics, and other connections carry on.

use amq_protocol::protocol::{basic, channel, queue, AMQPClass};
use amq_protocol::types::FieldTable;
use lapin::options::*;
use warren_tests::raw_client::{Next, RawClient};
use warren_tests::*;

fn declare_passive(name: &str) -> AMQPClass {
    AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
        queue: name.into(),
        passive: true,
        durable: false,
        exclusive: false,
        auto_delete: false,
        nowait: false,
        arguments: FieldTable::default(),
    }))
}

/// Another connection still works end to end.
async fn broker_still_serves(broker: &warren_tests::TestBroker) {
    let conn = connect(broker).await;
    let ch = channel(&conn).await;
    ch.queue_declare("still-alive".into(), QueueDeclareOptions::default(), lapin::types::FieldTable::default())
        .await
        .expect("another connection still works");
}

#[tokio::test]
async fn a_channel_error_closes_only_that_channel() {
    let broker = start_broker().await;
    let mut client = RawClient::handshake(broker.amqp_addr).await;
    client.open_channel(1).await;
    client.open_channel(2).await;
    client.send_method(1, declare_passive("missing")).await;
    assert_eq!(client.expect_channel_close(1).await, 404);
    client.send_method(1, AMQPClass::Channel(channel::AMQPMethod::CloseOk(channel::CloseOk {}))).await;
    client.send_method(2, declare_passive("missing-too")).await;
    assert_eq!(client.expect_channel_close(2).await, 404);
    // Channel 1 can be opened again after the close handshake.
    client.send_method(1, AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {}))).await;
    let (ch, ok) = client.expect_method().await;
    assert_eq!(ch, 1);
    assert!(matches!(ok, AMQPClass::Channel(channel::AMQPMethod::OpenOk(_))), "{ok:?}");
    broker.shutdown().await;
}

#[tokio::test]
async fn lapin_channel_error_leaves_the_connection_usable() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let bad = channel(&conn).await;
    let error = bad
        .queue_declare(
            "nope".into(),
            QueueDeclareOptions { passive: true, ..Default::default() },
            lapin::types::FieldTable::default(),
        )
        .await
        .expect_err("404");
    assert_eq!(reply_code(&error), Some(404));
    let good = channel(&conn).await;
    good.queue_declare("ok".into(), QueueDeclareOptions::default(), lapin::types::FieldTable::default())
        .await
        .expect("declare on a new channel");
    broker.shutdown().await;
}

#[tokio::test]
async fn many_channels_on_one_connection() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let mut channels = Vec::new();
    for i in 0..200 {
        let ch = channel(&conn).await;
        let name = format!("many-{i}");
        ch.queue_declare(name.as_str().into(), QueueDeclareOptions::default(), lapin::types::FieldTable::default())
            .await
            .expect("declare");
        ch.basic_publish("".into(), name.as_str().into(), BasicPublishOptions::default(), b"x", Default::default())
            .await
            .expect("publish");
        channels.push((ch, name));
    }
    for (ch, name) in &channels {
        let got = ch.basic_get(name.as_str().into(), BasicGetOptions { no_ack: true }).await.expect("get");
        assert_eq!(got.expect("a message").data, b"x");
    }
    broker.shutdown().await;
}

#[tokio::test]
async fn a_frame_on_a_channel_that_is_not_open_is_504() {
    let broker = start_broker().await;
    let mut client = RawClient::handshake(broker.amqp_addr).await;
    client.send_method(7, declare_passive("q")).await;
    assert_eq!(client.expect_connection_close().await.0, 504);
    broker_still_serves(&broker).await;
    broker.shutdown().await;
}

#[tokio::test]
async fn opening_an_open_channel_is_504() {
    let broker = start_broker().await;
    let mut client = RawClient::handshake(broker.amqp_addr).await;
    client.open_channel(1).await;
    client.send_method(1, AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {}))).await;
    assert_eq!(client.expect_connection_close().await.0, 504);
    broker.shutdown().await;
}

#[tokio::test]
async fn an_unknown_method_is_a_connection_error() {
    let broker = start_broker().await;
    let mut client = RawClient::handshake(broker.amqp_addr).await;
    client.open_channel(1).await;
    // Class 60 (basic), method 999: no such method.
    client.send(&[1, 0, 1, 0, 0, 0, 4, 0, 60, 0x03, 0xE7, 0xCE]).await;
    let (code, class_id, method_id) = client.expect_connection_close().await;
    assert_eq!((code, class_id, method_id), (503, 60, 999));
    broker_still_serves(&broker).await;
    broker.shutdown().await;
}

#[tokio::test]
async fn undecodable_method_arguments_are_501() {
    let broker = start_broker().await;
    let mut client = RawClient::handshake(broker.amqp_addr).await;
    client.open_channel(1).await;
    // queue.declare (50.10) whose queue name claims 200 bytes but has 2.
    client.send(&[1, 0, 1, 0, 0, 0, 9, 0, 50, 0, 10, 0, 0, 200, b'a', b'b', 0xCE]).await;
    assert_eq!(client.expect_connection_close().await.0, 501);
    broker.shutdown().await;
}

#[tokio::test]
async fn garbage_after_the_handshake_is_a_frame_error() {
    let broker = start_broker().await;
    let mut client = RawClient::handshake(broker.amqp_addr).await;
    client.send(b"this is not an AMQP frame at all").await;
    assert_eq!(client.expect_connection_close().await.0, 501);
    assert_eq!(client.next().await, Next::Closed);
    broker_still_serves(&broker).await;
    broker.shutdown().await;
}

#[tokio::test]
async fn a_bad_frame_end_octet_is_501() {
    let broker = start_broker().await;
    let mut client = RawClient::handshake(broker.amqp_addr).await;
    client.send(&[8, 0, 0, 0, 0, 0, 0, 0x00]).await;
    assert_eq!(client.expect_connection_close().await.0, 501);
    broker.shutdown().await;
}

#[tokio::test]
async fn a_truncated_frame_then_hangup_harms_nothing() {
    let broker = start_broker().await;
    let mut client = RawClient::handshake(broker.amqp_addr).await;
    client.open_channel(1).await;
    client.send(&[1, 0, 1, 0, 0, 0, 50, 0, 50, 0, 10]).await;
    drop(client);
    broker_still_serves(&broker).await;
    broker.shutdown().await;
}

#[tokio::test]
async fn content_without_publish_and_methods_inside_content_are_505() {
    let broker = start_broker().await;
    let mut client = RawClient::handshake(broker.amqp_addr).await;
    client.open_channel(1).await;
    client.send(&[3, 0, 1, 0, 0, 0, 1, b'x', 0xCE]).await;
    assert_eq!(client.expect_connection_close().await.0, 505);

    let mut client = RawClient::handshake(broker.amqp_addr).await;
    client.open_channel(1).await;
    let publish = basic::Publish { exchange: "".into(), routing_key: "q".into(), mandatory: false, immediate: false };
    client.send_method(1, AMQPClass::Basic(basic::AMQPMethod::Publish(publish))).await;
    client.send_method(1, declare_passive("q")).await;
    assert_eq!(client.expect_connection_close().await.0, 505);
    broker.shutdown().await;
}

#[tokio::test]
async fn channel_flow_pauses_and_resumes_deliveries() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    ch.queue_declare("flow".into(), QueueDeclareOptions::default(), lapin::types::FieldTable::default())
        .await
        .expect("declare");
    let mut consumer = ch
        .basic_consume("flow".into(), "c".into(), BasicConsumeOptions::default(), lapin::types::FieldTable::default())
        .await
        .expect("consume");
    assert!(!ch.channel_flow(ChannelFlowOptions { active: false }).await.expect("flow off"));
    let publisher = channel(&conn).await;
    publisher
        .basic_publish("".into(), "flow".into(), BasicPublishOptions::default(), b"held", Default::default())
        .await
        .expect("publish");
    assert_no_delivery(&mut consumer, 300).await;
    assert!(ch.channel_flow(ChannelFlowOptions { active: true }).await.expect("flow on"));
    assert_eq!(next_delivery(&mut consumer).await.data, b"held");
    broker.shutdown().await;
}

/// `basic.publish` (with content) then `channel.close`: a confirm may come before `close-ok`,
/// or not at all, never after it (a channel reopened with the same number would take it for
/// its own). The close is sent in the same write as the publish, or right after it, so that
/// the broker reads it while the publish's fsync is still in progress.
#[tokio::test]
async fn no_confirm_follows_close_ok() {
    use amq_protocol::frame::AMQPFrame;
    use amq_protocol::protocol::{basic::AMQPProperties, confirm, BasicProperties};
    const ROUNDS: u16 = 12;
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    ch.queue_declare("durable-q".into(), durable(), lapin::types::FieldTable::default()).await.expect("declare");
    let mut client = RawClient::handshake(broker.amqp_addr).await;
    for round in 1..=ROUNDS {
        let (persistent, together) = (round % 3 != 0, round % 2 == 0);
        client.open_channel(round).await;
        let select = AMQPClass::Confirm(confirm::AMQPMethod::Select(confirm::Select { nowait: false }));
        client.send_method(round, select).await;
        client.expect_method().await;
        let publish = basic::Publish { exchange: "".into(), routing_key: "durable-q".into(), ..Default::default() };
        let properties: BasicProperties = AMQPProperties::default().with_delivery_mode(if persistent { 2 } else { 1 });
        let header = amq_protocol::frame::AMQPContentHeader { class_id: 60, body_size: 5, properties };
        let mut frames = vec![
            AMQPFrame::Method(round, AMQPClass::Basic(basic::AMQPMethod::Publish(publish))),
            AMQPFrame::Header(round, header),
            AMQPFrame::Body(round, b"hello".to_vec()),
        ];
        let close = AMQPFrame::Method(round, AMQPClass::Channel(channel::AMQPMethod::Close(channel::Close::default())));
        if together {
            frames.push(close);
            client.send_together(&frames).await;
        } else {
            client.send_together(&frames).await;
            client.send_frame(close).await;
        }
        // Acks may come first; then close-ok.
        loop {
            match client.expect_method().await {
                (_, AMQPClass::Channel(channel::AMQPMethod::CloseOk(_))) => break,
                (_, AMQPClass::Basic(basic::AMQPMethod::Ack(_))) => {}
                other => panic!("round {round}: unexpected {other:?}"),
            }
        }
        // Time for a confirm that waited for the fsync: if one came now, the next frame would
        // be that ack instead of the next channel's open-ok.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    client.open_channel(ROUNDS + 1).await;
    assert_eq!(drain(&ch, "durable-q").await.len(), usize::from(ROUNDS));
    drop(client);
    broker.shutdown().await;
}

/// `tx.commit` of persistent publishes waits for their fsync; a method sent right behind it
/// (without waiting for commit-ok, which AMQP allows) is answered after it, never before.
#[tokio::test]
async fn replies_keep_the_order_of_methods_behind_a_commit_that_waits_for_the_disk() {
    use amq_protocol::frame::AMQPFrame;
    use amq_protocol::protocol::{basic::AMQPProperties, tx};
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    ch.queue_declare("tx-durable".into(), durable(), lapin::types::FieldTable::default()).await.expect("declare");
    let mut client = RawClient::handshake(broker.amqp_addr).await;
    client.open_channel(1).await;
    client.send_method(1, AMQPClass::Tx(tx::AMQPMethod::Select(tx::Select {}))).await;
    client.expect_method().await;
    for round in 0..5 {
        let publish = basic::Publish { exchange: "".into(), routing_key: "tx-durable".into(), ..Default::default() };
        let properties = AMQPProperties::default().with_delivery_mode(2);
        let header = amq_protocol::frame::AMQPContentHeader { class_id: 60, body_size: 2, properties };
        client
            .send_together(&[
                AMQPFrame::Method(1, AMQPClass::Basic(basic::AMQPMethod::Publish(publish))),
                AMQPFrame::Header(1, header),
                AMQPFrame::Body(1, b"tx".to_vec()),
                AMQPFrame::Method(1, AMQPClass::Tx(tx::AMQPMethod::Commit(tx::Commit {}))),
                AMQPFrame::Method(1, declare_passive("tx-durable")),
            ])
            .await;
        let (_, first) = client.expect_method().await;
        assert!(matches!(first, AMQPClass::Tx(tx::AMQPMethod::CommitOk(_))), "round {round}: {first:?} came first");
        let (_, second) = client.expect_method().await;
        assert!(matches!(second, AMQPClass::Queue(queue::AMQPMethod::DeclareOk(_))), "round {round}: {second:?}");
    }
    assert_eq!(drain(&ch, "tx-durable").await.len(), 5);
    drop(client);
    broker.shutdown().await;
}
