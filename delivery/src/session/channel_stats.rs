//! A channel's message counters, as RabbitMQ's Prometheus plugin counts them per channel:
//! bumped by the channel and its session where messages pass, read by the metrics.

use crate::node_counters::Counter;

/// What one channel published, was confirmed, was delivered and acked, since it opened.
#[derive(Debug, Default)]
pub struct ChannelStats {
    /// Messages published on it.
    pub published: Counter,
    /// Its publishes confirmed to it.
    pub confirmed: Counter,
    /// Its mandatory publishes returned as unroutable.
    pub unroutable_returned: Counter,
    /// Its publishes dropped as unroutable.
    pub unroutable_dropped: Counter,
    /// Deliveries to its consumers that ack.
    pub delivered_ack: Counter,
    /// Deliveries to its no-ack consumers.
    pub delivered_no_ack: Counter,
    /// Its `basic.get` results to be acked.
    pub get_ack: Counter,
    /// Its `basic.get` results taken with no-ack.
    pub get_no_ack: Counter,
    /// Its `basic.get`s that found the queue empty.
    pub get_empty: Counter,
    /// Deliveries to its consumers of messages delivered before.
    pub redelivered: Counter,
    /// Deliveries it acked.
    pub acked: Counter,
}

impl ChannelStats {
    /// Whether it ever published (RabbitMQ counts such a channel as a publisher).
    pub fn is_publisher(&self) -> bool {
        self.published.total() > 0
    }
}
