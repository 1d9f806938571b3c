//! Prometheus metrics, with the names, labels and endpoints of RabbitMQ's Prometheus plugin,
//! so that its dashboards and alerts work unchanged:
//!
//! - `GET /metrics`: every family, those of many objects (queues, channels, connections, Raft
//!   members) summed over them (cheap with 10,000 queues);
//! - `GET /metrics/per-object`: the same families with a sample per object, labelled as
//!   RabbitMQ labels them (`vhost` and `queue`, `channel`, `connection`);
//! - `GET /metrics/detailed?family=GROUP&vhost=NAME`: the groups asked for, per object,
//!   prefixed `rabbitmq_detailed_` (`rabbitmq_cluster_` for the cluster-wide groups), only of
//!   the virtual hosts asked for if any.
//!
//! Per-object samples are written as the scraper reads them (with 100,000 queues the text is
//! tens of megabytes, never held whole). Warren's own figures are prefixed `warren_`. No
//! endpoint needs a login, as RabbitMQ's Prometheus endpoint.
//!
//! The exposition is written here rather than through a metrics registry crate: every figure
//! is read at scrape time from the broker's own counters and state, so a registry would only
//! hold copies of them.

mod exposition;
pub mod families;
mod objects;

pub(crate) use objects::ProcessFigures;

use crate::api::Management;
use crate::authorization::Rule;
use crate::route_table::RouteTable;
use axum::extract::{Query, State};
use axum::response::Response;
use exposition::{family_text, histogram_text, push_sample, sample_text, Kind, CONTENT_TYPE};
use families::{Aggregate, Family, Group, Naming, Read, GROUPS};
use objects::Scrape;
use std::sync::Arc;
use warren_delivery::node_counters::{of_queue_type, DeadLetterStrategy};
use warren_delivery::queue::QueueType;

/// The metrics routes (no authentication, as RabbitMQ's Prometheus endpoint).
pub fn routes(table: &mut RouteTable) {
    table.get("/metrics", Rule::Public, aggregated).get("/metrics/per-object", Rule::Public, per_object).get(
        "/metrics/detailed",
        Rule::Public,
        detailed,
    );
}

/// Which endpoint a text is for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    Aggregated,
    PerObject,
    Detailed,
}

impl Endpoint {
    /// The name family `family` of `group` has on this endpoint.
    fn name(self, group: &Group, family: &Family) -> String {
        let prefix = match (group.naming, self) {
            (Naming::Warren, _) => "",
            (Naming::Cluster, _) => "rabbitmq_cluster_",
            (Naming::RabbitMq, Endpoint::Detailed) => "rabbitmq_detailed_",
            (Naming::RabbitMq, _) => "rabbitmq_",
        };
        format!("{prefix}{}", family.name)
    }

    /// Whether it serves `group`.
    fn serves(self, group: &Group) -> bool {
        self == Endpoint::Detailed || group.naming != Naming::Cluster
    }
}

/// The label RabbitMQ gives queues of `queue_type` in its global counters.
fn queue_type_label(queue_type: QueueType) -> &'static str {
    match queue_type {
        QueueType::Classic => "rabbit_classic_queue",
        QueueType::Quorum => "rabbit_quorum_queue",
        QueueType::Stream => "rabbit_stream_queue",
    }
}

/// The protocol label of the global counters (the only protocol so far).
const PROTOCOL: (&str, &str) = ("protocol", "amqp091");

/// The (queue type, dead-letter strategy) series RabbitMQ keeps dead-letter counters for.
const DEAD_LETTER_SERIES: [(QueueType, DeadLetterStrategy); 5] = [
    (QueueType::Classic, DeadLetterStrategy::Disabled),
    (QueueType::Classic, DeadLetterStrategy::AtMostOnce),
    (QueueType::Quorum, DeadLetterStrategy::Disabled),
    (QueueType::Quorum, DeadLetterStrategy::AtMostOnce),
    (QueueType::Quorum, DeadLetterStrategy::AtLeastOnce),
];

