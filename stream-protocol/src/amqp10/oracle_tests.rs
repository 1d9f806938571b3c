//! Checks against RabbitMQ's own AMQP 1.0 codec (the `rabbitmq-stream-protocol` crate of
//! their Rust stream client): messages it encodes decode here into the right 0-9-1 fields,
//! and messages encoded here decode with it to the right values. Its encoder writes list8
//! headers for lists over 255 bytes, so the messages it builds here stay small; it also
//! over-counts small longs in compound sizes, which the decoder here tolerates.

use super::message::Message;
use super::{amqp10_from_message, message_from_amqp10};
use amq_protocol::frame::WriteContext;
use amq_protocol::protocol::basic::{gen_properties, parse_properties, AMQPProperties};
use amq_protocol::types::{AMQPValue, FieldArray, FieldTable, LongString, ShortString};
use bytes::Bytes;
use rabbitmq_stream_protocol::codec::{Decoder, Encoder};
use rabbitmq_stream_protocol::message::{Message as OracleMessage, SimpleValue, Value as OracleValue};

fn oracle_bytes(message: &OracleMessage) -> Bytes {
    let mut out = Vec::new();
    message.encode(&mut out).unwrap();
    Bytes::from(out)
}

fn oracle_decode(bytes: &[u8]) -> OracleMessage {
    let (rest, message) = OracleMessage::decode(bytes).unwrap();
    assert!(rest.is_empty());
    message
}

fn stored_properties(message: &warren_delivery::Message) -> AMQPProperties {
    parse_properties(&message.properties.raw()[..]).unwrap().1
}

fn header<'a>(properties: &'a AMQPProperties, key: &str) -> Option<&'a AMQPValue> {
    properties.headers().as_ref()?.inner().get(key)
}

fn text(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s))
}

fn short(s: &str) -> Option<ShortString> {
    Some(ShortString::from(s))
}

#[test]
fn a_body_only_message_from_the_client_is_stored_with_its_bytes() {
    let message = OracleMessage::builder().body("hello").build();
    let stored = message_from_amqp10(&oracle_bytes(&message), "stream").unwrap();
    assert_eq!(stored.body, Bytes::from_static(b"hello"));
    assert_eq!((stored.exchange.as_str(), stored.routing_key.as_str()), ("", "stream"));
    assert_eq!(stored.properties.raw().as_ref(), [0, 0]);
}

#[test]
fn client_properties_map_to_091_properties() {
    let message = OracleMessage::builder()
        .body(b"payload".to_vec())
        .properties()
        .message_id("id-1".to_string())
        .correlation_id(77u64)
        .user_id(b"guest".to_vec())
        .reply_to("replies")
        .to("ignored")
        .subject("ignored too")
        .content_type("text/plain")
        .content_encoding("utf-8")
        .group_id("app")
        .message_builder()
        .build();
    let stored = message_from_amqp10(&oracle_bytes(&message), "s").unwrap();
    let p = stored_properties(&stored);
    assert_eq!((p.message_id(), p.correlation_id()), (&short("id-1"), &short("77")));
    assert_eq!((p.user_id(), p.reply_to(), p.app_id()), (&short("guest"), &short("replies"), &short("app")));
    assert_eq!((p.content_type(), p.content_encoding()), (&short("text/plain"), &short("utf-8")));
    assert_eq!((p.delivery_mode(), p.headers()), (&None, &None));
    assert_eq!(stored.body, Bytes::from_static(b"payload"));
}

#[test]
fn client_application_properties_and_annotations_map_to_headers() {
    let message = OracleMessage::builder()
        .body("b")
        .application_properties()
        .insert("string", "v")
        .insert("long", -7i64)
        .insert("uint", 7u32)
        .insert("bool", true)
        .insert("binary", SimpleValue::Binary(vec![1, 2]))
        .message_builder()
        .message_annotations()
        .insert("x-stream-filter", "f")
        .insert("x-routing-key", "rk")
        .insert("x-exchange", "ex")
        .insert("not-x", "dropped")
        .message_builder()
        .build();
    let stored = message_from_amqp10(&oracle_bytes(&message), "s").unwrap();
    assert_eq!((stored.exchange.as_str(), stored.routing_key.as_str()), ("ex", "rk"));
    let p = stored_properties(&stored);
    assert_eq!(header(&p, "string"), Some(&text("v")));
    assert_eq!(header(&p, "long"), Some(&AMQPValue::LongLongInt(-7)));
    assert_eq!(header(&p, "uint"), Some(&AMQPValue::LongUInt(7)));
    assert_eq!(header(&p, "bool"), Some(&AMQPValue::Boolean(true)));
    assert_eq!(header(&p, "binary"), Some(&AMQPValue::LongString(LongString::from(vec![1, 2]))));
    assert_eq!(header(&p, "x-stream-filter"), Some(&text("f")));
    assert_eq!(p.headers().as_ref().map(|h| h.inner().len()), Some(6));
}

