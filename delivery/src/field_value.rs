//! Comparing field-table values the way RabbitMQ does: by value, not by wire type.
//!
//! A short string equals a long string with the same bytes, and numbers compare as numbers
//! (a 32-bit 1000 equals a 64-bit 1000, and 1 equals 1.0).

use amq_protocol::types::AMQPValue;

/// The bytes of a string value.
pub(crate) fn string_of(value: &AMQPValue) -> Option<&[u8]> {
    match value {
        AMQPValue::ShortString(s) => Some(s.as_str().as_bytes()),
        AMQPValue::LongString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

/// The numeric value of a number.
pub(crate) fn number_of(value: &AMQPValue) -> Option<f64> {
    Some(match value {
        AMQPValue::ShortShortInt(v) => f64::from(*v),
        AMQPValue::ShortShortUInt(v) => f64::from(*v),
        AMQPValue::ShortInt(v) => f64::from(*v),
        AMQPValue::ShortUInt(v) => f64::from(*v),
        AMQPValue::LongInt(v) => f64::from(*v),
        AMQPValue::LongUInt(v) => f64::from(*v),
        AMQPValue::LongLongInt(v) => *v as f64,
        AMQPValue::Float(v) => f64::from(*v),
        AMQPValue::Double(v) => *v,
        AMQPValue::Timestamp(v) => *v as f64,
        _ => return None,
    })
}

/// A number that is a whole number within `[min, max]`.
pub(crate) fn whole_number_within(value: &AMQPValue, min: u64, max: u64) -> Option<u64> {
    number_of(value).filter(|n| n.fract() == 0.0 && *n >= min as f64 && *n <= max as f64).map(|n| n as u64)
}

/// Whether two values are equal as RabbitMQ compares them.
pub(crate) fn values_equal(a: &AMQPValue, b: &AMQPValue) -> bool {
    if let (Some(x), Some(y)) = (string_of(a), string_of(b)) {
        return x == y;
    }
    if let (Some(x), Some(y)) = (number_of(a), number_of(b)) {
        return x == y;
    }
    a == b
}

/// Field tables for unit tests.
#[cfg(test)]
pub(crate) mod test_values {
    use amq_protocol::types::{AMQPValue, FieldTable, LongString};

    /// A table from (key, value) pairs.
    pub(crate) fn table(pairs: &[(&str, AMQPValue)]) -> FieldTable {
        let mut t = FieldTable::default();
        for (k, v) in pairs {
            t.insert((*k).into(), v.clone());
        }
        t
    }

    /// A long-string value.
    pub(crate) fn text(s: &str) -> AMQPValue {
        AMQPValue::LongString(LongString::from(s))
    }
}
