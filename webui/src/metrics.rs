//! Prometheus metrics in the text exposition format (0.0.4), named as RabbitMQ's Prometheus
//! plugin names them where it has a name, so that its dashboards mostly work: `GET /metrics`
//! aggregates over all queues (cheap with 10,000 of them), `GET /metrics/per-object` has one
//! series per queue, streamed as the scraper reads it (with 100,000 queues it is tens of
//! megabytes, never held whole). Warren's own figures are prefixed `warren_`. Both need no
//! login, as RabbitMQ's Prometheus endpoint.
//!
//! The exposition is written here rather than through a metrics registry crate: every figure
//! is read at scrape time from the broker's own counters and state, so a registry would only
//! hold copies of them.

use crate::api::Management;
use crate::authorization::Rule;
use crate::rates::QueueRates;
use crate::route_table::RouteTable;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use std::fmt::Write;
use std::sync::Arc;
use warren_delivery::latency::{HistogramSnapshot, BUCKET_BOUNDS_SECONDS, FSYNC_LATENCY};
use warren_delivery::queue::MessageCounts;
use warren_delivery::Queue;

/// The metrics routes (no authentication, as RabbitMQ's Prometheus endpoint).
pub fn routes(table: &mut RouteTable) {
    table.get("/metrics", Rule::Public, aggregated).get("/metrics/per-object", Rule::Public, per_object);
}

/// The exposition format's content type.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The text of an exposition, family by family.
#[derive(Default)]
struct Exposition {
    text: String,
}

/// A metric family's kind.
#[derive(Clone, Copy)]
enum Kind {
    Gauge,
    Counter,
}

/// A family's `HELP` and `TYPE` lines.
fn family_text(name: &str, kind: Kind, help: &str) -> String {
    let kind = match kind {
        Kind::Gauge => "gauge",
        Kind::Counter => "counter",
    };
    format!("# HELP {name} {help}\n# TYPE {name} {kind}\n")
}

/// One sample's line.
fn sample_text(name: &str, labels: &[(&str, &str)], value: f64) -> String {
    let mut text = String::from(name);
    if !labels.is_empty() {
        text.push('{');
        for (i, (key, label)) in labels.iter().enumerate() {
            if i > 0 {
                text.push(',');
            }
            let _ = write!(text, "{key}=\"{}\"", escape(label));
        }
        text.push('}');
    }
    let _ = writeln!(text, " {value}");
    text
}

impl Exposition {
    fn family(&mut self, name: &str, kind: Kind, help: &str) {
        self.text.push_str(&family_text(name, kind, help));
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.text.push_str(&sample_text(name, labels, value));
    }

    /// A family with one unlabelled sample.
    fn single(&mut self, name: &str, kind: Kind, help: &str, value: f64) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }

    fn histogram(&mut self, name: &str, help: &str, snapshot: &HistogramSnapshot) {
        let _ = writeln!(self.text, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (bound, count) in BUCKET_BOUNDS_SECONDS.iter().zip(&snapshot.cumulative) {
            let _ = writeln!(self.text, "{name}_bucket{{le=\"{bound}\"}} {count}");
        }
        let _ = writeln!(self.text, "{name}_bucket{{le=\"+Inf\"}} {}", snapshot.count);
        let _ = writeln!(self.text, "{name}_sum {}", snapshot.sum_seconds);
        let _ = writeln!(self.text, "{name}_count {}", snapshot.count);
    }
}

/// A label value with backslash, quote and newline escaped, as the format requires.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn respond(exposition: Exposition) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], exposition.text)
}

/// This process's resident memory and open file descriptors, from `/proc` (0 elsewhere).
fn process_figures() -> (f64, f64) {
    let rss_kib = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| status.lines().find_map(|l| l.strip_prefix("VmRSS:").map(str::to_string)))
        .and_then(|value| value.split_whitespace().next().and_then(|kib| kib.parse::<f64>().ok()))
        .unwrap_or(0.0);
    let fds = std::fs::read_dir("/proc/self/fd").map(|entries| entries.count() as f64).unwrap_or(0.0);
    (rss_kib * 1024.0, fds)
}

/// Logins that succeeded and failed (AMQP and management API), as RabbitMQ's plugin names
/// them.
fn login_figures(api: &Management, exposition: &mut Exposition) {
    let throttle = api.broker().access().throttle();
    exposition.single(
        "rabbitmq_auth_attempts_succeeded_total",
        Kind::Counter,
        "Total number of successful authentication attempts",
        throttle.succeeded_total() as f64,
    );
    exposition.single(
        "rabbitmq_auth_attempts_failed_total",
        Kind::Counter,
        "Total number of failed authentication attempts",
        throttle.failed_total() as f64,
    );
}

