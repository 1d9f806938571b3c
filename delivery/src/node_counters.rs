//! Counters of this node since the process started, under the names RabbitMQ's Prometheus
//! plugin gives them: churn (connections and channels opened and closed, queues declared,
//! created and deleted: a client reconnecting in a loop, or an application declaring a queue
//! per request, shows here long before it shows anywhere else) and what became of publishes
//! (routed, dropped or returned as unroutable, confirmed).

use std::sync::atomic::{AtomicU64, Ordering};

/// One counter.
#[derive(Debug)]
pub struct Counter(AtomicU64);

impl Counter {
    const fn new() -> Self {
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
