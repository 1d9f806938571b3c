//! The broker as a whole: `GET /api/overview`, `/api/vhosts[/{vhost}]` (and their creation and
//! deletion). The health checks are in `health.rs`.

use super::{message_stats, Management};
use crate::authorization::{Caller, Rule};
use crate::error::ApiError;
use crate::listing::ListQuery;
use crate::rates::QueueRates;
use crate::route_table::RouteTable;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Json;
use serde_json::{json, Value};
use std::collections::HashMap;
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
        .delete("/api/vhosts/{vhost}", Rule::Administrator, delete_vhost);
}

/// Ready and unacknowledged messages of `vhosts`' queues.
fn queue_totals(vhosts: &[Arc<VirtualHost>]) -> (u64, u64) {
    vhosts.iter().flat_map(|v| v.queues()).fold((0, 0), |(ready, unacked), queue| {
        (ready + u64::from(queue.message_count()), unacked + u64::from(queue.unacked_count()))
    })
}

/// The overview: for a monitor the node's listeners too, as RabbitMQ shows them to monitors.
async fn overview(caller: Caller, State(api): State<Management>) -> Json<Value> {
    let totals = api.figures().current(&api, false).await.totals(&api, &caller);
    let mut overview = json!({
        "management_version": COMPATIBLE_RABBITMQ_VERSION,
        "rabbitmq_version": COMPATIBLE_RABBITMQ_VERSION,
        "product_name": "Warren",
        "product_version": env!("CARGO_PKG_VERSION"),
        "rates_mode": "basic",
        "cluster_name": super::parameters::shown_cluster_name(&api),
        "statistics_db_event_queue": 0,
    });
    if let (Value::Object(fields), Value::Object(figures)) = (&mut overview, totals.overview_fields()) {
        fields.extend(figures);
    }
    if caller.is_monitor() {
        let listeners: Vec<Value> = api
            .listeners()
            .iter()
            .map(|l| json!({"node": api.node(), "protocol": l.protocol, "ip_address": l.addr.ip().to_string(), "port": l.addr.port()}))
            .collect();
        overview["node"] = json!(api.node());
        overview["listeners"] = json!(listeners);
        overview["uptime_ms"] = json!(api.uptime_ms());
    }
    Json(overview)
}

/// Vhost `vhost` as RabbitMQ's API shows it, with its queues' rates from `rates` (the rates of
/// each vhost, added up once for a whole list).
fn vhost_json(api: &Management, vhost: &Arc<VirtualHost>, rates: &HashMap<String, QueueRates>) -> Value {
    let (ready, unacked) = queue_totals(std::slice::from_ref(vhost));
    let sampled = rates.get(vhost.name()).copied().unwrap_or_default();
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
    let rates = api.rates().by_vhost();
    let items: Vec<Value> = api.vhosts(&caller, None)?.iter().map(|v| vhost_json(&api, v, &rates)).collect();
    query.answer(items)
}

async fn vhost(State(api): State<Management>, Path(name): Path<String>) -> Result<Json<Value>, ApiError> {
    Ok(Json(vhost_json(&api, &api.vhost(&name)?, &api.rates().by_vhost())))
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
