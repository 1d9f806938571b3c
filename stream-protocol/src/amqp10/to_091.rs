//! AMQP 1.0 message → the AMQP 0-9-1 message Warren stores, as RabbitMQ 3.13 converts a
//! stream's AMQP 1.0 entry for 0-9-1 readers (`mc_amqpl:convert_from(mc_amqp, ..)` and
//! `rabbit_stream_queue:binary_to_msg/2`, v3.13.7):
//!
//! - header `durable` → `delivery_mode` 2 (true) or 1 (false), `priority` → `priority`,
//!   `ttl` → `expiration` (decimal ms); without a header field, the message annotations
//!   `x-basic-delivery-mode` / `x-basic-priority` / `x-basic-expiration` stand in.
//! - properties: `message-id` and `correlation-id` (uuid → `urn:uuid:` string, ulong →
//!   decimal, string of up to 255 bytes as is; a binary or longer string goes to the header
//!   `x-message-id` / `x-correlation-id` instead), `user-id` (if a valid short string),
//!   `reply-to`, `content-type`, `content-encoding`, `creation-time` (ms → s for
//!   `timestamp`), `group-id` → `app_id`. The rest (`to`, `subject`, ...) has no 0-9-1 place.
//! - application properties with string keys → headers; message annotations whose symbol key
//!   starts with `x-` → headers too (`x-cc` as `CC`, `x-opt-rabbitmq-received-time` as
//!   `timestamp_in_ms`), except those the conversion itself uses (`x-basic-*`, `x-exchange`,
//!   `x-routing-key`, `x-death`) and `x-opt-deaths` (not converted, see below).
//! - body: one data section → its bytes. Anything else (several data sections, sequences,
//!   a value, no body) → the body sections exactly as encoded, with `type` `amqp-1.0`;
//!   otherwise `type` is the `x-basic-type` annotation.
//! - exchange and routing key: the `x-exchange` / `x-routing-key` annotations, else `""` and
//!   the stream's name (the default exchange's view of a stream-protocol publish).
//!
//! Where RabbitMQ would fail the conversion Warren chooses: `char` values become strings,
//! `uuid` values `urn:uuid:` strings, decimals and described values are dropped, as are
//! negative timestamps, names over 255 bytes and `x-opt-deaths` (a RabbitMQ 4 dead-letter
//! record that stream publishers do not send). A `ulong` over `i64::MAX` wraps, as in
//! RabbitMQ.

use super::error::Amqp10Error;
use super::message::{Body, DecodedMessage, Header, Message, Properties};
use super::types::{symbol_entry, Value};
use amq_protocol::frame::WriteContext;
use amq_protocol::protocol::basic::{gen_properties, AMQPProperties};
use amq_protocol::types::{AMQPValue, ByteArray, FieldArray, FieldTable, LongString, ShortString};
use bytes::Bytes;

/// The 0-9-1 `type` of a message whose body is AMQP 1.0 sections, as RabbitMQ names it.
pub const AMQP10_BODY_TYPE: &str = "amqp-1.0";

/// Longest string header value RabbitMQ maps to an AMQP 1.0 string (beyond it, binary).
pub const LONGSTR_UTF8_LIMIT_BYTES: usize = 4096;

/// Annotations the conversions themselves write, never copied into headers.
fn is_internal_annotation(key: &str) -> bool {
    key.starts_with("x-basic-") || matches!(key, "x-routing-key" | "x-exchange" | "x-death")
}

/// Decodes an AMQP 1.0 message published to `stream` into the 0-9-1 message Warren stores.
pub fn message_from_amqp10(bytes: &Bytes, stream: &str) -> Result<warren_delivery::Message, Amqp10Error> {
    let decoded = Message::decode(bytes)?;
    let annotations = decoded.message.message_annotations.as_deref().unwrap_or_default();
    let (body, amqp_body) = body_of(&decoded);
    let properties = basic_properties(&decoded.message, annotations, amqp_body);
    let raw = encode_properties(&properties)?;
    let exchange = string_annotation(annotations, "x-exchange").unwrap_or_default();
    let routing_key = string_annotation(annotations, "x-routing-key").unwrap_or(stream);
    Ok(warren_delivery::Message {
        exchange: short_name("exchange", exchange)?,
        routing_key: short_name("routing key", routing_key)?,
        // Stream consumers get the sections back as they were sent (AMQP 1.0 has fields
        // 0-9-1 has no place for: `to`, `subject`, annotations without `x-`).
        properties: warren_delivery::Properties::decode(raw)?.with_amqp10_head(decoded.head.clone()),
        body,
    })
}

/// The body, and whether it is encoded AMQP 1.0 sections rather than plain bytes.
fn body_of(decoded: &DecodedMessage) -> (Bytes, bool) {
    match &decoded.message.body {
        Body::Data(sections) if sections.len() == 1 => (sections[0].clone(), false),
        _ => (decoded.body_sections.clone(), true),
    }
}

