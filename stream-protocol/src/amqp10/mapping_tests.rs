//! Tests of the mapping between AMQP 1.0 messages and Warren's AMQP 0-9-1 ones, field by
//! field, against what RabbitMQ 3.13's `mc_amqpl` does.

use super::message::{Body, Header, Message, Properties};
use super::types::Value;
use super::{amqp10_from_message, message_from_amqp10, Amqp10Error};
use amq_protocol::frame::WriteContext;
use amq_protocol::protocol::basic::{gen_properties, parse_properties, AMQPProperties};
use amq_protocol::types::{AMQPValue, ByteArray, DecimalValue, FieldArray, FieldTable, LongString, ShortString};
use bytes::Bytes;
use proptest::prelude::*;

const UUID_URN: &str = "urn:uuid:123e4567-e89b-12d3-a456-426614174000";
const UUID: [u8; 16] = [0x12, 0x3e, 0x45, 0x67, 0xe8, 0x9b, 0x12, 0xd3, 0xa4, 0x56, 0x42, 0x66, 0x14, 0x17, 0x40, 0x00];

fn text(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s))
}

fn message_091(properties: &AMQPProperties, body: &'static [u8]) -> warren_delivery::Message {
    let raw = gen_properties(properties)(WriteContext::from(Vec::new())).unwrap().write;
    warren_delivery::Message {
        exchange: "ex".into(),
        routing_key: "key".into(),
        properties: warren_delivery::Properties::decode(Bytes::from(raw)).unwrap(),
        body: Bytes::from_static(body),
    }
}

fn full_091() -> warren_delivery::Message {
    let mut headers = FieldTable::default();
    headers.insert("k".into(), text("v"));
    headers.insert("n".into(), AMQPValue::LongLongInt(5));
    headers.insert("flag".into(), AMQPValue::Boolean(true));
    headers.insert("ts".into(), AMQPValue::Timestamp(1_700_000_000));
    headers.insert("bin".into(), AMQPValue::ByteArray(ByteArray::from(vec![0, 1])));
    headers.insert("dec".into(), AMQPValue::DecimalValue(DecimalValue { scale: 1, value: 5 }));
    headers.insert("nested".into(), AMQPValue::FieldTable(FieldTable::default()));
    headers.insert("arr".into(), AMQPValue::FieldArray(FieldArray::from(vec![text("a")])));
    headers.insert("x-custom".into(), text("xv"));
    headers.insert("CC".into(), AMQPValue::FieldArray(FieldArray::from(vec![text("rk2")])));
    let properties = AMQPProperties::default()
        .with_content_type("application/json".into())
        .with_content_encoding("gzip".into())
        .with_headers(headers)
        .with_delivery_mode(2)
        .with_priority(5)
        .with_correlation_id(UUID_URN.into())
        .with_reply_to("replies".into())
        .with_expiration("60000".into())
        .with_message_id("m-1".into())
        .with_timestamp(1_700_000_000)
        .with_type("order".into())
        .with_user_id("guest".into())
        .with_app_id("app".into());
    message_091(&properties, b"hello")
}

fn to_amqp10(message: &warren_delivery::Message) -> (Message, Bytes) {
    let mut out = Vec::new();
    amqp10_from_message(message, &mut out);
    let bytes = Bytes::from(out);
    (Message::decode(&bytes).unwrap().message, bytes)
}

fn amqp10_bytes(message: &Message) -> Bytes {
    let mut out = Vec::new();
    message.encode(&mut out);
    Bytes::from(out)
}

fn properties_of(message: &warren_delivery::Message) -> AMQPProperties {
    parse_properties(&message.properties.raw()[..]).unwrap().1
}

fn header<'a>(properties: &'a AMQPProperties, key: &str) -> Option<&'a AMQPValue> {
    properties.headers().as_ref()?.inner().get(key)
}

fn symbol(s: &str) -> Value {
    Value::Symbol(s.into())
}

fn string(s: &str) -> Value {
    Value::String(s.into())
}

