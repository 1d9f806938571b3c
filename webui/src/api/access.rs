//! Users, virtual hosts, permissions and vhost limits, in RabbitMQ's shapes:
//! `/api/users[/{name}[/permissions]]`, `/api/vhosts/{vhost}` (PUT, DELETE) and
//! `/api/vhosts/{vhost}/permissions`, `/api/permissions[/{vhost}/{user}]`,
//! `/api/vhost-limits[/{vhost}[/{name}]]`, `/api/whoami`. Users, permissions and changes are
//! for administrators, as in RabbitMQ (a password hash is never shown to anyone else); they go
//! through the broker's access control (the catalog), which
//! stores them. The JSON forms here serve definitions export and import too.

use super::Management;
use crate::authorization::{Caller, Rule};
use crate::error::ApiError;
use crate::json_body::JsonBody;
use crate::listing::ListQuery;
use crate::route_table::RouteTable;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Json;
use serde_json::{json, Map, Value};
use warren_delivery::access::{AccessChange, PasswordChange, PermissionSpec, User};
use warren_delivery::user_limits::UserLimits;
use warren_delivery::vhost_limits::VhostLimits;

/// The routes.
pub(super) fn routes(table: &mut RouteTable) {
    use Rule::Administrator;
    table
        .get("/api/users", Administrator, users)
        .get("/api/users/{name}", Administrator, user)
        .put("/api/users/{name}", Administrator, put_user)
        .delete("/api/users/{name}", Administrator, delete_user)
        .post("/api/users/{name}/authenticate", Administrator, authenticate_user)
        .get("/api/users/{name}/permissions", Administrator, user_permissions)
        .get("/api/vhosts/{vhost}/permissions", Administrator, vhost_permissions)
        .get("/api/permissions", Administrator, permissions)
        .get("/api/permissions/{vhost}/{user}", Administrator, permission)
        .put("/api/permissions/{vhost}/{user}", Administrator, put_permission)
        .delete("/api/permissions/{vhost}/{user}", Administrator, delete_permission)
        .get("/api/vhost-limits", Rule::Management, all_vhost_limits)
        .get("/api/vhost-limits/{vhost}", Rule::Vhost, vhost_limits)
        .put("/api/vhost-limits/{vhost}/{name}", Administrator, put_vhost_limit)
        .delete("/api/vhost-limits/{vhost}/{name}", Administrator, delete_vhost_limit)
        .get("/api/user-limits", Administrator, all_user_limits)
        .get("/api/user-limits/{user}", Administrator, user_limits)
        .put("/api/user-limits/{user}/{name}", Administrator, put_user_limit)
        .delete("/api/user-limits/{user}/{name}", Administrator, delete_user_limit)
        .get("/api/whoami", Rule::Management, whoami);
}

fn bad_request(reason: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, reason)
}

/// A user as RabbitMQ's API and definitions show it.
pub(super) fn user_json(user: &User, limits: &UserLimits) -> Value {
    let (hash, algorithm) = match &user.password {
        Some(hash) => (hash.to_base64(), hash.algorithm().name()),
        None => (String::new(), warren_delivery::access::HashingAlgorithm::Sha256.name()),
    };
    json!({
        "name": user.name, "password_hash": hash, "hashing_algorithm": algorithm, "tags": user.tags,
        "limits": limits.to_json(),
    })
}

/// Every user as RabbitMQ's API and definitions show them, with their limits.
pub(super) fn users_json(api: &Management) -> Vec<Value> {
    let access = api.broker().access();
    access.users().iter().map(|user| user_json(user, &access.user_limits(&user.name))).collect()
}

/// Tags as RabbitMQ writes them: a list, or (older versions) one comma-separated string.
fn tags_of(value: &Value) -> Result<Option<Vec<String>>, ApiError> {
    match value {
        Value::Null => Ok(None),
        Value::String(text) => Ok(Some(warren_delivery::access::user::parse_tags(text))),
        Value::Array(items) => items
            .iter()
            .map(|tag| tag.as_str().map(str::to_string).ok_or_else(|| bad_request("tags are strings")))
            .collect::<Result<_, _>>()
            .map(Some),
        _ => Err(bad_request("tags is a list or a comma-separated string")),
    }
}

