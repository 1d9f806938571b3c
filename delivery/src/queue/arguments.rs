//! A queue's `x-` arguments, parsed and checked once at declare time.
//!
//! Names and meanings are RabbitMQ's. A value of the wrong type or out of range is refused
//! with 406 PRECONDITION_FAILED and a text naming the argument and what is expected.

use crate::error::{BrokerError, BrokerResult};
use crate::field_value::{string_of, whole_number_within, Shown};
use amq_protocol::types::{AMQPValue, FieldTable};

/// The highest priority a queue may declare (`x-max-priority`).
pub const MAX_PRIORITY: u8 = 255;

/// What a full queue does with one more message (`x-overflow`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overflow {
    /// Drop (or dead-letter) the oldest ready messages.
    #[default]
    DropHead,
    /// Refuse the new message (nack under confirms).
    RejectPublish,
    /// Refuse the new message and dead-letter it.
    RejectPublishDlx,
}

/// `x-queue-type`: what kind of queue is declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QueueType {
    /// A classic queue: messages leave once acked.
    #[default]
    Classic,
    /// A stream: an append-only log read by offset (see `crate::stream`).
    Stream,
}

/// The arguments that change how a queue behaves.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueArguments {
    /// `x-max-priority`: priorities 0..=max are honoured.
    pub max_priority: Option<u8>,
    /// `x-message-ttl` in ms.
    pub message_ttl_ms: Option<u64>,
    /// `x-expires` in ms: delete the queue after this long unused.
    pub expires_ms: Option<u64>,
    /// `x-max-length`: ready messages kept at most.
    pub max_length: Option<u64>,
    /// `x-max-length-bytes`: ready body bytes kept at most.
    pub max_length_bytes: Option<u64>,
    /// `x-overflow`.
    pub overflow: Overflow,
    /// `x-dead-letter-exchange`.
    pub dead_letter_exchange: Option<String>,
    /// `x-dead-letter-routing-key`.
    pub dead_letter_routing_key: Option<String>,
    /// `x-delivery-limit`: deliveries allowed before a message is dead-lettered or dropped.
    pub delivery_limit: Option<u64>,
    /// `x-single-active-consumer`.
    pub single_active_consumer: bool,
    /// `x-queue-type`.
    pub queue_type: QueueType,
}

fn invalid(name: &str, expected: &str, value: &AMQPValue) -> BrokerError {
    BrokerError::precondition_failed(format!("invalid arg '{name}': expected {expected}, got {}", Shown(value)))
}

fn whole_number(name: &str, value: &AMQPValue, min: u64) -> BrokerResult<u64> {
    whole_number_within(value, min, u64::MAX).ok_or_else(|| invalid(name, &format!("an integer >= {min}"), value))
}

fn text(name: &str, value: &AMQPValue) -> BrokerResult<String> {
    string_of(value)
        .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
        .ok_or_else(|| invalid(name, "a string", value))
}

