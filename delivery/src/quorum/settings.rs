//! The queue arguments a quorum queue's state machine obeys, taken from the parsed
//! [`QueueArguments`] (parsing stays in `queue::arguments`). They come with the queue's
//! definition, not from the log, so every replica must be built with the same ones.

use crate::dedup_window::DedupSettings;
use crate::overflow::Overflow;
pub use crate::queue::DeadLetterStrategy;
use crate::queue::QueueArguments;

/// `x-delivery-limit` when the queue does not set one: RabbitMQ 4's default.
pub const DEFAULT_DELIVERY_LIMIT: u32 = 20;

/// What the state machine needs of the queue's arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `x-max-priority` (an extension on quorum queues): strict levels 0..=max.
    pub max_priority: Option<u8>,
    /// `x-message-ttl` in ms.
    pub message_ttl_ms: Option<u64>,
    /// `x-max-length`: ready messages kept at most.
    pub max_length: Option<u64>,
    /// `x-max-length-bytes`: ready body bytes kept at most.
    pub max_length_bytes: Option<u64>,
    /// `x-overflow`.
    pub overflow: Overflow,
    /// Whether messages that leave unsettled are dead-lettered (`x-dead-letter-exchange`
    /// is set) rather than dropped.
    pub dead_letter: bool,
    /// `x-dead-letter-strategy`.
    pub dead_letter_strategy: DeadLetterStrategy,
    /// `x-delivery-limit`: failed deliveries allowed; one more and the message goes.
    pub delivery_limit: u32,
    /// `x-single-active-consumer`.
    pub single_active_consumer: bool,
    /// `x-message-deduplication` with its window, if on.
    pub deduplication: Option<DedupSettings>,
    /// Whether a message's TTL is its `x-delay` header (none or under 1: due at once): the
    /// pending set of a replicated delayed exchange, whose messages "expire" when they are due.
    pub ttl_from_delay: bool,
}

impl Settings {
    /// Whether dead-lettered messages stay until the target confirms them.
    pub fn dead_letters_at_least_once(&self) -> bool {
        self.dead_letter
            && self.dead_letter_strategy == DeadLetterStrategy::AtLeastOnce
            && self.overflow == Overflow::RejectPublish
    }
}

impl Settings {
    /// The pending set of a replicated delayed exchange: each message is held for its
    /// `x-delay`, then handed on at least once (dead-lettered, in the state's terms, and kept
    /// until the exchange's routing confirmed it).
    pub fn delayed_exchange() -> Self {
        Settings {
            dead_letter: true,
            dead_letter_strategy: DeadLetterStrategy::AtLeastOnce,
            overflow: Overflow::RejectPublish,
            ttl_from_delay: true,
            ..Settings::default()
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings::from(&QueueArguments::default())
    }
}

impl From<&QueueArguments> for Settings {
    fn from(arguments: &QueueArguments) -> Self {
        Settings {
            max_priority: arguments.max_priority,
            message_ttl_ms: arguments.message_ttl_ms,
            max_length: arguments.max_length,
            max_length_bytes: arguments.max_length_bytes,
            overflow: arguments.overflow,
            dead_letter: arguments.dead_letter_exchange.is_some(),
            dead_letter_strategy: arguments.dead_letter_strategy,
            delivery_limit: arguments
                .delivery_limit
                .map_or(DEFAULT_DELIVERY_LIMIT, |limit| u32::try_from(limit).unwrap_or(u32::MAX)),
            single_active_consumer: arguments.single_active_consumer,
            deduplication: arguments.deduplication(),
            ttl_from_delay: false,
        }
    }
}
