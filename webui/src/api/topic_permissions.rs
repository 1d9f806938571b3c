//! `/api/topic-permissions`: users' topic permissions, in RabbitMQ's shapes (administrators
//! only, as the other permissions): all of them, a user's in a vhost (one entry per exchange),
//! set with `PUT {"exchange", "write", "read"}`, cleared with `DELETE` (all of the user's in the
//! vhost, or one exchange's).

use super::Management;
use crate::authorization::Rule;
use crate::error::ApiError;
use crate::json_body::JsonBody;
use crate::route_table::RouteTable;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};
use warren_delivery::access::{AccessChange, TopicPermissionSpec};

/// The topic permission routes.
pub(super) fn routes(table: &mut RouteTable) {
    use Rule::Administrator;
    table
        .get("/api/topic-permissions", Administrator, all)
        .get("/api/vhosts/{vhost}/topic-permissions", Administrator, of_vhost)
        .get("/api/topic-permissions/{vhost}/{user}", Administrator, of_user)
        .put("/api/topic-permissions/{vhost}/{user}", Administrator, put)
        .delete("/api/topic-permissions/{vhost}/{user}", Administrator, delete_all)
        .delete("/api/topic-permissions/{vhost}/{user}/{exchange}", Administrator, delete_one);
}

/// A topic permission as RabbitMQ's API and definitions show it.
pub(super) fn topic_permission_json(vhost: &str, user: &str, spec: &TopicPermissionSpec) -> Value {
    json!({ "user": user, "vhost": vhost, "exchange": spec.exchange, "write": spec.write, "read": spec.read })
}

/// A topic permission from RabbitMQ's JSON: `exchange`, `write` and `read`, all required.
pub(super) fn topic_permission_spec(body: &Value) -> Result<TopicPermissionSpec, ApiError> {
    let field = |key: &str| {
        body.get(key)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| ApiError::new(StatusCode::BAD_REQUEST, format!("'{key}' must be set")))
    };
    Ok(TopicPermissionSpec { exchange: field("exchange")?, write: field("write")?, read: field("read")? })
}

fn listed(api: &Management, keep: impl Fn(&str, &str) -> bool) -> Vec<Value> {
    let every = api.broker().access().topic_permissions();
    every.iter().filter(|(v, u, _)| keep(v, u)).map(|(v, u, spec)| topic_permission_json(v, u, spec)).collect()
}

async fn all(State(api): State<Management>) -> Json<Value> {
    Json(Value::Array(listed(&api, |_, _| true)))
}

async fn of_vhost(State(api): State<Management>, Path(vhost): Path<String>) -> Json<Value> {
    Json(Value::Array(listed(&api, |v, _| v == vhost)))
}

async fn of_user(
    State(api): State<Management>,
    Path((vhost, user)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let found = listed(&api, |v, u| v == vhost && u == user);
    if found.is_empty() {
        return Err(ApiError::new(StatusCode::NOT_FOUND, format!("no topic permissions for '{user}' in '{vhost}'")));
    }
    Ok(Json(Value::Array(found)))
}

async fn put(
    State(api): State<Management>,
    Path((vhost, user)): Path<(String, String)>,
    JsonBody(body): JsonBody<Value>,
) -> Result<StatusCode, ApiError> {
    let permissions = topic_permission_spec(&body)?;
    let existed = api.broker().access().topic_permissions_of(&vhost, &user, &permissions.exchange).is_some();
    api.broker().change_access(AccessChange::SetTopicPermissions { vhost, user, permissions }).await?;
    Ok(if existed { StatusCode::NO_CONTENT } else { StatusCode::CREATED })
}

async fn delete_all(
    State(api): State<Management>,
    Path((vhost, user)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    api.broker().change_access(AccessChange::ClearTopicPermissions { vhost, user, exchange: None }).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn delete_one(
    State(api): State<Management>,
    Path((vhost, user, exchange)): Path<(String, String, String)>,
) -> Result<StatusCode, ApiError> {
    let exchange = Some(exchange);
    api.broker().change_access(AccessChange::ClearTopicPermissions { vhost, user, exchange }).await?;
    Ok(StatusCode::NO_CONTENT)
}
