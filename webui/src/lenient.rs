//! RabbitMQ's API takes booleans and numbers as JSON values or as their text (`"true"`,
//! `"5"`), and rabbitmqadmin sends them as text: the request bodies read both.

use serde::de::{self, Deserializer};
use serde::Deserialize;
use serde_json::Value;

/// A boolean, or `"true"` / `"false"`.
pub fn boolean<'de, D: Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    match Value::deserialize(deserializer)? {
        Value::Bool(b) => Ok(b),
        Value::String(s) if s == "true" => Ok(true),
        Value::String(s) if s == "false" => Ok(false),
        other => Err(de::Error::custom(format!("expected true or false, got {other}"))),
    }
}

/// An optional [`boolean`].
pub fn optional_boolean<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<bool>, D::Error> {
    boolean(deserializer).map(Some)
}

/// A query flag: a boolean, or text that is true when it is `"true"` or `"1"` (as a query
/// string's `sort_reverse=1`).
pub fn optional_flag<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<bool>, D::Error> {
    match Value::deserialize(deserializer)? {
        Value::Bool(b) => Ok(Some(b)),
        Value::String(s) => Ok(Some(s == "true" || s == "1")),
        Value::Null => Ok(None),
        other => Err(de::Error::custom(format!("expected true or false, got {other}"))),
    }
}

/// A whole number, or its text.
pub fn count<'de, D: Deserializer<'de>>(deserializer: D) -> Result<usize, D::Error> {
    match Value::deserialize(deserializer)? {
        Value::Number(n) => n
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| de::Error::custom(format!("{n} is not a count"))),
        Value::String(s) => s.trim().parse().map_err(|_| de::Error::custom(format!("{s:?} is not a count"))),
        other => Err(de::Error::custom(format!("expected a number, got {other}"))),
    }
}

/// An optional [`count`].
pub fn optional_count<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<usize>, D::Error> {
    count(deserializer).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct Body {
        #[serde(deserialize_with = "boolean")]
        flag: bool,
        #[serde(deserialize_with = "count")]
        n: usize,
    }

    #[test]
    fn values_or_their_text() {
        let from_text: Body = serde_json::from_str(r#"{"flag": "true", "n": "7"}"#).expect("text");
        let from_values: Body = serde_json::from_str(r#"{"flag": false, "n": 3}"#).expect("values");
        assert_eq!((from_text.flag, from_text.n, from_values.flag, from_values.n), (true, 7, false, 3));
        assert!(serde_json::from_str::<Body>(r#"{"flag": "yes", "n": 1}"#).is_err());
    }
}
