//! Tests of the value codec and the message sections: exact encodings, every refusal the
//! decoder makes of hostile input, and a property-based round trip of arbitrary values.

use super::decode::{Decoder, MAX_DEPTH};
use super::message::{Body, Header, Message, Properties};
use super::types::{Array, Value};
use super::Amqp10Error;
use bytes::Bytes;
use proptest::collection::vec;
use proptest::prelude::*;

fn encode(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    value.encode(&mut out);
    out
}

fn decode(bytes: &[u8]) -> Result<Value, Amqp10Error> {
    let bytes = Bytes::copy_from_slice(bytes);
    let mut decoder = Decoder::new(&bytes);
    let value = decoder.value()?;
    assert!(decoder.is_at_end(), "bytes left after {value:?}");
    Ok(value)
}

#[test]
fn scalars_take_their_smallest_encoding() {
    assert_eq!(encode(&Value::Uint(0)), [0x43]);
    assert_eq!(encode(&Value::Uint(7)), [0x52, 7]);
    assert_eq!(encode(&Value::Uint(256)), [0x70, 0, 0, 1, 0]);
    assert_eq!(encode(&Value::Ulong(0)), [0x44]);
    assert_eq!(encode(&Value::Ulong(0x70)), [0x53, 0x70]);
    assert_eq!(encode(&Value::Int(-1)), [0x54, 0xff]);
    assert_eq!(encode(&Value::Long(-200)), [0x81, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x38]);
    assert_eq!(encode(&Value::Bool(true)), [0x41]);
    assert_eq!(encode(&Value::String("hi".into())), [0xa1, 2, b'h', b'i']);
    assert_eq!(encode(&Value::Symbol("a".repeat(256)))[..5], [0xb3, 0, 0, 1, 0]);
    assert_eq!(encode(&Value::List(Vec::new())), [0x45]);
    assert_eq!(encode(&Value::Map(Vec::new())), [0xc1, 1, 0]);
}

#[test]
fn compounds_shrink_to_one_byte_headers_when_they_fit() {
    let small = Value::List(vec![Value::Null, Value::Bool(false)]);
    assert_eq!(encode(&small), [0xc0, 3, 2, 0x40, 0x42]);
    let large = Value::List(vec![Value::Binary(Bytes::from(vec![7; 300]))]);
    let bytes = encode(&large);
    assert_eq!(bytes[..9], [0xd0, 0, 0, 1, 0x35, 0, 0, 0, 1]);
    assert_eq!(decode(&bytes), Ok(large));
}

#[test]
fn every_primitive_decodes_from_every_width() {
    let cases: [(&[u8], Value); 16] = [
        (&[0x56, 1], Value::Bool(true)),
        (&[0x42], Value::Bool(false)),
        (&[0x50, 9], Value::Ubyte(9)),
        (&[0x60, 1, 2], Value::Ushort(0x102)),
        (&[0x53, 5], Value::Ulong(5)),
        (&[0x80, 0, 0, 0, 0, 0, 0, 1, 0], Value::Ulong(256)),
        (&[0x51, 0xfe], Value::Byte(-2)),
        (&[0x61, 0xff, 0xfe], Value::Short(-2)),
        (&[0x71, 0, 0, 1, 0], Value::Int(256)),
        (&[0x55, 0x80], Value::Long(-128)),
        (&[0x72, 0x3f, 0x80, 0, 0], Value::Float(1.0)),
        (&[0x82, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0], Value::Double(1.0)),
        (&[0x73, 0, 0, 0, 0x41], Value::Char('A')),
        (&[0x83, 0, 0, 0, 0, 0, 0, 3, 0xe8], Value::Timestamp(1000)),
        (&[0x74, 1, 2, 3, 4], Value::Decimal32([1, 2, 3, 4])),
        (&[0xb1, 0, 0, 0, 1, b'x'], Value::String("x".into())),
    ];
    for (bytes, expected) in cases {
        assert_eq!(decode(bytes), Ok(expected), "{bytes:x?}");
    }
}

