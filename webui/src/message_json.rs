//! Messages as RabbitMQ's management API writes them in JSON: basic properties by their AMQP
//! names (`content_type`, `delivery_mode`, `headers`, ...), and a payload that is text when
//! it is UTF-8 and base64 otherwise (`payload_encoding`).

use crate::json_table;
use amq_protocol::frame::WriteContext;
use amq_protocol::protocol::basic::{gen_properties, parse_properties, AMQPProperties};
use amq_protocol::types::ShortString;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use bytes::Bytes;
use serde_json::{json, Map, Value};
use warren_delivery::properties::Properties;
use warren_delivery::Message;

/// Most payload bytes shown of one message unless the request asks for less.
pub const DEFAULT_TRUNCATE_BYTES: usize = 50_000;

/// A message's properties as JSON (only those set).
pub fn properties_json(properties: &Properties) -> Value {
    let Ok((_, parsed)) = parse_properties(&properties.raw()[..]) else { return json!({}) };
    let mut out = Map::new();
    let mut text = |name: &str, value: &Option<ShortString>| {
        if let Some(value) = value {
            out.insert(name.to_string(), Value::String(value.to_string()));
        }
    };
    text("content_type", parsed.content_type());
    text("content_encoding", parsed.content_encoding());
    text("correlation_id", parsed.correlation_id());
    text("reply_to", parsed.reply_to());
    text("expiration", parsed.expiration());
    text("message_id", parsed.message_id());
    text("type", parsed.kind());
    text("user_id", parsed.user_id());
    text("app_id", parsed.app_id());
    text("cluster_id", parsed.cluster_id());
    if let Some(mode) = parsed.delivery_mode() {
        out.insert("delivery_mode".into(), json!(mode));
    }
    if let Some(priority) = parsed.priority() {
        out.insert("priority".into(), json!(priority));
    }
    if let Some(timestamp) = parsed.timestamp() {
        out.insert("timestamp".into(), json!(timestamp));
    }
    if let Some(headers) = parsed.headers() {
        out.insert("headers".into(), json_table::to_json(headers));
    }
    Value::Object(out)
}

/// The raw property list of JSON `properties` (a 400-worthy text if they do not make one).
pub fn properties_from_json(properties: &Value) -> Result<Properties, String> {
    let mut props = AMQPProperties::default();
    let Some(map) = properties.as_object() else {
        return if properties.is_null() { Ok(Properties::empty()) } else { Err("properties must be an object".into()) };
    };
    let short = |name: &str| -> Result<Option<ShortString>, String> {
        match map.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => {
                ShortString::try_new(s.clone()).map(Some).map_err(|_| format!("{name} is longer than 255 bytes"))
            }
            Some(Value::Number(n)) => {
                ShortString::try_new(n.to_string()).map(Some).map_err(|_| format!("{name} is too long"))
            }
            Some(other) => Err(format!("{name} must be a string, not {other}")),
        }
    };
    let octet = |name: &str| -> Result<Option<u8>, String> {
        match map.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => {
                value.as_u64().and_then(|v| u8::try_from(v).ok()).map(Some).ok_or(format!("{name} must be 0-255"))
            }
        }
    };
    if let Some(v) = short("content_type")? {
        props = props.with_content_type(v);
    }
    if let Some(v) = short("content_encoding")? {
        props = props.with_content_encoding(v);
    }
    if let Some(v) = short("correlation_id")? {
        props = props.with_correlation_id(v);
    }
    if let Some(v) = short("reply_to")? {
        props = props.with_reply_to(v);
    }
    if let Some(v) = short("expiration")? {
        props = props.with_expiration(v);
    }
    if let Some(v) = short("message_id")? {
        props = props.with_message_id(v);
    }
    if let Some(v) = short("type")? {
        props = props.with_type(v);
    }
    if let Some(v) = short("user_id")? {
        props = props.with_user_id(v);
    }
    if let Some(v) = short("app_id")? {
        props = props.with_app_id(v);
    }
    if let Some(v) = octet("delivery_mode")? {
        props = props.with_delivery_mode(v);
    }
    if let Some(v) = octet("priority")? {
        props = props.with_priority(v);
    }
    if let Some(v) = map.get("timestamp").and_then(Value::as_u64) {
        props = props.with_timestamp(v);
    }
    if let Some(headers) = map.get("headers").filter(|h| !h.is_null()) {
        props = props.with_headers(json_table::from_json(headers)?);
    }
    let raw = gen_properties(&props)(WriteContext::from(Vec::new()))
        .map_err(|e| format!("cannot encode the properties: {e:?}"))?
        .write;
    Properties::decode(Bytes::from(raw)).map_err(|e| e.to_string())
}

/// A body as the API shows it: text if it is UTF-8 (and `encoding` is not `base64`), base64
/// otherwise, cut to `truncate` bytes; with its full length.
pub fn payload_json(body: &[u8], encoding: &str, truncate: usize) -> Value {
    let shown = &body[..body.len().min(truncate)];
    let (payload, payload_encoding) = match (encoding, std::str::from_utf8(shown)) {
        ("base64", _) | (_, Err(_)) => (STANDARD.encode(shown), "base64"),
        (_, Ok(text)) => (text.to_string(), "string"),
    };
    json!({ "payload": payload, "payload_bytes": body.len(), "payload_encoding": payload_encoding })
}

/// A body from the API: `payload` as `payload_encoding` says (`string` or `base64`).
pub fn payload_from_json(payload: &str, encoding: &str) -> Result<Bytes, String> {
    match encoding {
        "string" | "" => Ok(Bytes::copy_from_slice(payload.as_bytes())),
        "base64" => STANDARD.decode(payload).map(Bytes::from).map_err(|e| format!("payload is not base64: {e}")),
        other => Err(format!("payload_encoding must be string or base64, not {other}")),
    }
}

/// A message as the API shows it: routing, properties and payload merged into one object.
pub fn message_json(message: &Message, encoding: &str, truncate: usize) -> Value {
    let mut item = payload_json(&message.body, encoding, truncate);
    item["exchange"] = json!(message.exchange.as_str());
    item["routing_key"] = json!(message.routing_key.as_str());
    item["properties"] = properties_json(&message.properties);
    item
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_go_both_ways() {
        let given =
            json!({"content_type": "text/plain", "delivery_mode": 2, "priority": 5, "headers": {"k": "v", "n": 3}});
        let properties = properties_from_json(&given).expect("encodes");
        assert!(properties.is_persistent());
        assert_eq!(properties_json(&properties), given);
        assert!(properties_from_json(&json!({"priority": 300})).is_err());
    }

    #[test]
    fn payloads_are_text_or_base64() {
        assert_eq!(payload_json(b"hello", "auto", 100)["payload"], "hello");
        let binary = payload_json(&[0xff, 0x00], "auto", 100);
        assert_eq!((binary["payload"].as_str(), binary["payload_encoding"].as_str()), (Some("/wA="), Some("base64")));
        assert_eq!(payload_json(b"hello", "auto", 2)["payload"], "he");
        assert_eq!(payload_from_json("/wA=", "base64").expect("decodes").as_ref(), [0xff, 0x00]);
    }
}
