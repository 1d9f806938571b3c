//! Stream consumers and consumer groups: `GET /api/stream/consumers` in the shape of
//! RabbitMQ's stream plugin (a consumer's offset and lag), and Warren's
//! `GET /api/stream/groups`: each consumer group of each stream (per partition of a super
//! stream) with its committed offset, the stream's last offset, its lag in messages and its
//! consumers. The lag metric (`warren_stream_group_offset_lag`) reads the same rows.

use super::connections::{channel_details, channels_of, visible_connections};
use super::Management;
use crate::authorization::{Caller, Rule};
use crate::error::ApiError;
use crate::listing::ListQuery;
use crate::route_table::RouteTable;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use warren_delivery::exchange::Destination;
use warren_delivery::stream::{GroupLag, StreamConsumer};
use warren_delivery::SessionId;
use warren_delivery::{Queue, VirtualHost};

/// The stream consumer and group routes.
pub(super) fn routes(table: &mut RouteTable) {
    table
        .get("/api/stream/consumers", Rule::Management, list_consumers)
        .get("/api/stream/consumers/{vhost}", Rule::Vhost, list_vhost_consumers)
        .get("/api/stream/groups", Rule::Management, list_groups)
        .get("/api/stream/groups/{vhost}", Rule::Vhost, list_vhost_groups)
        .get("/api/stream/groups/{vhost}/{name}", Rule::Vhost, list_stream_groups);
}

/// Where a stream stands among super streams: the one it is a partition of, and its place.
#[derive(Debug, Clone)]
pub(crate) struct Partition {
    pub super_stream: String,
    pub index: usize,
}

/// A consumer group of one stream (one partition of a super stream), as the API and the
/// metrics show it.
pub(crate) struct GroupRow {
    pub vhost: Arc<str>,
    pub stream: Arc<Queue>,
    pub partition: Option<Partition>,
    pub lag: GroupLag,
}

impl GroupRow {
    /// The stream the metric names: the super stream, for a partition.
    pub fn stream_label(&self) -> &str {
        self.partition.as_ref().map_or(self.stream.name(), |p| p.super_stream.as_str())
    }

    /// The partition the metric names: the partition's stream, empty for a stream alone.
    pub fn partition_label(&self) -> &str {
        if self.partition.is_some() {
            self.stream.name()
        } else {
            ""
        }
    }
}

/// The partitions of the super streams of `vhost`, by stream name.
fn partitions(vhost: &VirtualHost) -> HashMap<String, Partition> {
    let mut found = HashMap::new();
    for exchange in vhost.exchanges() {
        let Some(destinations) = exchange.partitions() else { continue };
        for (index, destination) in destinations.into_iter().enumerate() {
            if let Destination::Queue(stream) = destination {
                found.insert(stream.to_string(), Partition { super_stream: exchange.name().to_string(), index });
            }
        }
    }
    found
}

/// The consumer groups of the streams of `vhost`.
pub(crate) fn group_rows(vhost: &VirtualHost) -> Vec<GroupRow> {
    let partitions = partitions(vhost);
    let name: Arc<str> = vhost.name().into();
    let mut rows = Vec::new();
    for queue in vhost.queues() {
        let Some(stream) = queue.stream() else { continue };
        for lag in stream.consumer_groups() {
            let partition = partitions.get(queue.name()).cloned();
            rows.push(GroupRow { vhost: Arc::clone(&name), stream: Arc::clone(&queue), partition, lag });
        }
    }
    rows
}

/// Each channel's details, by its session (for the consumers of the rows).
fn channels_by_session(api: &Management, caller: &Caller) -> HashMap<SessionId, Value> {
    channels_of(api, visible_connections(api, caller))
        .into_iter()
        .map(|row| (row.session.id(), channel_details(&row.info, row.number)))
        .collect()
}

/// The newest offset of a stream whose next offset is `next`; none while it is empty.
fn last_offset(next: u64) -> Option<u64> {
    next.checked_sub(1)
}

fn consumer_json(consumer: &StreamConsumer, channels: &HashMap<SessionId, Value>) -> Value {
    json!({
        "consumer_tag": consumer.consumer.tag().as_str(),
        "channel_details": channels.get(&consumer.consumer.session().id()).cloned().unwrap_or(Value::Null),
        "offset": consumer.last_delivered,
        "active": consumer.active,
    })
}

