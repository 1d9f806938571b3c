//! Churn: how many connections and channels this node has opened and closed, and how many
//! queues were declared, created and deleted here, since the process started (RabbitMQ's
//! `rabbitmq_*_opened_total`, `_closed_total`, `_declared_total`, `_created_total` and
//! `_deleted_total`). A client that reconnects in a loop, or an application that declares a
//! queue per request, shows here long before it shows anywhere else.

use std::sync::atomic::{AtomicU64, Ordering};

/// One churn counter.
#[derive(Debug)]
pub struct Counter(AtomicU64);

impl Counter {
    const fn new() -> Self {
        Counter(AtomicU64::new(0))
    }

    /// Counts one more.
    pub fn add(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
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
