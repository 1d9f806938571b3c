//! The field tables inside the methods clients send, found and checked before decoding.
//!
//! amq-protocol decodes a method's field tables recursively, so their nesting depth must be
//! checked on the raw payload first (see `warren_delivery::field_table`). Each method that
//! carries a table is listed here with the fields that come before the table, which is all it
//! takes to find it.

use warren_delivery::field_table::{self, FieldTableError};

/// A field before a method's table, as far as skipping it goes.
#[derive(Debug, Clone, Copy)]
enum Field {
    /// An octet of packed bits.
    Bits,
    /// A 16-bit integer.
    Short,
    /// A length-prefixed short string.
    ShortStr,
}

use Field::{Bits, Short, ShortStr};

/// What precedes the field table of each client method that has one, by (class, method).
fn fields_before_table(class_id: u16, method_id: u16) -> Option<&'static [Field]> {
    Some(match (class_id, method_id) {
        // connection.start-ok: client-properties first.
        (10, 11) => &[],
        // exchange.declare: reserved, exchange, type, bits.
        (40, 10) => &[Short, ShortStr, ShortStr, Bits],
        // exchange.bind and exchange.unbind: reserved, destination, source, routing key, no-wait.
        (40, 30) | (40, 40) => &[Short, ShortStr, ShortStr, ShortStr, Bits],
        // queue.declare: reserved, queue, bits.
        (50, 10) => &[Short, ShortStr, Bits],
        // queue.bind: reserved, queue, exchange, routing key, no-wait.
        (50, 20) => &[Short, ShortStr, ShortStr, ShortStr, Bits],
        // queue.unbind: reserved, queue, exchange, routing key (no no-wait bit).
        (50, 50) => &[Short, ShortStr, ShortStr, ShortStr],
        // basic.consume: reserved, queue, consumer tag, bits.
        (60, 20) => &[Short, ShortStr, ShortStr, Bits],
        _ => return None,
    })
}

/// Checks the nesting depth of the table in a method payload (class and method ids first).
/// Only [`FieldTableError::TooDeep`] is reported: anything malformed is left to the decoder,
/// which says precisely what is wrong.
pub fn check_depth(payload: &[u8]) -> Result<(), FieldTableError> {
    let Some(ids) = payload.get(..4) else { return Ok(()) };
    let (class_id, method_id) = (u16::from_be_bytes([ids[0], ids[1]]), u16::from_be_bytes([ids[2], ids[3]]));
    let Some(fields) = fields_before_table(class_id, method_id) else { return Ok(()) };
    let Some(at) = skip(&payload[4..], fields) else { return Ok(()) };
    match field_table::check_wire_table(&payload[4 + at..]) {
        Err(FieldTableError::TooDeep) => Err(FieldTableError::TooDeep),
        _ => Ok(()),
    }
}

/// Where the table starts after `fields`, or `None` if the payload ends first.
fn skip(args: &[u8], fields: &[Field]) -> Option<usize> {
    let mut at = 0;
    for field in fields {
        at += match field {
            Bits => 1,
            Short => 2,
            ShortStr => 1 + *args.get(at)? as usize,
        };
    }
    (at <= args.len()).then_some(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use amq_protocol::protocol::{basic, connection, exchange, gen_class, queue, AMQPClass};
    use amq_protocol::types::{AMQPValue, FieldTable};

    fn nested(depth: usize) -> FieldTable {
        let mut table = FieldTable::default();
        table.insert("leaf".into(), AMQPValue::Boolean(true));
        for _ in 1..depth {
            let mut outer = FieldTable::default();
            outer.insert("k".into(), AMQPValue::FieldTable(table));
            table = outer;
        }
        table
    }

    fn encode(method: &AMQPClass) -> Vec<u8> {
        gen_class(method)(amq_protocol::frame::WriteContext::from(Vec::new())).map(|c| c.write).unwrap_or_default()
    }

    fn methods(arguments: FieldTable) -> Vec<AMQPClass> {
        vec![
            AMQPClass::Connection(connection::AMQPMethod::StartOk(connection::StartOk {
                client_properties: arguments.clone(),
                mechanism: "PLAIN".into(),
                response: "\0guest\0guest".into(),
                locale: "en_US".into(),
            })),
            AMQPClass::Exchange(exchange::AMQPMethod::Declare(exchange::Declare {
                exchange: "e".into(),
                kind: "direct".into(),
                arguments: arguments.clone(),
                ..Default::default()
            })),
            AMQPClass::Exchange(exchange::AMQPMethod::Bind(exchange::Bind {
                destination: "d".into(),
                source: "s".into(),
                routing_key: "rk".into(),
                nowait: false,
                arguments: arguments.clone(),
            })),
            AMQPClass::Exchange(exchange::AMQPMethod::Unbind(exchange::Unbind {
                destination: "d".into(),
                source: "s".into(),
                routing_key: "rk".into(),
                nowait: false,
                arguments: arguments.clone(),
            })),
            AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
                queue: "q".into(),
                arguments: arguments.clone(),
                ..Default::default()
            })),
            AMQPClass::Queue(queue::AMQPMethod::Bind(queue::Bind {
                queue: "q".into(),
                exchange: "e".into(),
                routing_key: "rk".into(),
                nowait: true,
                arguments: arguments.clone(),
            })),
            AMQPClass::Queue(queue::AMQPMethod::Unbind(queue::Unbind {
                queue: "q".into(),
                exchange: "e".into(),
                routing_key: "rk".into(),
                arguments: arguments.clone(),
            })),
            AMQPClass::Basic(basic::AMQPMethod::Consume(basic::Consume {
                queue: "q".into(),
                consumer_tag: "c".into(),
                arguments,
                ..Default::default()
            })),
        ]
    }

    #[test]
    fn finds_the_table_of_every_method_that_has_one() {
        for method in methods(nested(field_table::MAX_NESTING_DEPTH)) {
            assert_eq!(check_depth(&encode(&method)), Ok(()), "{method:?}");
        }
        for method in methods(nested(field_table::MAX_NESTING_DEPTH + 1)) {
            assert_eq!(check_depth(&encode(&method)), Err(FieldTableError::TooDeep), "{method:?}");
        }
    }

    #[test]
    fn leaves_truncated_payloads_to_the_decoder() {
        for method in methods(nested(3)) {
            let bytes = encode(&method);
            for cut in 0..bytes.len() {
                assert_eq!(check_depth(&bytes[..cut]), Ok(()));
            }
        }
    }
}
