//! The queue arguments a quorum queue's state machine obeys. The queue layer parses the
//! arguments and builds these from them; they come with the queue's definition, not from the
//! log, so every replica must be built with the same ones. What policies change of them
//! ([`PolicySettings`]) does come from the log (`Op::ApplyPolicy`, from machine version 2):
//! every replica applies a policy change at the same entry, and a snapshot keeps it.

use crate::dedup_window::DedupSettings;
use crate::overflow::Overflow;
use serde::{Deserialize, Serialize};

/// `x-dead-letter-strategy` of a quorum queue: when a dead-lettered message leaves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum DeadLetterStrategy {
    /// At once: if the dead-letter target never gets it, it is lost.
    #[default]
    AtMostOnce,
    /// Once the dead-letter target confirmed it; RabbitMQ's rule applies: only with
    /// `x-overflow: reject-publish`, else at-most-once.
    AtLeastOnce,
}

/// `x-delivery-limit` when the queue does not set one: RabbitMQ 4's default.
pub const DEFAULT_DELIVERY_LIMIT: u32 = 20;

/// What the state machine needs of the queue's arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `x-max-priority` (an extension on quorum queues): strict levels 0..=max.
    pub max_priority: Option<u8>,
    /// What policies may change: TTL, length limits, overflow, dead-lettering, delivery limit.
    pub policy: PolicySettings,
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
        let policy = &self.policy;
        policy.dead_letter
            && policy.dead_letter_strategy == DeadLetterStrategy::AtLeastOnce
            && policy.overflow == Overflow::RejectPublish
    }

    /// The pending set of a replicated delayed exchange: each message is held for its
    /// `x-delay`, then handed on at least once (dead-lettered, in the state's terms, and kept
    /// until the exchange's routing confirmed it).
    pub fn delayed_exchange() -> Self {
        let policy = PolicySettings {
            dead_letter: true,
            dead_letter_strategy: DeadLetterStrategy::AtLeastOnce,
            overflow: Overflow::RejectPublish,
            ..PolicySettings::default()
        };
        Settings { policy, ttl_from_delay: true, ..Settings::default() }
    }
}

/// What a queue declared with no arguments gets.
impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_priority: None,
            policy: PolicySettings::default(),
            single_active_consumer: false,
            deduplication: None,
            ttl_from_delay: false,
        }
    }
}

/// The part of [`Settings`] that policies and operator policies may change: the queue's own
/// arguments merged with the policies that apply, as the queue layer resolves them. The group's
/// leader proposes them when they change, so that every replica switches at the same entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicySettings {
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
}

/// No limits, no dead-lettering, RabbitMQ 4's delivery limit.
impl Default for PolicySettings {
    fn default() -> Self {
        PolicySettings {
            message_ttl_ms: None,
            max_length: None,
            max_length_bytes: None,
            overflow: Overflow::default(),
            dead_letter: false,
            dead_letter_strategy: DeadLetterStrategy::default(),
            delivery_limit: DEFAULT_DELIVERY_LIMIT,
        }
    }
}