#[test]
fn arrays_share_one_constructor() {
    let ints = Value::Array(Array::new(vec![Value::Int(1), Value::Int(-1)]).unwrap());
    assert_eq!(encode(&ints), [0xe0, 10, 2, 0x71, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff]);
    let mixed = Array::new(vec![Value::String("a".into()), Value::String("b".repeat(300))]).unwrap();
    let bytes = encode(&Value::Array(mixed.clone()));
    assert_eq!(bytes[9], 0xb1, "one long element makes them all str32");
    assert_eq!(decode(&bytes), Ok(Value::Array(mixed)));
    let symbol = |s: &str| Value::Symbol(s.into());
    let described = |v: Value| Value::Described(Box::new(symbol("d")), Box::new(v));
    let described = Array::new(vec![described(Value::Uint(1)), described(Value::Uint(2))]).unwrap();
    assert_eq!(decode(&encode(&Value::Array(described.clone()))), Ok(Value::Array(described)));
}

#[test]
fn announced_sizes_are_checked_against_the_bytes_left() {
    let mut map8 = vec![0xc1, 200];
    map8.extend_from_slice(&[0; 12]);
    let error = decode(&map8).unwrap_err();
    assert_eq!(error.to_string(), "map8 announces 200 bytes, 12 left");
    assert_eq!(
        decode(&[0xb0, 0xff, 0xff, 0xff, 0xff, 1]),
        Err(Amqp10Error::Oversized { what: "vbin32", announced: u32::MAX.into(), left: 1 })
    );
    assert_eq!(
        decode(&[0xd0, 0, 0, 0, 4, 0xff, 0xff, 0xff, 0xff]),
        Err(Amqp10Error::TooManyAnnounced { what: "list32", count: u32::MAX, bytes: 0 })
    );
    assert_eq!(
        decode(&[0xc0, 3, 1, 0x71, 0, 0, 0, 1]),
        Err(Amqp10Error::Truncated { what: "int", needed: 4, left: 1 }),
        "elements past the announced size"
    );
    assert_eq!(decode(&[0xc1, 2, 1, 0x40]), Err(Amqp10Error::OddMapCount { what: "map8", count: 1 }));
    assert_eq!(decode(&[0x71, 0, 0]), Err(Amqp10Error::Truncated { what: "int", needed: 4, left: 2 }));
}

#[test]
fn compounds_whose_elements_end_early_are_read_by_their_count() {
    let bytes = Bytes::from_static(&[0xc1, 4, 2, 0x40, 0x40, 0x41]);
    let mut decoder = Decoder::new(&bytes);
    assert_eq!(decoder.value(), Ok(Value::Map(vec![(Value::Null, Value::Null)])));
    assert_eq!(decoder.value(), Ok(Value::Bool(true)), "the byte after the elements is read next");
}

#[test]
fn zero_width_array_elements_are_bounded_by_the_element_budget() {
    let nulls = [0xf0, 0, 0, 0, 5, 0xff, 0xff, 0xff, 0xff, 0x40];
    assert_eq!(decode(&nulls), Err(Amqp10Error::TooManyElements));
    let trues = [0xe0, 2, 0xff, 0x41];
    assert!(matches!(decode(&trues), Ok(Value::Array(a)) if a.items().len() == 255));
}

#[test]
fn nesting_is_refused_before_it_recurses() {
    let nested = |depth: usize| (0..depth).fold(Value::Null, |inner, _| Value::List(vec![inner]));
    assert!(decode(&encode(&nested(MAX_DEPTH))).is_ok());
    assert_eq!(decode(&encode(&nested(MAX_DEPTH + 1))), Err(Amqp10Error::TooDeep));
    // A hundred thousand descriptor markers: refused at the limit, not on stack overflow.
    assert_eq!(decode(&vec![0x00; 100_000]), Err(Amqp10Error::TooDeep));
    let arrays = |depth: usize| {
        (0..depth).fold(Value::Null, |inner, _| Value::Array(Array::new(vec![inner]).expect("one element")))
    };
    assert!(decode(&encode(&arrays(MAX_DEPTH))).is_ok());
    assert_eq!(decode(&encode(&arrays(MAX_DEPTH + 1))), Err(Amqp10Error::TooDeep));
}

