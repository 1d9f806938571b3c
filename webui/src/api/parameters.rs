//! RabbitMQ's runtime parameters. `/api/parameters`, read-only: those of vhosts that Warren
//! has, operator policies (component `operator_policy`) and vhost limits (component
//! `vhost-limits`, one entry named `limits` per vhost that has any), in the shape RabbitMQ
//! lists and exports them; they are changed through their own routes
//! (`/api/operator-policies`, `/api/vhost-limits`). `/api/global-parameters`: global ones,
//! any JSON value, kept and exported; `cluster_name` among them is the cluster's name as the
//! API shows it (`/api/cluster-name`, the overview), as in RabbitMQ.

use super::Management;
use crate::authorization::{Caller, Rule};
use crate::error::ApiError;
use crate::json_body::JsonBody;
use crate::route_table::RouteTable;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};
use warren_delivery::access::AccessChange;
use warren_delivery::policy::PolicyKind;

/// The component of an operator policy among the runtime parameters.
pub(super) const OPERATOR_POLICY_COMPONENT: &str = "operator_policy";
/// The component of a vhost's limits among the runtime parameters.
pub(super) const VHOST_LIMITS_COMPONENT: &str = "vhost-limits";

/// The parameter routes: whoever sees a vhost sees its parameters.
pub(super) fn routes(table: &mut RouteTable) {
    table
        .get("/api/parameters", Rule::Management, all)
        .get("/api/parameters/{component}", Rule::Management, of_component)
        .get("/api/parameters/{component}/{vhost}", Rule::Vhost, of_component_in_vhost)
        .get("/api/global-parameters", Rule::Policymaker, global_parameters)
        .get("/api/global-parameters/{name}", Rule::Policymaker, global_parameter)
        .put("/api/global-parameters/{name}", Rule::Policymaker, put_global_parameter)
        .delete("/api/global-parameters/{name}", Rule::Policymaker, delete_global_parameter)
        .get("/api/cluster-name", Rule::Management, cluster_name)
        .put("/api/cluster-name", Rule::Administrator, put_cluster_name);
}

/// The global parameter that names the cluster in the API (RabbitMQ's).
const CLUSTER_NAME_PARAMETER: &str = "cluster_name";
/// Global parameters whose names start so are RabbitMQ's own bookkeeping: kept, not exported.
const INTERNAL_PREFIX: &str = "internal";

/// The cluster's name as the API shows it: the `cluster_name` global parameter if it is set
/// to a string, else the configured `--cluster-name`.
pub(super) fn shown_cluster_name(api: &Management) -> String {
    let set = api.broker().access().global_parameter(CLUSTER_NAME_PARAMETER);
    let named =
        set.and_then(|text| serde_json::from_str::<Value>(&text).ok()).and_then(|v| v.as_str().map(str::to_string));
    named.unwrap_or_else(|| api.cluster_name())
}

fn global_json(name: &str, value: &str) -> Value {
    json!({ "name": name, "value": serde_json::from_str::<Value>(value).unwrap_or(Value::Null) })
}

/// The global parameters a definitions export carries (RabbitMQ leaves out its internal ones).
pub(super) fn exported_global_parameters(api: &Management) -> Vec<Value> {
    let every = api.broker().access().global_parameters();
    every.iter().filter(|(name, _)| !name.starts_with(INTERNAL_PREFIX)).map(|(n, v)| global_json(n, v)).collect()
}

/// The change a definitions entry or a `PUT` body `{"value": ...}` asks for.
pub(super) fn global_parameter_change(name: &str, body: &Value) -> Result<AccessChange, ApiError> {
    let value = body.get("value").ok_or_else(|| ApiError::new(StatusCode::BAD_REQUEST, "'value' must be set"))?;
    Ok(AccessChange::SetGlobalParameter { name: name.to_string(), value: value.to_string() })
}

async fn global_parameters(State(api): State<Management>) -> Json<Value> {
    let every = api.broker().access().global_parameters();
    Json(Value::Array(every.iter().map(|(name, value)| global_json(name, value)).collect()))
}

async fn global_parameter(State(api): State<Management>, Path(name): Path<String>) -> Result<Json<Value>, ApiError> {
    let value = api.broker().access().global_parameter(&name);
    let value = value.ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("no global parameter '{name}'")))?;
    Ok(Json(global_json(&name, &value)))
}

async fn put_global_parameter(
    State(api): State<Management>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<Value>,
) -> Result<StatusCode, ApiError> {
    let existed = api.broker().access().global_parameter(&name).is_some();
    api.broker().change_access(global_parameter_change(&name, &body)?).await?;
    Ok(if existed { StatusCode::NO_CONTENT } else { StatusCode::CREATED })
}

async fn delete_global_parameter(
    State(api): State<Management>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    api.broker().change_access(AccessChange::ClearGlobalParameter { name }).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn cluster_name(State(api): State<Management>) -> Json<Value> {
    Json(json!({ "name": shown_cluster_name(&api) }))
}

async fn put_cluster_name(
    State(api): State<Management>,
    JsonBody(body): JsonBody<Value>,
) -> Result<StatusCode, ApiError> {
    let name = body.get("name").and_then(Value::as_str);
    let name = name.ok_or_else(|| ApiError::new(StatusCode::BAD_REQUEST, "'name' must be a string"))?;
    let change =
        AccessChange::SetGlobalParameter { name: CLUSTER_NAME_PARAMETER.into(), value: json!(name).to_string() };
    api.broker().change_access(change).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Every parameter of vhost `vhost`.
pub(super) fn of_vhost(api: &Management, vhost: &str) -> Vec<Value> {
    let Some(host) = api.broker().vhost(vhost) else { return Vec::new() };
    let policies = host.policies();
    let mut parameters: Vec<Value> = policies
        .of_kind(PolicyKind::Operator)
        .map(|policy| {
            let value = json!({
                "pattern": policy.spec.pattern, "definition": policy.definition,
                "priority": policy.spec.priority, "apply-to": policy.spec.apply_to,
            });
            json!({ "vhost": vhost, "component": OPERATOR_POLICY_COMPONENT, "name": policy.name, "value": value })
        })
        .collect();
    let limits = host.limits();
    if !limits.is_empty() {
        let value = Value::Object(limits.to_json());
        parameters
            .push(json!({ "vhost": vhost, "component": VHOST_LIMITS_COMPONENT, "name": "limits", "value": value }));
    }
    parameters
}

fn visible(caller: &Caller, api: &Management) -> Vec<Value> {
    let vhosts = api.broker().vhosts();
    let seen = vhosts.iter().filter(|v| caller.may_see_vhost(api.broker(), v.name()));
    seen.flat_map(|v| of_vhost(api, v.name())).collect()
}

async fn all(caller: Caller, State(api): State<Management>) -> Json<Value> {
    Json(Value::Array(visible(&caller, &api)))
}

async fn of_component(caller: Caller, State(api): State<Management>, Path(component): Path<String>) -> Json<Value> {
    let parameters = visible(&caller, &api).into_iter().filter(|p| p["component"] == component.as_str());
    Json(Value::Array(parameters.collect()))
}

async fn of_component_in_vhost(
    State(api): State<Management>,
    Path((component, vhost)): Path<(String, String)>,
) -> Json<Value> {
    let parameters = of_vhost(&api, &vhost).into_iter().filter(|p| p["component"] == component.as_str());
    Json(Value::Array(parameters.collect()))
}
