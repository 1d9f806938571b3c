//! A queue's `x-` arguments, each declared once in [`ARGUMENTS`]: its name, the kinds of queue
//! that interpret it, whether a redeclare must repeat it, and how its value is read. Parsing,
//! the redeclare comparison (by the virtual host) and "not for this kind of queue" all
//! follow from that one table.
//!
//! Names and meanings are RabbitMQ's. A value of the wrong type or out of range is refused
//! with 406 PRECONDITION_FAILED and a text naming the argument and what is expected. A kind
//! ignores the arguments it does not interpret, as RabbitMQ's classic queues do, unless it is
//! strict: a stream refuses (406) the arguments that only make sense for a queue whose
//! messages leave, so that an application learns at declare time that they would not apply.

use crate::dedup_window::{DedupSettings, DEFAULT_DEDUPLICATION_HEADER};
use crate::error::{BrokerError, BrokerResult};
use crate::field_value::{string_of, whole_number_within, Shown};
use crate::overflow::Overflow;
use crate::quorum::DeadLetterStrategy;
use crate::stream::arguments::{parse_interval_ms, StreamArguments, MIN_SEGMENT_BYTES};
use amq_protocol::types::{AMQPValue, FieldTable};
use std::time::Duration;
use warren_storage::MAX_SEGMENT_BYTES;

/// The highest priority a queue may declare (`x-max-priority`).
pub const MAX_PRIORITY: u8 = 255;
/// `x-cache-size` at most: about 120 bytes a key, so 120 MB for a full window.
pub const MAX_DEDUP_CACHE_ENTRIES: u64 = 1_000_000;
/// A field-table key (a header name) is a short string: 255 bytes at most.
const MAX_HEADER_NAME_BYTES: usize = 255;
/// The longest TTL, expiry or timeout a queue argument may ask for, as RabbitMQ: 2^32 - 1 ms
/// (about 49.7 days).
pub const MAX_TIMER_MS: u64 = u32::MAX as u64;

/// `x-queue-type`: what kind of queue is declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QueueType {
    /// A classic queue: messages leave once acked.
    #[default]
    Classic,
    /// A stream: an append-only log read by offset (see `crate::stream`).
    Stream,
    /// A quorum queue: its messages and state replicated by a Raft group (see
    /// `crate::quorum`).
    Quorum,
}

/// `x-queue-leader-locator`: where a new quorum queue's leader is placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LeaderLocator {
    /// On the node the declaring client is connected to.
    #[default]
    ClientLocal,
    /// On the node leading the fewest queues.
    Balanced,
}

impl QueueType {
    /// Every kind, in the order their names are listed in errors.
    pub const ALL: [QueueType; 3] = [QueueType::Classic, QueueType::Quorum, QueueType::Stream];