#[test]
fn a_091_message_maps_to_sections_as_rabbitmq_writes_it_to_a_stream() {
    let (message, _) = to_amqp10(&full_091());
    assert_eq!(
        message.header,
        Some(Header { durable: Some(true), priority: Some(5), ttl_ms: Some(60_000), ..Header::default() })
    );
    let expected_annotations = vec![
        (symbol("x-basic-type"), string("order")),
        (symbol("x-cc"), Value::List(vec![string("rk2")])),
        (symbol("x-custom"), string("xv")),
        (symbol("x-exchange"), string("ex")),
        (symbol("x-routing-key"), string("key")),
    ];
    assert_eq!(message.message_annotations, Some(expected_annotations));
    let expected_properties = Properties {
        message_id: Some(string("m-1")),
        user_id: Some(Bytes::from_static(b"guest")),
        reply_to: Some("replies".into()),
        correlation_id: Some(Value::Uuid(UUID)),
        content_type: Some("application/json".into()),
        content_encoding: Some("gzip".into()),
        creation_time: Some(1_700_000_000_000),
        group_id: Some("app".into()),
        ..Properties::default()
    };
    assert_eq!(message.properties, Some(expected_properties));
    let expected_application_properties = vec![
        (string("bin"), Value::Binary(Bytes::from_static(&[0, 1]))),
        (string("flag"), Value::Bool(true)),
        (string("k"), string("v")),
        (string("n"), Value::Long(5)),
        (string("ts"), Value::Timestamp(1_700_000_000_000)),
    ];
    assert_eq!(message.application_properties, Some(expected_application_properties));
    assert_eq!(message.body, Body::Data(vec![Bytes::from_static(b"hello")]));
}

#[test]
fn a_091_message_comes_back_through_amqp10() {
    let (_, bytes) = to_amqp10(&full_091());
    let back = message_from_amqp10(&bytes, "stream").unwrap();
    assert_eq!((back.exchange.as_str(), back.routing_key.as_str()), ("ex", "key"));
    assert_eq!(back.body, Bytes::from_static(b"hello"));
    let p = properties_of(&back);
    let short = |s: &str| Some(ShortString::from(s));
    assert_eq!((p.content_type(), p.content_encoding()), (&short("application/json"), &short("gzip")));
    assert_eq!((*p.delivery_mode(), *p.priority(), p.expiration()), (Some(2), Some(5), &short("60000")));
    assert_eq!((p.message_id(), p.correlation_id()), (&short("m-1"), &short(UUID_URN)));
    assert_eq!((p.reply_to(), p.user_id(), p.app_id()), (&short("replies"), &short("guest"), &short("app")));
    assert_eq!((*p.timestamp(), p.kind()), (Some(1_700_000_000), &short("order")));
    assert_eq!(header(&p, "k"), Some(&text("v")));
    assert_eq!(header(&p, "n"), Some(&AMQPValue::LongLongInt(5)));
    assert_eq!(header(&p, "ts"), Some(&AMQPValue::Timestamp(1_700_000_000)));
    assert_eq!(header(&p, "bin"), Some(&AMQPValue::LongString(LongString::from(vec![0, 1]))));
    assert_eq!(header(&p, "x-custom"), Some(&text("xv")));
    assert_eq!(header(&p, "CC"), Some(&AMQPValue::FieldArray(FieldArray::from(vec![text("rk2")]))));
    for dropped in ["dec", "nested", "arr", "x-exchange", "x-routing-key", "x-basic-type"] {
        assert_eq!(header(&p, dropped), None, "{dropped}");
    }
}

#[test]
fn a_bare_091_message_gets_the_routing_annotations_and_no_header_of_defaults() {
    let (message, _) = to_amqp10(&message_091(&AMQPProperties::default(), b""));
    assert_eq!(message.header, None, "not durable and priority 4 are AMQP 1.0's defaults");
    let expected = vec![(symbol("x-exchange"), string("ex")), (symbol("x-routing-key"), string("key"))];
    assert_eq!(message.message_annotations, Some(expected));
    assert_eq!((message.properties, message.application_properties), (None, None));
    assert_eq!(message.body, Body::Data(vec![Bytes::new()]));
}

