//! `GET /api/definitions` (export) and `POST /api/definitions` (import) in RabbitMQ's
//! definitions format, so that a file RabbitMQ exported loads into Warren and back. Users,
//! vhosts, permissions, topic permissions, policies and the runtime parameters Warren has
//! (operator policies, vhost limits) go through access control; durable exchanges, queues and
//! bindings through the same path as AMQP declares; global parameters are kept. What Warren cannot apply
//! (parameters of other components) is reported item by item and skipped rather than failing the import.

use super::overview::COMPATIBLE_RABBITMQ_VERSION;
use super::Management;
use crate::authorization::Rule;
use crate::error::ApiError;
use crate::json_body::JsonBody;
use crate::json_table;
use crate::route_table::RouteTable;
use crate::streamed::{self, Piece};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::Json;
use serde_json::{json, Value};
use std::sync::Arc;
use warren_delivery::access::AccessChange;
use warren_delivery::catalog::DefinitionOp;
use warren_delivery::exchange::{Destination, Exchange};
use warren_delivery::policy::PolicyKind;
use warren_delivery::Queue;

/// Entries an import applies at most (a definitions file is not a way to flood the broker).
const MAX_IMPORTED_ENTRIES: usize = 100_000;

/// The definitions routes: administrators only, as in RabbitMQ (they hold password hashes).
pub(super) fn routes(table: &mut RouteTable) {
    table.get("/api/definitions", Rule::Administrator, export).post("/api/definitions", Rule::Administrator, import);
}

/// Exchanges of the broker's own (`amq.*`, the default one) are not exported.
fn is_builtin_exchange(name: &str) -> bool {
    name.is_empty() || name.starts_with("amq.")
}

/// Objects with the name of their vhost.
type InVhost<T> = Vec<(String, Arc<T>)>;

/// The durable queues and the exchanges of every vhost, by vhost then name.
fn durable_objects(api: &Management) -> (InVhost<Queue>, InVhost<Exchange>) {
    let (mut queues, mut exchanges) = (Vec::new(), Vec::new());
    for vhost in api.broker().vhosts() {
        let name = vhost.name().to_string();
        let mut of_vhost = vhost.queues();
        of_vhost.sort_by(|a, b| a.name().cmp(b.name()));
        let stored = |q: &Arc<Queue>| q.definition().durable && q.definition().exclusive_owner.is_none();
        queues.extend(of_vhost.into_iter().filter(stored).map(|q| (name.clone(), q)));
        let mut of_vhost = vhost.exchanges();
        of_vhost.sort_by(|a, b| a.name().cmp(b.name()));
        exchanges.extend(of_vhost.into_iter().map(|e| (name.clone(), e)));
    }
    (queues, exchanges)
}

fn queue_entry(vhost: &str, queue: &Queue) -> Value {
    let definition = queue.definition();
    json!({
        "name": definition.name, "vhost": vhost, "durable": true, "auto_delete": definition.auto_delete,
        "arguments": json_table::to_json(&definition.arguments),
    })
}

fn binding_entries(vhost: &str, exchange: &Exchange) -> Vec<Value> {
    let entry = |binding: warren_delivery::exchange::Binding| {
        let (destination, destination_type) = match &binding.destination {
            Destination::Queue(q) => (q.to_string(), "queue"),
            Destination::Exchange(e) => (e.to_string(), "exchange"),
        };
        json!({
            "source": exchange.name(), "vhost": vhost, "destination": destination,
            "destination_type": destination_type, "routing_key": binding.routing_key,
            "arguments": json_table::to_json(&binding.arguments),
        })
    };
    exchange.bindings().into_iter().map(entry).collect()
}

/// Every policy of `kind`, as a definitions file lists them (without Warren's `no_effect`).
fn policy_entries(api: &Management, kind: PolicyKind) -> Vec<Value> {
    let mut entries = Vec::new();
    for vhost in api.broker().vhosts() {
        for policy in vhost.policies().of_kind(kind) {
            let mut entry = super::policies::policy_json(vhost.name(), policy);
            if let Value::Object(fields) = &mut entry {
                fields.remove("no_effect");
            }
            entries.push(entry);
        }
    }
    entries
}