/// The change a user's JSON (API body or definitions entry) asks for.
pub(super) fn user_change(name: &str, body: &Value, exists: bool) -> Result<AccessChange, ApiError> {
    let password = match (body.get("password").and_then(Value::as_str), body.get("password_hash")) {
        (Some(password), _) => PasswordChange::new_password(password),
        (None, Some(Value::String(hash))) if hash.is_empty() => PasswordChange::Clear,
        (None, Some(Value::String(hash))) => PasswordChange::Hash {
            hashing_algorithm: body
                .get("hashing_algorithm")
                .and_then(Value::as_str)
                .unwrap_or(warren_delivery::access::HashingAlgorithm::Sha256.name())
                .to_string(),
            password_hash: hash.clone(),
        },
        (None, None) if exists => PasswordChange::Keep,
        _ => return Err(bad_request("password or password_hash must be set")),
    };
    let tags = tags_of(body.get("tags").unwrap_or(&Value::Null))?;
    Ok(AccessChange::PutUser { name: name.to_string(), password, tags: tags.or_else(|| (!exists).then(Vec::new)) })
}

/// A permission as RabbitMQ's API and definitions show it.
pub(super) fn permission_json(vhost: &str, user: &str, spec: &PermissionSpec) -> Value {
    json!({ "user": user, "vhost": vhost, "configure": spec.configure, "write": spec.write, "read": spec.read })
}

/// The patterns of a permission's JSON.
pub(super) fn permission_spec(body: &Value) -> Result<PermissionSpec, ApiError> {
    let field = |key: &str| {
        body.get(key)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| bad_request(format!("'{key}' must be set")))
    };
    Ok(PermissionSpec { configure: field("configure")?, write: field("write")?, read: field("read")? })
}

async fn users(State(api): State<Management>, Query(query): Query<ListQuery>) -> Result<Response, ApiError> {
    let items = users_json(&api);
    query.answer(items)
}

async fn user(State(api): State<Management>, Path(name): Path<String>) -> Result<Json<Value>, ApiError> {
    let user = api
        .broker()
        .access()
        .user(&name)
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("no user '{name}'")))?;
    Ok(Json(user_json(&user, &api.broker().access().user_limits(&user.name))))
}

async fn put_user(
    State(api): State<Management>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<Value>,
) -> Result<StatusCode, ApiError> {
    let exists = api.broker().access().user(&name).is_some();
    api.broker().change_access(user_change(&name, &body, exists)?).await?;
    Ok(if exists { StatusCode::NO_CONTENT } else { StatusCode::CREATED })
}

async fn delete_user(State(api): State<Management>, Path(name): Path<String>) -> Result<StatusCode, ApiError> {
    api.broker().change_access(AccessChange::DeleteUser { name }).await?;
    Ok(StatusCode::NO_CONTENT)
}

fn permissions_where(api: &Management, keep: impl Fn(&str, &str) -> bool) -> Vec<Value> {
    let all = api.broker().access().permissions();
    all.iter().filter(|(vhost, user, _)| keep(vhost, user)).map(|(v, u, spec)| permission_json(v, u, spec)).collect()
}

async fn user_permissions(State(api): State<Management>, Path(name): Path<String>) -> Json<Value> {
    Json(Value::Array(permissions_where(&api, |_, user| user == name)))
}

async fn vhost_permissions(State(api): State<Management>, Path(name): Path<String>) -> Json<Value> {
    Json(Value::Array(permissions_where(&api, |vhost, _| vhost == name)))
}

async fn permissions(State(api): State<Management>) -> Json<Value> {
    Json(Value::Array(permissions_where(&api, |_, _| true)))
}

async fn permission(
    State(api): State<Management>,
    Path((vhost, user)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let found = permissions_where(&api, |v, u| v == vhost && u == user).pop();
    found
        .map(Json)
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("no permissions for '{user}' in '{vhost}'")))
}

async fn put_permission(
    State(api): State<Management>,
    Path((vhost, user)): Path<(String, String)>,
    JsonBody(body): JsonBody<Value>,
) -> Result<StatusCode, ApiError> {
    let existed = api.broker().access().permissions_of(&vhost, &user).is_some();
    let permissions = permission_spec(&body)?;
    api.broker().change_access(AccessChange::SetPermissions { vhost, user, permissions }).await?;
    Ok(if existed { StatusCode::NO_CONTENT } else { StatusCode::CREATED })
}