#[test]
fn a_stream_publish_without_annotations_is_routed_by_the_stream_name() {
    let message = Message { body: Body::Data(vec![Bytes::from_static(b"hi")]), ..Message::default() };
    let stored = message_from_amqp10(&amqp10_bytes(&message), "orders").unwrap();
    assert_eq!((stored.exchange.as_str(), stored.routing_key.as_str()), ("", "orders"));
    assert_eq!(stored.properties.raw().as_ref(), [0, 0]);
    assert_eq!(stored.body, Bytes::from_static(b"hi"));
}

#[test]
fn a_non_data_body_is_kept_as_encoded_sections_typed_amqp_1_0() {
    for body in [
        Body::Value(string("hi")),
        Body::Sequence(vec![vec![Value::Int(1)], vec![]]),
        Body::Data(vec![Bytes::from_static(b"a"), Bytes::from_static(b"b")]),
        Body::None,
    ] {
        let message = Message { properties: Some(Properties::default()), body: body.clone(), ..Message::default() };
        let bytes = amqp10_bytes(&message);
        let stored = message_from_amqp10(&bytes, "s").unwrap();
        let body_only = amqp10_bytes(&Message { body: body.clone(), ..Message::default() });
        assert_eq!(stored.body, body_only, "{body:?}");
        assert_eq!(properties_of(&stored).kind(), &Some("amqp-1.0".into()));
        let (again, again_bytes) = to_amqp10(&stored);
        assert_eq!(again.body, body);
        // Published over the Stream protocol: its sections come back as they were sent.
        assert_eq!((again.properties, again.message_annotations), (Some(Properties::default()), None));
        assert_eq!(again_bytes, bytes, "{body:?}");
    }
}

#[test]
fn an_amqp_1_0_type_on_a_body_that_is_not_sections_keeps_it_as_data() {
    let properties = AMQPProperties::default().with_type("amqp-1.0".into());
    let (message, _) = to_amqp10(&message_091(&properties, b"not sections"));
    assert_eq!(message.body, Body::Data(vec![Bytes::from_static(b"not sections")]));
}

fn with_ids(message_id: Value, correlation_id: Value) -> warren_delivery::Message {
    let properties =
        Properties { message_id: Some(message_id), correlation_id: Some(correlation_id), ..Properties::default() };
    let message = Message { properties: Some(properties), body: Body::Data(vec![Bytes::new()]), ..Message::default() };
    message_from_amqp10(&amqp10_bytes(&message), "s").unwrap()
}

#[test]
fn ids_that_do_not_fit_a_short_string_go_to_headers() {
    let p = properties_of(&with_ids(Value::Binary(Bytes::from_static(&[1, 2])), string(&"c".repeat(300))));
    assert_eq!((p.message_id(), p.correlation_id()), (&None, &None));
    assert_eq!(header(&p, "x-message-id"), Some(&AMQPValue::ByteArray(ByteArray::from(vec![1, 2]))));
    assert_eq!(header(&p, "x-correlation-id"), Some(&text(&"c".repeat(300))));
    let p = properties_of(&with_ids(Value::Ulong(42), Value::Uuid(UUID)));
    assert_eq!((p.message_id(), p.correlation_id()), (&Some("42".into()), &Some(UUID_URN.into())));
}

