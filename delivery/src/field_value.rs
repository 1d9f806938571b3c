//! Field-table values as users mean them: compared the way RabbitMQ compares them (by value,
//! not by wire type), and shown in error texts as they were written.
//!
//! A short string equals a long string with the same bytes, and numbers compare as numbers
//! (a 32-bit 1000 equals a 64-bit 1000, and 1 equals 1.0).

use amq_protocol::types::AMQPValue;
use std::fmt;

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

/// A number's exact whole value: integers exactly whatever their width (where [`number_of`]
/// rounds those beyond 2^53), floats only when whole.
pub(crate) fn exact_whole_number_of(value: &AMQPValue) -> Option<i128> {
    Some(match value {
        AMQPValue::ShortShortInt(v) => i128::from(*v),
        AMQPValue::ShortShortUInt(v) => i128::from(*v),
        AMQPValue::ShortInt(v) => i128::from(*v),
        AMQPValue::ShortUInt(v) => i128::from(*v),
        AMQPValue::LongInt(v) => i128::from(*v),
        AMQPValue::LongUInt(v) => i128::from(*v),
        AMQPValue::LongLongInt(v) => i128::from(*v),
        AMQPValue::Timestamp(v) => i128::from(*v),
        AMQPValue::Float(v) if v.fract() == 0.0 && v.abs() < 1e18 => *v as i128,
        AMQPValue::Double(v) if v.fract() == 0.0 && v.abs() < 1e18 => *v as i128,
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

/// A value as a user wrote it, for error texts: `"quorum"` for a string (quoted, escaped),
/// `1000` or `true` for numbers and booleans whatever their wire type, and arrays and tables
/// element by element (`["a", 1]`, `{x-match: "all"}`).
pub(crate) struct Shown<'a>(pub &'a AMQPValue);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let value = self.0;
        if let Some(text) = string_of(value) {
            return write!(f, "{:?}", String::from_utf8_lossy(text));
        }
        match value {
            AMQPValue::Boolean(on) => write!(f, "{on}"),
            AMQPValue::ShortShortInt(v) => write!(f, "{v}"),
            AMQPValue::ShortShortUInt(v) => write!(f, "{v}"),
            AMQPValue::ShortInt(v) => write!(f, "{v}"),
            AMQPValue::ShortUInt(v) => write!(f, "{v}"),
            AMQPValue::LongInt(v) => write!(f, "{v}"),
            AMQPValue::LongUInt(v) => write!(f, "{v}"),
            AMQPValue::LongLongInt(v) => write!(f, "{v}"),
            AMQPValue::Timestamp(v) => write!(f, "{v}"),
            AMQPValue::Float(v) => write!(f, "{v}"),
            AMQPValue::Double(v) => write!(f, "{v}"),
            AMQPValue::DecimalValue(d) => write!(f, "{}e-{}", d.value, d.scale),
            AMQPValue::FieldArray(array) => {
                f.write_str("[")?;
                for (i, item) in array.as_slice().iter().enumerate() {
                    write!(f, "{}{}", if i == 0 { "" } else { ", " }, Shown(item))?;
                }
                f.write_str("]")
            }
            AMQPValue::FieldTable(table) => {
                f.write_str("{")?;
                for (i, (key, item)) in table.inner().iter().enumerate() {
                    write!(f, "{}{}: {}", if i == 0 { "" } else { ", " }, key.as_str(), Shown(item))?;
                }
                f.write_str("}")
            }
            AMQPValue::ByteArray(bytes) => write!(f, "<{} bytes>", bytes.len()),
            AMQPValue::Void => f.write_str("void"),
            AMQPValue::ShortString(_) | AMQPValue::LongString(_) => Ok(()),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::test_values::{table, text};
    use super::*;
    use amq_protocol::types::FieldArray;

    #[test]
    fn values_are_shown_as_written() {
        assert_eq!(Shown(&text("quorum")).to_string(), "\"quorum\"");
        assert_eq!(Shown(&AMQPValue::ShortString("say \"hi\"".into())).to_string(), "\"say \\\"hi\\\"\"");
        assert_eq!(Shown(&AMQPValue::LongInt(-5)).to_string(), "-5");
        assert_eq!(Shown(&AMQPValue::ShortShortUInt(7)).to_string(), "7");
        assert_eq!(Shown(&AMQPValue::Boolean(true)).to_string(), "true");
        assert_eq!(Shown(&AMQPValue::Double(1.5)).to_string(), "1.5");
        let array = AMQPValue::FieldArray(FieldArray::from(vec![text("a"), AMQPValue::LongInt(1)]));
        assert_eq!(Shown(&array).to_string(), "[\"a\", 1]");
        let nested = AMQPValue::FieldTable(table(&[("x-match", text("all"))]));
        assert_eq!(Shown(&nested).to_string(), "{x-match: \"all\"}");
    }
}