async fn delete_permission(
    State(api): State<Management>,
    Path((vhost, user)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    api.broker().change_access(AccessChange::ClearPermissions { vhost, user }).await?;
    Ok(StatusCode::NO_CONTENT)
}

fn limits_json(vhost: &str, limits: &VhostLimits) -> Value {
    json!({ "vhost": vhost, "value": limits.to_json() })
}

/// The limits of the vhosts the caller may see.
async fn all_vhost_limits(caller: Caller, State(api): State<Management>) -> Json<Value> {
    let vhosts = api.broker().access().vhosts();
    let shown = vhosts.iter().filter(|(v, e)| !e.limits.is_empty() && caller.may_see_vhost(api.broker(), v));
    Json(Value::Array(shown.map(|(v, e)| limits_json(v, &e.limits)).collect()))
}

async fn vhost_limits(State(api): State<Management>, Path(vhost): Path<String>) -> Result<Json<Value>, ApiError> {
    let host = api.vhost(&vhost)?;
    let limits = host.limits();
    Ok(Json(Value::Array(if limits.is_empty() { Vec::new() } else { vec![limits_json(&vhost, &limits)] })))
}

/// `limits` (RabbitMQ's JSON object) with limit `name` set to `value`, or cleared: what a
/// per-limit `PUT` or `DELETE` makes of a vhost's or a user's limits (merged, as RabbitMQ's).
fn with_limit(mut limits: Map<String, Value>, name: &str, value: Option<Value>) -> Map<String, Value> {
    match value {
        Some(value) => limits.insert(name.to_string(), value),
        None => limits.remove(name),
    };
    limits
}

/// The `value` of a per-limit `PUT`.
fn limit_value(body: &Value) -> Result<Value, ApiError> {
    body.get("value").cloned().ok_or_else(|| bad_request("'value' must be set"))
}

/// Sets (`value` some) or clears one limit of `vhost`.
async fn change_limit(api: &Management, vhost: String, name: &str, value: Option<Value>) -> Result<(), ApiError> {
    let limits = VhostLimits::from_json(&with_limit(api.vhost(&vhost)?.limits().to_json(), name, value))?;
    api.broker().change_access(AccessChange::SetVhostLimits { vhost, limits }).await?;
    Ok(())
}

async fn put_vhost_limit(
    State(api): State<Management>,
    Path((vhost, name)): Path<(String, String)>,
    JsonBody(body): JsonBody<Value>,
) -> Result<StatusCode, ApiError> {
    change_limit(&api, vhost, &name, Some(limit_value(&body)?)).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn delete_vhost_limit(
    State(api): State<Management>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    change_limit(&api, vhost, &name, None).await?;
    Ok(StatusCode::NO_CONTENT)
}

fn user_limits_json(user: &str, limits: &UserLimits) -> Value {
    json!({ "user": user, "value": limits.to_json() })
}

/// Every user with a limit, and its limits.
async fn all_user_limits(State(api): State<Management>) -> Json<Value> {
    let every = api.broker().access().all_user_limits();
    Json(Value::Array(every.iter().map(|(user, limits)| user_limits_json(user, limits)).collect()))
}

async fn user_limits(State(api): State<Management>, Path(user): Path<String>) -> Result<Json<Value>, ApiError> {
    let access = api.broker().access();
    access.user(&user).ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("no user '{user}'")))?;
    let limits = access.user_limits(&user);
    Ok(Json(Value::Array(if limits.is_empty() { Vec::new() } else { vec![user_limits_json(&user, &limits)] })))
}

/// Sets (`value` some) or clears one limit of `user`.
async fn change_user_limit(api: &Management, user: String, name: &str, value: Option<Value>) -> Result<(), ApiError> {
    let current = api.broker().access().user_limits(&user).to_json();
    let limits = UserLimits::from_json(&with_limit(current, name, value))?;
    api.broker().change_access(AccessChange::SetUserLimits { user, limits }).await?;
    Ok(())
}

async fn put_user_limit(
    State(api): State<Management>,
    Path((user, name)): Path<(String, String)>,
    JsonBody(body): JsonBody<Value>,
) -> Result<StatusCode, ApiError> {
    change_user_limit(&api, user, &name, Some(limit_value(&body)?)).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn delete_user_limit(
    State(api): State<Management>,
    Path((user, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    change_user_limit(&api, user, &name, None).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn whoami(caller: Caller, State(api): State<Management>) -> Json<Value> {
    let tags = api.broker().access().user(&caller.user).map(|u| u.tags).unwrap_or_default();
    Json(json!({ "name": caller.user, "tags": tags }))
}

/// The body of `POST /api/users/{name}/authenticate`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PasswordBody {
    password: String,
}

/// Whether user `name` logs in with the password given (`warren ctl authenticate_user`, as
/// `rabbitmqctl authenticate_user`): the credentials alone, wherever the user may log in from.
async fn authenticate_user(
    State(api): State<Management>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<PasswordBody>,
) -> Json<Value> {
    let loopback = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
    let checked = api.broker().access().authenticate(&name, &body.password, loopback);
    Json(json!({ "name": name, "authenticated": checked.is_ok() }))
}
