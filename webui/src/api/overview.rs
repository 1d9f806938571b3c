//! The broker as a whole: `GET /api/overview`, `/api/vhosts[/{vhost}]` (and their creation and
//! deletion), and RabbitMQ's health checks
//! `/api/health/checks/port-listener/{port}` and `/api/aliveness-test/{vhost}` (the alarm
//! checks are in `alarms.rs`).

use super::{message_stats, Management};
use crate::auth::Authenticated;
use crate::error::ApiError;
use crate::listing::ListQuery;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};
use warren_delivery::access::AccessChange;
use warren_delivery::VirtualHost;

/// The RabbitMQ version Warren's API answers as, for tools that check it.
pub const COMPATIBLE_RABBITMQ_VERSION: &str = "3.10.8";

/// The overview routes.
pub(super) fn routes() -> Router<Management> {
    Router::new()
        .route("/api/overview", get(overview))
        .route("/api/vhosts", get(vhosts))
        .route("/api/vhosts/{vhost}", get(vhost).put(put_vhost).delete(delete_vhost))
        .route("/api/health/checks/port-listener/{port}", get(port_listener))
        .route("/api/aliveness-test/{vhost}", get(aliveness))
}

/// Ready and unacknowledged messages of `vhosts`' queues.
fn queue_totals(vhosts: &[std::sync::Arc<VirtualHost>]) -> (u64, u64) {
    vhosts.iter().flat_map(|v| v.queues()).fold((0, 0), |(ready, unacked), queue| {
        (ready + u64::from(queue.message_count()), unacked + u64::from(queue.unacked_count()))
    })
}

async fn overview(_: Authenticated, State(api): State<Management>) -> Json<Value> {
    let broker = api.broker();
    let vhosts = broker.vhosts();
    let (ready, unacked) = queue_totals(&vhosts);
    let connections = broker.connections().all();
    let channels: usize = connections.iter().map(|c| c.channels().len()).sum();
    let consumers: usize =
        connections.iter().flat_map(|c| c.channels()).map(|(_, session)| session.consumers().len()).sum();
    let exchanges: usize = vhosts.iter().map(|v| v.exchanges().len()).sum();
    let queues: usize = vhosts.iter().map(|v| v.queues().len()).sum();
    let listeners: Vec<Value> = api
        .listeners()
        .iter()
        .map(|l| json!({"node": api.node(), "protocol": l.protocol, "ip_address": l.addr.ip().to_string(), "port": l.addr.port()}))
        .collect();
    Json(json!({
        "management_version": COMPATIBLE_RABBITMQ_VERSION,
        "rabbitmq_version": COMPATIBLE_RABBITMQ_VERSION,
        "product_name": "Warren",
        "product_version": env!("CARGO_PKG_VERSION"),
        "rates_mode": "basic",
        "cluster_name": api.cluster.cluster_name(),
        "node": api.node(),
        "message_stats": message_stats(&api.rates().totals()),
        "queue_totals": { "messages": ready + unacked, "messages_ready": ready, "messages_unacknowledged": unacked },
        "object_totals": {
            "connections": connections.len(),
            "channels": channels,
            "consumers": consumers,
            "exchanges": exchanges,
            "queues": queues,
        },
        "listeners": listeners,
        "statistics_db_event_queue": 0,
        "uptime_ms": warren_delivery::scheduler::now_ms().saturating_sub(api.started_at_ms),
    }))
}

fn vhost_json(api: &Management, vhost: &std::sync::Arc<VirtualHost>) -> Value {
    let (ready, unacked) = queue_totals(std::slice::from_ref(vhost));
    let rates = api.rates().queues();
    let sampled = rates.iter().filter(|((v, _), _)| v == vhost.name()).fold(
        crate::rates::QueueRates::default(),
        |total, (_, queue)| crate::rates::QueueRates {
            counts: total.counts.plus(queue.counts),
            rates: total.rates.plus(queue.rates),
        },
    );
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

async fn vhosts(
    _: Authenticated,
    State(api): State<Management>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    let items = api.broker().vhosts().iter().map(|v| vhost_json(&api, v)).collect();
    Ok(Json(query.apply(items)?))
}

async fn vhost(
    who: Authenticated,
    State(api): State<Management>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(vhost_json(&api, &api.vhost(&who, &name)?)))
}

/// Creates the vhost (or changes its description): 201, or 204 if it existed.
async fn put_vhost(
    who: Authenticated,
    State(api): State<Management>,
    Path(name): Path<String>,
    body: Option<Json<Value>>,
) -> Result<StatusCode, ApiError> {
    who.require_administrator()?;
    let existed = api.broker().vhost(&name).is_some();
    let description =
        body.as_ref().and_then(|b| b.get("description")).and_then(Value::as_str).unwrap_or("").to_string();
    api.broker().change_access(AccessChange::PutVhost { name, description }).await?;
    Ok(if existed { StatusCode::NO_CONTENT } else { StatusCode::CREATED })
}

/// Deletes the vhost with everything in it; its connections are closed.
async fn delete_vhost(
    who: Authenticated,
    State(api): State<Management>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    who.require_administrator()?;
    api.broker().change_access(AccessChange::DeleteVhost { name }).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Healthy if this node listens on `port`; 503 with the ports it listens on otherwise.
async fn port_listener(_: Authenticated, State(api): State<Management>, Path(port): Path<u16>) -> Response {
    let ports: Vec<u16> = api.listeners().iter().map(|l| l.addr.port()).collect();
    if ports.contains(&port) {
        return Json(json!({ "status": "ok", "port": port })).into_response();
    }
    let body = json!({ "status": "failed", "reason": format!("No active listener on port {port}"), "missing": port, "ports": ports });
    (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
}

/// RabbitMQ's aliveness test: a message through a queue of `vhost` and back.
async fn aliveness(
    who: Authenticated,
    State(api): State<Management>,
    Path(vhost): Path<String>,
) -> Result<Response, ApiError> {
    let host = api.vhost(&who, &vhost)?;
    let failed = |why: String| {
        (StatusCode::SERVICE_UNAVAILABLE, Json(json!({ "status": "failed", "reason": why }))).into_response()
    };
    match super::messages::round_trip(&host, "aliveness-test").await {
        Ok(()) => Ok(Json(json!({ "status": "ok" })).into_response()),
        Err(why) => Ok(failed(why)),
    }
}
