//! The Stream protocol's string arguments as the broker's queue and consumer arguments: a
//! stream created with `max-age=7D` is the stream a 0-9-1 client declares with
//! `x-max-age: 7D`, and a subscription is a stream consumer with `x-stream-offset` and
//! `x-stream-filter`. The broker checks the values, as it does for 0-9-1.

use crate::request::OffsetSpecification;
use amq_protocol::types::{AMQPValue, FieldArray, FieldTable, LongString, ShortString};
use warren_delivery::client_text::{sanitize, MAX_TEXT_BYTES};
use warren_delivery::stream::OFFSET_ARGUMENT;

/// The Create arguments RabbitMQ's stream plugin takes, and whether each is a number.
const CREATE_ARGUMENTS: &[(&str, bool)] = &[
    ("max-length-bytes", true),
    ("max-age", false),
    ("stream-max-segment-size-bytes", true),
    ("initial-cluster-size", true),
    ("queue-leader-locator", false),
    ("stream-filter-size-bytes", true),
];

/// The subscription property that starts each filter value (`filter.0`, `filter.1`, ...).
const FILTER_PREFIX: &str = "filter.";
/// The subscription property that also takes messages without a filter value.
const MATCH_UNFILTERED: &str = "match-unfiltered";

fn long_string(text: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(text.as_bytes().to_vec()))
}

/// The queue arguments of a Create (a stream, with the arguments given that it knows).
pub fn queue_arguments(arguments: &[(String, String)]) -> Result<FieldTable, String> {
    let mut table = FieldTable::default();
    table.insert(ShortString::from("x-queue-type"), long_string("stream"));
    for (name, value) in arguments {
        // As RabbitMQ's stream plugin, an argument it does not know is ignored (some clients
        // send the 0-9-1 names, `x-max-age`, which it ignores too).
        let Some((_, numeric)) = CREATE_ARGUMENTS.iter().find(|(known, _)| known == name) else {
            tracing::debug!(argument = %sanitize(name, MAX_TEXT_BYTES), "an unknown stream argument is ignored");
            continue;
        };
        let value = if *numeric {
            AMQPValue::LongLongInt(value.parse::<i64>().map_err(|_| format!("{name} must be a number, not {value}"))?)
        } else {
            long_string(value)
        };
        table.insert(ShortString::from(format!("x-{name}")), value);
    }
    Ok(table)
}

/// The consumer arguments of a Subscribe.
pub fn consumer_arguments(offset: OffsetSpecification, properties: &[(String, String)]) -> Result<FieldTable, String> {
    let mut table = FieldTable::default();
    let start = match offset {
        OffsetSpecification::First => long_string("first"),
        OffsetSpecification::Last => long_string("last"),
        OffsetSpecification::Next => long_string("next"),
        OffsetSpecification::Offset(offset) => {
            AMQPValue::LongLongInt(i64::try_from(offset).map_err(|_| format!("offset {offset} is too large"))?)
        }
        // The 0-9-1 argument is an AMQP timestamp, in seconds.
        OffsetSpecification::Timestamp(ms) => AMQPValue::Timestamp(u64::try_from(ms.max(0) / 1000).unwrap_or(0)),
    };
    table.insert(ShortString::from(OFFSET_ARGUMENT), start);
    let filters: Vec<AMQPValue> = properties
        .iter()
        .filter(|(name, _)| name.starts_with(FILTER_PREFIX))
        .map(|(_, value)| long_string(value))
        .collect();
    if !filters.is_empty() {
        table.insert(ShortString::from("x-stream-filter"), AMQPValue::FieldArray(FieldArray::from(filters)));
    }
    if let Some((_, value)) = properties.iter().find(|(name, _)| name == MATCH_UNFILTERED) {
        table.insert(ShortString::from("x-stream-match-unfiltered"), AMQPValue::Boolean(value == "true"));
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_arguments_become_the_x_arguments_of_a_stream() {
        let table = queue_arguments(&[("max-age".into(), "7D".into()), ("max-length-bytes".into(), "1000".into())])
            .expect("known arguments");
        let inner = table.inner();
        assert_eq!(inner.get("x-queue-type"), Some(&long_string("stream")));
        assert_eq!(inner.get("x-max-age"), Some(&long_string("7D")));
        assert_eq!(inner.get("x-max-length-bytes"), Some(&AMQPValue::LongLongInt(1000)));
        assert!(queue_arguments(&[("max-length-bytes".into(), "lots".into())]).is_err());
        let ignored = queue_arguments(&[("x-max-age".into(), "soon".into())]).expect("ignored, as RabbitMQ does");
        assert_eq!(ignored.inner().len(), 1, "only the queue type: {ignored:?}");
    }

    #[test]
    fn a_subscription_is_a_stream_consumer_with_its_start_and_filters() {
        let properties =
            [("filter.0".into(), "eu".into()), ("filter.1".into(), "us".into()), ("name".into(), "app".into())];
        let table = consumer_arguments(OffsetSpecification::Offset(42), &properties).expect("valid");
        let inner = table.inner();
        assert_eq!(inner.get(OFFSET_ARGUMENT), Some(&AMQPValue::LongLongInt(42)));
        let Some(AMQPValue::FieldArray(filters)) = inner.get("x-stream-filter") else { panic!("filters: {inner:?}") };
        assert_eq!(filters.as_slice(), [long_string("eu"), long_string("us")]);
        let table = consumer_arguments(OffsetSpecification::Timestamp(1_700_000_000_999), &[]).expect("valid");
        assert_eq!(table.inner().get(OFFSET_ARGUMENT), Some(&AMQPValue::Timestamp(1_700_000_000)));
    }
}
