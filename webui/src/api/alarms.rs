//! Resource alarms: their figures are in `GET /api/nodes` (`node_figures.rs`), their health
//! checks in `health.rs`; and `GET` / `PUT /api/resource-limits` (Warren's), which reads and
//! changes the thresholds at run time, as `rabbitmqctl set_vm_memory_high_watermark` and
//! `set_disk_free_limit` do (administrators only: one change blocks every publisher).

use super::Management;
use crate::authorization::Rule;
use crate::error::ApiError;
use crate::json_body::JsonBody;
use crate::route_table::RouteTable;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use warren_delivery::resource_alarm::{parse_size_bytes, ResourceLimits};

/// The alarm routes.
pub(super) fn routes(table: &mut RouteTable) {
    table.get("/api/resource-limits", Rule::Monitoring, limits).put(
        "/api/resource-limits",
        Rule::Administrator,
        set_limits,
    );
}

fn limits_json(limits: ResourceLimits) -> Value {
    json!({
        "vm_memory_high_watermark": limits.memory_high_watermark.to_string(),
        "disk_free_limit": limits.disk_free_limit_bytes,
    })
}

async fn limits(State(api): State<Management>) -> Json<Value> {
    Json(limits_json(api.broker().alarms().limits()))
}

/// The body of `PUT /api/resource-limits`: either or both thresholds, as the flags take them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsBody {
    #[serde(default)]
    vm_memory_high_watermark: Option<Value>,
    #[serde(default)]
    disk_free_limit: Option<Value>,
}

/// A JSON string or number as the flag's text.
fn text_of(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

async fn set_limits(
    State(api): State<Management>,
    JsonBody(body): JsonBody<LimitsBody>,
) -> Result<StatusCode, ApiError> {
    let bad = |e: warren_delivery::resource_alarm::BadSize| ApiError::new(StatusCode::BAD_REQUEST, e.to_string());
    let alarms = api.broker().alarms();
    let mut limits = alarms.limits();
    if let Some(watermark) = &body.vm_memory_high_watermark {
        limits.memory_high_watermark = text_of(watermark).parse().map_err(bad)?;
    }
    if let Some(size) = &body.disk_free_limit {
        limits.disk_free_limit_bytes = parse_size_bytes(&text_of(size)).map_err(bad)?;
    }
    tracing::info!(memory_high_watermark = %limits.memory_high_watermark, disk_free_limit = limits.disk_free_limit_bytes, "resource limits changed");
    alarms.set_limits(limits);
    Ok(StatusCode::NO_CONTENT)
}
