//! The end-of-run summary: the numbers, the count check, and their rendering as a table or JSON.

use super::expect::CountCheck;
use super::options::Options;
use super::stats::{LatencySummary, Totals};
use serde::Serialize;

/// The result of a load run. Serialized flat, one JSON object per run, for `--report`.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scenario: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broker: Option<String>,
    /// The client engine of the producers and consumers: raw or lapin.
    pub engine: &'static str,
    pub producers: usize,
    pub consumers: usize,
    pub queues: usize,
    pub size: usize,
    pub exchange_type: &'static str,
    pub queue_type: &'static str,
    /// Where stream consumers started (x-stream-offset); absent for other queue types.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_offset: Option<String>,
    pub durable: bool,
    pub persistent: bool,
    pub confirm: usize,
    pub prefetch: u16,
    pub auto_ack: bool,
    pub multi_ack_every: u64,
    pub rate: u64,
    pub backlog: bool,
    /// Seconds from the first publish until every producer finished (confirms included).
    pub publish_secs: f64,
    /// Seconds from the start of consuming to the last delivery.
    pub consume_secs: f64,
    pub published: u64,
    pub confirmed: u64,
    pub nacked: u64,
    /// Deliveries the consumers should have received (summed over them); absent when nothing sets it.
    pub expected: Option<u64>,
    pub consumed: u64,
    pub redelivered: u64,
    /// Expected but never delivered (with streams: summed over the consumers' shortfalls).
    pub lost: u64,
    /// Delivered beyond what was expected (duplicates, or messages left from earlier runs).
    pub extra: u64,
    pub publish_rate: f64,
    /// Deliveries per second; null when there were no consumers.
    pub consume_rate: Option<f64>,
    pub latency_p50_ms: Option<f64>,
    pub latency_p95_ms: Option<f64>,
    pub latency_p99_ms: Option<f64>,
    pub latency_max_ms: Option<f64>,
}

/// Timings measured by the run, besides the counters.
pub struct Timings {
    pub publish_secs: f64,
    pub consume_secs: f64,
}

impl RunSummary {
    pub fn new(
        options: &Options,
        totals: Totals,
        check: &CountCheck,
        timings: Timings,
        latency: Option<LatencySummary>,
    ) -> Self {
        let rate = |count: u64, secs: f64| if secs > 0.0 { count as f64 / secs } else { 0.0 };
        RunSummary {
            scenario: options.scenario.clone(),
            broker: options.broker.clone(),
            engine: options.engine.name(),
            producers: options.producers,
            consumers: options.consumers,
            queues: options.queues,
            size: options.size,
            exchange_type: options.exchange_type.name(),
            queue_type: options.queue_type.name(),
            stream_offset: options.stream_offset().filter(|_| options.consumers > 0).map(|offset| offset.spec()),
            durable: options.durable_queues(),
            persistent: options.persistent,
            confirm: options.confirm,
            prefetch: options.prefetch,
            auto_ack: options.auto_ack,
            multi_ack_every: options.multi_ack_every,
            rate: options.rate,
            backlog: options.backlog,
            publish_secs: timings.publish_secs,
            consume_secs: timings.consume_secs,
            published: totals.published,
            confirmed: totals.confirmed,
            nacked: totals.nacked,
            expected: check.expected,
            consumed: totals.consumed,
            redelivered: totals.redelivered,
            lost: check.lost,
            extra: check.extra,
            publish_rate: rate(totals.published, timings.publish_secs),
            consume_rate: (options.consumers > 0).then(|| rate(totals.consumed, timings.consume_secs)),
            latency_p50_ms: latency.map(|l| l.p50_ms),
            latency_p95_ms: latency.map(|l| l.p95_ms),
            latency_p99_ms: latency.map(|l| l.p99_ms),
            latency_max_ms: latency.map(|l| l.max_ms),
        }
    }

    /// Why the counts do not add up, if they do not.
    pub fn count_problem(&self) -> Option<String> {
        let expected = self.expected?;
        if self.lost > 0 {
            return Some(format!(
                "LOST {} of {expected} messages: consumed {}, published {}, confirmed {}, nacked {}",
                self.lost, self.consumed, self.published, self.confirmed, self.nacked
            ));
        }
        if self.extra > 0 {
            return Some(format!(
                "consumed {} messages more than the {expected} expected ({} flagged redelivered)",
                self.extra, self.redelivered
            ));
        }
        None
    }