#[test]
fn without_a_header_the_basic_annotations_stand_in() {
    let annotations = vec![
        (symbol("x-basic-delivery-mode"), Value::Ubyte(2)),
        (symbol("x-basic-priority"), Value::Ubyte(7)),
        (symbol("x-basic-expiration"), string("1000")),
        (symbol("x-basic-type"), string("t")),
    ];
    let message = Message { message_annotations: Some(annotations.clone()), ..Message::default() };
    let p = properties_of(&message_from_amqp10(&amqp10_bytes(&message), "s").unwrap());
    assert_eq!((*p.delivery_mode(), *p.priority(), p.expiration()), (Some(2), Some(7), &Some("1000".into())));
    assert_eq!(p.kind(), &Some("amqp-1.0".into()), "no body: the type says the body is sections");
    let header = Header { durable: Some(false), priority: Some(1), ttl_ms: Some(5), ..Header::default() };
    let data = Body::Data(vec![Bytes::new()]);
    let message =
        Message { header: Some(header), message_annotations: Some(annotations), body: data, ..Message::default() };
    let p = properties_of(&message_from_amqp10(&amqp10_bytes(&message), "s").unwrap());
    assert_eq!((*p.delivery_mode(), *p.priority(), p.expiration()), (Some(1), Some(1), &Some("5".into())));
    assert_eq!(p.kind(), &Some("t".into()));
}

#[test]
fn only_x_annotations_become_headers() {
    let annotations = vec![
        (symbol("x-cc"), Value::List(vec![string("a")])),
        (symbol("x-opt-rabbitmq-received-time"), Value::Timestamp(1_234)),
        (symbol("x-opt-deaths"), Value::List(Vec::new())),
        (symbol("x-exchange"), string("e")),
        (symbol("x-routing-key"), string("r")),
        (symbol("x-death"), Value::Null),
        (symbol("not-x"), Value::Int(1)),
        (Value::Ulong(9), Value::Int(1)),
        (symbol("x-n"), Value::Ulong(u64::MAX)),
    ];
    let data = Body::Data(vec![Bytes::new()]);
    let message = Message { message_annotations: Some(annotations), body: data, ..Message::default() };
    let stored = message_from_amqp10(&amqp10_bytes(&message), "s").unwrap();
    assert_eq!((stored.exchange.as_str(), stored.routing_key.as_str()), ("e", "r"));
    let p = properties_of(&stored);
    let headers: Vec<&str> = p.headers().as_ref().unwrap().inner().keys().map(|k| k.as_str()).collect();
    assert_eq!(headers, ["CC", "timestamp_in_ms", "x-n"]);
    assert_eq!(header(&p, "timestamp_in_ms"), Some(&AMQPValue::LongLongInt(1_234)));
    assert_eq!(header(&p, "x-n"), Some(&AMQPValue::LongLongInt(-1)), "wraps, as in RabbitMQ");
}

#[test]
fn properties_without_a_091_place_or_value_are_dropped() {
    let properties = Properties {
        user_id: Some(Bytes::from_static(b"a\0b")),
        to: Some("t".into()),
        subject: Some("s".into()),
        reply_to: Some("r".repeat(256)),
        creation_time: Some(-5_000),
        ..Properties::default()
    };
    let data = Body::Data(vec![Bytes::new()]);
    let message = Message { properties: Some(properties), body: data, ..Message::default() };
    let stored = message_from_amqp10(&amqp10_bytes(&message), "s").unwrap();
    assert_eq!(stored.properties.raw().as_ref(), [0, 0]);
    let creation = Properties { creation_time: Some(1_700_000_000_999), ..Properties::default() };
    let message = Message { properties: Some(creation), body: Body::Data(vec![Bytes::new()]), ..Message::default() };
    let p = properties_of(&message_from_amqp10(&amqp10_bytes(&message), "s").unwrap());
    assert_eq!(*p.timestamp(), Some(1_700_000_000), "milliseconds to seconds");
}