fn short_name(what: &'static str, name: &str) -> Result<ShortString, Amqp10Error> {
    ShortString::try_new(name).map_err(|_| Amqp10Error::ShortStringTooLong { what, len: name.len() })
}

/// Only strings count (RabbitMQ matches the `utf8` type, not symbols).
fn string_annotation<'a>(annotations: &'a [(Value, Value)], key: &str) -> Option<&'a str> {
    match symbol_entry(annotations, key) {
        Some(Value::String(text)) => Some(text),
        _ => None,
    }
}

fn basic_properties(message: &Message, annotations: &[(Value, Value)], amqp_body: bool) -> AMQPProperties {
    let header = message.header.unwrap_or_default();
    let default_properties = Properties::default();
    let props = message.properties.as_ref().unwrap_or(&default_properties);
    let mut headers = FieldTable::default();
    for (key, value) in message.application_properties.as_deref().unwrap_or_default() {
        if let (Value::String(key), Some(value)) = (key, to_091(value)) {
            insert(&mut headers, key, value);
        }
    }
    let message_id = id_property(props.message_id.as_ref(), "x-message-id", &mut headers);
    let correlation_id = id_property(props.correlation_id.as_ref(), "x-correlation-id", &mut headers);
    annotation_headers(annotations, &mut headers);
    let kind = if amqp_body { Some(AMQP10_BODY_TYPE) } else { text_annotation(annotations, "x-basic-type") };
    let basic = AMQPProperties::default();
    let basic = set(basic, message_id, AMQPProperties::with_message_id);
    let basic = set(basic, correlation_id, AMQPProperties::with_correlation_id);
    let basic = set(basic, kind.and_then(short), AMQPProperties::with_type);
    let basic = set(basic, props.user_id.as_deref().and_then(valid_short_string), AMQPProperties::with_user_id);
    let basic = set(basic, props.reply_to.as_deref().and_then(short), AMQPProperties::with_reply_to);
    let basic = set(basic, props.group_id.as_deref().and_then(short), AMQPProperties::with_app_id);
    let basic = set(basic, props.content_type.as_deref().and_then(short), AMQPProperties::with_content_type);
    let basic = set(basic, props.content_encoding.as_deref().and_then(short), AMQPProperties::with_content_encoding);
    let seconds = props.creation_time.and_then(|ms| u64::try_from(ms / 1000).ok());
    let basic = set(basic, seconds, AMQPProperties::with_timestamp);
    let basic = with_header_fields(basic, &header, annotations);
    set(basic, Some(headers).filter(|h| !h.inner().is_empty()), AMQPProperties::with_headers)
}

/// Sets a property if there is a value for it (amq-protocol's setters take values, not options).
fn set<T>(basic: AMQPProperties, value: Option<T>, with: fn(AMQPProperties, T) -> AMQPProperties) -> AMQPProperties {
    match value {
        Some(value) => with(basic, value),
        None => basic,
    }
}

/// Delivery mode, priority and expiration: from the header, else from the annotations a
/// 0-9-1 publisher's conversion leaves.
fn with_header_fields(basic: AMQPProperties, header: &Header, annotations: &[(Value, Value)]) -> AMQPProperties {
    let delivery_mode = match header.durable {
        Some(durable) => Some(if durable { 2 } else { 1 }),
        None => small_annotation(annotations, "x-basic-delivery-mode"),
    };
    let priority = header.priority.or_else(|| small_annotation(annotations, "x-basic-priority"));
    let expiration = match header.ttl_ms {
        Some(ttl) => short(&ttl.to_string()),
        None => text_annotation(annotations, "x-basic-expiration").and_then(short),
    };
    let basic = set(basic, expiration, AMQPProperties::with_expiration);
    let basic = set(basic, delivery_mode, AMQPProperties::with_delivery_mode);
    set(basic, priority, AMQPProperties::with_priority)
}

fn text_annotation<'a>(annotations: &'a [(Value, Value)], key: &str) -> Option<&'a str> {
    symbol_entry(annotations, key).and_then(Value::as_text)
}

/// An integer annotation that fits an octet (delivery mode, priority).
fn small_annotation(annotations: &[(Value, Value)], key: &str) -> Option<u8> {
    match symbol_entry(annotations, key)? {
        Value::Ubyte(n) => Some(*n),
        Value::Byte(n) => u8::try_from(*n).ok(),
        Value::Ushort(n) => u8::try_from(*n).ok(),
        Value::Short(n) => u8::try_from(*n).ok(),
        Value::Uint(n) => u8::try_from(*n).ok(),
        Value::Int(n) => u8::try_from(*n).ok(),
        Value::Ulong(n) => u8::try_from(*n).ok(),
        Value::Long(n) => u8::try_from(*n).ok(),
        _ => None,
    }
}

