//! Counters shared by every task, the latency histogram each consumer keeps, and how the end
//! of a publish is counted ([`PublishTally`]), the same for both engines.

use hdrhistogram::Histogram;
use std::sync::atomic::{AtomicU64, Ordering};

/// Highest latency the histogram records, in microseconds (one hour); larger values are clamped.
const MAX_LATENCY_MICROS: u64 = 3_600_000_000;
/// Significant decimal digits kept by the histogram.
const LATENCY_PRECISION_DIGITS: u8 = 3;

/// One counter on its own cache line, so producers and consumers on different cores do not contend.
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Totals of the run so far, read by the progress line and the end-of-run check.
#[derive(Debug)]
pub struct Counters {
    /// Messages written to the socket.
    pub published: Counter,
    /// Messages the broker confirmed with basic.ack.
    pub confirmed: Counter,
    /// Messages the broker refused with basic.nack.
    pub nacked: Counter,
    /// Deliveries received by consumers.
    pub consumed: Counter,
    /// Deliveries flagged as redelivered.
    pub redelivered: Counter,
    /// Per queue, by the index of the queue the producer addressed: messages confirmed (without
    /// confirms: published). With a fanout exchange every message is counted on its first queue only.
    accepted_by_queue: Vec<Counter>,
    /// Per consumer, by consumer id: deliveries received.
    consumed_by_consumer: Vec<Counter>,
}

/// A snapshot of [`Counters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub published: u64,
    pub confirmed: u64,
    pub nacked: u64,
    pub consumed: u64,
    pub redelivered: u64,
}

impl Counters {
    pub fn new(queues: usize, consumers: usize) -> Self {
        Counters {
            published: Counter::default(),
            confirmed: Counter::default(),
            nacked: Counter::default(),
            consumed: Counter::default(),
            redelivered: Counter::default(),
            accepted_by_queue: (0..queues).map(|_| Counter::default()).collect(),
            consumed_by_consumer: (0..consumers).map(|_| Counter::default()).collect(),
        }
    }

    /// Counts `n` deliveries to consumer `consumer`.
    pub fn delivered_n(&self, consumer: usize, n: u64) {
        self.consumed.add(n);
        if let Some(counter) = self.consumed_by_consumer.get(consumer) {
            counter.add(n);
        }
    }

    /// Accepted messages per addressed queue.
    pub fn accepted_by_queue(&self) -> Vec<u64> {
        self.accepted_by_queue.iter().map(Counter::get).collect()
    }

    /// Deliveries per consumer.
    pub fn consumed_by_consumer(&self) -> Vec<u64> {
        self.consumed_by_consumer.iter().map(Counter::get).collect()
    }

    pub fn totals(&self) -> Totals {
        Totals {
            published: self.published.get(),
            confirmed: self.confirmed.get(),
            nacked: self.nacked.get(),
            consumed: self.consumed.get(),
            redelivered: self.redelivered.get(),
        }
    }
}

/// How one publish ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Written to the socket; confirms are off.
    Sent,
    /// Confirmed by the broker (basic.ack).
    Acked,
    /// Refused by the broker (basic.nack).
    Nacked,
}

/// A producer's settled publishes not yet added to the shared [`Counters`]: engines that settle
/// many publishes at once (a multiple basic.ack, a written batch) add them up here and
/// [`flush`](PublishTally::flush) once.
#[derive(Debug)]
pub struct PublishTally {
    published: u64,
    confirmed: u64,
    nacked: u64,
    /// Accepted messages by the index of the queue they were addressed to.
    accepted_by_queue: Vec<u64>,
}

impl PublishTally {
    pub fn new(queues: usize) -> Self {
        PublishTally { published: 0, confirmed: 0, nacked: 0, accepted_by_queue: vec![0; queues] }
    }

    /// Counts one publish, addressed to queue `queue`, that ended with `outcome`: every one is
    /// published; an acked one is confirmed; a sent or acked one is accepted into its queue.
    pub fn settle(&mut self, outcome: Outcome, queue: usize) {
        self.published += 1;
        let accepted = match outcome {
            Outcome::Sent => true,
            Outcome::Acked => {
                self.confirmed += 1;
                true
            }
            Outcome::Nacked => {
                self.nacked += 1;
                false
            }
        };
        if accepted {
            if let Some(count) = self.accepted_by_queue.get_mut(queue) {
                *count += 1;
            }
        }
    }

    /// Adds what was settled since the last flush to `counters`.
    pub fn flush(&mut self, counters: &Counters) {
        for (counter, count) in [
            (&counters.published, &mut self.published),
            (&counters.confirmed, &mut self.confirmed),
            (&counters.nacked, &mut self.nacked),
        ] {
            if *count > 0 {
                counter.add(std::mem::take(count));
            }
        }
        for (counter, count) in counters.accepted_by_queue.iter().zip(&mut self.accepted_by_queue) {
            if *count > 0 {
                counter.add(std::mem::take(count));
            }
        }
    }
}

/// End-to-end latencies in microseconds.
pub struct Latencies(Histogram<u64>);

impl Latencies {
    pub fn new() -> Self {
        match Histogram::new_with_bounds(1, MAX_LATENCY_MICROS, LATENCY_PRECISION_DIGITS) {
            Ok(histogram) => Latencies(histogram),
            Err(error) => unreachable!("constant histogram bounds are valid: {error}"),
        }
    }

    /// Records one message sent at `sent_nanos` and received at `received_nanos` (UNIX epoch).
    pub fn record(&mut self, sent_nanos: u64, received_nanos: u64) {
        let micros = received_nanos.saturating_sub(sent_nanos) / 1_000;
        self.0.saturating_record(micros.clamp(1, MAX_LATENCY_MICROS));
    }

    pub fn merge(&mut self, other: &Latencies) {
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.0.add(&other.0);
    }

    /// Percentiles in milliseconds, or `None` when nothing was recorded.
    pub fn summary(&self) -> Option<LatencySummary> {
        if self.0.is_empty() {
            return None;
        }
        let millis = |micros: u64| micros as f64 / 1_000.0;
        Some(LatencySummary {
            p50_ms: millis(self.0.value_at_quantile(0.50)),
            p95_ms: millis(self.0.value_at_quantile(0.95)),
            p99_ms: millis(self.0.value_at_quantile(0.99)),
            max_ms: millis(self.0.max()),
        })
    }
}

impl Default for Latencies {
    fn default() -> Self {
        Self::new()
    }
}

/// Latency percentiles of a run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatencySummary {
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_in_milliseconds() {
        let mut latencies = Latencies::new();
        for micros in 1..=1000u64 {
            latencies.record(0, micros * 1_000);
        }
        let summary = latencies.summary().unwrap();
        assert!((summary.p50_ms - 0.5).abs() < 0.01);
        assert!((summary.max_ms - 1.0).abs() < 0.01);
        assert!(Latencies::new().summary().is_none());
    }

    #[test]
    fn a_tally_counts_outcomes_like_single_publishes() {
        let counters = Counters::new(2, 0);
        let mut tally = PublishTally::new(2);
        tally.settle(Outcome::Acked, 0);
        tally.settle(Outcome::Nacked, 1);
        tally.settle(Outcome::Sent, 1);
        assert_eq!(counters.totals(), Totals::default(), "nothing counted before the flush");
        tally.flush(&counters);
        tally.flush(&counters);
        let totals = counters.totals();
        assert_eq!((totals.published, totals.confirmed, totals.nacked), (3, 1, 1));
        assert_eq!(counters.accepted_by_queue(), vec![1, 1]);
    }
}