    /// The value of `x-queue-type` that names it.
    pub fn name(self) -> &'static str {
        match self {
            QueueType::Classic => "classic",
            QueueType::Stream => "stream",
            QueueType::Quorum => "quorum",
        }
    }

    /// Whether a queue of this kind is replicated by a Raft group of its own in a cluster
    /// (its members chosen at declare).
    pub fn is_replicated(self) -> bool {
        REPLICATED.contains(&self)
    }

    /// Whether queues of this kind run with the policies that apply to them where the catalog
    /// is at machine version `catalog_version`. A quorum queue takes a policy change through its
    /// Raft group (`quorum::Op::ApplyPolicy`), so that every replica applies the same values at
    /// the same point of its log: once every node can read that
    /// ([`QUORUM_QUEUE_POLICIES`](crate::feature_flags::QUORUM_QUEUE_POLICIES)). A replicated
    /// stream takes a retention change the same way (`quorum::Op::ApplyRetention`), once
    /// every node can read that ([`STREAM_POLICIES`](crate::feature_flags::STREAM_POLICIES)).
    pub fn takes_policies(self, catalog_version: u16) -> bool {
        match self {
            QueueType::Classic => true,
            QueueType::Quorum => crate::feature_flags::QUORUM_QUEUE_POLICIES.enabled_at(catalog_version),
            QueueType::Stream => crate::feature_flags::STREAM_POLICIES.enabled_at(catalog_version),
        }
    }

    /// Whether queues of this kind interpret argument `name`.
    pub fn interprets(self, name: &str) -> bool {
        ARGUMENTS.iter().any(|a| a.name == name && a.kinds.contains(&self))
    }

    /// Whether it refuses (rather than ignores) arguments that other kinds interpret.
    fn is_strict(self) -> bool {
        self == QueueType::Stream
    }

    /// Why such an argument does not apply, for the 406 text.
    fn why_not(self) -> &'static str {
        match self {
            QueueType::Classic | QueueType::Quorum => "queues of this kind do not use it",
            QueueType::Stream => "streams keep every message until retention removes it",
        }
    }
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
    /// `x-max-length-bytes` of a queue: ready body bytes kept at most (for a stream, see
    /// [`StreamArguments::max_length_bytes`]).
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
    /// `x-consumer-timeout` in ms: how long a delivery may stay unacknowledged.
    pub consumer_timeout_ms: Option<u64>,
    /// `x-dead-letter-strategy` (quorum queues).
    pub dead_letter_strategy: DeadLetterStrategy,
    /// Replicas of a new quorum queue (`x-quorum-initial-group-size`) or stream
    /// (`x-initial-cluster-size`); default: min(3, nodes).
    pub initial_group_size: Option<u64>,
    /// `x-queue-leader-locator` (quorum queues and streams).
    pub leader_locator: LeaderLocator,
    /// `x-message-deduplication` (quorum queues and streams, an extension): drop a message
    /// whose key was seen within the window.
    pub message_deduplication: bool,
    /// `x-cache-size`: keys in the deduplication window (required with deduplication).
    pub cache_size: Option<u64>,
    /// `x-cache-ttl` in ms: how long a key stays in the window.
    pub cache_ttl_ms: Option<u64>,
    /// `x-deduplication-header`: the header carrying a message's key (LavinMQ's argument;
    /// default `x-deduplication-header`, the plugin's header).
    pub deduplication_header: Option<String>,
    /// `x-queue-type`.
    pub queue_type: QueueType,
    /// A stream's retention and segment size.
    pub stream: StreamArguments,
}

/// Reads one argument's value into the parsed arguments (the kind is already known).
type Parse = fn(&str, &AMQPValue, QueueType, &mut QueueArguments) -> BrokerResult<()>;

/// One `x-` argument of `queue.declare`.
pub struct QueueArgument {
    /// Its name, as RabbitMQ spells it.
    pub name: &'static str,
    /// The kinds of queue that interpret it.
    kinds: &'static [QueueType],
    /// Whether a redeclare must give the same value.
    pub compared_on_redeclare: bool,
    parse: Parse,
}

const ALL: &[QueueType] = &QueueType::ALL;
/// Queues whose messages leave once settled.
const QUEUES: &[QueueType] = &[QueueType::Classic, QueueType::Quorum];
const QUORUM: &[QueueType] = &[QueueType::Quorum];
/// Queues that deduplicate: their log or their replicated state holds the window.
const DEDUPLICATING: &[QueueType] = &[QueueType::Quorum, QueueType::Stream];
const STREAM: &[QueueType] = &[QueueType::Stream];
/// Queues replicated by a Raft group of their own.
const REPLICATED: &[QueueType] = &[QueueType::Quorum, QueueType::Stream];

const fn argument(name: &'static str, kinds: &'static [QueueType], parse: Parse) -> QueueArgument {
    QueueArgument { name, kinds, compared_on_redeclare: true, parse }
}

