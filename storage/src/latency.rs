//! Latency histograms for the metrics: fixed buckets of atomic counters, recorded from the
//! hot path without a lock and read whole by a scrape. Storage records its fsyncs here
//! ([`FSYNC_LATENCY`]); the layers above keep histograms of their own of the same type.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the buckets, in seconds (the last one is everything above).
pub const BUCKET_BOUNDS_SECONDS: [f64; 14] =
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];

/// A histogram of durations.
#[derive(Debug)]
pub struct LatencyHistogram {
    buckets: [AtomicU64; BUCKET_BOUNDS_SECONDS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

/// What a histogram holds at one moment: cumulative bucket counts (as Prometheus wants
/// them), the count and the sum.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// For each bound of [`BUCKET_BOUNDS_SECONDS`], how many were at or below it.
    pub cumulative: Vec<u64>,
    /// How many were recorded.
    pub count: u64,
    /// Their sum, in seconds.
    pub sum_seconds: f64,
}

impl LatencyHistogram {
    /// An empty histogram (usable in a `static`).
    pub const fn new() -> Self {
        LatencyHistogram {
            buckets: [const { AtomicU64::new(0) }; BUCKET_BOUNDS_SECONDS.len()],
            count: AtomicU64::new(0),
            sum_micros: AtomicU64::new(0),
        }
    }

    /// Records one duration.
    pub fn record(&self, took: Duration) {
        let seconds = took.as_secs_f64();
        if let Some(bucket) = BUCKET_BOUNDS_SECONDS.iter().position(|bound| seconds <= *bound) {
            self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add(u64::try_from(took.as_micros()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// The histogram now.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut running = 0;
        let cumulative = self
            .buckets
            .iter()
            .map(|bucket| {
                running += bucket.load(Ordering::Relaxed);
                running
            })
            .collect();
        HistogramSnapshot {
            cumulative,
            count: self.count.load(Ordering::Relaxed),
            sum_seconds: self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6,
        }
    }
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram::new()
    }
}

/// How long the fsyncs of every log of this process take.
pub static FSYNC_LATENCY: LatencyHistogram = LatencyHistogram::new();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_land_in_cumulative_buckets() {
        let histogram = LatencyHistogram::new();
        histogram.record(Duration::from_micros(50));
        histogram.record(Duration::from_millis(3));
        histogram.record(Duration::from_secs(10));
        let snapshot = histogram.snapshot();
        assert_eq!(snapshot.count, 3);
        assert_eq!(snapshot.cumulative[0], 1, "50 µs is within the first bucket");
        assert_eq!(snapshot.cumulative[5], 2, "3 ms is within 5 ms");
        assert_eq!(*snapshot.cumulative.last().expect("buckets"), 2, "10 s is above the last bound");
        assert!((snapshot.sum_seconds - 10.00305).abs() < 1e-6);
    }
}
