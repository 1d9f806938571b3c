//! What applying a command asks of the world: deliveries and dead-letterings. Every replica
//! computes the same effects; only the leader that appended the entry acts on them.

use super::command::{ConsumerId, MessageId};
use crate::dead_letter::DeathReason;

/// One thing the leader must do after applying an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Send message `id` (body read from the log at that index) to `consumer`.
    Deliver {
        /// To whom.
        consumer: ConsumerId,
        /// Which message.
        id: MessageId,
        /// Failed deliveries so far (`x-delivery-count`).
        delivery_count: u32,
        /// Whether it was delivered before (`redelivered`).
        redelivered: bool,
    },
    /// Publish message `id` to the dead-letter exchange. It has left the queue, or, with
    /// `confirm` (at-least-once), leaves once [`super::Op::DeadLettered`] says the target
    /// confirmed it.
    DeadLetter {
        /// Which message.
        id: MessageId,
        /// Why (`x-death` reason).
        reason: DeathReason,
        /// Whether the queue waits for the target's confirm.
        confirm: bool,
    },
    /// With `x-single-active-consumer`: `consumer` became (or stopped being) the active one.
    ConsumerActive {
        /// Who.
        consumer: ConsumerId,
        /// Whether it is now the active consumer.
        active: bool,
    },
}