/// Every argument a queue interprets (or that RabbitMQ compares on redeclare), once.
pub const ARGUMENTS: &[QueueArgument] = &[
    // Read before the others (it decides the kind); here for the comparison on redeclare.
    argument("x-queue-type", ALL, |_, _, _, _| Ok(())),
    // On quorum queues an extension: strict levels as on classic queues.
    // 0 asks for no priorities, as in RabbitMQ.
    argument("x-max-priority", QUEUES, |name, value, _, parsed| {
        let max = whole_number(name, value, 0, u64::from(MAX_PRIORITY))?;
        parsed.max_priority = u8::try_from(max).ok().filter(|max| *max > 0);
        Ok(())
    }),
    argument("x-message-ttl", QUEUES, |name, value, _, parsed| {
        parsed.message_ttl_ms = Some(whole_number(name, value, 0, MAX_TIMER_MS)?);
        Ok(())
    }),
    argument("x-expires", QUEUES, |name, value, _, parsed| {
        parsed.expires_ms = Some(whole_number(name, value, 1, MAX_TIMER_MS)?);
        Ok(())
    }),
    // How long a delivery may stay unacknowledged before its channel is closed (406); a
    // consumer's own `x-consumer-timeout` wins over it, and it wins over `--consumer-timeout`.
    argument("x-consumer-timeout", QUEUES, |name, value, _, parsed| {
        parsed.consumer_timeout_ms = Some(whole_number(name, value, 1, MAX_TIMER_MS)?);
        Ok(())
    }),
    argument("x-max-length", QUEUES, |name, value, _, parsed| {
        parsed.max_length = Some(whole_number(name, value, 0, u64::MAX)?);
        Ok(())
    }),
    argument("x-max-length-bytes", ALL, |name, value, kind, parsed| {
        match kind {
            QueueType::Classic | QueueType::Quorum => {
                parsed.max_length_bytes = Some(whole_number(name, value, 0, u64::MAX)?)
            }
            QueueType::Stream => parsed.stream.retention.bytes = Some(whole_number(name, value, 1, u64::MAX)?),
        }
        Ok(())
    }),
    argument("x-overflow", QUEUES, |name, value, kind, parsed| {
        parsed.overflow = match (text(name, value)?.as_str(), kind) {
            ("drop-head", _) => Overflow::DropHead,
            ("reject-publish", _) => Overflow::RejectPublish,
            // As RabbitMQ: quorum queues do not offer it.
            ("reject-publish-dlx", QueueType::Classic) => Overflow::RejectPublishDlx,
            (_, QueueType::Quorum) => return Err(invalid(name, "drop-head or reject-publish", value)),
            _ => return Err(invalid(name, "drop-head, reject-publish or reject-publish-dlx", value)),
        };
        Ok(())
    }),
    argument("x-dead-letter-exchange", QUEUES, |name, value, _, parsed| {
        parsed.dead_letter_exchange = Some(text(name, value)?);
        Ok(())
    }),
    argument("x-dead-letter-routing-key", QUEUES, |name, value, _, parsed| {
        parsed.dead_letter_routing_key = Some(text(name, value)?);
        Ok(())
    }),
    argument("x-dead-letter-strategy", QUORUM, |name, value, _, parsed| {
        parsed.dead_letter_strategy = match text(name, value)?.as_str() {
            "at-most-once" => DeadLetterStrategy::AtMostOnce,
            "at-least-once" => DeadLetterStrategy::AtLeastOnce,
            _ => return Err(invalid(name, "at-most-once or at-least-once", value)),
        };
        Ok(())
    }),
    // Quorum queues dead-letter past 20 when it is not set (RabbitMQ 4's default).
    argument("x-delivery-limit", QUEUES, |name, value, _, parsed| {
        parsed.delivery_limit = Some(whole_number(name, value, 0, u64::MAX)?);
        Ok(())
    }),
    argument("x-single-active-consumer", QUEUES, |name, value, _, parsed| {
        parsed.single_active_consumer = boolean(name, value)?;
        Ok(())
    }),
    argument("x-max-age", STREAM, |name, value, _, parsed| {
        let text = string_of(value).and_then(|t| std::str::from_utf8(t).ok());
        let age = text.and_then(parse_interval_ms).filter(|ms| *ms > 0);
        let age = age.ok_or_else(|| invalid(name, "a positive age like 7D, 12h, 30m or 10s", value))?;
        parsed.stream.retention.age = Some(Duration::from_millis(age));
        Ok(())
    }),
    argument("x-stream-max-segment-size-bytes", STREAM, |name, value, _, parsed| {
        parsed.stream.max_segment_size_bytes =
            Some(whole_number(name, value, MIN_SEGMENT_BYTES, MAX_SEGMENT_BYTES - 1)?);
        Ok(())
    }),
    argument("x-quorum-initial-group-size", QUORUM, |name, value, _, parsed| {
        parsed.initial_group_size = Some(whole_number(name, value, 1, u64::from(u8::MAX))?);
        Ok(())
    }),
    argument("x-initial-cluster-size", STREAM, |name, value, _, parsed| {
        parsed.initial_group_size = Some(whole_number(name, value, 1, u64::from(u8::MAX))?);
        Ok(())
    }),
    argument("x-queue-leader-locator", REPLICATED, |name, value, _, parsed| {
        parsed.leader_locator = match text(name, value)?.as_str() {
            "client-local" => LeaderLocator::ClientLocal,
            // "random" and "least-leaders" are RabbitMQ's older names, which it still accepts.
            "balanced" | "random" | "least-leaders" => LeaderLocator::Balanced,
            _ => return Err(invalid(name, "client-local or balanced", value)),
        };
        Ok(())
    }),
    // Deduplication, an extension with the names of RabbitMQ's plugin and LavinMQ.
    argument("x-message-deduplication", DEDUPLICATING, |name, value, _, parsed| {
        parsed.message_deduplication = boolean(name, value)?;
        Ok(())
    }),
    argument("x-cache-size", DEDUPLICATING, |name, value, _, parsed| {
        parsed.cache_size = Some(whole_number(name, value, 1, MAX_DEDUP_CACHE_ENTRIES)?);
        Ok(())
    }),
    argument("x-cache-ttl", DEDUPLICATING, |name, value, _, parsed| {
        parsed.cache_ttl_ms = Some(whole_number(name, value, 1, u64::MAX)?);
        Ok(())
    }),
    argument("x-deduplication-header", DEDUPLICATING, |name, value, _, parsed| {
        let header = text(name, value)?;
        if header.is_empty() || header.len() > MAX_HEADER_NAME_BYTES {
            return Err(invalid(name, "a header name of 1 to 255 bytes", value));
        }
        parsed.deduplication_header = Some(header);
        Ok(())
    }),
    // RabbitMQ's, validated as it does and compared on redeclare; they change nothing in
    // Warren, whose queues keep their messages on disk and in memory as they see fit.
    argument("x-queue-mode", ALL, |name, value, _, _| match text(name, value)?.as_str() {
        "default" | "lazy" => Ok(()),
        _ => Err(invalid(name, "default or lazy", value)),
    }),
    argument("x-queue-version", ALL, |name, value, _, _| whole_number(name, value, 1, 2).map(drop)),
    argument("x-max-in-memory-length", QUORUM, |name, value, _, _| whole_number(name, value, 0, u64::MAX).map(drop)),
    argument("x-max-in-memory-bytes", QUORUM, |name, value, _, _| whole_number(name, value, 0, u64::MAX).map(drop)),
];

