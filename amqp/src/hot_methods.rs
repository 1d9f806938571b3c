//! Decoding of the methods a client sends once per message: `basic.publish` and `basic.ack`.
//!
//! amq-protocol's parser (nom, with error contexts) handles every method; for these two, which
//! arrive at the message rate, a direct decode of their fixed layout is several times cheaper.
//! Anything unusual (bad UTF-8, a short payload) falls back to the general parser, which
//! produces the proper error.

use amq_protocol::protocol::{basic, AMQPClass};
use amq_protocol::types::ShortString;

const BASIC_CLASS_ID: u16 = 60;
const PUBLISH_METHOD_ID: u16 = 40;
const ACK_METHOD_ID: u16 = 80;

struct Reader<'a> {
    bytes: &'a [u8],
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let (head, tail) = (self.bytes.get(..n)?, self.bytes.get(n..)?);
        self.bytes = tail;
        Some(head)
    }

    fn short_string(&mut self) -> Option<ShortString> {
        let len = *self.take(1)?.first()? as usize;
        let text = std::str::from_utf8(self.take(len)?).ok()?;
        ShortString::try_new(text).ok()
    }
}

/// Decodes `payload` (class id, method id, arguments) if it is one of the hot methods.
pub fn decode(payload: &[u8]) -> Option<AMQPClass> {
    let ids = payload.get(..4)?;
    let (class_id, method_id) = (u16::from_be_bytes([ids[0], ids[1]]), u16::from_be_bytes([ids[2], ids[3]]));
    if class_id != BASIC_CLASS_ID {
        return None;
    }
    let mut reader = Reader { bytes: &payload[4..] };
    let method = match method_id {
        PUBLISH_METHOD_ID => {
            reader.take(2)?; // reserved (ticket)
            let exchange = reader.short_string()?;
            let routing_key = reader.short_string()?;
            let bits = *reader.take(1)?.first()?;
            basic::AMQPMethod::Publish(basic::Publish {
                exchange,
                routing_key,
                mandatory: bits & 1 != 0,
                immediate: bits & 2 != 0,
            })
        }
        ACK_METHOD_ID => {
            let tag = u64::from_be_bytes(reader.take(8)?.try_into().ok()?);
            let bits = *reader.take(1)?.first()?;
            basic::AMQPMethod::Ack(basic::Ack { delivery_tag: tag, multiple: bits & 1 != 0 })
        }
        _ => return None,
    };
    reader.bytes.is_empty().then_some(AMQPClass::Basic(method))
}

#[cfg(test)]
mod tests {
    use super::*;
    use amq_protocol::frame::WriteContext;
    use amq_protocol::protocol::{gen_class, parse_class};
    use proptest::prelude::*;

    fn encode(method: &AMQPClass) -> Vec<u8> {
        gen_class(method)(WriteContext::from(Vec::new())).map(|c| c.write).unwrap_or_default()
    }

    proptest! {
        /// The fast decode agrees with amq-protocol's parser on every publish and ack.
        #[test]
        fn agrees_with_the_general_parser(
            exchange in "[a-z.]{0,20}", key in "\\PC{0,40}", mandatory: bool, immediate: bool,
            tag: u64, multiple: bool,
        ) {
            let publish = AMQPClass::Basic(basic::AMQPMethod::Publish(basic::Publish {
                exchange: exchange.as_str().into(), routing_key: ShortString::try_new(key).unwrap_or_default(),
                mandatory, immediate,
            }));
            let ack = AMQPClass::Basic(basic::AMQPMethod::Ack(basic::Ack { delivery_tag: tag, multiple }));
            for method in [publish, ack] {
                let bytes = encode(&method);
                let general = parse_class(&bytes[..]).map(|(_, m)| m).ok();
                prop_assert_eq!(decode(&bytes), general.clone());
                prop_assert_eq!(decode(&bytes), Some(method));
            }
        }
    }

    #[test]
    fn leaves_anything_else_to_the_general_parser() {
        assert_eq!(decode(&[0, 60, 0, 40, 0, 0, 5, b'a']), None, "truncated");
        assert_eq!(decode(&[0, 60, 0, 80, 0, 0, 0, 0, 0, 0, 0, 1, 0, 9]), None, "trailing byte");
        assert_eq!(decode(&[0, 50, 0, 10]), None, "not a hot method");
    }
}
