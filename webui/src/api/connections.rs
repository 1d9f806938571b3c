//! Connections, channels and consumers of this node's clients: `GET /api/connections[/{name}]`,
//! `DELETE /api/connections/{name}` (closed with 320 CONNECTION_FORCED and the reason in the
//! `X-Reason` header, as RabbitMQ's), `GET /api/connections/{name}/channels`,
//! `GET /api/channels[/{name}]`, `GET /api/consumers[/{vhost}]`.

use super::Management;
use crate::auth::Authenticated;
use crate::error::ApiError;
use crate::json_table;
use crate::listing::ListQuery;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Map, Value};
use std::sync::Arc;
use warren_delivery::connections::ConnectionInfo;
use warren_delivery::Session;

/// The connection routes.
pub(super) fn routes() -> Router<Management> {
    Router::new()
        .route("/api/connections", get(list_connections))
        .route("/api/connections/{name}", get(show_connection).delete(close_connection))
        .route("/api/connections/{name}/channels", get(connection_channels))
        .route("/api/channels", get(list_channels))
        .route("/api/channels/{name}", get(show_channel))
        .route("/api/consumers", get(list_consumers))
        .route("/api/consumers/{vhost}", get(list_vhost_consumers))
}

/// The reason given when an operator closes a connection without saying why.
const DEFAULT_CLOSE_REASON: &str = "Closed via management plugin";

fn connection_json(api: &Management, info: &ConnectionInfo) -> Value {
    let handshake = info.handshake();
    let (received, sent) = info.traffic_bytes();
    let properties: Map<String, Value> =
        handshake.client_properties.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
    json!({
        "name": info.name,
        "node": api.node(),
        "type": "network",
        "protocol": "AMQP 0-9-1",
        "state": "running",
        "user": handshake.user,
        "vhost": handshake.vhost,
        "auth_mechanism": handshake.auth_mechanism,
        "peer_host": info.peer.ip().to_string(),
        "peer_port": info.peer.port(),
        "host": info.local.ip().to_string(),
        "port": info.local.port(),
        "connected_at": info.connected_at_ms,
        "channels": info.channels().len(),
        "channel_max": handshake.channel_max,
        "frame_max": handshake.frame_max,
        "timeout": handshake.heartbeat_secs,
        "recv_oct": received,
        "send_oct": sent,
        "client_properties": properties,
        "ssl": info.tls,
    })
}

fn channel_name(info: &ConnectionInfo, number: u16) -> String {
    format!("{} ({number})", info.name)
}

fn channel_details(info: &ConnectionInfo, number: u16) -> Value {
    json!({
        "name": channel_name(info, number),
        "number": number,
        "connection_name": info.name,
        "peer_host": info.peer.ip().to_string(),
        "peer_port": info.peer.port(),
        "user": info.handshake().user,
    })
}

fn channel_json(api: &Management, info: &ConnectionInfo, number: u16, session: &Session) -> Value {
    let handshake = info.handshake();
    json!({
        "name": channel_name(info, number),
        "number": number,
        "node": api.node(),
        "user": handshake.user,
        "vhost": handshake.vhost,
        "state": "running",
        "connection_details": { "name": info.name, "peer_host": info.peer.ip().to_string(), "peer_port": info.peer.port() },
        "prefetch_count": session.consumer_prefetch(),
        "global_prefetch_count": session.channel_prefetch(),
        "messages_unacknowledged": session.unacked_count(),
        "consumer_count": session.consumers().len(),
    })
}

fn connection(api: &Management, name: &str) -> Result<Arc<ConnectionInfo>, ApiError> {
    api.broker()
        .connections()
        .named(name)
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("no connection '{name}'")))
}

async fn list_connections(
    _: Authenticated,
    State(api): State<Management>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    let items = api.broker().connections().all().iter().map(|info| connection_json(&api, info)).collect();
    Ok(Json(query.apply(items)?))
}

async fn show_connection(
    _: Authenticated,
    State(api): State<Management>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let info = connection(&api, &name)?;
    Ok(Json(connection_json(&api, &info)))
}

/// Closes the connection: the client gets `connection.close` 320 with the `X-Reason`.
async fn close_connection(
    _: Authenticated,
    State(api): State<Management>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    let info = connection(&api, &name)?;
    let reason = headers.get("x-reason").and_then(|v| v.to_str().ok()).unwrap_or(DEFAULT_CLOSE_REASON);
    info.request_close(reason);
    Ok(StatusCode::NO_CONTENT)
}

/// Every channel, with its connection.
fn all_channels(api: &Management) -> Vec<(Arc<ConnectionInfo>, u16, Arc<Session>)> {
    let connections = api.broker().connections().all();
    connections
        .into_iter()
        .flat_map(|info| {
            let channels = info.channels();
            channels.into_iter().map(move |(number, session)| (Arc::clone(&info), number, session))
        })
        .collect()
}

async fn connection_channels(
    _: Authenticated,
    State(api): State<Management>,
    Path(name): Path<String>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    let info = connection(&api, &name)?;
    let items = info.channels().iter().map(|(number, session)| channel_json(&api, &info, *number, session)).collect();
    Ok(Json(query.apply(items)?))
}

async fn list_channels(
    _: Authenticated,
    State(api): State<Management>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    let items =
        all_channels(&api).iter().map(|(info, number, session)| channel_json(&api, info, *number, session)).collect();
    Ok(Json(query.apply(items)?))
}

async fn show_channel(
    _: Authenticated,
    State(api): State<Management>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    all_channels(&api)
        .iter()
        .find(|(info, number, _)| channel_name(info, *number) == name)
        .map(|(info, number, session)| Json(channel_json(&api, info, *number, session)))
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("no channel '{name}'")))
}

fn consumers(api: &Management, vhost: Option<&str>) -> Vec<Value> {
    let mut items = Vec::new();
    for (info, number, session) in all_channels(api) {
        if vhost.is_some_and(|v| session.vhost().name() != v) {
            continue;
        }
        for consumer in session.consumers() {
            items.push(json!({
                "consumer_tag": consumer.tag().as_str(),
                "queue": { "name": consumer.queue().name(), "vhost": session.vhost().name() },
                "channel_details": channel_details(&info, number),
                "ack_required": !consumer.no_ack(),
                "prefetch_count": consumer.prefetch(),
                "exclusive": consumer.is_exclusive(),
                "arguments": json_table::to_json(consumer.arguments()),
                "active": true,
                "activity_status": "up",
            }));
        }
    }
    items
}

async fn list_consumers(
    _: Authenticated,
    State(api): State<Management>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(query.apply(consumers(&api, None))?))
}

async fn list_vhost_consumers(
    who: Authenticated,
    State(api): State<Management>,
    Path(vhost): Path<String>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    api.vhost(&who, &vhost)?;
    Ok(Json(query.apply(consumers(&api, Some(&vhost)))?))
}
