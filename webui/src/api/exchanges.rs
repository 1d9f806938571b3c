//! Exchanges: `GET /api/exchanges[/{vhost}[/{name}]]`, `PUT` and `DELETE
//! /api/exchanges/{vhost}/{name}`. The default exchange is listed with the empty name, as
//! RabbitMQ lists it, and cannot be declared or deleted (403 on AMQP, 400 here).

use super::{exchange_name, flag, Management};
use crate::auth::Authenticated;
use crate::error::ApiError;
use crate::json_table;
use crate::listing::ListQuery;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use warren_delivery::exchange::Exchange;
use warren_delivery::metadata::DefinitionOp;

/// The exchange routes.
pub(super) fn routes() -> Router<Management> {
    Router::new()
        .route("/api/exchanges", get(list_all))
        .route("/api/exchanges/{vhost}", get(list_vhost))
        .route("/api/exchanges/{vhost}/{name}", get(show).put(declare).delete(remove))
}

/// An exchange as RabbitMQ's API shows it.
pub(crate) fn exchange_json(vhost: &str, exchange: &Exchange) -> Value {
    let definition = exchange.definition();
    json!({
        "name": definition.name,
        "vhost": vhost,
        "type": definition.type_name(),
        "durable": definition.durable,
        "auto_delete": definition.auto_delete,
        "internal": definition.internal,
        "arguments": json_table::to_json(&definition.arguments),
        "user_who_performed_action": "",
    })
}

fn list(
    api: &Management,
    who: &Authenticated,
    vhost: Option<&str>,
    query: &ListQuery,
) -> Result<Json<Value>, ApiError> {
    let mut items = Vec::new();
    for host in api.vhosts(who, vhost)? {
        items.extend(host.exchanges().iter().map(|exchange| exchange_json(host.name(), exchange)));
    }
    Ok(Json(query.apply(items)?))
}

async fn list_all(
    who: Authenticated,
    State(api): State<Management>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    list(&api, &who, None, &query)
}

async fn list_vhost(
    who: Authenticated,
    State(api): State<Management>,
    Path(vhost): Path<String>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    list(&api, &who, Some(&vhost), &query)
}

async fn show(
    who: Authenticated,
    State(api): State<Management>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let exchange = api.vhost(&who, &vhost)?.exchange(exchange_name(&name))?;
    Ok(Json(exchange_json(&vhost, &exchange)))
}

/// The body of `PUT /api/exchanges/{vhost}/{name}`.
#[derive(Debug, Deserialize)]
struct ExchangeBody {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default = "yes", deserialize_with = "crate::lenient::boolean")]
    durable: bool,
    #[serde(default, deserialize_with = "crate::lenient::boolean")]
    auto_delete: bool,
    #[serde(default, deserialize_with = "crate::lenient::boolean")]
    internal: bool,
    #[serde(default)]
    arguments: Value,
}

fn yes() -> bool {
    true
}

/// Declares the exchange: 201 if it is new, 204 if an equivalent one was there.
async fn declare(
    who: Authenticated,
    State(api): State<Management>,
    Path((vhost, name)): Path<(String, String)>,
    Json(body): Json<ExchangeBody>,
) -> Result<StatusCode, ApiError> {
    let host = api.vhost(&who, &vhost)?;
    let arguments = json_table::from_json(&body.arguments).map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e))?;
    let existed = host.exchange(&name).is_ok();
    let op = DefinitionOp::DeclareExchange {
        name,
        kind: body.kind,
        durable: body.durable,
        auto_delete: body.auto_delete,
        internal: body.internal,
        arguments,
    };
    warren_delivery::metadata::change(&host, op).await?;
    Ok(if existed { StatusCode::NO_CONTENT } else { StatusCode::CREATED })
}

/// Deletes the exchange (`?if-unused=true` as RabbitMQ's).
async fn remove(
    who: Authenticated,
    State(api): State<Management>,
    Path((vhost, name)): Path<(String, String)>,
    Query(flags): Query<HashMap<String, String>>,
) -> Result<StatusCode, ApiError> {
    let host = api.vhost(&who, &vhost)?;
    let name = exchange_name(&name).to_string();
    host.exchange(&name)?;
    let op = DefinitionOp::DeleteExchange { name, if_unused: flag(flags.get("if-unused")) };
    warren_delivery::metadata::change(&host, op).await?;
    Ok(StatusCode::NO_CONTENT)
}
