//! Where a stream consumer starts: the consumer argument `x-stream-offset`, RabbitMQ's
//! names and forms, resolved against the stream's log.

use super::arguments::parse_interval_ms;
use crate::clock::now_ms;
use crate::error::{BrokerError, BrokerResult};
use crate::field_value::string_of;
use amq_protocol::types::AMQPValue;
use warren_storage::{Log, StorageError};

/// The consumer argument naming where to start.
pub const OFFSET_ARGUMENT: &str = "x-stream-offset";

/// A starting point, as the consumer asked for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OffsetSpec {
    /// The oldest message the stream still holds.
    First,
    /// The newest message.
    Last,
    /// Only messages published from now on (RabbitMQ's default).
    #[default]
    Next,
    /// This offset, clamped into the stream.
    Offset(u64),
    /// The first message appended at or after this time (ms since the epoch).
    Timestamp(i64),
}

impl OffsetSpec {
    /// Parses `x-stream-offset`: `first`, `last`, `next`, a non-negative integer, an AMQP
    /// timestamp (seconds), or an interval back from now such as `1h` (406 otherwise).
    pub fn parse(value: Option<&AMQPValue>) -> BrokerResult<Self> {
        let Some(value) = value else { return Ok(OffsetSpec::Next) };
        let invalid = || {
            BrokerError::precondition_failed(format!(
                "invalid consumer arg '{OFFSET_ARGUMENT}': expected first, last, next, an offset >= 0, a timestamp \
                 or an interval like 1h, got {value:?}"
            ))
        };
        if let AMQPValue::Timestamp(secs) = value {
            let ms = i64::try_from(*secs).ok().and_then(|s| s.checked_mul(1000)).ok_or_else(invalid)?;
            return Ok(OffsetSpec::Timestamp(ms));
        }
        if let Some(text) = string_of(value) {
            let text = std::str::from_utf8(text).map_err(|_| invalid())?;
            return match text {
                "first" => Ok(OffsetSpec::First),
                "last" => Ok(OffsetSpec::Last),
                "next" => Ok(OffsetSpec::Next),
                interval => {
                    let back_ms = parse_interval_ms(interval).ok_or_else(invalid)?;
                    Ok(OffsetSpec::Timestamp(now_ms().saturating_sub(back_ms) as i64))
                }
            };
        }
        let offset = match *value {
            AMQPValue::ShortShortInt(v) => i64::from(v),
            AMQPValue::ShortShortUInt(v) => i64::from(v),
            AMQPValue::ShortInt(v) => i64::from(v),
            AMQPValue::ShortUInt(v) => i64::from(v),
            AMQPValue::LongInt(v) => i64::from(v),
            AMQPValue::LongUInt(v) => i64::from(v),
            AMQPValue::LongLongInt(v) => v,
            _ => return Err(invalid()),
        };
        u64::try_from(offset).map(OffsetSpec::Offset).map_err(|_| invalid())
    }

    /// The offset to start reading at in `log`.
    pub fn resolve(self, log: &Log) -> Result<u64, StorageError> {
        let (first, next) = (log.first_offset(), log.next_offset());
        Ok(match self {
            OffsetSpec::First => first,
            OffsetSpec::Last => next.saturating_sub(1).max(first),
            OffsetSpec::Next => next,
            OffsetSpec::Offset(offset) => offset.clamp(first, next),
            OffsetSpec::Timestamp(ms) => log.offset_for_timestamp(ms)?.unwrap_or(next),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use amq_protocol::types::LongString;

    #[test]
    fn parses_every_form_rabbitmq_accepts() {
        let text = |s: &str| AMQPValue::LongString(LongString::from(s));
        assert_eq!(OffsetSpec::parse(None).ok(), Some(OffsetSpec::Next));
        assert_eq!(OffsetSpec::parse(Some(&text("first"))).ok(), Some(OffsetSpec::First));
        assert_eq!(OffsetSpec::parse(Some(&text("last"))).ok(), Some(OffsetSpec::Last));
        assert_eq!(OffsetSpec::parse(Some(&text("next"))).ok(), Some(OffsetSpec::Next));
        assert_eq!(OffsetSpec::parse(Some(&AMQPValue::LongLongInt(42))).ok(), Some(OffsetSpec::Offset(42)));
        assert_eq!(OffsetSpec::parse(Some(&AMQPValue::ShortShortUInt(7))).ok(), Some(OffsetSpec::Offset(7)));
        assert_eq!(
            OffsetSpec::parse(Some(&AMQPValue::Timestamp(1_700_000_000))).ok(),
            Some(OffsetSpec::Timestamp(1_700_000_000_000))
        );
        let Ok(OffsetSpec::Timestamp(ms)) = OffsetSpec::parse(Some(&text("1h"))) else { panic!("an interval") };
        let expected = now_ms() as i64 - 3_600_000;
        assert!((ms - expected).abs() < 5_000, "{ms} vs {expected}");
    }

    #[test]
    fn refuses_malformed_specs_with_406() {
        for value in [
            AMQPValue::LongString(LongString::from("middle")),
            AMQPValue::LongLongInt(-1),
            AMQPValue::Boolean(true),
            AMQPValue::LongString(LongString::from("5")),
        ] {
            let error = OffsetSpec::parse(Some(&value)).expect_err("malformed");
            assert_eq!(error.code, crate::error::ReplyCode::PreconditionFailed);
            assert!(error.text.contains(OFFSET_ARGUMENT), "{}", error.text);
        }
    }
}
