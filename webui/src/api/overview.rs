//! The broker as a whole: `GET /api/overview`, `/api/vhosts[/{vhost}]` (and their creation and
//! deletion), and RabbitMQ's health checks
//! `/api/health/checks/port-listener/{port}` and `/api/aliveness-test/{vhost}` (the alarm
//! checks are in `alarms.rs`).

use super::{message_stats, Management};
use crate::authorization::{Caller, ObjectOp, Rule, ALIVENESS_QUEUE};
use crate::error::ApiError;
use crate::listing::ListQuery;
use crate::rates::QueueRates;
use crate::route_table::RouteTable;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::sync::Arc;
use warren_delivery::access::{AccessChange, PermissionSpec};
use warren_delivery::VirtualHost;

/// The RabbitMQ version Warren's API answers as, for tools that check it.
pub const COMPATIBLE_RABBITMQ_VERSION: &str = "3.10.8";

/// The overview routes.
pub(super) fn routes(table: &mut RouteTable) {
    table
        .get("/api/overview", Rule::Management, overview)
        .get("/api/vhosts", Rule::Management, vhosts)
        .get("/api/vhosts/{vhost}", Rule::Vhost, vhost)
        .put("/api/vhosts/{vhost}", Rule::Administrator, put_vhost)
        .delete("/api/vhosts/{vhost}", Rule::Administrator, delete_vhost)
        .get("/api/health/checks/port-listener/{port}", Rule::Management, port_listener)
        .get("/api/aliveness-test/{vhost}", Rule::Object(ObjectOp::AlivenessTest), aliveness);
}

/// Ready and unacknowledged messages of `vhosts`' queues.
fn queue_totals(vhosts: &[Arc<VirtualHost>]) -> (u64, u64) {
    vhosts.iter().flat_map(|v| v.queues()).fold((0, 0), |(ready, unacked), queue| {
        (ready + u64::from(queue.message_count()), unacked + u64::from(queue.unacked_count()))
    })
}

/// The figures of what a caller may see: its vhosts' queues, exchanges and messages, its
/// connections' channels and consumers (all of them for a monitor).
#[derive(Debug, Default)]
pub(crate) struct VisibleTotals {
    pub ready: u64,
    pub unacked: u64,
    pub connections: usize,
    pub channels: usize,
    pub consumers: usize,
    pub exchanges: usize,
    pub queues: usize,
    pub rates: QueueRates,
}

impl VisibleTotals {
    /// What `caller` sees of the broker.
    pub(crate) fn of(api: &Management, caller: &Caller) -> Self {
        let vhosts = api.vhosts(caller, None).unwrap_or_default();
        let (ready, unacked) = queue_totals(&vhosts);
        let connections: Vec<_> = api
            .broker()
            .connections()
            .all()
            .into_iter()
            .filter(|info| caller.sees_connection_of(&info.handshake().user.unwrap_or_default()))
            .collect();
        let channels: Vec<_> = connections.iter().flat_map(|c| c.channels()).collect();
        let rates = if caller.is_monitor() {
            api.rates().totals()
        } else {
            let names: Vec<&str> = vhosts.iter().map(|v| v.name()).collect();
            sum_rates(api, |vhost| names.contains(&vhost))
        };
        VisibleTotals {
            ready,
            unacked,
            connections: connections.len(),
            channels: channels.len(),
            consumers: channels.iter().map(|(_, session)| session.consumers().len()).sum(),
            exchanges: vhosts.iter().map(|v| v.exchanges().len()).sum(),
            queues: vhosts.iter().map(|v| v.queues().len()).sum(),
            rates,
        }
    }
}

/// The rates of the queues of the vhosts `keep` accepts, added up.
fn sum_rates(api: &Management, keep: impl Fn(&str) -> bool) -> QueueRates {
    let rates = api.rates().queues();
    rates.iter().filter(|((vhost, _), _)| keep(vhost)).fold(QueueRates::default(), |total, (_, queue)| QueueRates {
        counts: total.counts.plus(queue.counts),
        rates: total.rates.plus(queue.rates),
    })
}