fn invalid(name: &str, expected: &str, value: &AMQPValue) -> BrokerError {
    BrokerError::precondition_failed(format!("invalid arg '{name}': expected {expected}, got {}", Shown(value)))
}

fn whole_number(name: &str, value: &AMQPValue, min: u64, max: u64) -> BrokerResult<u64> {
    whole_number_within(value, min, max).ok_or_else(|| {
        let expected =
            if max == u64::MAX { format!("an integer >= {min}") } else { format!("an integer from {min} to {max}") };
        invalid(name, &expected, value)
    })
}

fn boolean(name: &str, value: &AMQPValue) -> BrokerResult<bool> {
    match value {
        AMQPValue::Boolean(on) => Ok(*on),
        _ => Err(invalid(name, "a boolean", value)),
    }
}

fn text(name: &str, value: &AMQPValue) -> BrokerResult<String> {
    string_of(value)
        .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
        .ok_or_else(|| invalid(name, "a string", value))
}

/// Checks `value` as argument `name` would be checked at declare (by the first kind that
/// interprets it); what a policy setting it is validated by.
pub fn validate_argument(name: &str, value: &AMQPValue) -> BrokerResult<()> {
    let Some(argument) = ARGUMENTS.iter().find(|a| a.name == name) else {
        return Err(BrokerError::precondition_failed(format!("no queue argument '{name}'")));
    };
    let kind = argument.kinds.first().copied().unwrap_or_default();
    (argument.parse)(argument.name, value, kind, &mut QueueArguments::default())
}

