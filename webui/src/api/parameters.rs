//! `/api/parameters`: RabbitMQ's runtime parameters that Warren has, read-only: operator
//! policies (component `operator_policy`) and vhost limits (component `vhost-limits`, one
//! entry named `limits` per vhost that has any), in the shape RabbitMQ lists and exports them.
//! They are changed through their own routes (`/api/operator-policies`, `/api/vhost-limits`).

use super::Management;
use crate::authorization::{Caller, Rule};
use crate::route_table::RouteTable;
use axum::extract::{Path, State};
use axum::Json;
use serde_json::{json, Value};
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
        .get("/api/parameters/{component}/{vhost}", Rule::Vhost, of_component_in_vhost);
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
