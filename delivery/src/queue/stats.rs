//! A queue's message counters, for the management API and the metrics: relaxed atomics
//! bumped where messages pass (publish, deliver, get, ack), read by whoever samples them.
//! Rates are the sampler's business (`warren-webui`), not the hot path's.

use crate::node_counters::QueueTypeCounters;
use std::sync::atomic::{AtomicU64, Ordering};

/// The counters of one queue, since it was created (or recovered) on this node.
#[derive(Debug)]
pub struct QueueStats {
    /// The node's counters of its queue type, which count with it.
    by_type: &'static QueueTypeCounters,
    publish: AtomicU64,
    deliver: AtomicU64,
    deliver_no_ack: AtomicU64,
    get: AtomicU64,
    get_no_ack: AtomicU64,
    ack: AtomicU64,
    redeliver: AtomicU64,
}

/// The counters' values at one moment, with RabbitMQ's names for them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MessageCounts {
    /// Messages published to the queue.
    pub publish: u64,
    /// Deliveries to consumers that ack.
    pub deliver: u64,
    /// Deliveries to no-ack consumers.
    pub deliver_no_ack: u64,
    /// `basic.get` results that are to be acked.
    pub get: u64,
    /// `basic.get` results taken with no-ack.
    pub get_no_ack: u64,
    /// Deliveries acked.
    pub ack: u64,
    /// Deliveries of messages delivered before.
    pub redeliver: u64,
}

impl MessageCounts {
    /// Every delivery and get together (RabbitMQ's `deliver_get`).
    pub fn deliver_get(&self) -> u64 {
        self.deliver + self.deliver_no_ack + self.get + self.get_no_ack
    }

    /// The sum of `self` and `other`, field by field.
    pub fn plus(self, other: MessageCounts) -> MessageCounts {
        MessageCounts {
            publish: self.publish + other.publish,
            deliver: self.deliver + other.deliver,
            deliver_no_ack: self.deliver_no_ack + other.deliver_no_ack,
            get: self.get + other.get,
            get_no_ack: self.get_no_ack + other.get_no_ack,
            ack: self.ack + other.ack,
            redeliver: self.redeliver + other.redeliver,
        }
    }
}

fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

impl QueueStats {
    /// The counters of a new queue of type `queue_type`, all 0.
    pub(crate) fn new(queue_type: super::QueueType) -> Self {
        let zero = || AtomicU64::new(0);
        QueueStats {
            by_type: crate::node_counters::of_queue_type(queue_type),
            publish: zero(),
            deliver: zero(),
            deliver_no_ack: zero(),
            get: zero(),
            get_no_ack: zero(),
            ack: zero(),
            redeliver: zero(),
        }
    }

    /// The node's counters of its queue type.
    pub fn of_type(&self) -> &'static QueueTypeCounters {
        self.by_type
    }

    /// A message was published to the queue.
    pub(crate) fn published(&self) {
        bump(&self.publish, 1);
    }

    /// A message went to a consumer.
    pub(crate) fn delivered(&self, no_ack: bool, redelivered: bool) {
        bump(if no_ack { &self.deliver_no_ack } else { &self.deliver }, 1);
        let by_type = self.by_type;
        if no_ack { &by_type.delivered_consume_auto_ack } else { &by_type.delivered_consume_manual_ack }.add();
        if redelivered {
            bump(&self.redeliver, 1);
            by_type.redelivered.add();
        }
    }

    /// A message was taken by `basic.get`.
    pub(crate) fn got(&self, no_ack: bool) {
        bump(if no_ack { &self.get_no_ack } else { &self.get }, 1);
        if no_ack { &self.by_type.delivered_get_auto_ack } else { &self.by_type.delivered_get_manual_ack }.add();
    }

    /// `count` deliveries were acked.
    pub(crate) fn acked(&self, count: usize) {
        bump(&self.ack, count as u64);
        self.by_type.acknowledged.add_many(count as u64);
    }

    /// The counters now.
    pub fn counts(&self) -> MessageCounts {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        MessageCounts {
            publish: read(&self.publish),
            deliver: read(&self.deliver),
            deliver_no_ack: read(&self.deliver_no_ack),
            get: read(&self.get),
            get_no_ack: read(&self.get_no_ack),
            ack: read(&self.ack),
            redeliver: read(&self.redeliver),
        }
    }
}
