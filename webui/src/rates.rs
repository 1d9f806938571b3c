//! Message rates, as the API's `message_stats` and the live feed show them: once a second the
//! sampler reads every queue's counters (atomics the hot path bumps), and keeps per queue the
//! counts and their per-second rates, the totals over all queues, and five minutes of the
//! totals' history for the overview's charts. Nothing on the message path waits for it.
//!
//! A queue that has counted nothing is not kept: its counts and rates are the defaults a
//! lookup answers anyway, and a broker holding 100,000 idle queues then samples them without
//! allocating.

use parking_lot::RwLock;
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};
use warren_delivery::queue::MessageCounts;
use warren_delivery::Broker;

/// How often the counters are sampled.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);
/// Samples of the totals kept: five minutes at one a second.
pub const HISTORY_SAMPLES: usize = 300;

/// Per-second rates of the counters of [`MessageCounts`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Serialize)]
pub struct RateSet {
    /// Publishes per second.
    pub publish: f64,
    /// Deliveries and gets per second.
    pub deliver_get: f64,
    /// Deliveries to consumers that ack, per second.
    pub deliver: f64,
    /// Deliveries to no-ack consumers, per second.
    pub deliver_no_ack: f64,
    /// Gets to ack, per second.
    pub get: f64,
    /// No-ack gets, per second.
    pub get_no_ack: f64,
    /// Acks per second.
    pub ack: f64,
    /// Redeliveries per second.
    pub redeliver: f64,
}

impl RateSet {
    fn between(before: &MessageCounts, after: &MessageCounts, seconds: f64) -> RateSet {
        let rate = |a: u64, b: u64| if seconds > 0.0 { b.saturating_sub(a) as f64 / seconds } else { 0.0 };
        RateSet {
            publish: rate(before.publish, after.publish),
            deliver_get: rate(before.deliver_get(), after.deliver_get()),
            deliver: rate(before.deliver, after.deliver),
            deliver_no_ack: rate(before.deliver_no_ack, after.deliver_no_ack),
            get: rate(before.get, after.get),
            get_no_ack: rate(before.get_no_ack, after.get_no_ack),
            ack: rate(before.ack, after.ack),
            redeliver: rate(before.redeliver, after.redeliver),
        }
    }

    /// The sum of `self` and `other`, field by field.
    pub fn plus(self, other: RateSet) -> RateSet {
        RateSet {
            publish: self.publish + other.publish,
            deliver_get: self.deliver_get + other.deliver_get,
            deliver: self.deliver + other.deliver,
            deliver_no_ack: self.deliver_no_ack + other.deliver_no_ack,
            get: self.get + other.get,
            get_no_ack: self.get_no_ack + other.get_no_ack,
            ack: self.ack + other.ack,
            redeliver: self.redeliver + other.redeliver,
        }
    }
}

/// A queue's counters at the last sample, and their rates over the second before.
#[derive(Debug, Default, Clone, Copy)]
pub struct QueueRates {
    /// The counters.
    pub counts: MessageCounts,
    /// Their rates.
    pub rates: RateSet,
}

/// One second of the totals, for the overview's charts.
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct HistoryPoint {
    /// When (ms since the Unix epoch).
    pub at_ms: u64,
    /// Publishes per second.
    pub publish: f64,
    /// Deliveries and gets per second.
    pub deliver_get: f64,
    /// Acks per second.
    pub ack: f64,
    /// Ready messages, all queues.
    pub ready: u64,
    /// Unacknowledged messages, all queues.
    pub unacked: u64,
}

/// Queues by vhost, then by name (nested so that a lookup by `&str` allocates nothing).
type QueuesByVhost = HashMap<String, HashMap<String, QueueRates>>;

#[derive(Debug, Default)]
struct Sampled {
    queues: QueuesByVhost,
    totals: QueueRates,
    history: VecDeque<HistoryPoint>,
    at: Option<Instant>,
}

/// The rates, shared by the API, the feed and the metrics.
#[derive(Debug, Default)]
pub struct Rates {
    sampled: RwLock<Sampled>,
}

