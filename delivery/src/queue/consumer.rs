//! A consumer: one `basic.consume` subscription, its QoS credit and where its deliveries go.

use super::{DeliveryChannel, Queue};
use crate::error::{BrokerError, BrokerResult};
use crate::field_value::{number_of, string_of, Shown};
use crate::message::Message;
use crate::tag_filter::{message_tag, TagFilter};
use amq_protocol::types::{AMQPValue, FieldTable, ShortString};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// One subscription of a channel to a queue.
#[derive(Debug)]
pub struct Consumer {
    tag: ShortString,
    queue: Arc<Queue>,
    session: Arc<dyn DeliveryChannel>,
    no_ack: bool,
    exclusive: bool,
    /// The per-consumer prefetch limit (0 = none), fixed when the consumer starts, as in RabbitMQ.
    prefetch: u32,
    unacked: AtomicU32,
    arguments: FieldTable,
    /// `x-consumer-timeout` in ms: how long its deliveries may stay unacknowledged.
    timeout_ms: Option<u64>,
    /// `x-priority`: higher goes first.
    priority: i64,
    /// `x-stream-filter` and `x-stream-match-unfiltered`.
    filter: Option<TagFilter>,
    /// For a consumer of a super stream: which partition this part of it reads (its
    /// deliveries carry [`PARTITION_HEADER`]).
    partition: Option<u32>,
}

/// The header a super stream consumer's deliveries carry: the partition's place (0 first).
pub const PARTITION_HEADER: &str = "x-stream-partition";

fn invalid(name: &str, expected: &str, value: &AMQPValue) -> BrokerError {
    BrokerError::precondition_failed(format!(
        "invalid consumer arg '{name}': expected {expected}, got {}",
        Shown(value)
    ))
}

impl ConsumerOptions {
    /// Checks the consumer arguments Warren interprets (406 if malformed).
    pub fn parse_priority_and_filter(&self) -> BrokerResult<(i64, Option<TagFilter>)> {
        let args = self.arguments.inner();
        let priority = match args.get("x-priority") {
            None => 0,
            Some(value) => match number_of(value) {
                Some(n) if n.fract() == 0.0 => n as i64,
                _ => return Err(invalid("x-priority", "an integer", value)),
            },
        };
        let tags = match args.get("x-stream-filter") {
            None => None,
            Some(AMQPValue::FieldArray(array)) => Some(
                array
                    .as_slice()
                    .iter()
                    .map(|v| string_of(v).map(<[u8]>::to_vec).ok_or_else(|| invalid("x-stream-filter", "strings", v)))
                    .collect::<BrokerResult<Vec<_>>>()?,
            ),
            Some(value) => Some(vec![string_of(value)
                .map(<[u8]>::to_vec)
                .ok_or_else(|| invalid("x-stream-filter", "a string or an array of strings", value))?]),
        };
        let match_unfiltered = match args.get("x-stream-match-unfiltered") {
            None => false,
            Some(AMQPValue::Boolean(on)) => *on,
            Some(value) => return Err(invalid("x-stream-match-unfiltered", "a boolean", value)),
        };
        Ok((priority, tags.map(|tags| TagFilter::new(tags, match_unfiltered))))
    }

    /// `x-consumer-timeout`, in ms (1 to 2^32 - 1, as the queue argument), if given.
    pub fn parse_timeout(&self) -> BrokerResult<Option<u64>> {
        let Some(value) = self.arguments.inner().get("x-consumer-timeout") else { return Ok(None) };
        crate::field_value::whole_number_within(value, 1, super::MAX_TIMER_MS)
            .map(Some)
            .ok_or_else(|| invalid("x-consumer-timeout", "an integer from 1 to 4294967295 (ms)", value))
    }
}

/// What `basic.consume` asked for.
#[derive(Debug, Clone, Default)]
pub struct ConsumerOptions {
    /// Deliveries need no ack.
    pub no_ack: bool,
    /// No other consumer may use the queue.
    pub exclusive: bool,
    /// The consume arguments (kept for consumer priorities and filters).
    pub arguments: FieldTable,
}

impl Consumer {
    pub(crate) fn new(
        tag: ShortString,
        queue: Arc<Queue>,
        session: Arc<dyn DeliveryChannel>,
        options: ConsumerOptions,
        prefetch: u32,
    ) -> BrokerResult<Self> {
        let (priority, filter) = options.parse_priority_and_filter()?;
        let timeout_ms = options.parse_timeout()?;
        Ok(Consumer {
            timeout_ms,
            priority,
            filter,
            tag,
            queue,
            session,
            no_ack: options.no_ack,
            exclusive: options.exclusive,
            prefetch,
            unacked: AtomicU32::new(0),
            arguments: options.arguments,
            partition: None,
        })
    }

    /// This consumer as the part of a super stream consumer that reads partition `index`.
    pub(crate) fn in_partition(self, index: u32) -> Self {
        Consumer { partition: Some(index), ..self }
    }

    /// The super stream partition it reads, if it is part of a super stream consumer.
    pub fn partition(&self) -> Option<u32> {
        self.partition
    }

    /// `x-consumer-timeout` in ms, if the consumer set one.
    pub fn timeout_ms(&self) -> Option<u64> {
        self.timeout_ms
    }

    /// `x-priority` (0 by default).
    pub fn priority(&self) -> i64 {
        self.priority
    }

    /// Whether the consumer wants this message (its tag filter, if any).
    pub fn wants(&self, message: &Message) -> bool {
        self.filter.as_ref().is_none_or(|f| f.matches(message_tag(message)))
    }

    /// Its tag filter, if any.
    pub fn filter(&self) -> Option<&TagFilter> {
        self.filter.as_ref()
    }

    /// The per-consumer prefetch limit it started with (0 = none).
    pub fn prefetch(&self) -> u32 {
        self.prefetch
    }

    /// Whether the consumer filters by tag.
    pub fn filters(&self) -> bool {
        self.filter.is_some()
    }

    /// The consumer tag.
    pub fn tag(&self) -> &ShortString {
        &self.tag
    }

    /// The queue it consumes from.
    pub fn queue(&self) -> &Arc<Queue> {
        &self.queue
    }

    /// The session (channel) it belongs to.
    pub fn session(&self) -> &Arc<dyn DeliveryChannel> {
        &self.session
    }

    /// Whether deliveries are settled on sending.
    pub fn no_ack(&self) -> bool {
        self.no_ack
    }

    /// Whether it holds its queue exclusively.
    pub fn is_exclusive(&self) -> bool {
        self.exclusive
    }

    /// The consume arguments.
    pub fn arguments(&self) -> &FieldTable {
        &self.arguments
    }

    /// Deliveries sent and not yet settled.
    pub fn unacked(&self) -> u32 {
        self.unacked.load(Ordering::Acquire)
    }

    /// Whether the consumer may take one more message now.
    pub(crate) fn has_credit(&self) -> bool {
        if self.no_ack {
            return self.session.flow_active();
        }
        let own = self.prefetch == 0 || self.unacked() < self.prefetch;
        own && self.session.has_credit()
    }

    pub(crate) fn delivered(&self) {
        if !self.no_ack {
            self.unacked.fetch_add(1, Ordering::AcqRel);
        }
    }

    pub(crate) fn settled(&self) {
        // Saturating: a recover that raced an ack must not wrap the counter.
        let _ = self.unacked.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }
}
