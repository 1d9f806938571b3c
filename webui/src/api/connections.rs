//! Connections, channels and consumers of this node's clients: `GET /api/connections[/{name}]`,
//! `DELETE /api/connections/{name}` (closed with 320 CONNECTION_FORCED and the reason in the
//! `X-Reason` header, as RabbitMQ's), `GET /api/connections/{name}/channels`,
//! `GET /api/channels[/{name}]`, `GET /api/consumers[/{vhost}]`. As in RabbitMQ, a user sees
//! its own connections (and their channels and consumers) and closes them; `monitoring`
//! users see everyone's, administrators close anyone's.

use super::Management;
use crate::authorization::{Caller, ConnectionOp, Rule};
use crate::error::ApiError;
use crate::json_table;
use crate::listing::{field, ListQuery, Listed, SortKey};
use crate::route_table::RouteTable;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::Json;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use warren_delivery::connections::ConnectionInfo;
use warren_delivery::Session;

/// The connection routes.
pub(super) fn routes(table: &mut RouteTable) {
    table
        .get("/api/connections", Rule::Management, list_connections)
        .get("/api/connections/{name}", Rule::Connection(ConnectionOp::Read), show_connection)
        .delete("/api/connections/{name}", Rule::Connection(ConnectionOp::Close), close_connection)
        .get("/api/connections/{name}/channels", Rule::Connection(ConnectionOp::Read), connection_channels)
        .get("/api/channels", Rule::Management, list_channels)
        .get("/api/channels/{name}", Rule::Connection(ConnectionOp::ReadChannel), show_channel)
        .get("/api/consumers", Rule::Management, list_consumers)
        .get("/api/consumers/{vhost}", Rule::Vhost, list_vhost_consumers);
}

/// The reason given when an operator closes a connection without saying why.
const DEFAULT_CLOSE_REASON: &str = "Closed via management plugin";

pub(super) fn connection_json(node: &str, info: &ConnectionInfo) -> Value {
    let handshake = info.handshake();
    let (received, sent) = info.traffic_bytes();
    let properties: Map<String, Value> =
        handshake.client_properties.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
    json!({
        "name": info.name,
        "node": node,
        "type": "network",
        "protocol": info.protocol.name(),
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

pub(crate) fn channel_name(info: &ConnectionInfo, number: u16) -> String {
    format!("{} ({number})", info.name)
}

pub(super) fn channel_details(info: &ConnectionInfo, number: u16) -> Value {
    json!({
        "name": channel_name(info, number),
        "number": number,
        "connection_name": info.name,
        "peer_host": info.peer.ip().to_string(),
        "peer_port": info.peer.port(),
        "user": info.handshake().user,
    })
}

fn channel_json(node: &str, info: &ConnectionInfo, number: u16, session: &Session) -> Value {
    let handshake = info.handshake();
    json!({
        "name": channel_name(info, number),
        "number": number,
        "node": node,
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

/// The user a connection logged in as ("" before it has).
fn owner(info: &ConnectionInfo) -> String {
    info.handshake().user.unwrap_or_default()
}

/// The connections `caller` sees.
pub(super) fn visible_connections(api: &Management, caller: &Caller) -> Vec<Arc<ConnectionInfo>> {
    let all = api.broker().connections().all();
    all.into_iter().filter(|info| caller.sees_connection_of(&owner(info))).collect()
}

/// A connection in a list, shown as JSON when its turn comes.
struct ConnectionRow {
    node: Arc<str>,
    info: Arc<ConnectionInfo>,
}

impl Listed for ConnectionRow {
    fn name(&self) -> &str {
        &self.info.name
    }

    fn sort_key(&self, path: &str) -> SortKey {
        match path {
            "name" => SortKey::text(&self.info.name),
            _ => SortKey::of(field(&self.json(), path)),
        }
    }

    fn into_json(self) -> Value {
        self.json()
    }
}

impl ConnectionRow {
    fn json(&self) -> Value {
        connection_json(&self.node, &self.info)
    }
}

async fn list_connections(
    caller: Caller,
    State(api): State<Management>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    let node: Arc<str> = api.node().into();
    let rows =
        visible_connections(&api, &caller).into_iter().map(|info| ConnectionRow { node: Arc::clone(&node), info });
    query.answer(rows.collect())
}

async fn show_connection(State(api): State<Management>, Path(name): Path<String>) -> Result<Json<Value>, ApiError> {
    let info = connection(&api, &name)?;
    Ok(Json(connection_json(&api.node(), &info)))
}

/// Closes the connection: the client gets `connection.close` 320 with the `X-Reason`.
async fn close_connection(
    State(api): State<Management>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    let info = connection(&api, &name)?;
    let reason = headers.get("x-reason").and_then(|v| v.to_str().ok()).unwrap_or(DEFAULT_CLOSE_REASON);
    info.request_close(reason);
    Ok(StatusCode::NO_CONTENT)
}

/// A channel in a list, with its connection.
pub(super) struct ChannelRow {
    node: Arc<str>,
    pub(super) info: Arc<ConnectionInfo>,
    pub(super) number: u16,
    pub(super) session: Arc<Session>,
}

impl ChannelRow {
    fn json(&self) -> Value {
        channel_json(&self.node, &self.info, self.number, &self.session)
    }
}

impl Listed for ChannelRow {
    fn name(&self) -> &str {
        &self.info.name
    }

    fn sort_key(&self, path: &str) -> SortKey {
        SortKey::of(field(&self.json(), path))
    }

    fn into_json(self) -> Value {
        self.json()
    }
}

/// The channels of `connections`.
pub(super) fn channels_of(api: &Management, connections: Vec<Arc<ConnectionInfo>>) -> Vec<ChannelRow> {
    let node: Arc<str> = api.node().into();
    let mut rows = Vec::new();
    for info in connections {
        for (number, session) in info.channels() {
            rows.push(ChannelRow { node: Arc::clone(&node), info: Arc::clone(&info), number, session });
        }
    }
    rows
}

async fn connection_channels(
    State(api): State<Management>,
    Path(name): Path<String>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    let info = connection(&api, &name)?;
    query.answer(channels_of(&api, vec![info]))
}

async fn list_channels(
    caller: Caller,
    State(api): State<Management>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    query.answer(channels_of(&api, visible_connections(&api, &caller)))
}

async fn show_channel(State(api): State<Management>, Path(name): Path<String>) -> Result<Json<Value>, ApiError> {
    let all = channels_of(&api, api.broker().connections().all());
    all.iter()
        .find(|row| channel_name(&row.info, row.number) == name)
        .map(|row| Json(row.json()))
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("no channel '{name}'")))
}

/// The consumers on the channels of the connections `caller` sees (of `vhost` only, if some).
fn consumers(api: &Management, caller: &Caller, vhost: Option<&str>) -> Vec<Value> {
    let mut items = Vec::new();
    for row in channels_of(api, visible_connections(api, caller)) {
        let session = &row.session;
        if vhost.is_some_and(|v| session.vhost().name() != v) {
            continue;
        }
        for consumer in session.consumers() {
            items.push(json!({
                "consumer_tag": consumer.tag().as_str(),
                "queue": { "name": consumer.queue().name(), "vhost": session.vhost().name() },
                "channel_details": channel_details(&row.info, row.number),
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
    caller: Caller,
    State(api): State<Management>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    query.answer(consumers(&api, &caller, None))
}

async fn list_vhost_consumers(
    caller: Caller,
    State(api): State<Management>,
    Path(vhost): Path<String>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    query.answer(consumers(&api, &caller, Some(&vhost)))
}
