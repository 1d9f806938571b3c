//! Policies and operator policies, as RabbitMQ's API has them: `/api/policies` and
//! `/api/operator-policies`, listed across vhosts, per vhost, and one by name, set with
//! `PUT {"pattern", "definition", "priority", "apply-to"}` and cleared with `DELETE`.
//! Each listed policy says which of its keys change nothing in Warren (`no_effect`).

use super::Management;
use crate::authorization::{Caller, Rule};
use crate::error::ApiError;
use crate::json_body::JsonBody;
use crate::route_table::RouteTable;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Map, Value};
use warren_delivery::access::AccessChange;
use warren_delivery::policy::{AppliedPolicy, Policy, PolicyKind, PolicySpec};

/// The policy routes: reading for whoever sees the vhost, changing for policymakers (user
/// policies) and administrators (operator policies). A handler's `OPERATOR` says which kind.
pub(super) fn routes(table: &mut RouteTable) {
    table
        .get("/api/policies", Rule::Management, all::<false>)
        .get("/api/policies/{vhost}", Rule::Vhost, of_vhost::<false>)
        .get("/api/policies/{vhost}/{name}", Rule::Vhost, one::<false>)
        .put("/api/policies/{vhost}/{name}", Rule::Policymaker, put::<false>)
        .delete("/api/policies/{vhost}/{name}", Rule::Policymaker, delete::<false>)
        .get("/api/operator-policies", Rule::Management, all::<true>)
        .get("/api/operator-policies/{vhost}", Rule::Vhost, of_vhost::<true>)
        .get("/api/operator-policies/{vhost}/{name}", Rule::Vhost, one::<true>)
        .put("/api/operator-policies/{vhost}/{name}", Rule::Administrator, put::<true>)
        .delete("/api/operator-policies/{vhost}/{name}", Rule::Administrator, delete::<true>);
}

const fn kind<const OPERATOR: bool>() -> PolicyKind {
    if OPERATOR {
        PolicyKind::Operator
    } else {
        PolicyKind::User
    }
}

/// Adds to a queue's or exchange's JSON the policies that apply to it, in RabbitMQ's shapes:
/// `policy` left out when none, `operator_policy` an empty string, and
/// `effective_policy_definition` their merged definition.
pub(super) fn insert_applied(item: &mut Value, applied: AppliedPolicy) {
    if let Some(policy) = applied.policy {
        item["policy"] = json!(policy);
    }
    item["operator_policy"] = json!(applied.operator_policy.unwrap_or_default());
    item["effective_policy_definition"] = Value::Object(applied.definition);
}

/// A policy as RabbitMQ's API and definitions show it, with Warren's `no_effect` keys.
pub(super) fn policy_json(vhost: &str, policy: &Policy) -> Value {
    let no_effect: Map<String, Value> =
        policy.without_effect().into_iter().map(|(key, why)| (key, Value::from(why))).collect();
    json!({
        "vhost": vhost,
        "name": policy.name,
        "pattern": policy.spec.pattern,
        "apply-to": policy.spec.apply_to,
        "definition": policy.definition,
        "priority": policy.spec.priority,
        "no_effect": no_effect,
    })
}

/// The policies of `kind` in `vhosts`, lowest priority first, as RabbitMQ sorts them.
fn listed<'a>(api: &Management, kind: PolicyKind, vhosts: impl Iterator<Item = &'a str>) -> Value {
    let mut shown: Vec<(i64, Value)> = Vec::new();
    for vhost in vhosts {
        let Some(host) = api.broker().vhost(vhost) else { continue };
        let policies = host.policies();
        shown.extend(policies.of_kind(kind).map(|policy| (policy.spec.priority, policy_json(vhost, policy))));
    }
    shown.sort_by_key(|(priority, _)| *priority);
    Value::Array(shown.into_iter().map(|(_, json)| json).collect())
}

async fn all<const OPERATOR: bool>(caller: Caller, State(api): State<Management>) -> Json<Value> {
    let names: Vec<String> = api.broker().vhosts().iter().map(|v| v.name().to_string()).collect();
    let visible = names.iter().map(String::as_str).filter(|v| caller.may_see_vhost(api.broker(), v));
    Json(listed(&api, kind::<OPERATOR>(), visible))
}

async fn of_vhost<const OPERATOR: bool>(State(api): State<Management>, Path(vhost): Path<String>) -> Json<Value> {
    Json(listed(&api, kind::<OPERATOR>(), std::iter::once(vhost.as_str())))
}

async fn one<const OPERATOR: bool>(
    State(api): State<Management>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let kind = kind::<OPERATOR>();
    let host = api.vhost(&vhost)?;
    let policies = host.policies();
    let policy = policies.get(kind, &name).ok_or_else(|| not_found(kind, &name))?;
    Ok(Json(policy_json(&vhost, policy)))
}

async fn put<const OPERATOR: bool>(
    State(api): State<Management>,
    Path((vhost, name)): Path<(String, String)>,
    JsonBody(body): JsonBody<Value>,
) -> Result<StatusCode, ApiError> {
    let kind = kind::<OPERATOR>();
    let existed = api.vhost(&vhost)?.policies().get(kind, &name).is_some();
    let spec = policy_spec(&body)?;
    api.broker().change_access(AccessChange::SetPolicy { vhost, kind, name, spec }).await?;
    Ok(if existed { StatusCode::NO_CONTENT } else { StatusCode::CREATED })
}

async fn delete<const OPERATOR: bool>(
    State(api): State<Management>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let kind = kind::<OPERATOR>();
    api.broker().change_access(AccessChange::ClearPolicy { vhost, kind, name }).await?;
    Ok(StatusCode::NO_CONTENT)
}

fn not_found(kind: PolicyKind, name: &str) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, format!("no {} '{name}'", kind.noun()))
}

/// A policy from RabbitMQ's JSON (the API's body, an entry of a definitions file):
/// `pattern` and `definition` required, `priority` 0 and `apply-to` `all` by default.
pub(super) fn policy_spec(body: &Value) -> Result<PolicySpec, ApiError> {
    let bad = |why: &str| ApiError::new(StatusCode::BAD_REQUEST, why.to_string());
    let pattern = body.get("pattern").and_then(Value::as_str).ok_or_else(|| bad("'pattern' must be a string"))?;
    let definition = body.get("definition").ok_or_else(|| bad("'definition' must be set"))?;
    let priority = match body.get("priority") {
        None | Some(Value::Null) => 0,
        Some(value) => value.as_i64().ok_or_else(|| bad("'priority' must be an integer"))?,
    };
    let apply_to = match body.get("apply-to") {
        None | Some(Value::Null) => "all",
        Some(value) => value.as_str().ok_or_else(|| bad("'apply-to' must be a string"))?,
    };
    Ok(PolicySpec {
        pattern: pattern.to_string(),
        definition: definition.to_string(),
        priority,
        apply_to: apply_to.to_string(),
    })
}
