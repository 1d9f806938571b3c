//! Dead-lettering: the copy of a message that goes to a queue's dead-letter exchange.
//!
//! The copy carries the `x-death` header exactly as RabbitMQ writes it: an array of tables,
//! newest first, one per (queue, reason), each with `count`, `reason`, `queue`, `time`,
//! `exchange`, `routing-keys` and, if the message had one, `original-expiration` (the
//! `expiration` property itself is removed, so the copy does not expire again). The headers
//! `x-first-death-queue/-reason/-exchange` are set once, `x-last-death-*` every time.

use crate::message::Message;
use crate::properties::Properties;
use amq_protocol::frame::WriteContext;
use amq_protocol::protocol::basic::{gen_properties, parse_properties, AMQPProperties};
use amq_protocol::types::{AMQPValue, FieldArray, FieldTable, LongString, ShortString};
use bytes::Bytes;

/// Why a message was dead-lettered (the `reason` in `x-death`). Serializable: a quorum
/// queue's snapshot keeps the reasons of messages waiting for their dead-letter confirm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum DeathReason {
    /// Rejected or nacked without requeue.
    Rejected,
    /// Its TTL passed.
    Expired,
    /// Dropped or refused by a length limit.
    Maxlen,
    /// Delivered more often than `x-delivery-limit` allows.
    DeliveryLimit,
}

impl DeathReason {
    /// The reason's name in `x-death`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeathReason::Rejected => "rejected",
            DeathReason::Expired => "expired",
            DeathReason::Maxlen => "maxlen",
            DeathReason::DeliveryLimit => "delivery_limit",
        }
    }
}

/// A message's properties could not be rewritten.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot rewrite message properties: {0}")]
pub struct RewriteError(String);

fn text(value: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(value))
}

fn key(name: &str) -> ShortString {
    ShortString::from(name)
}

/// Applies `change` to a copy of the message's properties and returns the rewritten message.
pub fn rewrite(
    message: &Message,
    change: impl FnOnce(&mut AMQPProperties, &mut FieldTable),
) -> Result<Message, RewriteError> {
    let raw = message.properties.raw();
    let (_, mut properties) = parse_properties(&raw[..]).map_err(|e| RewriteError(format!("{e:?}")))?;
    let mut headers = properties.headers().clone().unwrap_or_default();
    change(&mut properties, &mut headers);
    let properties = properties.with_headers(headers);
    let encoded =
        gen_properties(&properties)(WriteContext::from(Vec::new())).map_err(|e| RewriteError(format!("{e:?}")))?;
    let properties = Properties::decode(Bytes::from(encoded.write)).map_err(|e| RewriteError(e.to_string()))?;
    // The rewritten message is kept (queued again): it must not pin a log read buffer.
    Ok(Message { properties, body: Bytes::copy_from_slice(&message.body), ..message.clone() })
}

/// The header a redelivery carries: failed deliveries before this one.
const DELIVERY_COUNT_HEADER: &str = "x-delivery-count";

/// `message` with its `x-delivery-count` header set to `count` (unchanged if its properties
/// cannot be rewritten).
pub fn with_delivery_count(message: std::sync::Arc<Message>, count: u32) -> std::sync::Arc<Message> {
    let counted = rewrite(&message, |_, headers| {
        headers.insert(DELIVERY_COUNT_HEADER.into(), AMQPValue::LongLongInt(i64::from(count)));
    });
    counted.map(std::sync::Arc::new).unwrap_or(message)
}

/// The copy of `message` dead-lettered from `queue` for `reason`, to be published with
/// `routing_key`, at `now_secs`.
pub fn dead_letter(
    message: &Message,
    queue: &str,
    reason: DeathReason,
    routing_key: &ShortString,
    exchange: &ShortString,
    now_secs: u64,
) -> Result<Message, RewriteError> {
    let mut copy = rewrite(message, |properties, headers| {
        let mut death = FieldTable::default();
        death.insert(key("reason"), text(reason.as_str()));
        death.insert(key("queue"), text(queue));
        death.insert(key("time"), AMQPValue::Timestamp(now_secs));
        death.insert(key("exchange"), text(message.exchange.as_str()));
        let mut routing_keys = FieldArray::default();
        routing_keys.push(text(message.routing_key.as_str()));
        death.insert(key("routing-keys"), AMQPValue::FieldArray(routing_keys));
        if let Some(expiration) = properties.expiration().clone() {
            death.insert(key("original-expiration"), text(expiration.as_str()));
            remove_expiration(properties);
        }
        record_death(headers, death, queue, reason);
        for (which, set_always) in [("first", false), ("last", true)] {
            for (field, value) in
                [("queue", queue), ("reason", reason.as_str()), ("exchange", message.exchange.as_str())]
            {
                let name = key(&format!("x-{which}-death-{field}"));
                if set_always || !headers.contains_key(name.as_str()) {
                    headers.insert(name, text(value));
                }
            }
        }
    })?;
    copy.exchange = exchange.clone();
    copy.routing_key = routing_key.clone();
    Ok(copy)
}

/// Removes the `expiration` property (the builder can only set it).
fn remove_expiration(properties: &mut AMQPProperties) {
    let mut rebuilt = AMQPProperties::default();
    macro_rules! keep {
        ($($get:ident => $with:ident),*) => {
            $(if let Some(value) = properties.$get().clone() { rebuilt = rebuilt.$with(value); })*
        };
    }
    keep!(content_type => with_content_type, content_encoding => with_content_encoding,
        delivery_mode => with_delivery_mode, priority => with_priority, correlation_id => with_correlation_id,
        reply_to => with_reply_to, message_id => with_message_id, timestamp => with_timestamp,
        kind => with_type, user_id => with_user_id, app_id => with_app_id, cluster_id => with_cluster_id);
    *properties = rebuilt;
}