fn group_json(row: &GroupRow, consumers: &[StreamConsumer], channels: &HashMap<SessionId, Value>) -> Value {
    let members = consumers.iter().filter(|c| c.group.as_deref() == Some(row.lag.group.as_str()));
    json!({
        "vhost": &*row.vhost,
        "stream": row.stream.name(),
        "super_stream": row.partition.as_ref().map(|p| p.super_stream.as_str()),
        "partition": row.partition.as_ref().map(|p| p.index),
        "group": row.lag.group,
        "committed_offset": row.lag.committed,
        "last_offset": last_offset(row.lag.next),
        "offset_lag": row.lag.lag,
        "consumers": members.map(|c| consumer_json(c, channels)).collect::<Vec<_>>(),
    })
}

/// The groups of `vhosts`; of stream (or super stream) `name` only, if given.
fn groups(api: &Management, caller: &Caller, vhosts: &[Arc<VirtualHost>], name: Option<&str>) -> Vec<Value> {
    let channels = channels_by_session(api, caller);
    let mut items = Vec::new();
    for vhost in vhosts {
        let mut rows = group_rows(vhost);
        rows.retain(|row| name.is_none_or(|name| row.stream.name() == name || row.stream_label() == name));
        rows.sort_by(|a, b| (a.stream.name(), &a.lag.group).cmp(&(b.stream.name(), &b.lag.group)));
        let mut consumers: HashMap<&str, Vec<StreamConsumer>> = HashMap::new();
        for row in &rows {
            let stream = row.stream.name();
            let attached = consumers
                .entry(stream)
                .or_insert_with(|| row.stream.stream().map(|s| s.consumers()).unwrap_or_default());
            items.push(group_json(row, attached, &channels));
        }
    }
    items
}

/// The stream consumers of `vhosts`, as RabbitMQ's `/api/stream/consumers` lists them: each
/// with its last delivered offset and its lag behind the stream's end.
fn consumers(api: &Management, caller: &Caller, vhosts: &[Arc<VirtualHost>]) -> Vec<Value> {
    let channels = channels_by_session(api, caller);
    let mut items = Vec::new();
    for vhost in vhosts {
        for queue in vhost.queues() {
            let Some(stream) = queue.stream() else { continue };
            let next = stream.bounds().1;
            for consumer in stream.consumers() {
                let Some(channel) = channels.get(&consumer.consumer.session().id()) else { continue };
                let lag = consumer.last_delivered.map_or(next, |offset| next.saturating_sub(offset + 1));
                items.push(json!({
                    "queue": { "name": queue.name(), "vhost": vhost.name() },
                    "consumer_tag": consumer.consumer.tag().as_str(),
                    "channel_details": channel,
                    "connection_details": {
                        "name": channel["connection_name"],
                        "peer_host": channel["peer_host"],
                        "peer_port": channel["peer_port"],
                    },
                    "offset": consumer.last_delivered,
                    "offset_lag": lag,
                    "active": consumer.active,
                    "activity_status": if consumer.active { "up" } else { "waiting" },
                    "ack_required": !consumer.consumer.no_ack(),
                    "prefetch_count": consumer.consumer.prefetch(),
                    "properties": { "group": consumer.group },
                }));
            }
        }
    }
    items
}

async fn list_consumers(
    caller: Caller,
    State(api): State<Management>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    let vhosts = api.vhosts(&caller, None)?;
    query.answer(consumers(&api, &caller, &vhosts))
}

async fn list_vhost_consumers(
    caller: Caller,
    State(api): State<Management>,
    Path(vhost): Path<String>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    let vhosts = api.vhosts(&caller, Some(&vhost))?;
    query.answer(consumers(&api, &caller, &vhosts))
}

async fn list_groups(
    caller: Caller,
    State(api): State<Management>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    let vhosts = api.vhosts(&caller, None)?;
    query.answer(groups(&api, &caller, &vhosts, None))
}

async fn list_vhost_groups(
    caller: Caller,
    State(api): State<Management>,
    Path(vhost): Path<String>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    let vhosts = api.vhosts(&caller, Some(&vhost))?;
    query.answer(groups(&api, &caller, &vhosts, None))
}

/// The groups of one stream, or of every partition of a super stream; 404 if `name` is
/// neither.
async fn list_stream_groups(
    caller: Caller,
    State(api): State<Management>,
    Path((vhost, name)): Path<(String, String)>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    let host = api.vhost(&vhost)?;
    let is_stream = host.queue(&name).is_ok_and(|queue| queue.stream().is_some());
    let is_super_stream = host.exchange(&name).is_ok_and(|exchange| exchange.partitions().is_some());
    if !is_stream && !is_super_stream {
        let reason = format!("no stream or super stream '{name}' in vhost '{vhost}'");
        return Err(ApiError::new(axum::http::StatusCode::NOT_FOUND, reason));
    }
    query.answer(groups(&api, &caller, &[host], Some(&name)))
}