/// The samples of a family of the node (one figure, or one per label set), as text.
fn node_samples(name: &str, family: &Family, scrape: &Scrape) -> Option<String> {
    let mut text = String::new();
    match family.read {
        Read::Node(read) => push_sample(&mut text, name, &[], read(&scrape.node)),
        Read::ByProtocol(read) => push_sample(&mut text, name, &[PROTOCOL], read() as f64),
        Read::Clients(read) => push_sample(&mut text, name, &[PROTOCOL], read(&scrape.node)),
        Read::ByQueueType(read) => {
            for queue_type in QueueType::ALL {
                let labels = [PROTOCOL, ("queue_type", queue_type_label(queue_type))];
                push_sample(&mut text, name, &labels, read(of_queue_type(queue_type)) as f64);
            }
        }
        Read::DeadLettered(reason) => {
            for (queue_type, strategy) in DEAD_LETTER_SERIES {
                let no_delivery_limit = queue_type == QueueType::Classic;
                if reason == warren_delivery::dead_letter::DeathReason::DeliveryLimit && no_delivery_limit {
                    continue;
                }
                let labels = [("queue_type", queue_type_label(queue_type)), ("dead_letter_strategy", strategy.label())];
                let value = of_queue_type(queue_type).dead_lettered_counter(strategy, reason).total();
                push_sample(&mut text, name, &labels, value as f64);
            }
        }
        Read::DeadLetteredConfirmed => {
            let labels = [
                ("queue_type", queue_type_label(QueueType::Quorum)),
                ("dead_letter_strategy", DeadLetterStrategy::AtLeastOnce.label()),
            ];
            let value = of_queue_type(QueueType::Quorum).dead_lettered_confirmed.total();
            push_sample(&mut text, name, &labels, value as f64);
        }
        Read::Histogram(read) => text = histogram_text(name, &read()),
        _ => return None,
    }
    Some(text)
}