#[test]
fn malformed_primitives_are_refused() {
    assert_eq!(decode(&[0x56, 2]), Err(Amqp10Error::InvalidBoolean(2)));
    assert_eq!(decode(&[0x73, 0, 0, 0xd8, 0]), Err(Amqp10Error::InvalidChar(0xd800)));
    assert_eq!(decode(&[0xa1, 1, 0xff]), Err(Amqp10Error::InvalidUtf8("str8")));
    assert_eq!(decode(&[0x99]), Err(Amqp10Error::UnknownFormatCode(0x99)));
    assert_eq!(decode(&[0xe0, 2, 0, 0x99]), Err(Amqp10Error::UnknownFormatCode(0x99)));
    assert_eq!(decode(&[]), Err(Amqp10Error::Truncated { what: "format code", needed: 1, left: 0 }));
}

fn full_message() -> Message {
    let symbol = |s: &str| Value::Symbol(s.into());
    Message {
        header: Some(Header { durable: Some(true), priority: Some(3), ttl_ms: Some(60_000), ..Header::default() }),
        delivery_annotations: Some(vec![(symbol("x-da"), Value::Int(1))]),
        message_annotations: Some(vec![(symbol("x-ma"), Value::String("v".into()))]),
        properties: Some(Properties {
            message_id: Some(Value::Ulong(42)),
            subject: Some("s".into()),
            content_type: Some("text/plain".into()),
            creation_time: Some(1_700_000_000_123),
            ..Properties::default()
        }),
        application_properties: Some(vec![(Value::String("k".into()), Value::Long(-5))]),
        body: Body::Data(vec![Bytes::from_static(b"one"), Bytes::from_static(b"two")]),
        footer: Some(vec![(symbol("x-f"), Value::Null)]),
    }
}

#[test]
fn messages_round_trip_section_by_section() {
    let message = full_message();
    let mut out = Vec::new();
    message.encode(&mut out);
    let decoded = Message::decode(&Bytes::from(out)).unwrap();
    assert_eq!(decoded.message, message);
    assert_eq!(
        decoded.body_sections.as_ref(),
        [&[0, 0x53, 0x75, 0xa0, 3][..], b"one", &[0, 0x53, 0x75, 0xa0, 3], b"two"].concat()
    );
}

#[test]
fn sections_are_recognized_by_symbolic_descriptors_too() {
    let mut out = vec![0x00, 0xa3, 16];
    out.extend_from_slice(b"amqp:data:binary");
    out.extend_from_slice(&[0xa0, 2, b'h', b'i']);
    let decoded = Message::decode(&Bytes::from(out)).unwrap();
    assert_eq!(decoded.message.body, Body::Data(vec![Bytes::from_static(b"hi")]));
}

#[test]
fn sections_out_of_order_or_repeated_are_refused() {
    let section = |descriptor: u8, value: &[u8]| [&[0x00, 0x53, descriptor][..], value].concat();
    let header = section(0x70, &[0x45]);
    let data = section(0x75, &[0xa0, 0]);
    let value = section(0x77, &[0x40]);
    let sequence = section(0x76, &[0x45]);
    let refused = |parts: &[&[u8]]| Message::decode(&Bytes::from(parts.concat())).unwrap_err();
    assert_eq!(refused(&[&data, &header]), Amqp10Error::SectionOrder { found: "header", after: "data" });
    assert_eq!(refused(&[&header, &header]), Amqp10Error::SectionOrder { found: "header", after: "header" });
    assert_eq!(refused(&[&value, &value]), Amqp10Error::SectionOrder { found: "amqp-value", after: "amqp-value" });
    assert_eq!(refused(&[&data, &sequence]), Amqp10Error::SectionOrder { found: "amqp-sequence", after: "data" });
    assert!(matches!(refused(&[&[0x40]]), Amqp10Error::NotASection(0x40)));
    assert!(matches!(refused(&[&section(0x79, &[0x40])]), Amqp10Error::UnknownSection(_)));
    let shape = Amqp10Error::SectionShape { section: "header", expected: "list", found: "null" };
    assert_eq!(refused(&[&section(0x70, &[0x40])]), shape);
    let field = Amqp10Error::FieldType { section: "header", field: "priority", expected: "a ubyte", found: "uint" };
    assert_eq!(refused(&[&section(0x70, &[0xc0, 4, 2, 0x40, 0x52, 4])]), field);
}

