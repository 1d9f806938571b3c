//! The Stream protocol's clients, as RabbitMQ's stream management plugin lists them:
//! `GET /api/stream/connections[/{vhost}]` (the connections that speak it) and
//! `GET /api/stream/publishers[/{vhost}[/{stream}]]` (their declared publishers). A user sees
//! its own, as with every connection.

use super::connections::{connection_json, visible_connections};
use super::Management;
use crate::authorization::{Caller, Rule};
use crate::error::ApiError;
use crate::listing::ListQuery;
use crate::route_table::RouteTable;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use serde_json::{json, Value};
use std::sync::Arc;
use warren_delivery::connections::{ClientProtocol, ConnectionInfo};

/// The stream connection and publisher routes.
pub(super) fn routes(table: &mut RouteTable) {
    table
        .get("/api/stream/connections", Rule::Management, list_connections)
        .get("/api/stream/connections/{vhost}", Rule::Vhost, list_vhost_connections)
        .get("/api/stream/publishers", Rule::Management, list_publishers)
        .get("/api/stream/publishers/{vhost}", Rule::Vhost, list_vhost_publishers)
        .get("/api/stream/publishers/{vhost}/{stream}", Rule::Vhost, list_stream_publishers);
}

/// The stream connections `caller` sees, in `vhost` if given.
fn stream_connections(api: &Management, caller: &Caller, vhost: Option<&str>) -> Vec<Arc<ConnectionInfo>> {
    let in_vhost = |info: &ConnectionInfo| vhost.is_none_or(|v| info.handshake().vhost.as_deref() == Some(v));
    let mut connections = visible_connections(api, caller);
    connections.retain(|info| info.protocol == ClientProtocol::Stream && in_vhost(info));
    connections
}

fn connections_json(api: &Management, caller: &Caller, vhost: Option<&str>) -> Vec<Value> {
    let node = api.node();
    stream_connections(api, caller, vhost).iter().map(|info| connection_json(&node, info)).collect()
}

/// The publishers of the stream connections `caller` sees, in `vhost` and of `stream` if
/// given, in RabbitMQ's shape.
fn publishers_json(api: &Management, caller: &Caller, vhost: Option<&str>, stream: Option<&str>) -> Vec<Value> {
    let mut items = Vec::new();
    for info in stream_connections(api, caller, vhost) {
        let connection_vhost = info.handshake().vhost.unwrap_or_default();
        for publisher in info.stream_publishers() {
            if stream.is_some_and(|s| s != publisher.stream) {
                continue;
            }
            items.push(json!({
                "publisher_id": publisher.id,
                "reference": publisher.reference.unwrap_or_default(),
                "queue": { "name": publisher.stream, "vhost": connection_vhost },
                "connection_details": {
                    "name": info.name,
                    "peer_host": info.peer.ip().to_string(),
                    "peer_port": info.peer.port(),
                    "node": api.node(),
                },
            }));
        }
    }
    items
}

async fn list_connections(
    caller: Caller,
    State(api): State<Management>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    query.answer(connections_json(&api, &caller, None))
}

async fn list_vhost_connections(
    caller: Caller,
    State(api): State<Management>,
    Path(vhost): Path<String>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    api.vhost(&vhost)?;
    query.answer(connections_json(&api, &caller, Some(&vhost)))
}

async fn list_publishers(
    caller: Caller,
    State(api): State<Management>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    query.answer(publishers_json(&api, &caller, None, None))
}

async fn list_vhost_publishers(
    caller: Caller,
    State(api): State<Management>,
    Path(vhost): Path<String>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    api.vhost(&vhost)?;
    query.answer(publishers_json(&api, &caller, Some(&vhost), None))
}

async fn list_stream_publishers(
    caller: Caller,
    State(api): State<Management>,
    Path((vhost, stream)): Path<(String, String)>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    api.vhost(&vhost)?;
    query.answer(publishers_json(&api, &caller, Some(&vhost), Some(&stream)))
}