/// A sample's labels.
type Labels = Vec<(&'static str, String)>;

fn queue_labels(vhost: &str, queue: &str) -> Labels {
    vec![("vhost", vhost.to_string()), ("queue", queue.to_string())]
}

/// How many objects a per-object family has a sample each of; `None` for a family of the
/// node.
fn object_count(family: &Family, scrape: &Scrape) -> Option<usize> {
    Some(match family.read {
        Read::Queue(_) => scrape.queues.len(),
        Read::Channel(_) => scrape.channels.len(),
        Read::Connection(_) => scrape.connections.len(),
        Read::Raft(_) => scrape.raft.len(),
        Read::FollowersBehind => scrape.followers.len(),
        Read::Vhost(_) => scrape.vhosts.len(),
        Read::Exchange(_) => scrape.exchanges.len(),
        Read::StreamGroup(_) => scrape.stream_groups.len(),
        _ => return None,
    })
}

/// The value of object `index` of a per-object family.
fn object_value(family: &Family, scrape: &Scrape, index: usize) -> Option<f64> {
    match family.read {
        Read::Queue(read) => scrape.queues.get(index).map(|(_, queue)| read(queue)),
        Read::Channel(read) => scrape.channels.get(index).map(read),
        Read::Connection(read) => scrape.connections.get(index).map(|connection| read(connection)),
        Read::Raft(read) => scrape.raft.get(index).map(|raft| read(&raft.figures)),
        Read::FollowersBehind => scrape.followers.get(index).map(|follower| follower.behind as f64),
        Read::Vhost(read) => scrape.vhosts.get(index).map(|vhost| read(vhost)),
        Read::Exchange(read) => scrape.exchanges.get(index).map(|(_, exchange)| read(exchange)),
        Read::StreamGroup(read) => scrape.stream_groups.get(index).map(|row| read(&row.lag)),
        _ => None,
    }
}

/// The labels of object `index` of a per-object family, as RabbitMQ labels its kind.
fn object_labels(family: &Family, scrape: &Scrape, index: usize) -> Option<Labels> {
    match family.read {
        Read::Queue(_) => scrape.queues.get(index).map(|(vhost, queue)| queue_labels(vhost, queue.name())),
        Read::Channel(_) => scrape.channels.get(index).map(|channel| vec![("channel", channel.name.clone())]),
        Read::Connection(_) => {
            scrape.connections.get(index).map(|connection| vec![("connection", connection.name.clone())])
        }
        Read::Raft(_) => scrape.raft.get(index).map(|raft| queue_labels(&raft.vhost, &raft.queue)),
        Read::FollowersBehind => scrape.followers.get(index).map(|follower| {
            let mut labels = queue_labels(&follower.vhost, &follower.queue);
            labels.push(("follower", follower.follower.clone()));
            labels
        }),
        Read::Vhost(_) => scrape.vhosts.get(index).map(|vhost| vec![("vhost", vhost.name().to_string())]),
        Read::Exchange(_) => scrape
            .exchanges
            .get(index)
            .map(|(vhost, exchange)| vec![("vhost", vhost.to_string()), ("exchange", exchange.name().to_string())]),
        Read::StreamGroup(_) => scrape.stream_groups.get(index).map(|row| {
            vec![
                ("vhost", row.vhost.to_string()),
                ("stream", row.stream_label().to_string()),
                ("group", row.lag.group.clone()),
                ("partition", row.partition_label().to_string()),
            ]
        }),
        _ => None,
    }
}

/// The text of one family on the aggregated endpoint: objects' figures summed (or averaged).
fn aggregated_family(endpoint: Endpoint, group: &Group, family: &Family, scrape: &Scrape) -> String {
    let name = endpoint.name(group, family);
    let mut text = family_text(&name, family.kind, family.help);
    if let Some(samples) = node_samples(&name, family, scrape) {
        text.push_str(&samples);
        return text;
    }
    let count = object_count(family, scrape).unwrap_or(0);
    if family.aggregate == Aggregate::PerObject {
        for index in 0..count {
            let (Some(labels), Some(value)) =
                (object_labels(family, scrape, index), object_value(family, scrape, index))
            else {
                continue;
            };
            let labels: Vec<(&str, &str)> = labels.iter().map(|(key, value)| (*key, value.as_str())).collect();
            push_sample(&mut text, &name, &labels, value);
        }
        return text;
    }
    let sum: f64 = (0..count).filter_map(|index| object_value(family, scrape, index)).sum();
    let value = match family.aggregate {
        Aggregate::Mean if count > 0 => sum / count as f64,
        _ => sum,
    };
    push_sample(&mut text, &name, &[], value);
    text
}

/// One family's text on a per-object endpoint, a line per object, each written when the
/// scraper reaches it.
fn per_object_family(
    endpoint: Endpoint,
    group: &'static Group,
    family: &'static Family,
    scrape: &Arc<Scrape>,
) -> Box<dyn Iterator<Item = String> + Send> {
    let name = endpoint.name(group, family);
    let header = std::iter::once(family_text(&name, family.kind, family.help));
    if let Some(samples) = node_samples(&name, family, scrape) {
        return Box::new(header.chain(std::iter::once(samples)));
    }
    let scrape = Arc::clone(scrape);
    let count = object_count(family, &scrape).unwrap_or(0);
    let lines = (0..count).filter_map(move |index| {
        let labels = object_labels(family, &scrape, index)?;
        let labels: Vec<(&str, &str)> = labels.iter().map(|(key, value)| (*key, value.as_str())).collect();
        Some(sample_text(&name, &labels, object_value(family, &scrape, index)?))
    });
    Box::new(header.chain(lines))
}

/// RabbitMQ's totals (connections, channels, consumers, queues) and the identity families
/// its dashboards join every query on.
fn totals_and_identity(api: &Management, scrape: &Scrape, with_totals: bool) -> String {
    let mut text = String::new();
    let totals = [
        ("rabbitmq_connections", "Connections currently open", scrape.node.connections),
        ("rabbitmq_channels", "Channels currently open", scrape.node.channels),
        ("rabbitmq_consumers", "Consumers currently connected", scrape.node.consumers),
        ("rabbitmq_queues", "Queues available", scrape.node.queues),
    ];
    for (name, help, value) in totals.into_iter().filter(|_| with_totals) {
        text.push_str(&family_text(name, Kind::Gauge, help));
        push_sample(&mut text, name, &[], value as f64);
    }
    let (node, cluster) = (api.node(), api.cluster_name());
    text.push_str(&family_text("rabbitmq_identity_info", Kind::Gauge, "RabbitMQ node & cluster identity info"));
    push_sample(
        &mut text,
        "rabbitmq_identity_info",
        &[("rabbitmq_node", node.as_str()), ("rabbitmq_cluster", cluster.as_str())],
        1.0,
    );
    text.push_str(&family_text(
        "rabbitmq_build_info",
        Kind::Gauge,
        "The build serving these figures: the RabbitMQ version it answers as, and its own",
    ));
    let build = [
        ("rabbitmq_version", crate::api::COMPATIBLE_RABBITMQ_VERSION),
        ("product_name", "Warren"),
        ("product_version", env!("CARGO_PKG_VERSION")),
    ];
    push_sample(&mut text, "rabbitmq_build_info", &build, 1.0);
    text
}

async fn aggregated(State(api): State<Management>) -> Response {
    let scrape = Scrape::now(&api, &[]);
    let mut text = totals_and_identity(&api, &scrape, true);
    for group in GROUPS.iter().filter(|g| Endpoint::Aggregated.serves(g)) {
        for family in group.families {
            text.push_str(&aggregated_family(Endpoint::Aggregated, group, family, &scrape));
        }
    }
    crate::streamed::text(CONTENT_TYPE, std::iter::once(text))
}

/// The text of `groups` per object, streamed.
fn per_object_text(api: &Management, endpoint: Endpoint, groups: Vec<&'static Group>, scrape: Scrape) -> Response {
    let head = totals_and_identity(api, &scrape, endpoint == Endpoint::PerObject);
    let scrape = Arc::new(scrape);
    let pieces = groups
        .into_iter()
        .flat_map(|group| group.families.iter().map(move |family| (group, family)))
        .flat_map(move |(group, family)| per_object_family(endpoint, group, family, &scrape));
    crate::streamed::text(CONTENT_TYPE, std::iter::once(head).chain(pieces))
}

async fn per_object(State(api): State<Management>) -> Response {
    let scrape = Scrape::now(&api, &[]);
    let groups = GROUPS.iter().filter(|g| Endpoint::PerObject.serves(g)).collect();
    per_object_text(&api, Endpoint::PerObject, groups, scrape)
}

/// `family=` and `vhost=` of a query string, each as often as given.
fn detailed_query(pairs: Vec<(String, String)>) -> (Vec<String>, Vec<String>) {
    let (mut families, mut vhosts) = (Vec::new(), Vec::new());
    for (key, value) in pairs {
        match key.as_str() {
            "family" => families.push(value),
            "vhost" => vhosts.push(value),
            _ => {}
        }
    }
    (families, vhosts)
}

async fn detailed(State(api): State<Management>, Query(pairs): Query<Vec<(String, String)>>) -> Response {
    let (families, vhosts) = detailed_query(pairs);
    let groups = GROUPS.iter().filter(|group| families.iter().any(|name| name == group.name)).collect();
    let scrape = Scrape::now(&api, &vhosts);
    per_object_text(&api, Endpoint::Detailed, groups, scrape)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_name_is_unique_on_each_endpoint() {
        for endpoint in [Endpoint::Aggregated, Endpoint::PerObject, Endpoint::Detailed] {
            let mut names: Vec<String> = GROUPS
                .iter()
                .filter(|g| endpoint.serves(g))
                .flat_map(|g| g.families.iter().map(move |f| endpoint.name(g, f)))
                .collect();
            let count = names.len();
            names.sort();
            names.dedup();
            assert_eq!(names.len(), count, "a name is declared twice");
        }
    }
}