#[test]
fn every_prefix_of_a_message_is_refused_or_ends_on_a_section() {
    let mut out = Vec::new();
    full_message().encode(&mut out);
    let boundaries = section_boundaries(&out);
    for len in 0..out.len() {
        let prefix = Bytes::copy_from_slice(&out[..len]);
        match Message::decode(&prefix) {
            Ok(_) => assert!(boundaries.contains(&len), "prefix of {len} bytes decoded"),
            Err(error) => assert!(!error.to_string().is_empty()),
        }
    }
}

/// Where each section of an encoded message ends.
fn section_boundaries(bytes: &[u8]) -> Vec<usize> {
    let bytes = Bytes::copy_from_slice(bytes);
    let mut decoder = Decoder::new(&bytes);
    let mut ends = vec![0];
    while !decoder.is_at_end() {
        decoder.value().unwrap();
        ends.push(decoder.position());
    }
    ends
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<u8>().prop_map(Value::Ubyte),
        any::<u16>().prop_map(Value::Ushort),
        any::<u32>().prop_map(Value::Uint),
        any::<u64>().prop_map(Value::Ulong),
        any::<i8>().prop_map(Value::Byte),
        any::<i16>().prop_map(Value::Short),
        any::<i32>().prop_map(Value::Int),
        any::<i64>().prop_map(Value::Long),
        any::<f32>().prop_filter("NaN is not equal to itself", |f| !f.is_nan()).prop_map(Value::Float),
        any::<f64>().prop_filter("NaN is not equal to itself", |f| !f.is_nan()).prop_map(Value::Double),
        any::<[u8; 4]>().prop_map(Value::Decimal32),
        any::<[u8; 8]>().prop_map(Value::Decimal64),
        any::<[u8; 16]>().prop_map(Value::Decimal128),
        any::<char>().prop_map(Value::Char),
        any::<i64>().prop_map(Value::Timestamp),
        any::<[u8; 16]>().prop_map(Value::Uuid),
        vec(any::<u8>(), 0..300).prop_map(|b| Value::Binary(Bytes::from(b))),
        ".{0,80}".prop_map(Value::String),
        "[a-z:.-]{0,300}".prop_map(Value::Symbol),
    ]
}

/// Arrays of one kind: copies of one leaf's kind with different values.
fn array() -> impl Strategy<Value = Value> {
    prop_oneof![
        vec(any::<i64>(), 0..20).prop_map(|v| v.into_iter().map(Value::Long).collect::<Vec<_>>()),
        vec("[a-z]{0,300}", 0..5).prop_map(|v| v.into_iter().map(Value::String).collect()),
        vec(any::<bool>(), 0..20).prop_map(|v| v.into_iter().map(Value::Bool).collect()),
        (0..20usize).prop_map(|n| vec![Value::Null; n]),
        vec(vec(any::<u8>(), 0..3), 0..5)
            .prop_map(|v| v.into_iter().map(|l| Value::List(l.into_iter().map(Value::Ubyte).collect())).collect()),
    ]
    .prop_map(|items| Value::Array(Array::new(items).expect("one kind")))
}

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![leaf(), array()].prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..8).prop_map(Value::List),
            vec((inner.clone(), inner.clone()), 0..4).prop_map(Value::Map),
            (leaf(), inner).prop_map(|(d, v)| Value::Described(Box::new(d), Box::new(v))),
        ]
    })
}

proptest! {
    #[test]
    fn values_round_trip(value in value()) {
        prop_assert_eq!(decode(&encode(&value)), Ok(value));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..200)) {
        let _ = Decoder::new(&Bytes::from(bytes.clone())).value();
        let _ = Message::decode(&Bytes::from(bytes.clone()));
        let _ = super::message_from_amqp10(&Bytes::from(bytes), "s");
    }

    #[test]
    fn corrupted_messages_never_panic(index in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let mut out = Vec::new();
        full_message().encode(&mut out);
        let at = index.index(out.len());
        out[at] = byte;
        let _ = super::message_from_amqp10(&Bytes::from(out), "s");
    }
}
