//! Properties are delivered as the exact bytes published, whatever their order or encoding.

use amq_protocol::protocol::{basic, AMQPClass};
use warren_tests::raw_client::RawClient;
use warren_tests::start_broker;

/// A property list a decoder that sorts table keys would not reproduce: headers with keys out
/// of order and a nested table, then delivery mode, then message id.
fn unusual_properties() -> Vec<u8> {
    let mut table = Vec::new();
    for (key, value) in [(&b"zeta"[..], &b"I\x00\x00\x00\x07"[..]), (b"alpha", b"F\x00\x00\x00\x04\x01kt\x01")] {
        table.push(key.len() as u8);
        table.extend_from_slice(key);
        table.extend_from_slice(value);
    }
    let flags: u16 = (1 << 13) | (1 << 12) | (1 << 7);
    let mut props = flags.to_be_bytes().to_vec();
    props.extend_from_slice(&(table.len() as u32).to_be_bytes());
    props.extend_from_slice(&table);
    props.push(2);
    props.push(3);
    props.extend_from_slice(b"m-1");
    props
}

fn frame(kind: u8, channel: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![kind];
    out.extend_from_slice(&channel.to_be_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out.push(0xCE);
    out
}

#[tokio::test]
async fn properties_come_back_byte_for_byte() {
    let broker = start_broker().await;
    let mut client = RawClient::handshake(broker.amqp_addr).await;
    client.open_channel(1).await;
    client.declare_queue(1, "exact", false).await;
    let publish =
        basic::Publish { exchange: "".into(), routing_key: "exact".into(), mandatory: false, immediate: false };
    client.send_method(1, AMQPClass::Basic(basic::AMQPMethod::Publish(publish))).await;
    let props = unusual_properties();
    let mut header = vec![0, 60, 0, 0];
    header.extend_from_slice(&5u64.to_be_bytes());
    header.extend_from_slice(&props);
    client.send(&frame(2, 1, &header)).await;
    client.send(&frame(3, 1, b"hello")).await;
    client
        .send_method(1, AMQPClass::Basic(basic::AMQPMethod::Get(basic::Get { queue: "exact".into(), no_ack: true })))
        .await;
    let (kind, _, _) = client.next_raw_frame().await.expect("get-ok");
    assert_eq!(kind, 1);
    let (kind, channel, payload) = client.next_raw_frame().await.expect("content header");
    assert_eq!((kind, channel), (2, 1));
    assert_eq!(&payload[4..12], &5u64.to_be_bytes());
    assert_eq!(&payload[12..], &props[..], "property bytes differ from those published");
    let (kind, _, body) = client.next_raw_frame().await.expect("body");
    assert_eq!((kind, body.as_slice()), (3, &b"hello"[..]));
    broker.shutdown().await;
}