/// The definitions export, streamed: each queue, exchange and binding becomes JSON as the
/// client reads, so an export of 100,000 queues is never held whole.
async fn export(State(api): State<Management>) -> Response {
    let (queues, exchanges) = durable_objects(&api);
    let access = api.broker().access();
    let users = super::access::users_json(&api);
    let vhosts: Vec<Value> = access
        .vhosts()
        .iter()
        .map(|(name, entry)| json!({"name": name, "description": entry.description, "limits": entry.limits.to_json()}))
        .collect();
    let permissions: Vec<Value> =
        access.permissions().iter().map(|(v, u, spec)| super::access::permission_json(v, u, spec)).collect();
    let topic_permissions: Vec<Value> = access
        .topic_permissions()
        .iter()
        .map(|(v, u, spec)| super::topic_permissions::topic_permission_json(v, u, spec))
        .collect();
    let policies = policy_entries(&api, PolicyKind::User);
    let vhost_names: Vec<String> = api.broker().vhosts().iter().map(|v| v.name().to_string()).collect();
    let parameters: Vec<Value> = vhost_names.iter().flat_map(|v| super::parameters::of_vhost(&api, v)).collect();
    let head = json!({
        "rabbit_version": COMPATIBLE_RABBITMQ_VERSION,
        "rabbitmq_version": COMPATIBLE_RABBITMQ_VERSION,
        "product_name": "Warren",
        "product_version": env!("CARGO_PKG_VERSION"),
        "users": users,
        "vhosts": vhosts,
        "permissions": permissions,
        "topic_permissions": topic_permissions,
        "parameters": parameters,
        "global_parameters": super::parameters::exported_global_parameters(&api),
        "policies": policies,
    });
    // The head is an object; the streamed arrays go in place of its closing brace.
    let head = head.to_string();
    let head = head.strip_suffix('}').unwrap_or(&head).to_string();
    let bindings = exchanges.clone().into_iter().flat_map(|(vhost, exchange)| binding_entries(&vhost, &exchange));
    let exchanges = exchanges.into_iter().filter(|(_, e)| e.definition().durable && !is_builtin_exchange(e.name()));
    streamed::json(vec![
        Piece::Raw(format!("{head},\"queues\":")),
        Piece::items(queues.into_iter().map(|(vhost, queue)| queue_entry(&vhost, &queue))),
        Piece::Raw(",\"exchanges\":".into()),
        Piece::items(exchanges.map(|(vhost, exchange)| super::exchanges::exchange_json(&vhost, &exchange))),
        Piece::Raw(",\"bindings\":".into()),
        Piece::items(bindings),
        Piece::Raw("}".into()),
    ])
}

/// What an import did.
#[derive(Debug, Default)]
struct Report {
    applied: usize,
    skipped: Vec<Value>,
}

impl Report {
    fn skip(&mut self, kind: &str, name: &str, why: impl Into<String>) {
        self.skipped.push(json!({ "kind": kind, "name": name, "reason": why.into() }));
    }
}

fn text<'a>(entry: &'a Value, key: &str) -> &'a str {
    entry.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// What to call an entry in the report: its name, its user (a permission), or its source and
/// destination (a binding).
fn label(entry: &Value) -> String {
    match (text(entry, "name"), text(entry, "user"), text(entry, "source")) {
        (name, _, _) if !name.is_empty() => name.to_string(),
        (_, user, _) if !user.is_empty() => user.to_string(),
        (_, _, source) => format!("{source} -> {}", text(entry, "destination")),
    }
}

fn boolean(entry: &Value, key: &str, default: bool) -> bool {
    entry.get(key).and_then(Value::as_bool).unwrap_or(default)
}

fn entries<'a>(body: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    body.get(key).and_then(Value::as_array).into_iter().flatten()
}