impl QueueArguments {
    /// Parses the arguments of `queue.declare`.
    pub fn parse(arguments: &FieldTable) -> BrokerResult<Self> {
        let mut parsed = QueueArguments::default();
        for (name, value) in arguments.inner() {
            let name = name.as_str();
            match name {
                "x-max-priority" => {
                    let max = whole_number(name, value, 1)?;
                    if max > u64::from(MAX_PRIORITY) {
                        return Err(invalid(name, "an integer from 1 to 255", value));
                    }
                    parsed.max_priority = Some(max as u8);
                }
                "x-message-ttl" => parsed.message_ttl_ms = Some(whole_number(name, value, 0)?),
                "x-expires" => parsed.expires_ms = Some(whole_number(name, value, 1)?),
                "x-max-length" => parsed.max_length = Some(whole_number(name, value, 0)?),
                "x-max-length-bytes" => parsed.max_length_bytes = Some(whole_number(name, value, 0)?),
                "x-delivery-limit" => parsed.delivery_limit = Some(whole_number(name, value, 0)?),
                "x-overflow" => {
                    parsed.overflow = match text(name, value)?.as_str() {
                        "drop-head" => Overflow::DropHead,
                        "reject-publish" => Overflow::RejectPublish,
                        "reject-publish-dlx" => Overflow::RejectPublishDlx,
                        _ => return Err(invalid(name, "drop-head, reject-publish or reject-publish-dlx", value)),
                    }
                }
                "x-dead-letter-exchange" => parsed.dead_letter_exchange = Some(text(name, value)?),
                "x-dead-letter-routing-key" => parsed.dead_letter_routing_key = Some(text(name, value)?),
                "x-single-active-consumer" => match value {
                    AMQPValue::Boolean(on) => parsed.single_active_consumer = *on,
                    _ => return Err(invalid(name, "a boolean", value)),
                },
                "x-queue-type" => {
                    parsed.queue_type = match string_of(value) {
                        Some(b"classic") => QueueType::Classic,
                        Some(b"stream") => QueueType::Stream,
                        _ => {
                            return Err(invalid(
                                name,
                                "'classic' or 'stream' (quorum queues are not available yet)",
                                value,
                            ))
                        }
                    }
                }
                _ => {}
            }
        }
        if parsed.dead_letter_routing_key.is_some() && parsed.dead_letter_exchange.is_none() {
            return Err(BrokerError::precondition_failed(
                "invalid arg 'x-dead-letter-routing-key': x-dead-letter-exchange must be set too",
            ));
        }
        Ok(parsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field_value::test_values::table;
    use amq_protocol::types::LongString;

    #[test]
    fn parses_rabbitmq_arguments() {
        let args = QueueArguments::parse(&table(&[
            ("x-max-priority", AMQPValue::ShortShortUInt(10)),
            ("x-message-ttl", AMQPValue::LongInt(1000)),
            ("x-overflow", AMQPValue::LongString(LongString::from("reject-publish"))),
            ("x-dead-letter-exchange", AMQPValue::LongString(LongString::from("dlx"))),
            ("x-single-active-consumer", AMQPValue::Boolean(true)),
        ]))
        .expect("valid");
        assert_eq!(args.max_priority, Some(10));
        assert_eq!(args.message_ttl_ms, Some(1000));
        assert_eq!(args.overflow, Overflow::RejectPublish);
        assert_eq!(args.dead_letter_exchange.as_deref(), Some("dlx"));
        assert!(args.single_active_consumer);
    }

    #[test]
    fn refuses_bad_values_with_406() {
        for (name, value) in [
            ("x-max-priority", AMQPValue::LongInt(256)),
            ("x-max-priority", AMQPValue::LongInt(0)),
            ("x-message-ttl", AMQPValue::LongInt(-1)),
            ("x-expires", AMQPValue::LongInt(0)),
            ("x-overflow", AMQPValue::LongString(LongString::from("spill"))),
            ("x-single-active-consumer", AMQPValue::LongInt(1)),
            ("x-queue-type", AMQPValue::LongString(LongString::from("lazy"))),
        ] {
            let error = QueueArguments::parse(&table(&[(name, value)])).expect_err(name);
            assert_eq!(error.code, crate::error::ReplyCode::PreconditionFailed, "{name}");
            assert!(error.text.contains(name), "{}", error.text);
        }
    }

    #[test]
    fn errors_show_the_value_as_the_user_wrote_it() {
        let error =
            QueueArguments::parse(&table(&[("x-queue-type", AMQPValue::LongString(LongString::from("quorum")))]))
                .expect_err("quorum is not available");
        assert!(error.text.ends_with("got \"quorum\""), "{}", error.text);
        let error = QueueArguments::parse(&table(&[("x-max-priority", AMQPValue::LongInt(300))])).expect_err("300");
        assert!(error.text.ends_with("got 300"), "{}", error.text);
    }
}