/// The resource alarms and what they watch, with the names of RabbitMQ's plugin.
fn alarm_figures(api: &Management, exposition: &mut Exposition) {
    let alarms = api.broker().alarms();
    let (usage, state) = (alarms.usage(), alarms.state());
    let flag = |on: bool| if on { 1.0 } else { 0.0 };
    exposition.single(
        "rabbitmq_alarms_memory_used_watermark",
        Kind::Gauge,
        "Whether the memory alarm is in effect (1) or not (0)",
        flag(state.memory),
    );
    exposition.single(
        "rabbitmq_alarms_free_disk_space_watermark",
        Kind::Gauge,
        "Whether the free disk space alarm is in effect (1) or not (0)",
        flag(state.disk),
    );
    exposition.single(
        "rabbitmq_resident_memory_limit_bytes",
        Kind::Gauge,
        "Memory high watermark in bytes",
        usage.memory_limit_bytes as f64,
    );
    exposition.single(
        "rabbitmq_disk_space_available_bytes",
        Kind::Gauge,
        "Disk space available in bytes",
        usage.disk_free_bytes as f64,
    );
    exposition.single(
        "rabbitmq_disk_space_available_limit_bytes",
        Kind::Gauge,
        "Free disk space low watermark in bytes",
        usage.disk_free_limit_bytes as f64,
    );
}

/// Which node and cluster the figures are of, and which build serves them, under RabbitMQ's
/// names and labels: RabbitMQ's dashboards join every query on `rabbitmq_identity_info` to
/// pick a cluster and name its nodes, so without it every panel is empty.
fn identity_figures(api: &Management, exposition: &mut Exposition) {
    let (node, cluster) = (api.node(), api.cluster_name());
    exposition.family("rabbitmq_identity_info", Kind::Gauge, "The node and the cluster these figures are of");
    let identity = [("rabbitmq_node", node.as_str()), ("rabbitmq_cluster", cluster.as_str())];
    exposition.sample("rabbitmq_identity_info", &identity, 1.0);
    exposition.family(
        "rabbitmq_build_info",
        Kind::Gauge,
        "The build serving these figures: the RabbitMQ version it answers as, and its own",
    );
    let build = [
        ("rabbitmq_version", crate::api::COMPATIBLE_RABBITMQ_VERSION),
        ("product_name", "Warren"),
        ("product_version", env!("CARGO_PKG_VERSION")),
    ];
    exposition.sample("rabbitmq_build_info", &build, 1.0);
}

/// The node's counters (see `warren_delivery::node_counters`), under RabbitMQ's names.
const NODE_COUNTERS: [(&str, &str, &warren_delivery::node_counters::Counter); 11] = {
    use warren_delivery::node_counters::*;
    [
        (
            "rabbitmq_connections_opened_total",
            "Client connections accepted since the node started",
            &CONNECTIONS_OPENED,
        ),
        (
            "rabbitmq_connections_closed_total",
            "Client connections ended since the node started, however they ended",
            &CONNECTIONS_CLOSED,
        ),
        ("rabbitmq_channels_opened_total", "Channels opened since the node started", &CHANNELS_OPENED),
        (
            "rabbitmq_channels_closed_total",
            "Channels closed since the node started, their connections' ends included",
            &CHANNELS_CLOSED,
        ),
        (
            "rabbitmq_queues_declared_total",
            "Successful queue declares since the node started, passive ones included",
            &QUEUES_DECLARED,
        ),
        ("rabbitmq_queues_created_total", "Queues created since the node started", &QUEUES_CREATED),
        ("rabbitmq_queues_deleted_total", "Queues deleted since the node started, however they went", &QUEUES_DELETED),
        ("rabbitmq_global_messages_routed_total", "Publishes routed to at least one queue or stream", &MESSAGES_ROUTED),
        (
            "rabbitmq_global_messages_unroutable_dropped_total",
            "Publishes that reached no queue and were dropped (not mandatory)",
            &MESSAGES_UNROUTABLE_DROPPED,
        ),
        (
            "rabbitmq_global_messages_unroutable_returned_total",
            "Publishes that reached no queue and were returned to their publisher (mandatory)",
            &MESSAGES_UNROUTABLE_RETURNED,
        ),
        ("rabbitmq_global_messages_confirmed_total", "Publishes confirmed to their publishers", &MESSAGES_CONFIRMED),
    ]
};

fn node_counter_figures(exposition: &mut Exposition) {
    for (name, help, counter) in NODE_COUNTERS {
        exposition.single(name, Kind::Counter, help, counter.total() as f64);
    }
    exposition.single("rabbitmq_process_max_fds", Kind::Gauge, "Open file descriptors allowed", max_fds());
}

