//! `GET` / `PUT /api/log-level` (Warren's): the running broker's log filter, read and changed
//! without a restart, as `rabbitmqctl set_log_level` does; per module too, in `RUST_LOG`'s
//! syntax (`info,warren_amqp=debug`). Administrators only: a debug level can flood the disk.

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

/// The broker's log filter, which the server owns (this crate sets up no logging).
pub trait LogLevels: Send + Sync + 'static {
    /// The filter's directives now.
    fn current(&self) -> String;
    /// Replaces the filter with `directives`; why not, if they are not a filter.
    fn set(&self, directives: &str) -> Result<(), String>;
}

/// The log-level routes.
pub(super) fn routes(table: &mut RouteTable) {
    table.get("/api/log-level", Rule::Administrator, current).put("/api/log-level", Rule::Administrator, set);
}

/// The body of `PUT /api/log-level`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LevelBody {
    /// A level (`debug`) or directives (`info,warren_amqp=debug`).
    level: String,
}

fn levels(api: &Management) -> Result<&dyn LogLevels, ApiError> {
    api.log_levels().ok_or_else(|| {
        ApiError::new(StatusCode::NOT_IMPLEMENTED, "this broker's log filter cannot be changed at run time")
    })
}

async fn current(State(api): State<Management>) -> Result<Json<Value>, ApiError> {
    Ok(Json(json!({ "level": levels(&api)?.current() })))
}

async fn set(State(api): State<Management>, JsonBody(body): JsonBody<LevelBody>) -> Result<StatusCode, ApiError> {
    levels(&api)?.set(&body.level).map_err(|reason| ApiError::new(StatusCode::BAD_REQUEST, reason))?;
    tracing::info!(level = %body.level, "log filter changed");
    Ok(StatusCode::NO_CONTENT)
}
