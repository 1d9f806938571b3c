//! RabbitMQ's health checks, each answering for this node: `200 {"status":"ok"}` when healthy,
//! `503 {"status":"failed","reason":...}` (with what failed) when not, as RabbitMQ answers, so
//! that load balancers and scripts written for it work. The checks: alarms, a listener port or
//! protocol, the virtual hosts, whether shutting this node down would cost a replicated queue
//! its quorum, and the aliveness test (a message through a queue of a vhost and back).

use super::Management;
use crate::authorization::{Caller, ObjectOp, Rule, ALIVENESS_QUEUE};
use crate::error::ApiError;
use crate::route_table::RouteTable;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::collections::HashSet;
use warren_delivery::quorum::LOCAL_NODE_ID;

/// Critical queues named in one answer at most; the rest are counted (`queues_not_shown`), so
/// that a node with 100,000 quorum queues answers in kilobytes, not megabytes.
const MAX_CRITICAL_QUEUES_SHOWN: usize = 1_000;

/// The health-check routes.
pub(super) fn routes(table: &mut RouteTable) {
    table
        .get("/api/health/checks/alarms", Rule::Management, alarms)
        .get("/api/health/checks/local-alarms", Rule::Management, alarms)
        .get("/api/health/checks/port-listener/{port}", Rule::Management, port_listener)
        .get("/api/health/checks/protocol-listener/{protocol}", Rule::Management, protocol_listener)
        .get("/api/health/checks/virtual-hosts", Rule::Management, virtual_hosts)
        .get("/api/health/checks/node-is-quorum-critical", Rule::Management, quorum_critical)
        .get("/api/aliveness-test/{vhost}", Rule::Object(ObjectOp::AlivenessTest), aliveness);
}

fn ok(fields: Value) -> Response {
    let mut body = json!({ "status": "ok" });
    if let (Value::Object(body), Value::Object(fields)) = (&mut body, fields) {
        body.extend(fields);
    }
    Json(body).into_response()
}

fn failed(reason: impl Into<String>, fields: Value) -> Response {
    let mut body = json!({ "status": "failed", "reason": reason.into() });
    if let (Value::Object(body), Value::Object(fields)) = (&mut body, fields) {
        body.extend(fields);
    }
    (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
}

/// Healthy without an alarm; the alarms in effect otherwise. Warren's nodes each watch their
/// own resources, so both alarm checks answer for this node.
async fn alarms(State(api): State<Management>) -> Response {
    let state = api.broker().alarms().state();
    if !state.any() {
        return ok(json!({}));
    }
    let node = api.node();
    let alarms: Vec<Value> = state.resources().into_iter().map(|r| json!({ "node": node, "resource": r })).collect();
    failed("There are alarms in effect in the cluster", json!({ "alarms": alarms }))
}

/// Healthy if this node listens on `port`; the ports it listens on are named to a monitor
/// only (the overview shows the listeners to monitors only).
async fn port_listener(caller: Caller, State(api): State<Management>, Path(port): Path<u16>) -> Response {
    let ports: Vec<u16> = api.listeners().iter().map(|l| l.addr.port()).collect();
    if ports.contains(&port) {
        return ok(json!({ "port": port }));
    }
    let shown =
        if caller.is_monitor() { json!({ "missing": port, "ports": ports }) } else { json!({ "missing": port }) };
    failed(format!("No active listener on port {port}"), shown)
}

/// Healthy if this node has a listener for `protocol`, by RabbitMQ's names (`amqp`,
/// `amqp/ssl`, `http`, `https`, `clustering`; `amqp091` and `amqps` are taken too).
async fn protocol_listener(caller: Caller, State(api): State<Management>, Path(protocol): Path<String>) -> Response {
    let wanted = match protocol.to_ascii_lowercase().as_str() {
        "amqp091" | "amqp0-9-1" | "amqp" => "amqp".to_string(),
        "amqps" | "amqp/ssl" => "amqp/ssl".to_string(),
        other => other.to_string(),
    };
    let protocols: Vec<&str> = api.listeners().iter().map(|l| l.protocol).collect();
    if protocols.contains(&wanted.as_str()) {
        return ok(json!({ "protocol": wanted }));
    }
    let reason = format!("No active listener for protocol {wanted}");
    let shown = if caller.is_monitor() {
        json!({ "missing": wanted, "protocols": protocols })
    } else {
        json!({ "missing": wanted })
    };
    failed(reason, shown)
}

/// Healthy if every virtual host runs here. A vhost whose storage could not be opened does not
/// start at all (the broker refuses to start), so a vhost that exists is one that runs.
async fn virtual_hosts(caller: Caller, State(api): State<Management>) -> Response {
    let running = api.broker().vhosts().iter().filter(|v| caller.may_see_vhost(api.broker(), v.name())).count();
    ok(json!({ "virtual_hosts": running }))
}

/// Healthy unless stopping this node would leave a replicated queue (quorum queue or stream)
/// with a member here without a majority of its members running: RabbitMQ's rule, a queue
/// whose running members are no more than a bare majority is critical.
async fn quorum_critical(caller: Caller, State(api): State<Management>) -> Response {
    let running: HashSet<u64> =
        api.cluster_nodes().iter().filter(|n| n.running).filter_map(|n| api.cluster.node_id(&n.name)).collect();
    let here = api.cluster.node_id(&api.node());
    // A broker alone gives its groups' one member LOCAL_NODE_ID.
    let is_here = |id: u64| Some(id) == here || id == LOCAL_NODE_ID;
    let (mut critical, mut not_shown) = (Vec::new(), 0usize);
    for vhost in api.broker().vhosts().iter().filter(|v| caller.may_see_vhost(api.broker(), v.name())) {
        for queue in vhost.queues() {
            let Some(group) = queue.replicas() else { continue };
            let members: Vec<u64> = group.members().into_iter().map(|(id, _)| id).collect();
            if !members.iter().any(|&id| is_here(id)) {
                continue;
            }
            let up = members.iter().filter(|&&id| running.contains(&id) || is_here(id)).count();
            if up > members.len() / 2 + 1 {
                continue;
            }
            if critical.len() == MAX_CRITICAL_QUEUES_SHOWN {
                not_shown += 1;
                continue;
            }
            let kind = queue.arguments().queue_type.name();
            critical.push(json!({ "name": queue.name(), "virtual_host": vhost.name(), "type": kind }));
        }
    }
    if critical.is_empty() {
        return ok(json!({}));
    }
    let reason = "stopping this node would leave quorum queues with fewer than a majority of their members running";
    failed(reason, json!({ "queues": critical, "queues_not_shown": not_shown }))
}

/// RabbitMQ's aliveness test: a message through a queue of `vhost` and back.
async fn aliveness(State(api): State<Management>, Path(vhost): Path<String>) -> Result<Response, ApiError> {
    let host = api.vhost(&vhost)?;
    Ok(match super::messages::round_trip(&host, ALIVENESS_QUEUE).await {
        Ok(()) => ok(json!({})),
        Err(why) => failed(why, json!({})),
    })
}
