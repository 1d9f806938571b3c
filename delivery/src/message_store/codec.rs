//! How a message is laid out in a log record's payload.
//!
//! ```text
//! u8   exchange length, then the exchange name
//! u8   routing key length, then the routing key
//! u32  property list length (big-endian), then the raw property list
//! ..   the body, to the end of the payload
//! ```
//! Decoding slices the record's `Bytes`, so the body is not copied.

use crate::message::Message;
use crate::properties::Properties;
use amq_protocol::types::ShortString;
use bytes::{BufMut, Bytes};

/// A record payload that does not decode as a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("stored message does not decode: {0}")]
pub struct DecodeError(pub &'static str);

/// Appends the encoding of `message` to `out`.
pub fn encode(message: &Message, out: &mut Vec<u8>) {
    let exchange = message.exchange.as_str().as_bytes();
    let routing_key = message.routing_key.as_str().as_bytes();
    let properties = message.properties.raw();
    out.reserve(1 + exchange.len() + 1 + routing_key.len() + 4 + properties.len() + message.body.len());
    out.put_u8(exchange.len() as u8);
    out.put_slice(exchange);
    out.put_u8(routing_key.len() as u8);
    out.put_slice(routing_key);
    out.put_u32(properties.len() as u32);
    out.put_slice(properties);
    out.put_slice(&message.body);
}

fn take(payload: &Bytes, at: &mut usize, len: usize, what: &'static str) -> Result<Bytes, DecodeError> {
    let end = at.checked_add(len).filter(|end| *end <= payload.len()).ok_or(DecodeError(what))?;
    let slice = payload.slice(*at..end);
    *at = end;
    Ok(slice)
}

fn short_string(payload: &Bytes, at: &mut usize, what: &'static str) -> Result<ShortString, DecodeError> {
    let len = take(payload, at, 1, what)?[0] as usize;
    let bytes = take(payload, at, len, what)?;
    let text = std::str::from_utf8(&bytes).map_err(|_| DecodeError(what))?;
    ShortString::try_new(text).map_err(|_| DecodeError(what))
}

/// Decodes a message from a record payload.
pub fn decode(payload: Bytes) -> Result<Message, DecodeError> {
    let mut at = 0;
    let exchange = short_string(&payload, &mut at, "exchange")?;
    let routing_key = short_string(&payload, &mut at, "routing key")?;
    let len_bytes = take(&payload, &mut at, 4, "property length")?;
    let properties_len = u32::from_be_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]) as usize;
    let properties = take(&payload, &mut at, properties_len, "properties")?;
    let properties = Properties::decode(properties).map_err(|_| DecodeError("properties"))?;
    let body = payload.slice(at..);
    Ok(Message { exchange, routing_key, properties, body })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_truncation() {
        let message = Message {
            exchange: "ex".into(),
            routing_key: "rk".into(),
            properties: Properties::decode(Bytes::from_static(&[0x10, 0, 2])).expect("delivery mode 2"),
            body: Bytes::from_static(b"body"),
        };
        let mut encoded = Vec::new();
        encode(&message, &mut encoded);
        let decoded = decode(Bytes::from(encoded.clone())).expect("decodes");
        assert_eq!(decoded.exchange, message.exchange);
        assert_eq!(decoded.routing_key, message.routing_key);
        assert_eq!(decoded.properties.raw(), message.properties.raw());
        assert!(decoded.properties.is_persistent());
        assert_eq!(decoded.body, message.body);
        assert!(decode(Bytes::from(encoded[..6].to_vec())).is_err());
    }
}