impl Rates {
    /// Reads every queue of `broker` now, and updates the rates from the last sample.
    pub fn sample(&self, broker: &Broker) {
        let now = Instant::now();
        let mut queues = QueuesByVhost::new();
        let (mut totals, mut ready, mut unacked) = (QueueRates::default(), 0, 0);
        let sampled = self.sampled.read();
        let seconds = sampled.at.map_or(0.0, |at| now.duration_since(at).as_secs_f64());
        for vhost in broker.vhosts() {
            let before = sampled.queues.get(vhost.name());
            let mut counted = HashMap::new();
            for queue in vhost.queues() {
                ready += u64::from(queue.message_count());
                unacked += u64::from(queue.unacked_count());
                let counts = queue.stats().counts();
                if counts == MessageCounts::default() {
                    continue;
                }
                let rates = match before.and_then(|b| b.get(queue.name())) {
                    Some(before) => RateSet::between(&before.counts, &counts, seconds),
                    None => RateSet::default(),
                };
                totals.counts = totals.counts.plus(counts);
                totals.rates = totals.rates.plus(rates);
                counted.insert(queue.name().to_string(), QueueRates { counts, rates });
            }
            if !counted.is_empty() {
                queues.insert(vhost.name().to_string(), counted);
            }
        }
        drop(sampled);
        let point = HistoryPoint {
            at_ms: warren_delivery::clock::now_ms(),
            publish: totals.rates.publish,
            deliver_get: totals.rates.deliver_get,
            ack: totals.rates.ack,
            ready,
            unacked,
        };
        let mut sampled = self.sampled.write();
        sampled.queues = queues;
        sampled.totals = totals;
        sampled.at = Some(now);
        if sampled.history.len() == HISTORY_SAMPLES {
            sampled.history.pop_front();
        }
        sampled.history.push_back(point);
    }

    /// Queue `name` of `vhost` at the last sample.
    pub fn queue(&self, vhost: &str, name: &str) -> QueueRates {
        let sampled = self.sampled.read();
        sampled.queues.get(vhost).and_then(|queues| queues.get(name)).copied().unwrap_or_default()
    }

    /// The queues of each vhost together at the last sample, by vhost.
    pub fn by_vhost(&self) -> HashMap<String, QueueRates> {
        let sampled = self.sampled.read();
        let total = |queues: &HashMap<String, QueueRates>| {
            queues.values().fold(QueueRates::default(), |total, queue| QueueRates {
                counts: total.counts.plus(queue.counts),
                rates: total.rates.plus(queue.rates),
            })
        };
        sampled.queues.iter().map(|(vhost, queues)| (vhost.clone(), total(queues))).collect()
    }

    /// All queues together at the last sample.
    pub fn totals(&self) -> QueueRates {
        self.sampled.read().totals
    }

    /// The totals of the last five minutes, oldest first.
    pub fn history(&self) -> Vec<HistoryPoint> {
        self.sampled.read().history.iter().copied().collect()
    }

    /// The newest history point, if any.
    pub fn latest(&self) -> Option<HistoryPoint> {
        self.sampled.read().history.back().copied()
    }
}

/// Samples `broker` every [`SAMPLE_INTERVAL`] until `shutdown` turns true.
pub async fn run(rates: Arc<Rates>, broker: Arc<Broker>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(SAMPLE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => rates.sample(&broker),
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_differences_over_time() {
        let before = MessageCounts { publish: 10, ack: 4, ..MessageCounts::default() };
        let after = MessageCounts { publish: 30, ack: 4, deliver: 6, ..MessageCounts::default() };
        let rates = RateSet::between(&before, &after, 2.0);
        assert_eq!((rates.publish, rates.ack, rates.deliver, rates.deliver_get), (10.0, 0.0, 3.0, 3.0));
        assert_eq!(RateSet::between(&before, &after, 0.0), RateSet::default(), "no time passed: no rate");
    }
}
