//! Counters of this node since the process started, under the names RabbitMQ's Prometheus
//! plugin gives them: churn (connections and channels opened and closed, queues declared,
//! created and deleted: a client reconnecting in a loop, or an application declaring a queue
//! per request, shows here long before it shows anywhere else) and what became of publishes
//! (routed, dropped or returned as unroutable, confirmed).

use crate::dead_letter::DeathReason;
use crate::queue::QueueType;
use std::sync::atomic::{AtomicU64, Ordering};

/// One counter.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// A counter at 0.
    pub const fn new() -> Self {
        Counter(AtomicU64::new(0))
    }

    /// Counts one more.
    pub fn add(&self) {
        self.add_many(1);
    }

    /// Counts `count` more.
    pub fn add_many(&self, count: u64) {
        if count > 0 {
            self.0.fetch_add(count, Ordering::Relaxed);
        }
    }

    /// The count so far.
    pub fn total(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Client connections accepted.
pub static CONNECTIONS_OPENED: Counter = Counter::new();
/// Client connections ended, however they ended.
pub static CONNECTIONS_CLOSED: Counter = Counter::new();
/// Channels opened.
pub static CHANNELS_OPENED: Counter = Counter::new();
/// Channels closed, by either side or with their connection.
pub static CHANNELS_CLOSED: Counter = Counter::new();
/// Successful `queue.declare`s, passive ones and those of queues that existed included.
pub static QUEUES_DECLARED: Counter = Counter::new();
/// Queues created by a declare.
pub static QUEUES_CREATED: Counter = Counter::new();
/// Queues deleted, however (a delete, auto-delete, `x-expires`, their vhost's deletion).
pub static QUEUES_DELETED: Counter = Counter::new();
/// Publishes routed to at least one queue or stream.
pub static MESSAGES_ROUTED: Counter = Counter::new();
/// Publishes that reached no queue and were dropped (not mandatory).
pub static MESSAGES_UNROUTABLE_DROPPED: Counter = Counter::new();
/// Publishes that reached no queue and were returned (mandatory).
pub static MESSAGES_UNROUTABLE_RETURNED: Counter = Counter::new();
/// Publishes confirmed (acked) to publishers in confirm mode.
pub static MESSAGES_CONFIRMED: Counter = Counter::new();
/// Publishes received from clients, whatever became of them.
pub static MESSAGES_RECEIVED: Counter = Counter::new();
/// Publishes received on channels in confirm mode (their publishers wait for a confirm).
pub static MESSAGES_RECEIVED_CONFIRM: Counter = Counter::new();

/// How a queue treats what it dead-letters (RabbitMQ's `dead_letter_strategy` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadLetterStrategy {
    /// No dead-letter exchange: the message is dropped.
    Disabled,
    /// Published to the dead-letter exchange once, without waiting for its targets.
    AtMostOnce,
    /// Kept until the dead-letter exchange's targets confirm the copy (quorum queues).
    AtLeastOnce,
}

impl DeadLetterStrategy {
    /// Every strategy, in the order of their counters.
    pub const ALL: [DeadLetterStrategy; 3] =
        [DeadLetterStrategy::Disabled, DeadLetterStrategy::AtMostOnce, DeadLetterStrategy::AtLeastOnce];

    /// The label value RabbitMQ gives it.
    pub fn label(self) -> &'static str {
        match self {
            DeadLetterStrategy::Disabled => "disabled",
            DeadLetterStrategy::AtMostOnce => "at_most_once",
            DeadLetterStrategy::AtLeastOnce => "at_least_once",
        }
    }
}

/// Every reason a message leaves a queue dead, in the order of their counters.
pub const DEATH_REASONS: [DeathReason; 4] =
    [DeathReason::Expired, DeathReason::Rejected, DeathReason::Maxlen, DeathReason::DeliveryLimit];

/// What the queues of one type (RabbitMQ's `queue_type` label) delivered and dead-lettered on
/// this node, kept whatever becomes of the queues (the sum over live queues would drop when
/// one is deleted, and a counter must not).
#[derive(Debug)]
pub struct QueueTypeCounters {
    /// Deliveries to consumers that ack.
    pub delivered_consume_manual_ack: Counter,
    /// Deliveries to no-ack consumers.
    pub delivered_consume_auto_ack: Counter,
    /// `basic.get` results to be acked.
    pub delivered_get_manual_ack: Counter,
    /// `basic.get` results taken with no-ack.
    pub delivered_get_auto_ack: Counter,
    /// `basic.get`s that found the queue empty.
    pub get_empty: Counter,
    /// Deliveries (to consumers) of messages delivered before.
    pub redelivered: Counter,
    /// Deliveries acked.
    pub acknowledged: Counter,
    /// Messages that left dead, by strategy then reason ([`DeadLetterStrategy::ALL`],
    /// [`DEATH_REASONS`]).
    dead_lettered: [[Counter; DEATH_REASONS.len()]; DeadLetterStrategy::ALL.len()],
    /// Dead-letter copies that every target confirmed (at-least-once).
    pub dead_lettered_confirmed: Counter,
}

impl QueueTypeCounters {
    const fn new() -> Self {
        const fn reasons() -> [Counter; DEATH_REASONS.len()] {
            [Counter::new(), Counter::new(), Counter::new(), Counter::new()]
        }
        QueueTypeCounters {
            delivered_consume_manual_ack: Counter::new(),
            delivered_consume_auto_ack: Counter::new(),
            delivered_get_manual_ack: Counter::new(),
            delivered_get_auto_ack: Counter::new(),
            get_empty: Counter::new(),
            redelivered: Counter::new(),
            acknowledged: Counter::new(),
            dead_lettered: [reasons(), reasons(), reasons()],
            dead_lettered_confirmed: Counter::new(),
        }
    }

    /// Every delivery and get.
    pub fn delivered(&self) -> u64 {
        [
            &self.delivered_consume_manual_ack,
            &self.delivered_consume_auto_ack,
            &self.delivered_get_manual_ack,
            &self.delivered_get_auto_ack,
        ]
        .iter()
        .map(|counter| counter.total())
        .sum()
    }

    /// Counts a message that left dead for `reason`, handled by `strategy`.
    pub fn dead_lettered(&self, strategy: DeadLetterStrategy, reason: DeathReason) {
        self.dead_lettered_counter(strategy, reason).add();
    }

    /// The counter of messages that left dead for `reason`, handled by `strategy`.
    pub fn dead_lettered_counter(&self, strategy: DeadLetterStrategy, reason: DeathReason) -> &Counter {
        let strategy = DeadLetterStrategy::ALL.iter().position(|s| *s == strategy).unwrap_or(0);
        let reason = DEATH_REASONS.iter().position(|r| *r == reason).unwrap_or(0);
        &self.dead_lettered[strategy][reason]
    }
}

/// The counters of each queue type, in [`QueueType::ALL`]'s order.
static BY_QUEUE_TYPE: [QueueTypeCounters; 3] =
    [QueueTypeCounters::new(), QueueTypeCounters::new(), QueueTypeCounters::new()];

/// The counters of the queues of type `queue_type`.
pub fn of_queue_type(queue_type: QueueType) -> &'static QueueTypeCounters {
    let index = QueueType::ALL.iter().position(|t| *t == queue_type).unwrap_or(0);
    &BY_QUEUE_TYPE[index]
}