/// Message annotations with `x-` symbol keys, as headers.
fn annotation_headers(annotations: &[(Value, Value)], headers: &mut FieldTable) {
    for (key, value) in annotations {
        let Value::Symbol(key) = key else { continue };
        let converted = match (key.as_str(), value) {
            ("x-cc", value) => to_091(value).map(|v| ("CC", v)),
            ("x-opt-rabbitmq-received-time", Value::Timestamp(ms)) => {
                Some(("timestamp_in_ms", AMQPValue::LongLongInt(*ms)))
            }
            ("x-opt-deaths", _) => None,
            (key, value) if key.starts_with("x-") && !is_internal_annotation(key) => to_091(value).map(|v| (key, v)),
            _ => None,
        };
        if let Some((key, value)) = converted {
            insert(headers, key, value);
        }
    }
}

fn insert(headers: &mut FieldTable, key: &str, value: AMQPValue) {
    if let Ok(key) = ShortString::try_new(key) {
        headers.insert(key, value);
    }
}

/// A message or correlation id as a 0-9-1 short string, or (binary, long string) as the
/// header `header_name` with no property.
fn id_property(id: Option<&Value>, header_name: &str, headers: &mut FieldTable) -> Option<ShortString> {
    match id? {
        Value::Uuid(uuid) => short(&urn_uuid(uuid)),
        Value::Ulong(n) => short(&n.to_string()),
        Value::Long(n) => short(&n.to_string()),
        Value::String(text) => short(text).or_else(|| {
            insert(headers, header_name, AMQPValue::LongString(LongString::from(text.as_bytes())));
            None
        }),
        Value::Binary(bytes) => {
            insert(headers, header_name, AMQPValue::ByteArray(ByteArray::from(&bytes[..])));
            None
        }
        _ => None,
    }
}

/// A UUID as RabbitMQ writes it in 0-9-1 ids: `urn:uuid:` and lower-case hex.
pub fn urn_uuid(uuid: &[u8; 16]) -> String {
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    format!(
        "urn:uuid:{}-{}-{}-{}-{}",
        hex(&uuid[0..4]),
        hex(&uuid[4..6]),
        hex(&uuid[6..8]),
        hex(&uuid[8..10]),
        hex(&uuid[10..16])
    )
}

fn short(text: &str) -> Option<ShortString> {
    ShortString::try_new(text).ok()
}

/// RabbitMQ keeps a user id only if it is a short string: at most 255 bytes of UTF-8, no NUL.
fn valid_short_string(bytes: &[u8]) -> Option<ShortString> {
    let text = std::str::from_utf8(bytes).ok().filter(|text| !text.contains('\0'))?;
    short(text)
}

/// An AMQP 1.0 value as a 0-9-1 field value, or `None` where it has none.
fn to_091(value: &Value) -> Option<AMQPValue> {
    Some(match value {
        Value::Null => AMQPValue::Void,
        Value::Bool(b) => AMQPValue::Boolean(*b),
        Value::Ubyte(n) => AMQPValue::ShortShortUInt(*n),
        Value::Ushort(n) => AMQPValue::ShortUInt(*n),
        Value::Uint(n) => AMQPValue::LongUInt(*n),
        Value::Ulong(n) => AMQPValue::LongLongInt(*n as i64),
        Value::Byte(n) => AMQPValue::ShortShortInt(*n),
        Value::Short(n) => AMQPValue::ShortInt(*n),
        Value::Int(n) => AMQPValue::LongInt(*n),
        Value::Long(n) => AMQPValue::LongLongInt(*n),
        Value::Float(f) => AMQPValue::Float(*f),
        Value::Double(f) => AMQPValue::Double(*f),
        Value::Timestamp(ms) => AMQPValue::Timestamp(u64::try_from(ms / 1000).ok()?),
        Value::Char(c) => AMQPValue::LongString(LongString::from(c.to_string())),
        Value::Uuid(uuid) => AMQPValue::LongString(LongString::from(urn_uuid(uuid))),
        Value::Binary(bytes) => AMQPValue::LongString(LongString::from(&bytes[..])),
        Value::String(text) | Value::Symbol(text) => AMQPValue::LongString(LongString::from(text.as_bytes())),
        Value::List(items) => {
            AMQPValue::FieldArray(FieldArray::from(items.iter().filter_map(to_091).collect::<Vec<_>>()))
        }
        Value::Array(array) => {
            AMQPValue::FieldArray(FieldArray::from(array.items().iter().filter_map(to_091).collect::<Vec<_>>()))
        }
        Value::Map(entries) => AMQPValue::FieldTable(table(entries)),
        Value::Decimal32(_) | Value::Decimal64(_) | Value::Decimal128(_) | Value::Described(..) => return None,
    })
}

/// A map as a field table: string or symbol keys only (a field table has no others).
fn table(entries: &[(Value, Value)]) -> FieldTable {
    let mut table = FieldTable::default();
    for (key, value) in entries {
        if let (Some(key), Some(value)) = (key.as_text(), to_091(value)) {
            insert(&mut table, key, value);
        }
    }
    table
}

fn encode_properties(properties: &AMQPProperties) -> Result<Bytes, Amqp10Error> {
    let context = gen_properties(properties)(WriteContext::from(Vec::new()))
        .map_err(|e| Amqp10Error::PropertiesEncoding(format!("{e:?}")))?;
    Ok(Bytes::from(context.write))
}