/// The soft limit on open files (`Max open files` in /proc/self/limits); 0 if unknown.
fn max_fds() -> f64 {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|limits| {
            let line = limits.lines().find(|l| l.starts_with("Max open files"))?.to_string();
            line.trim_start_matches("Max open files").split_whitespace().next()?.parse::<f64>().ok()
        })
        .unwrap_or(0.0)
}

/// The figures of the whole node: connections, channels, consumers, queues and their
/// messages, message counters, memory, disk, delayed messages and the latency histograms.
fn node_figures(api: &Management, exposition: &mut Exposition) {
    let broker = api.broker();
    let connections = broker.connections().all();
    let channels: Vec<_> = connections.iter().flat_map(|c| c.channels()).collect();
    let consumers: usize = channels.iter().map(|(_, session)| session.consumers().len()).sum();
    let queues: Vec<_> = broker.vhosts().iter().flat_map(|v| v.queues()).collect();
    let ready: u64 = queues.iter().map(|q| u64::from(q.message_count())).sum();
    let unacked: u64 = queues.iter().map(|q| u64::from(q.unacked_count())).sum();
    let disk: u64 = queues.iter().map(|q| q.disk_bytes()).sum();
    let delayed: u64 =
        broker.vhosts().iter().flat_map(|v| v.exchanges()).filter_map(|e| e.delayed().map(|d| d.pending())).sum();
    let (rss, fds) = process_figures();
    let totals = api.rates().totals();
    identity_figures(api, exposition);
    node_counter_figures(exposition);
    exposition.single("rabbitmq_connections", Kind::Gauge, "Connections currently open", connections.len() as f64);
    exposition.single("rabbitmq_channels", Kind::Gauge, "Channels currently open", channels.len() as f64);
    exposition.single("rabbitmq_consumers", Kind::Gauge, "Consumers currently connected", consumers as f64);
    exposition.single("rabbitmq_queues", Kind::Gauge, "Queues available", queues.len() as f64);
    exposition.single(
        "rabbitmq_queue_messages_ready",
        Kind::Gauge,
        "Messages ready to be delivered to consumers",
        ready as f64,
    );
    exposition.single(
        "rabbitmq_queue_messages_unacked",
        Kind::Gauge,
        "Messages delivered to consumers but not yet acknowledged",
        unacked as f64,
    );
    exposition.single(
        "rabbitmq_queue_messages",
        Kind::Gauge,
        "Sum of ready and unacknowledged messages",
        (ready + unacked) as f64,
    );
    counters(exposition, "rabbitmq_global_messages", &totals);
    exposition.single("rabbitmq_process_resident_memory_bytes", Kind::Gauge, "Memory used in bytes", rss);
    exposition.single("rabbitmq_process_open_fds", Kind::Gauge, "Open file descriptors", fds);
    segment_file_figures(exposition);
    alarm_figures(api, exposition);
    login_figures(api, exposition);
    exposition.single(
        "warren_queue_disk_bytes",
        Kind::Gauge,
        "Bytes the queues keep on disk on this node",
        disk as f64,
    );
    exposition.single(
        "warren_deduplicated_messages_total",
        Kind::Counter,
        "Messages dropped by deduplication (their key was seen within the window), and confirmed",
        warren_delivery::dedup_window::dropped_total() as f64,
    );
    exposition.single(
        "warren_delayed_messages",
        Kind::Gauge,
        "Messages delayed exchanges hold until they are due",
        delayed as f64,
    );
    exposition.single(
        "warren_delayed_refired_total",
        Kind::Counter,
        "Due messages of replicated delayed exchanges routed again by a new leader (each may have been routed twice)",
        warren_delivery::exchange::replicated_delays::refired_total() as f64,
    );
    exposition.single(
        "warren_raft_leader_changes_total",
        Kind::Counter,
        "New leaders seen by this node's Raft members (quorum queues, streams, delayed exchanges, metadata) since it started",
        warren_delivery::quorum::leader_changes::leader_changes_total() as f64,
    );
    exposition.single(
        "warren_timers_pending",
        Kind::Gauge,
        "Timers waiting in the broker's wheel (message TTLs: one per queue; queue expiry; delayed messages)",
        broker.pending_timers() as f64,
    );
    exposition.histogram("warren_fsync_seconds", "How long fsyncs of the logs take", &FSYNC_LATENCY.snapshot());
    exposition.histogram(
        "warren_delayed_message_lateness_seconds",
        "How late delayed messages are routed after their due time",
        &warren_delivery::scheduler::FIRING_LATENESS.snapshot(),
    );
    exposition.histogram(
        "warren_confirm_latency_seconds",
        "Time from a publish to its publisher confirm",
        &warren_delivery::message_store::CONFIRM_LATENCY.snapshot(),
    );
}