/// Users, then vhosts (with their limits), then permissions: what the queues and exchanges
/// after them need.
async fn import_access(api: &Management, body: &Value, report: &mut Report) {
    let access = api.broker().access();
    let mut changes: Vec<(&str, String, Result<AccessChange, String>)> = Vec::new();
    for user in entries(body, "users") {
        let name = text(user, "name");
        let change = super::access::user_change(name, user, access.user(name).is_some());
        changes.push(("user", name.to_string(), change.map_err(|e| e.reason().to_string())));
        if let Some(limits) = user.get("limits").and_then(Value::as_object).filter(|l| !l.is_empty()) {
            let limits = warren_delivery::user_limits::UserLimits::from_json(limits);
            let change = limits.map(|limits| AccessChange::SetUserLimits { user: name.to_string(), limits });
            changes.push(("user limits", name.to_string(), change.map_err(|e| e.text)));
        }
    }
    for vhost in entries(body, "vhosts") {
        let name = text(vhost, "name").to_string();
        let put = AccessChange::PutVhost { name: name.clone(), description: text(vhost, "description").to_string() };
        changes.push(("vhost", name.clone(), Ok(put)));
        if let Some(limits) = vhost.get("limits").and_then(Value::as_object).filter(|l| !l.is_empty()) {
            let limits = warren_delivery::vhost_limits::VhostLimits::from_json(limits);
            let change = limits.map(|limits| AccessChange::SetVhostLimits { vhost: name.clone(), limits });
            changes.push(("vhost limits", name, change.map_err(|e| e.text)));
        }
    }
    for permission in entries(body, "permissions") {
        let (vhost, user) = (text(permission, "vhost").to_string(), text(permission, "user").to_string());
        let change = super::access::permission_spec(permission).map(|permissions| AccessChange::SetPermissions {
            vhost: vhost.clone(),
            user: user.clone(),
            permissions,
        });
        changes.push(("permission", format!("{user} in {vhost}"), change.map_err(|e| e.reason().to_string())));
    }
    for permission in entries(body, "topic_permissions") {
        let (vhost, user) = (text(permission, "vhost").to_string(), text(permission, "user").to_string());
        let change = super::topic_permissions::topic_permission_spec(permission).map(|permissions| {
            AccessChange::SetTopicPermissions { vhost: vhost.clone(), user: user.clone(), permissions }
        });
        let name = format!("{user} on {} in {vhost}", text(permission, "exchange"));
        changes.push(("topic permission", name, change.map_err(|e| e.reason().to_string())));
    }
    for policy in entries(body, "policies") {
        changes.push(policy_change(policy, text(policy, "vhost"), PolicyKind::User, policy));
    }
    for parameter in entries(body, "global_parameters") {
        let name = text(parameter, "name");
        let change = super::parameters::global_parameter_change(name, parameter);
        changes.push(("global parameter", name.to_string(), change.map_err(|e| e.reason().to_string())));
    }
    for parameter in entries(body, "parameters") {
        changes.push(parameter_change(parameter));
    }
    for (kind, name, change) in changes {
        let outcome = match change {
            Ok(change) => api.broker().change_access(change).await.map_err(|e| e.text),
            Err(why) => Err(why),
        };
        match outcome {
            Ok(()) => report.applied += 1,
            Err(why) => report.skip(kind, &name, why),
        }
    }
}

/// An entry's change type, its name in the report, and the change (or why there is none).
type ImportedChange<'a> = (&'a str, String, Result<AccessChange, String>);

/// A policy of `kind` named as `entry` names it, made of `spec` (the entry itself for a policy,
/// its `value` for an operator policy among the parameters).
fn policy_change<'a>(entry: &Value, vhost: &str, kind: PolicyKind, spec: &Value) -> ImportedChange<'a> {
    let name = text(entry, "name").to_string();
    let change = super::policies::policy_spec(spec).map(|spec| AccessChange::SetPolicy {
        vhost: vhost.to_string(),
        kind,
        name: name.clone(),
        spec,
    });
    let noun = if kind == PolicyKind::Operator { "operator policy" } else { "policy" };
    (noun, format!("{name} in {vhost}"), change.map_err(|e| e.reason().to_string()))
}