/// Puts `death` at the head of `x-death`, merging it with the entry for the same queue and
/// reason (whose count it takes over, plus one).
fn record_death(headers: &mut FieldTable, mut death: FieldTable, queue: &str, reason: DeathReason) {
    let previous = match headers.inner().get("x-death") {
        Some(AMQPValue::FieldArray(array)) => array.as_slice().to_vec(),
        _ => Vec::new(),
    };
    let same = |entry: &AMQPValue| match entry {
        AMQPValue::FieldTable(table) => {
            table.inner().get("queue").and_then(string_value).as_deref() == Some(queue)
                && table.inner().get("reason").and_then(string_value).as_deref() == Some(reason.as_str())
        }
        _ => false,
    };
    let count = previous
        .iter()
        .find(|entry| same(entry))
        .and_then(|entry| match entry {
            AMQPValue::FieldTable(table) => table.inner().get("count").and_then(count_value),
            _ => None,
        })
        .unwrap_or(0);
    death.insert(key("count"), AMQPValue::LongLongInt(count + 1));
    let mut deaths = FieldArray::default();
    deaths.push(AMQPValue::FieldTable(death));
    for entry in previous.into_iter().filter(|entry| !same(entry)) {
        deaths.push(entry);
    }
    headers.insert(key("x-death"), AMQPValue::FieldArray(deaths));
}

fn string_value(value: &AMQPValue) -> Option<String> {
    crate::field_value::string_of(value).map(|b| String::from_utf8_lossy(b).into_owned())
}

fn count_value(value: &AMQPValue) -> Option<i64> {
    crate::field_value::number_of(value).map(|n| n as i64)
}

/// Whether dead-lettering to `target` would close a cycle with no rejection in it: RabbitMQ
/// drops such messages rather than let them loop forever.
pub fn is_cycle(message: &Message, target: &str) -> bool {
    let Some(AMQPValue::FieldArray(deaths)) = message.properties.headers().and_then(|h| h.inner().get("x-death"))
    else {
        return false;
    };
    let field = |entry: &AMQPValue, name: &str| match entry {
        AMQPValue::FieldTable(table) => table.inner().get(name).and_then(string_value),
        _ => None,
    };
    for entry in deaths.as_slice() {
        if field(entry, "reason").as_deref() == Some("rejected") {
            return false;
        }
        if field(entry, "queue").as_deref() == Some(target) {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(expiration: Option<&str>) -> Message {
        let mut properties = AMQPProperties::default().with_delivery_mode(2);
        if let Some(expiration) = expiration {
            properties = properties.with_expiration(expiration.into());
        }
        let raw = gen_properties(&properties)(WriteContext::from(Vec::new())).map(|c| c.write).unwrap_or_default();
        Message {
            exchange: "ex".into(),
            routing_key: "rk".into(),
            properties: Properties::decode(Bytes::from(raw)).expect("valid"),
            body: Bytes::from_static(b"body"),
        }
    }

    fn deaths(message: &Message) -> Vec<FieldTable> {
        match message.properties.headers().and_then(|h| h.inner().get("x-death")) {
            Some(AMQPValue::FieldArray(array)) => array
                .as_slice()
                .iter()
                .filter_map(|v| match v {
                    AMQPValue::FieldTable(t) => Some(t.clone()),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    #[test]
    fn x_death_is_written_and_merged_newest_first() {
        let original = message(Some("5000"));
        let once = dead_letter(&original, "q1", DeathReason::Expired, &"k".into(), &"dlx".into(), 100).expect("ok");
        assert_eq!(once.properties.expiration(), None, "expiration removed");
        assert!(once.properties.is_persistent(), "other properties kept");
        let first = &deaths(&once)[0];
        assert_eq!(first.inner().get("count"), Some(&AMQPValue::LongLongInt(1)));
        assert_eq!(first.inner().get("original-expiration"), Some(&text("5000")));
        assert_eq!(first.inner().get("time"), Some(&AMQPValue::Timestamp(100)));
        assert_eq!((once.exchange.as_str(), once.routing_key.as_str()), ("dlx", "k"));

        let twice = dead_letter(&once, "q2", DeathReason::Rejected, &"k".into(), &"dlx".into(), 200).expect("ok");
        let thrice = dead_letter(&twice, "q1", DeathReason::Expired, &"k".into(), &"dlx".into(), 300).expect("ok");
        let entries = deaths(&thrice);
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].inner().get("queue"), Some(&text("q1")));
        assert_eq!(entries[0].inner().get("count"), Some(&AMQPValue::LongLongInt(2)));
        assert_eq!(entries[1].inner().get("queue"), Some(&text("q2")));
        let headers = thrice.properties.headers().cloned().unwrap_or_default();
        assert_eq!(headers.inner().get("x-first-death-queue"), Some(&text("q1")));
        assert_eq!(headers.inner().get("x-first-death-reason"), Some(&text("expired")));
        assert_eq!(headers.inner().get("x-last-death-queue"), Some(&text("q1")));
    }

    #[test]
    fn cycles_without_rejection_are_detected() {
        let expired = dead_letter(&message(None), "a", DeathReason::Expired, &"k".into(), &"x".into(), 1).expect("ok");
        assert!(is_cycle(&expired, "a"));
        assert!(!is_cycle(&expired, "b"));
        let rejected = dead_letter(&expired, "b", DeathReason::Rejected, &"k".into(), &"x".into(), 2).expect("ok");
        assert!(!is_cycle(&rejected, "a"), "a rejection breaks the cycle");
    }
}