/// The cache of open segment files: how full it is.
fn segment_file_figures(exposition: &mut Exposition) {
    exposition.single(
        "warren_open_segment_files",
        Kind::Gauge,
        "Segment data files open now (durable queues, streams and Raft logs open theirs on use)",
        warren_delivery::open_segment_files() as f64,
    );
    exposition.single(
        "warren_max_open_segment_files",
        Kind::Gauge,
        "Segment data files that may be open at once; the least recently used close first",
        warren_delivery::max_open_segment_files() as f64,
    );
}

/// A per-queue gauge: its name, its help, how to read it.
type QueueGauge = (&'static str, &'static str, fn(&warren_delivery::Queue) -> f64);

/// The message counters a family is made of: its name's middle, its help, its value.
type Counter = (&'static str, &'static str, fn(&MessageCounts) -> u64);

/// The message counters, as RabbitMQ's plugin names them.
const COUNTERS: [Counter; 4] = [
    ("received", "Messages published", |c| c.publish),
    ("delivered", "Messages delivered to consumers and taken by basic.get", |c| c.deliver_get()),
    ("acknowledged", "Messages acknowledged by consumers", |c| c.ack),
    ("redelivered", "Messages delivered again", |c| c.redeliver),
];

/// The message counters of `sampled` as counter families named `{prefix}_..._total`.
fn counters(exposition: &mut Exposition, prefix: &str, sampled: &QueueRates) {
    for (what, help, value) in COUNTERS {
        let name = format!("{prefix}_{what}_total");
        exposition.family(&name, Kind::Counter, help);
        exposition.sample(&name, &[], value(&sampled.counts) as f64);
    }
}

async fn aggregated(State(api): State<Management>) -> impl IntoResponse {
    let mut exposition = Exposition::default();
    node_figures(&api, &mut exposition);
    respond(exposition)
}

/// One family with a sample per queue, each line made when the scraper reaches it.
fn per_queue_family(
    name: String,
    kind: Kind,
    help: &'static str,
    queues: Arc<Vec<(Arc<str>, Arc<Queue>)>>,
    value: impl Fn(&str, &Queue) -> f64 + Send + 'static,
) -> impl Iterator<Item = String> + Send {
    let header = family_text(&name, kind, help);
    let samples = (0..queues.len()).map(move |i| {
        let (vhost, queue) = &queues[i];
        sample_text(&name, &[("vhost", vhost), ("queue", queue.name())], value(vhost, queue))
    });
    std::iter::once(header).chain(samples)
}

/// One series per queue (and the node's figures): for dashboards of few queues. Streamed.
async fn per_object(State(api): State<Management>) -> Response {
    let mut exposition = Exposition::default();
    node_figures(&api, &mut exposition);
    // Each queue's rates are looked up when its line is written: a copy of every queue's
    // rates per scrape would be what a scraper that does not read holds.
    let rates = Arc::clone(api.rates());
    let mut queues: Vec<(Arc<str>, Arc<Queue>)> = Vec::new();
    for vhost in api.broker().vhosts() {
        let name: Arc<str> = vhost.name().into();
        queues.extend(vhost.queues().into_iter().map(|q| (Arc::clone(&name), q)));
    }
    let queues = Arc::new(queues);
    let gauges: [QueueGauge; 4] = [
        ("rabbitmq_detailed_queue_messages_ready", "Messages ready in the queue", |q| f64::from(q.message_count())),
        ("rabbitmq_detailed_queue_messages_unacked", "Messages delivered and not acknowledged", |q| {
            f64::from(q.unacked_count())
        }),
        ("rabbitmq_detailed_queue_consumers", "Consumers of the queue", |q| f64::from(q.consumer_count())),
        ("warren_detailed_queue_disk_bytes", "Bytes the queue keeps on disk on this node", |q| q.disk_bytes() as f64),
    ];
    let gauge_families = gauges.into_iter().flat_map({
        let queues = Arc::clone(&queues);
        move |(name, help, read)| {
            per_queue_family(name.to_string(), Kind::Gauge, help, Arc::clone(&queues), move |_, q| read(q))
        }
    });
    let counter_families = COUNTERS.into_iter().flat_map(move |(what, help, value)| {
        let rates = Arc::clone(&rates);
        let name = format!("rabbitmq_detailed_queue_messages_{what}_total");
        per_queue_family(name, Kind::Counter, help, Arc::clone(&queues), move |vhost, queue| {
            value(&rates.queue(vhost, queue.name()).counts) as f64
        })
    });
    let pieces = std::iter::once(exposition.text).chain(gauge_families).chain(counter_families);
    crate::streamed::text(CONTENT_TYPE, pieces)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        let mut exposition = Exposition::default();
        exposition.family("x", Kind::Gauge, "a gauge");
        exposition.sample("x", &[("queue", "a\"b\\c\nd")], 1.0);
        assert!(exposition.text.contains(r#"x{queue="a\"b\\c\nd"} 1"#), "{}", exposition.text);
    }
}
