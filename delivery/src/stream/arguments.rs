//! A stream's `x-` arguments: retention and segment size, with RabbitMQ's names and units.
//!
//! Arguments that only make sense for classic queues (priorities, TTLs, dead-lettering,
//! length limits in messages...) are refused on a stream with 406, as RabbitMQ refuses them,
//! so that an application learns at declare time that they would not apply.

use crate::error::{BrokerError, BrokerResult};
use crate::field_value::{string_of, whole_number_within};
use amq_protocol::types::{AMQPValue, FieldTable};
use std::time::Duration;
use warren_storage::MAX_SEGMENT_BYTES;

/// The smallest segment a stream may ask for: the storage engine's lower bound.
pub const MIN_SEGMENT_BYTES: u64 = 1024;

/// Classic-queue arguments that have no meaning on a stream.
const CLASSIC_ONLY: &[&str] = &[
    "x-max-priority",
    "x-message-ttl",
    "x-expires",
    "x-max-length",
    "x-overflow",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-delivery-limit",
    "x-single-active-consumer",
];

/// How long and how large a stream grows, and the size of its segments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamArguments {
    /// `x-max-age`: whole segments whose newest message is older than this are deleted.
    pub max_age: Option<Duration>,
    /// `x-max-length-bytes`: oldest whole segments are deleted while the stream is larger.
    pub max_length_bytes: Option<u64>,
    /// `x-stream-max-segment-size-bytes`: a new segment starts at this size.
    pub max_segment_size_bytes: Option<u64>,
}

fn invalid(name: &str, expected: &str, value: &AMQPValue) -> BrokerError {
    BrokerError::precondition_failed(format!("invalid arg '{name}' for a stream: expected {expected}, got {value:?}"))
}

impl StreamArguments {
    /// Parses the arguments of a stream's `queue.declare` (406 if malformed or classic-only).
    pub fn parse(arguments: &FieldTable) -> BrokerResult<Self> {
        let mut parsed = StreamArguments::default();
        for (name, value) in arguments.inner() {
            let name = name.as_str();
            match name {
                "x-max-age" => {
                    let text = string_of(value).and_then(|t| std::str::from_utf8(t).ok());
                    let age = text.and_then(parse_interval_ms).filter(|ms| *ms > 0);
                    let age = age.ok_or_else(|| invalid(name, "a positive age like 7D, 12h, 30m or 10s", value))?;
                    parsed.max_age = Some(Duration::from_millis(age));
                }
                "x-max-length-bytes" => parsed.max_length_bytes = Some(whole_number(name, value, 1, u64::MAX)?),
                "x-stream-max-segment-size-bytes" => {
                    let size = whole_number(name, value, MIN_SEGMENT_BYTES, MAX_SEGMENT_BYTES - 1)?;
                    parsed.max_segment_size_bytes = Some(size);
                }
                _ if CLASSIC_ONLY.contains(&name) => {
                    return Err(BrokerError::precondition_failed(format!(
                        "invalid arg '{name}' for a stream: streams keep every message until retention removes \
                         it, so '{name}' does not apply (declare a classic queue to use it)"
                    )));
                }
                _ => {}
            }
        }
        Ok(parsed)
    }
}

fn whole_number(name: &str, value: &AMQPValue, min: u64, max: u64) -> BrokerResult<u64> {
    whole_number_within(value, min, max).ok_or_else(|| invalid(name, &format!("an integer from {min} to {max}"), value))
}

/// An interval as RabbitMQ writes them, a whole number and a unit: `Y` (years), `M`
/// (months), `D` (days), `h`, `m`, `s`; in milliseconds. `None` if malformed.
pub fn parse_interval_ms(text: &str) -> Option<u64> {
    const SECOND_MS: u64 = 1000;
    const DAY_MS: u64 = 24 * 3600 * SECOND_MS;
    let unit = text.chars().last()?;
    let count: u64 = text[..text.len() - unit.len_utf8()].parse().ok()?;
    let unit_ms = match unit {
        'Y' => 365 * DAY_MS,
        'M' => 30 * DAY_MS,
        'D' => DAY_MS,
        'h' => 3600 * SECOND_MS,
        'm' => 60 * SECOND_MS,
        's' => SECOND_MS,
        _ => return None,
    };
    count.checked_mul(unit_ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field_value::test_values::{table, text};

    #[test]
    fn intervals_use_rabbitmq_units() {
        assert_eq!(parse_interval_ms("7D"), Some(7 * 24 * 3600 * 1000));
        assert_eq!(parse_interval_ms("12h"), Some(12 * 3600 * 1000));
        assert_eq!(parse_interval_ms("30m"), Some(30 * 60 * 1000));
        assert_eq!(parse_interval_ms("10s"), Some(10_000));
        assert_eq!(parse_interval_ms("1Y"), Some(365 * 24 * 3600 * 1000));
        for bad in ["", "h", "10", "10x", "-1h", "1.5h", "ten s"] {
            assert_eq!(parse_interval_ms(bad), None, "{bad}");
        }
    }

    #[test]
    fn parses_retention_and_segment_size() {
        let args = StreamArguments::parse(&table(&[
            ("x-max-age", text("12h")),
            ("x-max-length-bytes", AMQPValue::LongLongInt(1_000_000)),
            ("x-stream-max-segment-size-bytes", AMQPValue::LongInt(65_536)),
            ("x-queue-type", text("stream")),
        ]))
        .expect("valid");
        assert_eq!(args.max_age, Some(Duration::from_secs(12 * 3600)));
        assert_eq!(args.max_length_bytes, Some(1_000_000));
        assert_eq!(args.max_segment_size_bytes, Some(65_536));
    }

    #[test]
    fn refuses_bad_values_and_classic_arguments_with_406() {
        for (name, value) in [
            ("x-max-age", text("12")),
            ("x-max-age", text("0s")),
            ("x-max-age", AMQPValue::LongInt(5)),
            ("x-max-length-bytes", AMQPValue::LongInt(0)),
            ("x-stream-max-segment-size-bytes", AMQPValue::LongInt(10)),
            ("x-stream-max-segment-size-bytes", AMQPValue::LongLongInt(1 << 40)),
            ("x-max-priority", AMQPValue::LongInt(5)),
            ("x-dead-letter-exchange", text("dlx")),
        ] {
            let error = StreamArguments::parse(&table(&[(name, value)])).expect_err(name);
            assert_eq!(error.code, crate::error::ReplyCode::PreconditionFailed, "{name}");
            assert!(error.text.contains(name), "{}", error.text);
        }
    }
}
