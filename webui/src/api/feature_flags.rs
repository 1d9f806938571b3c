//! Feature flags (`GET /api/feature-flags`, `PUT /api/feature-flags/{name}/enable`, as
//! RabbitMQ's API names them): what `warren ctl list_feature_flags` and `enable_feature_flag`
//! speak. A flag moves a replicated state machine to a new version, once every node runs a
//! release that knows it (see `warren_delivery::feature_flags`). A node on its own has every
//! flag it knows enabled: there is no older node to wait for.

use super::Management;
use crate::authorization::Rule;
use crate::error::ApiError;
use crate::route_table::RouteTable;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};
use warren_delivery::feature_flags::{self, FeatureFlag, FEATURE_FLAGS};

/// Both routes are the administrator's, as in RabbitMQ.
pub(super) fn routes(table: &mut RouteTable) {
    table.get("/api/feature-flags", Rule::Administrator, list).put(
        "/api/feature-flags/{name}/enable",
        Rule::Administrator,
        enable,
    );
}

/// Whether `flag` is enabled on this node's cluster.
fn is_enabled(api: &Management, flag: &FeatureFlag) -> bool {
    match api.broker().catalog() {
        Some(catalog) => match flag.machine {
            feature_flags::Machine::Catalog => flag.enabled_at(catalog.machine_version()),
        },
        None => true,
    }
}

/// Every flag with its state, in RabbitMQ's fields (and the machine version it brings).
async fn list(State(api): State<Management>) -> Json<Value> {
    let flags = FEATURE_FLAGS.iter().map(|flag| {
        json!({
            "name": flag.name,
            "desc": flag.description,
            "state": if is_enabled(&api, flag) { "enabled" } else { "disabled" },
            "stability": "stable",
            "provided_by": "warren",
            "machine": flag.machine.name(),
            "machine_version": flag.version,
        })
    });
    Json(Value::Array(flags.collect()))
}

/// Enables flag `name` (and the earlier flags of its machine: versions follow one another),
/// once every node of the cluster knows its version; 409 naming the nodes that do not.
async fn enable(State(api): State<Management>, Path(name): Path<String>) -> Result<StatusCode, ApiError> {
    let flag = feature_flags::flag(&name).ok_or_else(|| {
        let known: Vec<&str> = FEATURE_FLAGS.iter().map(|flag| flag.name).collect();
        ApiError::new(StatusCode::NOT_FOUND, format!("no feature flag '{name}' (known: {})", known.join(", ")))
    })?;
    let Some(catalog) = api.broker().catalog() else { return Ok(StatusCode::NO_CONTENT) };
    if is_enabled(&api, flag) {
        return Ok(StatusCode::NO_CONTENT);
    }
    let nodes = api.cluster.machine_versions().await;
    if let Some(why) = feature_flags::why_not_enabled(flag, &nodes) {
        return Err(ApiError::new(StatusCode::CONFLICT, why));
    }
    catalog.set_machine_version(flag.version).await?;
    tracing::info!(flag = flag.name, version = flag.version, "feature flag enabled");
    Ok(StatusCode::NO_CONTENT)
}
