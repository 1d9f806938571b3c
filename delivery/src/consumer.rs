//! A consumer: one `basic.consume` subscription, its QoS credit and where its deliveries go.

use crate::queue::Queue;
use crate::session::Session;
use amq_protocol::types::{FieldTable, ShortString};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// One subscription of a channel to a queue.
#[derive(Debug)]
pub struct Consumer {
    tag: ShortString,
    queue: Arc<Queue>,
    session: Arc<Session>,
    no_ack: bool,
    exclusive: bool,
    /// The per-consumer prefetch limit (0 = none), fixed when the consumer starts, as in RabbitMQ.
    prefetch: u32,
    unacked: AtomicU32,
    arguments: FieldTable,
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
        session: Arc<Session>,
        options: ConsumerOptions,
        prefetch: u32,
    ) -> Self {
        Consumer {
            tag,
            queue,
            session,
            no_ack: options.no_ack,
            exclusive: options.exclusive,
            prefetch,
            unacked: AtomicU32::new(0),
            arguments: options.arguments,
        }
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
    pub fn session(&self) -> &Arc<Session> {
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
