//! The headers exchange's matching: binding arguments against a message's headers.
//!
//! RabbitMQ's rules: `x-match` is `all` (the default), `any`, `all-with-x` or `any-with-x`;
//! binding arguments whose names start with `x-` take part only in the `-with-x` modes; a
//! binding argument of type void matches any value of that header; values compare by value,
//! not by wire type (a short string equals a long string with the same bytes, 1 equals 1.0).

use crate::error::{BrokerError, BrokerResult};
use crate::field_value::{string_of, values_equal, Shown};
use amq_protocol::types::{AMQPValue, FieldTable};

/// The `x-match` modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    All,
    Any,
}

/// A compiled headers binding: the mode and the (name, value) pairs to compare.
#[derive(Debug, Clone, PartialEq)]
pub struct HeadersMatcher {
    mode: Mode,
    pairs: Vec<(String, AMQPValue)>,
}

impl HeadersMatcher {
    /// Compiles binding arguments; an unknown `x-match` value is 406 PRECONDITION_FAILED.
    pub fn compile(arguments: &FieldTable) -> BrokerResult<Self> {
        let (mode, with_x) = match arguments.inner().get("x-match") {
            None => (Mode::All, false),
            Some(value) => match string_of(value) {
                Some(b"all") => (Mode::All, false),
                Some(b"any") => (Mode::Any, false),
                Some(b"all-with-x") => (Mode::All, true),
                Some(b"any-with-x") => (Mode::Any, true),
                _ => {
                    return Err(BrokerError::precondition_failed(format!(
                        "invalid x-match value {}: expected all, any, all-with-x or any-with-x",
                        Shown(value)
                    )))
                }
            },
        };
        let pairs = arguments
            .inner()
            .iter()
            .filter(|(name, _)| name.as_str() != "x-match")
            .filter(|(name, _)| with_x || !name.as_str().starts_with("x-"))
            .map(|(name, value)| (name.to_string(), value.clone()))
            .collect();
        Ok(HeadersMatcher { mode, pairs })
    }

    /// Whether a message with these headers matches.
    pub fn matches(&self, headers: Option<&FieldTable>) -> bool {
        let pair_matches = |(name, expected): &(String, AMQPValue)| {
            let actual = headers.and_then(|h| h.inner().get(name.as_str()));
            match (expected, actual) {
                (_, None) => false,
                (AMQPValue::Void, Some(_)) => true,
                (expected, Some(actual)) => values_equal(expected, actual),
            }
        };
        match self.mode {
            Mode::All => self.pairs.iter().all(pair_matches),
            Mode::Any => self.pairs.iter().any(pair_matches),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use amq_protocol::types::{LongString, ShortString};

    fn table(pairs: &[(&str, AMQPValue)]) -> FieldTable {
        let mut t = FieldTable::default();
        for (k, v) in pairs {
            t.insert(ShortString::from(*k), v.clone());
        }
        t
    }

    fn s(v: &str) -> AMQPValue {
        AMQPValue::LongString(LongString::from(v))
    }

    #[test]
    fn all_and_any() {
        let all = HeadersMatcher::compile(&table(&[("a", s("1")), ("b", s("2"))])).unwrap();
        let any = HeadersMatcher::compile(&table(&[("x-match", s("any")), ("a", s("1")), ("b", s("2"))])).unwrap();
        let both = table(&[("a", s("1")), ("b", s("2"))]);
        let one = table(&[("a", s("1")), ("b", s("3"))]);
        assert!(all.matches(Some(&both)));
        assert!(!all.matches(Some(&one)));
        assert!(any.matches(Some(&one)));
        assert!(!any.matches(None));
    }

    #[test]
    fn x_arguments_only_with_x_modes() {
        let plain = HeadersMatcher::compile(&table(&[("x-k", s("v"))])).unwrap();
        let with_x = HeadersMatcher::compile(&table(&[("x-match", s("all-with-x")), ("x-k", s("v"))])).unwrap();
        assert!(plain.matches(None), "all with no pairs matches everything");
        assert!(!with_x.matches(None));
        assert!(with_x.matches(Some(&table(&[("x-k", s("v"))]))));
    }

    #[test]
    fn void_matches_presence_and_numbers_compare_by_value() {
        let m = HeadersMatcher::compile(&table(&[("p", AMQPValue::Void), ("n", AMQPValue::LongInt(1))])).unwrap();
        assert!(m.matches(Some(&table(&[("p", s("anything")), ("n", AMQPValue::ShortShortUInt(1))]))));
        assert!(!m.matches(Some(&table(&[("n", AMQPValue::LongInt(1))]))));
    }

    #[test]
    fn bad_x_match_is_406() {
        let err = HeadersMatcher::compile(&table(&[("x-match", s("some"))])).unwrap_err();
        assert_eq!(err.code, crate::error::ReplyCode::PreconditionFailed);
    }
}