#[test]
fn application_properties_convert_each_type() {
    let entries = vec![
        (string("s"), symbol("sym")),
        (string("u"), Value::Uint(3)),
        (string("b"), Value::Byte(-3)),
        (string("c"), Value::Char('é')),
        (string("id"), Value::Uuid(UUID)),
        (string("null"), Value::Null),
        (string("m"), Value::Map(vec![(symbol("k"), Value::Int(1)), (Value::Int(2), Value::Int(2))])),
        (string("d"), Value::Decimal64([0; 8])),
        (Value::Int(1), Value::Int(1)),
    ];
    let data = Body::Data(vec![Bytes::new()]);
    let message = Message { application_properties: Some(entries), body: data, ..Message::default() };
    let p = properties_of(&message_from_amqp10(&amqp10_bytes(&message), "s").unwrap());
    assert_eq!(header(&p, "s"), Some(&text("sym")));
    assert_eq!(header(&p, "u"), Some(&AMQPValue::LongUInt(3)));
    assert_eq!(header(&p, "b"), Some(&AMQPValue::ShortShortInt(-3)));
    assert_eq!(header(&p, "c"), Some(&text("é")));
    assert_eq!(header(&p, "id"), Some(&text(UUID_URN)));
    assert_eq!(header(&p, "null"), Some(&AMQPValue::Void));
    let mut table = FieldTable::default();
    table.insert("k".into(), AMQPValue::LongInt(1));
    assert_eq!(header(&p, "m"), Some(&AMQPValue::FieldTable(table)));
    assert_eq!(header(&p, "d"), None);
}

#[test]
fn names_too_long_for_091_are_refused() {
    let annotations = vec![(symbol("x-exchange"), string(&"e".repeat(256)))];
    let message = Message { message_annotations: Some(annotations), ..Message::default() };
    let error = message_from_amqp10(&amqp10_bytes(&message), "s").unwrap_err();
    assert_eq!(error, Amqp10Error::ShortStringTooLong { what: "exchange", len: 256 });
}

#[test]
fn the_deepest_application_properties_still_fit_a_field_table() {
    let deepest = (0..29).fold(Value::Int(1), |inner, _| Value::Map(vec![(string("k"), inner)]));
    let data = Body::Data(vec![Bytes::new()]);
    let message =
        Message { application_properties: Some(vec![(string("k"), deepest)]), body: data, ..Message::default() };
    assert!(message_from_amqp10(&amqp10_bytes(&message), "s").is_ok());
}

/// Header values that survive 0-9-1 → AMQP 1.0 → 0-9-1 with their types.
fn header_value() -> impl Strategy<Value = AMQPValue> {
    prop_oneof![
        any::<bool>().prop_map(AMQPValue::Boolean),
        any::<i8>().prop_map(AMQPValue::ShortShortInt),
        any::<u8>().prop_map(AMQPValue::ShortShortUInt),
        any::<i16>().prop_map(AMQPValue::ShortInt),
        any::<u16>().prop_map(AMQPValue::ShortUInt),
        any::<i32>().prop_map(AMQPValue::LongInt),
        any::<u32>().prop_map(AMQPValue::LongUInt),
        any::<i64>().prop_map(AMQPValue::LongLongInt),
        any::<f64>().prop_filter("NaN is not equal to itself", |f| !f.is_nan()).prop_map(AMQPValue::Double),
        (0..i64::MAX as u64 / 1000).prop_map(AMQPValue::Timestamp),
        "[ -~]{0,300}".prop_map(|s| text(&s)),
        Just(AMQPValue::Void),
    ]
}

proptest! {
    #[test]
    fn simple_headers_round_trip(
        plain in proptest::collection::btree_map("[a-w][a-z0-9_]{0,12}", header_value(), 0..8),
        x in proptest::collection::btree_map("x-h[a-z]{1,8}", header_value(), 0..4),
    ) {
        let mut headers = FieldTable::default();
        for (key, value) in plain.into_iter().chain(x) {
            headers.insert(key.into(), value);
        }
        let properties = AMQPProperties::default().with_headers(headers.clone());
        let (_, bytes) = to_amqp10(&message_091(&properties, b"body"));
        let back = properties_of(&message_from_amqp10(&bytes, "s").unwrap());
        let expected = Some(headers).filter(|h| !h.inner().is_empty());
        prop_assert_eq!(back.headers(), &expected);
    }
}
