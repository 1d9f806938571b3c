//! How a message is laid out in a log record's payload.
//!
//! ```text
//! u8   exchange length, then the exchange name
//! u8   routing key length, then the routing key
//! u32  property list length (big-endian), then the raw property list
//!      (the top bit of the length set: then a u32 length and a Stream-protocol message's
//!      AMQP 1.0 head, see `Properties::amqp10_head`)
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

/// The bit of the property length that says an AMQP 1.0 head follows the properties (a
/// property list is far shorter than 2 GiB).
const AMQP10_HEAD_BIT: u32 = 1 << 31;

/// Appends the encoding of `message` to `out`.
pub fn encode(message: &Message, out: &mut Vec<u8>) {
    let exchange = message.exchange.as_str().as_bytes();
    let routing_key = message.routing_key.as_str().as_bytes();
    let properties = message.properties.raw();
    let head = message.properties.amqp10_head();
    let head_bytes = head.map_or(0, |head| 4 + head.len());
    out.reserve(1 + exchange.len() + 1 + routing_key.len() + 4 + properties.len() + head_bytes + message.body.len());
    out.put_u8(exchange.len() as u8);
    out.put_slice(exchange);
    out.put_u8(routing_key.len() as u8);
    out.put_slice(routing_key);
    match head {
        None => {
            out.put_u32(properties.len() as u32);
            out.put_slice(properties);
        }
        Some(head) => {
            out.put_u32(properties.len() as u32 | AMQP10_HEAD_BIT);
            out.put_slice(properties);
            out.put_u32(head.len() as u32);
            out.put_slice(head);
        }
    }
    out.put_slice(&message.body);
}

fn length(payload: &Bytes, at: &mut usize, what: &'static str) -> Result<u32, DecodeError> {
    let bytes = take(payload, at, 4, what)?;
    Ok(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
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
    let properties_len = length(&payload, &mut at, "property length")?;
    let properties = take(&payload, &mut at, (properties_len & !AMQP10_HEAD_BIT) as usize, "properties")?;
    let mut properties = Properties::decode(properties).map_err(|_| DecodeError("properties"))?;
    if properties_len & AMQP10_HEAD_BIT != 0 {
        let head_len = length(&payload, &mut at, "AMQP 1.0 head length")? as usize;
        properties = properties.with_amqp10_head(take(&payload, &mut at, head_len, "AMQP 1.0 head")?);
    }
    let body = payload.slice(at..);
    Ok(Message { exchange, routing_key, properties, body })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_protocol_head_rides_beside_the_properties() {
        let properties = Properties::empty().with_amqp10_head(Bytes::from_static(b"\0Sr\xc1\x01\x00"));
        let message =
            Message { exchange: "".into(), routing_key: "s".into(), properties, body: Bytes::from_static(b"hi") };
        let mut encoded = Vec::new();
        encode(&message, &mut encoded);
        let decoded = decode(Bytes::from(encoded.clone())).expect("decodes");
        assert_eq!(decoded.properties.amqp10_head().map(|h| &h[..]), Some(&b"\0Sr\xc1\x01\x00"[..]));
        assert_eq!(decoded.properties.raw(), message.properties.raw(), "0-9-1 sees only its properties");
        assert_eq!(&decoded.body[..], b"hi");
        for cut in 0..encoded.len() - 2 {
            assert!(decode(Bytes::copy_from_slice(&encoded[..cut])).is_err(), "cut at {cut}");
        }
    }

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
