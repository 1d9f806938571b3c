//! What a hostile client sends, as bytes on the wire: the broker answers with the specified
//! error and stays up for everyone else.

use amq_protocol::protocol::{connection, queue, AMQPClass};
use lapin::options::{BasicPublishOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::BasicProperties;
use warren_tests::raw_client::{RawClient, PROTOCOL_HEADER};
use warren_tests::*;

/// The limit documented in the README (and in `warren_delivery::field_table`).
const MAX_NESTING_DEPTH: usize = 32;
/// Deep enough to overflow a worker's stack in a recursive decoder (about 14 KB of bytes).
const ATTACK_DEPTH: usize = 1_500;
const FRAME_METHOD: u8 = 1;
const FRAME_HEADER: u8 = 2;
const FRAME_BODY: u8 = 3;

/// A field table (length prefix included) whose single value nests `depth` levels deep,
/// as tables inside tables or as arrays inside arrays. Built as bytes: no encoder recurses.
fn nested_table(depth: usize, arrays: bool) -> Vec<u8> {
    let mut value = vec![b't', 1];
    for _ in 1..depth {
        let mut outer = vec![if arrays { b'A' } else { b'F' }];
        let mut body = if arrays { Vec::new() } else { vec![1, b'k'] };
        body.extend_from_slice(&value);
        outer.extend_from_slice(&(body.len() as u32).to_be_bytes());
        outer.extend_from_slice(&body);
        value = outer;
    }
    let mut table = ((value.len() + 2) as u32).to_be_bytes().to_vec();
    table.extend_from_slice(&[1, b'k']);
    table.extend_from_slice(&value);
    table
}

fn short_str(out: &mut Vec<u8>, s: &str) {
    out.push(s.len() as u8);
    out.extend_from_slice(s.as_bytes());
}

fn start_ok_payload(client_properties: &[u8]) -> Vec<u8> {
    let mut payload = vec![0, 10, 0, 11];
    payload.extend_from_slice(client_properties);
    short_str(&mut payload, "PLAIN");
    let response = b"\0guest\0guest";
    payload.extend_from_slice(&(response.len() as u32).to_be_bytes());
    payload.extend_from_slice(response);
    short_str(&mut payload, "en_US");
    payload
}

fn queue_declare_payload(name: &str, arguments: &[u8]) -> Vec<u8> {
    let mut payload = vec![0, 50, 0, 10, 0, 0];
    short_str(&mut payload, name);
    payload.push(0);
    payload.extend_from_slice(arguments);
    payload
}

/// `basic.publish` to the default exchange, then a content header whose only property is
/// `headers`, then a one-byte body.
async fn publish_with_headers(client: &mut RawClient, channel: u16, queue: &str, headers: &[u8]) {
    let mut publish = vec![0, 60, 0, 40, 0, 0];
    short_str(&mut publish, "");
    short_str(&mut publish, queue);
    publish.push(0);
    client.send_raw_frame(FRAME_METHOD, channel, &publish).await;
    let mut header = vec![0, 60, 0, 0];
    header.extend_from_slice(&1u64.to_be_bytes());
    header.extend_from_slice(&(1u16 << 13).to_be_bytes());
    header.extend_from_slice(headers);
    client.send_raw_frame(FRAME_HEADER, channel, &header).await;
    client.send_raw_frame(FRAME_BODY, channel, b"x").await;
}

/// A new client still gets through: the broker is up.
async fn assert_alive(broker: &warren_tests::TestBroker) {
    let connection = connect(broker).await;
    let channel = channel(&connection).await;
    channel.queue_declare("".into(), QueueDeclareOptions::default(), FieldTable::default()).await.expect("declare");
    connection.close(200, "bye".into()).await.expect("close");
}

#[tokio::test]
async fn deeply_nested_client_properties_close_the_connection_before_login() {
    let broker = start_broker().await;
    for arrays in [false, true] {
        let mut client = RawClient::connect(broker.amqp_addr).await;
        client.send(PROTOCOL_HEADER).await;
        client.expect_method().await;
        client.send_raw_frame(FRAME_METHOD, 0, &start_ok_payload(&nested_table(ATTACK_DEPTH, arrays))).await;
        assert_eq!(client.expect_connection_close().await, (502, 10, 11), "arrays: {arrays}");
    }
    // At the limit, client properties are fine.
    let mut client = RawClient::connect(broker.amqp_addr).await;
    client.send(PROTOCOL_HEADER).await;
    client.expect_method().await;
    client.send_raw_frame(FRAME_METHOD, 0, &start_ok_payload(&nested_table(MAX_NESTING_DEPTH, false))).await;
    let (_, tune) = client.expect_method().await;
    assert!(matches!(tune, AMQPClass::Connection(connection::AMQPMethod::Tune(_))), "{tune:?}");
    assert_alive(&broker).await;
    broker.shutdown().await;
}

#[tokio::test]
async fn deeply_nested_arguments_close_the_channel_with_406() {
    let broker = start_broker().await;
    let mut client = RawClient::handshake(broker.amqp_addr).await;
    for (id, arrays) in [(1, false), (2, true)] {
        client.open_channel(id).await;
        let payload = queue_declare_payload("deep", &nested_table(ATTACK_DEPTH, arrays));
        client.send_raw_frame(FRAME_METHOD, id, &payload).await;
        assert_eq!(client.expect_channel_close(id).await, 406);
    }
    // One level less than refused is declared, on the same connection.
    client.open_channel(3).await;
    client
        .send_raw_frame(FRAME_METHOD, 3, &queue_declare_payload("deep", &nested_table(MAX_NESTING_DEPTH, true)))
        .await;
    let (channel, ok) = client.expect_method().await;
    assert_eq!(channel, 3);
    assert!(matches!(ok, AMQPClass::Queue(queue::AMQPMethod::DeclareOk(_))), "{ok:?}");
    client.open_channel(4).await;
    let one_too_deep = queue_declare_payload("deeper", &nested_table(MAX_NESTING_DEPTH + 1, false));
    client.send_raw_frame(FRAME_METHOD, 4, &one_too_deep).await;
    assert_eq!(client.expect_channel_close(4).await, 406);
    assert_alive(&broker).await;
    broker.shutdown().await;
}

#[tokio::test]
async fn deeply_nested_headers_close_the_channel_with_406_and_nothing_is_queued() {
    let broker = start_broker().await;
    let connection = connect(&broker).await;
    let ch = channel(&connection).await;
    ch.queue_declare("target".into(), QueueDeclareOptions::default(), FieldTable::default()).await.expect("declare");
    let mut client = RawClient::handshake(broker.amqp_addr).await;
    for (id, arrays) in [(1, false), (2, true)] {
        client.open_channel(id).await;
        publish_with_headers(&mut client, id, "target", &nested_table(ATTACK_DEPTH, arrays)).await;
        assert_eq!(client.expect_channel_close(id).await, 406);
    }
    client.open_channel(3).await;
    publish_with_headers(&mut client, 3, "target", &nested_table(MAX_NESTING_DEPTH, false)).await;
    // The connection is still usable (open-ok comes after the publish before it was routed),
    // and only the publish within the limit was queued.
    client.open_channel(4).await;
    let queued = drain(&ch, "target").await;
    assert_eq!(queued.len(), 1);
    ch.basic_publish("".into(), "target".into(), BasicPublishOptions::default(), b"ok", BasicProperties::default())
        .await
        .expect("publish");
    assert_eq!(drain(&ch, "target").await.len(), 1);
    broker.shutdown().await;
}