/// The overview: for a monitor the node's listeners too, as RabbitMQ shows them to monitors.
async fn overview(caller: Caller, State(api): State<Management>) -> Json<Value> {
    let totals = VisibleTotals::of(&api, &caller);
    let mut overview = json!({
        "management_version": COMPATIBLE_RABBITMQ_VERSION,
        "rabbitmq_version": COMPATIBLE_RABBITMQ_VERSION,
        "product_name": "Warren",
        "product_version": env!("CARGO_PKG_VERSION"),
        "rates_mode": "basic",
        "cluster_name": api.cluster.cluster_name(),
        "message_stats": message_stats(&totals.rates),
        "queue_totals": {
            "messages": totals.ready + totals.unacked,
            "messages_ready": totals.ready,
            "messages_unacknowledged": totals.unacked,
        },
        "object_totals": {
            "connections": totals.connections,
            "channels": totals.channels,
            "consumers": totals.consumers,
            "exchanges": totals.exchanges,
            "queues": totals.queues,
        },
        "statistics_db_event_queue": 0,
    });
    if caller.is_monitor() {
        let listeners: Vec<Value> = api
            .listeners()
            .iter()
            .map(|l| json!({"node": api.node(), "protocol": l.protocol, "ip_address": l.addr.ip().to_string(), "port": l.addr.port()}))
            .collect();
        overview["node"] = json!(api.node());
        overview["listeners"] = json!(listeners);
        overview["uptime_ms"] = json!(warren_delivery::scheduler::now_ms().saturating_sub(api.started_at_ms));
    }
    Json(overview)
}

fn vhost_json(api: &Management, vhost: &Arc<VirtualHost>) -> Value {
    let (ready, unacked) = queue_totals(std::slice::from_ref(vhost));
    let sampled = sum_rates(api, |name| name == vhost.name());
    json!({
        "name": vhost.name(),
        "description": api.broker().access().vhost(vhost.name()).map(|v| v.description).unwrap_or_default(),
        "tags": [],
        "default_queue_type": "classic",
        "tracing": false,
        "messages": ready + unacked,
        "messages_ready": ready,
        "messages_unacknowledged": unacked,
        "message_stats": message_stats(&sampled),
    })
}

/// The vhosts `caller` may see.
async fn vhosts(
    caller: Caller,
    State(api): State<Management>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    let items: Vec<Value> = api.vhosts(&caller, None)?.iter().map(|v| vhost_json(&api, v)).collect();
    query.answer(items)
}

async fn vhost(State(api): State<Management>, Path(name): Path<String>) -> Result<Json<Value>, ApiError> {
    Ok(Json(vhost_json(&api, &api.vhost(&name)?)))
}

/// Creates the vhost (or changes its description): 201, or 204 if it existed. As in
/// RabbitMQ, the user who creates a vhost through the API gets every permission in it.
async fn put_vhost(
    caller: Caller,
    State(api): State<Management>,
    Path(name): Path<String>,
    body: Option<Json<Value>>,
) -> Result<StatusCode, ApiError> {
    let existed = api.broker().vhost(&name).is_some();
    let description =
        body.as_ref().and_then(|b| b.get("description")).and_then(Value::as_str).unwrap_or("").to_string();
    api.broker().change_access(AccessChange::PutVhost { name: name.clone(), description }).await?;
    if existed {
        return Ok(StatusCode::NO_CONTENT);
    }
    let grant =
        AccessChange::SetPermissions { vhost: name, user: caller.user, permissions: PermissionSpec::everything() };
    api.broker().change_access(grant).await?;
    Ok(StatusCode::CREATED)
}

/// Deletes the vhost with everything in it; its connections are closed.
async fn delete_vhost(State(api): State<Management>, Path(name): Path<String>) -> Result<StatusCode, ApiError> {
    api.broker().change_access(AccessChange::DeleteVhost { name }).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Healthy if this node listens on `port`; 503 with the ports it listens on otherwise.
async fn port_listener(State(api): State<Management>, Path(port): Path<u16>) -> Response {
    let ports: Vec<u16> = api.listeners().iter().map(|l| l.addr.port()).collect();
    if ports.contains(&port) {
        return Json(json!({ "status": "ok", "port": port })).into_response();
    }
    let body = json!({ "status": "failed", "reason": format!("No active listener on port {port}"), "missing": port, "ports": ports });
    (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
}

/// RabbitMQ's aliveness test: a message through a queue of `vhost` and back.
async fn aliveness(State(api): State<Management>, Path(vhost): Path<String>) -> Result<Response, ApiError> {
    let host = api.vhost(&vhost)?;
    let failed = |why: String| {
        (StatusCode::SERVICE_UNAVAILABLE, Json(json!({ "status": "failed", "reason": why }))).into_response()
    };
    match super::messages::round_trip(&host, ALIVENESS_QUEUE).await {
        Ok(()) => Ok(Json(json!({ "status": "ok" })).into_response()),
        Err(why) => Ok(failed(why)),
    }
}