    /// A human-readable table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let labels: Vec<&str> = [self.scenario.as_deref(), self.broker.as_deref()].into_iter().flatten().collect();
        if !labels.is_empty() {
            out.push_str(&format!("{}\n", labels.join(" on ")));
        }
        out.push_str(&format!(
            "{} producer(s), {} consumer(s), {} {} queue(s){}{}, {} exchange, {} B {} messages, prefetch {}, {}{}{}, \
             {} engine\n",
            self.producers,
            self.consumers,
            self.queues,
            self.queue_type,
            if self.durable { " (durable)" } else { "" },
            self.stream_offset.as_ref().map(|offset| format!(" read from {offset}")).unwrap_or_default(),
            self.exchange_type,
            self.size,
            if self.persistent { "persistent" } else { "transient" },
            self.prefetch,
            if self.auto_ack { "auto-ack".to_string() } else { format!("ack every {}", self.multi_ack_every) },
            if self.confirm > 0 { format!(", confirm window {}", self.confirm) } else { String::new() },
            if self.rate > 0 { format!(", {} msg/s per producer", self.rate) } else { String::new() },
            self.engine,
        ));
        out.push_str(&format!("{:<12} {:>14} {:>14} {:>10}\n", "", "messages", "msg/s", "seconds"));
        let row = |name: &str, count: u64, rate: f64, secs: f64| {
            format!("{name:<12} {:>14} {:>14} {secs:>10.2}\n", group(count), group(rate.round() as u64))
        };
        out.push_str(&row("published", self.published, self.publish_rate, self.publish_secs));
        if self.confirm > 0 {
            out.push_str(&format!("{:<12} {:>14}\n", "confirmed", group(self.confirmed)));
            out.push_str(&format!("{:<12} {:>14}\n", "nacked", group(self.nacked)));
        }
        if let Some(consume_rate) = self.consume_rate {
            out.push_str(&row("consumed", self.consumed, consume_rate, self.consume_secs));
        }
        if let Some(expected) = self.expected {
            out.push_str(&format!("{:<12} {:>14}\n", "expected", group(expected)));
        }
        if self.redelivered > 0 {
            out.push_str(&format!("{:<12} {:>14}\n", "redelivered", group(self.redelivered)));
        }
        if let (Some(p50), Some(p95), Some(p99), Some(max)) =
            (self.latency_p50_ms, self.latency_p95_ms, self.latency_p99_ms, self.latency_max_ms)
        {
            out.push_str(&format!("latency ms   p50 {p50:.3}  p95 {p95:.3}  p99 {p99:.3}  max {max:.3}\n"));
        }
        out.push_str(&match self.count_problem() {
            Some(problem) => format!("FAILED: {problem}\n"),
            None => "counts add up\n".to_string(),
        });
        out
    }
}

/// The result of an idle-connections run.
#[derive(Debug, Clone, Serialize)]
pub struct IdleSummary {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scenario: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broker: Option<String>,
    pub connections: u64,
    /// Seconds to open every connection, channel and consumer.
    pub connect_secs: f64,
    pub close_errors: u64,
    pub rss_before_kib: Option<u64>,
    pub rss_after_kib: Option<u64>,
    pub rss_per_connection_kib: Option<f64>,
}

impl IdleSummary {
    pub fn table(&self) -> String {
        let kib = |value: Option<u64>| value.map(group).unwrap_or_else(|| "-".into());
        format!(
            "{} idle connections (channel + consumer each), opened in {:.2} s, {} close errors\n\
             broker RSS before {} KiB, after {} KiB, per connection {} KiB\n",
            self.connections,
            self.connect_secs,
            self.close_errors,
            kib(self.rss_before_kib),
            kib(self.rss_after_kib),
            self.rss_per_connection_kib.map(|value| format!("{value:.1}")).unwrap_or_else(|| "-".into()),
        )
    }
}

/// 1234567 as "1,234,567".
pub fn group(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::group;

    #[test]
    fn groups_thousands() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(1000), "1,000");
        assert_eq!(group(1234567), "1,234,567");
    }
}