/// A runtime parameter of a definitions file: an operator policy or a vhost's limits (what
/// Warren has); any other component is reported as not applied.
fn parameter_change(parameter: &Value) -> ImportedChange<'_> {
    let (vhost, component) = (text(parameter, "vhost"), text(parameter, "component"));
    let value = parameter.get("value").unwrap_or(&Value::Null);
    match component {
        super::parameters::OPERATOR_POLICY_COMPONENT => policy_change(parameter, vhost, PolicyKind::Operator, value),
        super::parameters::VHOST_LIMITS_COMPONENT => {
            let limits = value.as_object().ok_or("a vhost's limits are a JSON object".to_string());
            let limits =
                limits.and_then(|l| warren_delivery::vhost_limits::VhostLimits::from_json(l).map_err(|e| e.text));
            let change = limits.map(|limits| AccessChange::SetVhostLimits { vhost: vhost.to_string(), limits });
            ("vhost limits", vhost.to_string(), change)
        }
        _ => {
            let why = format!("Warren has no runtime parameters of component '{component}'");
            ("parameter", format!("{component} {} in {vhost}", text(parameter, "name")), Err(why))
        }
    }
}

/// Applies one definition change, recording it as applied or skipped.
async fn apply(
    api: &Management,
    report: &mut Report,
    kind: &str,
    entry: &Value,
    op: impl FnOnce(amq_protocol::types::FieldTable) -> DefinitionOp,
) {
    let (name, vhost) = (label(entry), text(entry, "vhost"));
    let Some(host) = api.broker().vhost(vhost) else {
        return report.skip(kind, &name, format!("virtual host '{vhost}' does not exist"));
    };
    let arguments = match json_table::from_json(entry.get("arguments").unwrap_or(&Value::Null)) {
        Ok(arguments) => arguments,
        Err(why) => return report.skip(kind, &name, why),
    };
    match warren_delivery::catalog::change(&host, op(arguments)).await {
        Ok(_) => report.applied += 1,
        Err(error) => report.skip(kind, &name, error.text),
    }
}

/// Imports a definitions file: exchanges first, then queues, then bindings; answers what was
/// applied and what was skipped, and why.
async fn import(State(api): State<Management>, JsonBody(body): JsonBody<Value>) -> Result<Json<Value>, ApiError> {
    if !body.is_object() {
        return Err(ApiError::new(StatusCode::BAD_REQUEST, "a definitions file is a JSON object"));
    }
    let total: usize = body.as_object().into_iter().flatten().filter_map(|(_, v)| v.as_array()).map(Vec::len).sum();
    if total > MAX_IMPORTED_ENTRIES {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("more than {MAX_IMPORTED_ENTRIES} definitions in one import"),
        ));
    }
    let mut report = Report::default();
    import_access(&api, &body, &mut report).await;
    for exchange in entries(&body, "exchanges") {
        let op = |arguments| DefinitionOp::DeclareExchange {
            name: text(exchange, "name").to_string(),
            kind: text(exchange, "type").to_string(),
            durable: boolean(exchange, "durable", true),
            auto_delete: boolean(exchange, "auto_delete", false),
            internal: boolean(exchange, "internal", false),
            arguments,
        };
        apply(&api, &mut report, "exchange", exchange, op).await;
    }
    for queue in entries(&body, "queues") {
        let op = |arguments| DefinitionOp::DeclareQueue {
            name: text(queue, "name").to_string(),
            durable: boolean(queue, "durable", true),
            auto_delete: boolean(queue, "auto_delete", false),
            arguments,
            members: None,
        };
        apply(&api, &mut report, "queue", queue, op).await;
    }
    for binding in entries(&body, "bindings") {
        let op = |arguments| DefinitionOp::Bind {
            source: text(binding, "source").to_string(),
            destination: text(binding, "destination").to_string(),
            to_exchange: text(binding, "destination_type") == "exchange",
            routing_key: text(binding, "routing_key").to_string(),
            arguments,
        };
        apply(&api, &mut report, "binding", binding, op).await;
    }
    Ok(Json(json!({ "applied": report.applied, "skipped": report.skipped })))
}