#[test]
fn client_messages_re_encode_to_what_the_client_decodes_back() {
    let message = OracleMessage::builder()
        .body("b")
        .properties()
        .message_id(5u64)
        .content_type("t")
        .message_builder()
        .application_properties()
        .insert("k", 1i32)
        .message_builder()
        .message_annotations()
        .insert("x-a", OracleValue::from("v"))
        .message_builder()
        .build();
    let bytes = oracle_bytes(&message);
    let decoded = Message::decode(&bytes).unwrap().message;
    let mut out = Vec::new();
    decoded.encode(&mut out);
    assert_eq!(oracle_decode(&out), message);
}

fn message_091() -> warren_delivery::Message {
    let mut headers = FieldTable::default();
    headers.insert("k".into(), text("v"));
    // Not a small int: the client's decoder reads smallint (0x54) as unsigned.
    headers.insert("n".into(), AMQPValue::LongInt(-300));
    headers.insert("x-custom".into(), AMQPValue::Boolean(false));
    headers.insert("CC".into(), AMQPValue::FieldArray(FieldArray::from(vec![text("other")])));
    let properties = AMQPProperties::default()
        .with_content_type("application/json".into())
        .with_headers(headers)
        .with_delivery_mode(2)
        .with_priority(4)
        .with_expiration("1500".into())
        .with_message_id("urn:uuid:00112233-4455-6677-8899-aabbccddeeff".into())
        .with_correlation_id("corr".into())
        .with_timestamp(1_700_000_000)
        .with_type("kind".into())
        .with_app_id("app".into());
    let raw = gen_properties(&properties)(WriteContext::from(Vec::new())).unwrap().write;
    warren_delivery::Message {
        exchange: "amq.direct".into(),
        routing_key: "orders".into(),
        properties: warren_delivery::Properties::decode(Bytes::from(raw)).unwrap(),
        body: Bytes::from_static(b"{\"a\":1}"),
    }
}

#[test]
fn warren_deliveries_decode_with_the_client_codec() {
    let mut out = Vec::new();
    amqp10_from_message(&message_091(), &mut out);
    let message = oracle_decode(&out);
    assert_eq!(message.data(), Some(&b"{\"a\":1}"[..]));
    let header = message.header().unwrap();
    assert_eq!((header.durable, header.priority, header.ttl), (true, 4, Some(1500)));
    let properties = message.properties().unwrap();
    let debug = format!("{properties:?}");
    assert!(debug.contains("Uuid(00112233-4455-6677-8899-aabbccddeeff)"), "{debug}");
    assert!(debug.contains("correlation_id: Some(String(\"corr\"))"), "{debug}");
    assert!(debug.contains("2023-11-14T22:13:20Z"), "creation time in ms: {debug}");
    assert_eq!(properties.content_type.as_ref().map(|s| s.to_string()), Some("application/json".into()));
    assert_eq!(properties.group_id.as_deref(), Some("app"));
    let application = message.application_properties().unwrap();
    assert_eq!(application.get("k"), Some(&SimpleValue::from("v")));
    assert_eq!(application.get("n"), Some(&SimpleValue::Int(-300)));
    assert_eq!(application.len(), 2);
    let annotations = message.message_annotations().unwrap();
    assert_eq!(annotations.get("x-basic-type"), Some(&OracleValue::from("kind")));
    assert_eq!(annotations.get("x-custom"), Some(&OracleValue::from(false)));
    assert_eq!(annotations.get("x-exchange"), Some(&OracleValue::from("amq.direct")));
    assert_eq!(annotations.get("x-routing-key"), Some(&OracleValue::from("orders")));
    assert!(format!("{:?}", annotations.get("x-cc")).contains("String(\"other\")"));
}

#[test]
fn large_warren_deliveries_decode_with_the_client_codec() {
    let mut headers = FieldTable::default();
    headers.insert("big".into(), text(&"v".repeat(1000)));
    let properties = AMQPProperties::default().with_headers(headers).with_reply_to("r".repeat(255).into());
    let raw = gen_properties(&properties)(WriteContext::from(Vec::new())).unwrap().write;
    let body = Bytes::from(vec![7u8; 70_000]);
    let message = warren_delivery::Message {
        exchange: "".into(),
        routing_key: "q".into(),
        properties: warren_delivery::Properties::decode(Bytes::from(raw)).unwrap(),
        body: body.clone(),
    };
    let mut out = Vec::new();
    amqp10_from_message(&message, &mut out);
    let decoded = oracle_decode(&out);
    assert_eq!(decoded.data(), Some(&body[..]));
    assert_eq!(decoded.properties().unwrap().reply_to.as_deref(), Some(&*"r".repeat(255)));
    let big = decoded.application_properties().unwrap().get("big");
    assert_eq!(big, Some(&SimpleValue::from(&*"v".repeat(1000))));
}

#[test]
fn every_prefix_of_a_client_message_maps_or_is_refused_without_panic() {
    let message = OracleMessage::builder()
        .body("body")
        .properties()
        .message_id("id".to_string())
        .message_builder()
        .application_properties()
        .insert("k", 1i64)
        .message_builder()
        .message_annotations()
        .insert("x-a", OracleValue::from("v"))
        .message_builder()
        .build();
    let bytes = oracle_bytes(&message);
    assert!(message_from_amqp10(&bytes, "s").is_ok());
    for len in 0..bytes.len() {
        let _ = message_from_amqp10(&bytes.slice(..len), "s");
    }
}