/// The kind named by `x-queue-type` (classic if absent).
fn queue_type(arguments: &FieldTable) -> BrokerResult<QueueType> {
    let Some(value) = arguments.inner().get("x-queue-type") else { return Ok(QueueType::Classic) };
    QueueType::ALL
        .into_iter()
        .find(|kind| string_of(value) == Some(kind.name().as_bytes()))
        .ok_or_else(|| invalid("x-queue-type", "'classic', 'quorum' or 'stream'", value))
}

impl QueueArguments {
    /// The deduplication window the arguments ask for, if any.
    pub fn deduplication(&self) -> Option<DedupSettings> {
        if !self.message_deduplication {
            return None;
        }
        Some(DedupSettings {
            header: self.deduplication_header.clone().unwrap_or_else(|| DEFAULT_DEDUPLICATION_HEADER.to_string()),
            cache_size: self.cache_size?,
            cache_ttl_ms: self.cache_ttl_ms,
        })
    }

    /// Parses the arguments of `queue.declare`: the kind first, then every argument in
    /// [`ARGUMENTS`] that the kind interprets; one it does not is still validated (as
    /// RabbitMQ validates every argument whatever the queue's type) and then ignored, or
    /// refused by a strict kind.
    pub fn parse(arguments: &FieldTable) -> BrokerResult<Self> {
        let kind = queue_type(arguments)?;
        let mut parsed = QueueArguments { queue_type: kind, ..QueueArguments::default() };
        for (name, value) in arguments.inner() {
            let Some(argument) = ARGUMENTS.iter().find(|a| a.name == name.as_str()) else { continue };
            if argument.kinds.contains(&kind) {
                (argument.parse)(argument.name, value, kind, &mut parsed)?;
            } else if !kind.is_strict() {
                let as_kind = argument.kinds.first().copied().unwrap_or_default();
                (argument.parse)(argument.name, value, as_kind, &mut QueueArguments::default())?;
            } else {
                return Err(BrokerError::precondition_failed(format!(
                    "invalid arg '{}' for a {}: {}, so it does not apply (declare a queue of another kind to use it)",
                    argument.name,
                    kind.name(),
                    kind.why_not()
                )));
            }
        }
        if parsed.message_deduplication && parsed.cache_size.is_none() {
            return Err(BrokerError::precondition_failed(
                "invalid arg 'x-message-deduplication': x-cache-size must be set too (the window is bounded)",
            ));
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
    use crate::field_value::test_values::{table, text};
    use amq_protocol::types::LongString;

    #[test]
    fn parses_rabbitmq_arguments() {
        let args = QueueArguments::parse(&table(&[
            ("x-max-priority", AMQPValue::ShortShortUInt(10)),
            ("x-message-ttl", AMQPValue::LongInt(1000)),
            ("x-overflow", AMQPValue::LongString(LongString::from("reject-publish"))),
            ("x-dead-letter-exchange", AMQPValue::LongString(LongString::from("dlx"))),
            ("x-single-active-consumer", AMQPValue::Boolean(true)),
            ("x-max-age", text("1h")),
        ]))
        .expect("valid");
        assert_eq!(args.max_priority, Some(10));
        assert_eq!(args.message_ttl_ms, Some(1000));
        assert_eq!(args.overflow, Overflow::RejectPublish);
        assert_eq!(args.dead_letter_exchange.as_deref(), Some("dlx"));
        assert!(args.single_active_consumer);
        assert_eq!(args.stream.retention.age, None, "a classic queue ignores stream arguments");
    }

    #[test]
    fn parses_stream_retention_and_segment_size() {
        let args = QueueArguments::parse(&table(&[
            ("x-max-age", text("12h")),
            ("x-max-length-bytes", AMQPValue::LongLongInt(1_000_000)),
            ("x-stream-max-segment-size-bytes", AMQPValue::LongInt(65_536)),
            ("x-queue-type", text("stream")),
        ]))
        .expect("valid");
        assert_eq!(args.queue_type, QueueType::Stream);
        assert_eq!(args.stream.retention.age, Some(Duration::from_secs(12 * 3600)));
        assert_eq!(args.stream.retention.bytes, Some(1_000_000));
        assert_eq!(args.stream.max_segment_size_bytes, Some(65_536));
        assert_eq!(args.max_length_bytes, None);
    }

    #[test]
    fn refuses_bad_values_with_406() {
        for (kind, name, value) in [
            ("classic", "x-max-priority", AMQPValue::LongInt(256)),
            ("classic", "x-message-ttl", AMQPValue::LongInt(-1)),
            ("classic", "x-message-ttl", AMQPValue::LongLongInt(1 << 32)),
            ("classic", "x-expires", AMQPValue::LongInt(0)),
            ("classic", "x-expires", AMQPValue::LongLongInt(1 << 32)),
            ("quorum", "x-consumer-timeout", AMQPValue::LongInt(0)),
            ("classic", "x-queue-mode", text("bogus")),
            ("stream", "x-queue-mode", AMQPValue::LongInt(1)),
            ("classic", "x-queue-version", AMQPValue::LongInt(3)),
            ("quorum", "x-queue-version", text("2")),
            ("quorum", "x-max-in-memory-length", AMQPValue::LongInt(-1)),
            ("quorum", "x-queue-leader-locator", text("nearest")),
            // Validated by kinds that ignore them too, as RabbitMQ does.
            ("classic", "x-max-age", text("12")),
            ("classic", "x-max-in-memory-bytes", text("lots")),
            ("classic", "x-dead-letter-strategy", text("sometimes")),
            ("classic", "x-initial-cluster-size", AMQPValue::LongInt(0)),
            ("quorum", "x-stream-max-segment-size-bytes", AMQPValue::LongInt(10)),
            ("classic", "x-overflow", AMQPValue::LongString(LongString::from("spill"))),
            ("classic", "x-single-active-consumer", AMQPValue::LongInt(1)),
            ("lazy", "x-queue-type", AMQPValue::LongString(LongString::from("lazy"))),
            ("stream", "x-max-age", text("12")),
            ("stream", "x-max-age", text("0s")),
            ("stream", "x-max-age", AMQPValue::LongInt(5)),
            ("stream", "x-max-length-bytes", AMQPValue::LongInt(0)),
            ("stream", "x-stream-max-segment-size-bytes", AMQPValue::LongInt(10)),
            ("stream", "x-stream-max-segment-size-bytes", AMQPValue::LongLongInt(1 << 40)),
            ("quorum", "x-cache-size", AMQPValue::LongInt(0)),
            ("quorum", "x-cache-size", AMQPValue::LongLongInt(1 << 40)),
            ("quorum", "x-cache-ttl", AMQPValue::LongInt(0)),
            ("quorum", "x-message-deduplication", text("yes")),
            ("quorum", "x-deduplication-header", text("")),
        ] {
            let kind = if name == "x-queue-type" { value.clone() } else { text(kind) };
            let error = QueueArguments::parse(&table(&[("x-queue-type", kind), (name, value)])).expect_err(name);
            assert_eq!(error.code, crate::error::ReplyCode::PreconditionFailed, "{name}");
            assert!(error.text.contains(name), "{}", error.text);
        }
    }

    #[test]
    fn accepts_what_rabbitmq_accepts() {
        let args = QueueArguments::parse(&table(&[
            ("x-max-priority", AMQPValue::LongInt(0)),
            ("x-queue-mode", text("lazy")),
            ("x-queue-version", AMQPValue::LongInt(2)),
            ("x-message-ttl", AMQPValue::LongLongInt(MAX_TIMER_MS as i64)),
            ("x-consumer-timeout", AMQPValue::LongInt(5_000)),
        ]))
        .expect("valid");
        assert_eq!(args.max_priority, None, "0 means no priorities");
        assert_eq!(args.consumer_timeout_ms, Some(5_000));
        for older_name in ["random", "least-leaders"] {
            let args = QueueArguments::parse(&table(&[
                ("x-queue-type", text("quorum")),
                ("x-queue-leader-locator", text(older_name)),
                ("x-max-in-memory-length", AMQPValue::LongInt(10)),
            ]))
            .expect("valid");
            assert_eq!(args.leader_locator, LeaderLocator::Balanced, "{older_name}");
        }
    }

    #[test]
    fn a_stream_refuses_what_only_queues_whose_messages_leave_interpret() {
        for argument in ARGUMENTS.iter().filter(|a| !a.kinds.contains(&QueueType::Stream)) {
            let arguments = table(&[("x-queue-type", text("stream")), (argument.name, AMQPValue::LongInt(5))]);
            let error = QueueArguments::parse(&arguments).expect_err(argument.name);
            assert!(error.text.contains("does not apply"), "{}", error.text);
        }
    }

    #[test]
    fn deduplication_needs_a_bounded_window() {
        let on = ("x-message-deduplication", AMQPValue::Boolean(true));
        let error =
            QueueArguments::parse(&table(&[("x-queue-type", text("quorum")), on.clone()])).expect_err("no size");
        assert!(error.text.contains("x-cache-size must be set"), "{}", error.text);
        let args = QueueArguments::parse(&table(&[
            ("x-queue-type", text("quorum")),
            on,
            ("x-cache-size", AMQPValue::LongInt(1000)),
            ("x-cache-ttl", AMQPValue::LongInt(60_000)),
            ("x-deduplication-header", text("order-id")),
        ]))
        .expect("valid");
        assert!(args.message_deduplication);
        assert_eq!((args.cache_size, args.cache_ttl_ms), (Some(1000), Some(60_000)));
        assert_eq!(args.deduplication_header.as_deref(), Some("order-id"));
    }

    #[test]
    fn errors_show_the_value_as_the_user_wrote_it() {
        let error = QueueArguments::parse(&table(&[("x-queue-type", AMQPValue::LongString(LongString::from("lazy")))]))
            .expect_err("no such kind");
        assert!(error.text.ends_with("got \"lazy\""), "{}", error.text);
        let error = QueueArguments::parse(&table(&[("x-max-priority", AMQPValue::LongInt(300))])).expect_err("300");
        assert!(error.text.ends_with("got 300"), "{}", error.text);
    }

    #[test]
    fn quorum_settings_of_no_arguments_are_the_default_settings() {
        // The quorum layer spells its defaults out rather than asking the queue layer.
        assert_eq!(crate::quorum::Settings::from(&QueueArguments::default()), crate::quorum::Settings::default());
    }
}
