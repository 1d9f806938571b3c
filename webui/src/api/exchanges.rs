//! Exchanges: `GET /api/exchanges[/{vhost}[/{name}]]`, `PUT` and `DELETE
//! /api/exchanges/{vhost}/{name}`. The default exchange is listed with the empty name, as
//! RabbitMQ lists it, and cannot be declared or deleted (403 on AMQP, 400 here).

use super::{exchange_name, flag, Management};
use crate::authorization::{Caller, ObjectOp, Rule};
use crate::error::ApiError;
use crate::json_body::JsonBody;
use crate::json_table;
use crate::listing::ListQuery;
use crate::listing::{field, Listed, SortKey};
use crate::route_table::RouteTable;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use warren_delivery::catalog::DefinitionOp;
use warren_delivery::exchange::Exchange;
use warren_delivery::VirtualHost;

/// The exchange routes.
pub(super) fn routes(table: &mut RouteTable) {
    table
        .get("/api/exchanges", Rule::Management, list_all)
        .get("/api/exchanges/{vhost}", Rule::Vhost, list_vhost)
        .get("/api/exchanges/{vhost}/{name}", Rule::Vhost, show)
        .put("/api/exchanges/{vhost}/{name}", Rule::Object(ObjectOp::DeclareExchange), declare)
        .delete("/api/exchanges/{vhost}/{name}", Rule::Object(ObjectOp::DeleteExchange), remove);
}

/// An exchange's definition as RabbitMQ's API and definitions show it.
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

/// An exchange as the API shows it: its definition (as [`exchange_json`]) and the policies
/// that apply to it.
fn exchange_with_policies(vhost: &VirtualHost, exchange: &Exchange) -> Value {
    let mut item = exchange_json(vhost.name(), exchange);
    let applied = vhost.policies().applied(exchange.name(), warren_delivery::policy::Target::Exchange);
    super::policies::insert_applied(&mut item, applied);
    item
}

/// An exchange in a list: shown as JSON when its turn comes.
struct ExchangeRow {
    vhost: Arc<VirtualHost>,
    exchange: Arc<Exchange>,
}

impl Listed for ExchangeRow {
    fn name(&self) -> &str {
        self.exchange.name()
    }

    fn sort_key(&self, path: &str) -> SortKey {
        match path {
            "name" => SortKey::text(self.exchange.name()),
            _ => SortKey::of(field(&exchange_with_policies(&self.vhost, &self.exchange), path)),
        }
    }

    fn into_json(self) -> Value {
        exchange_with_policies(&self.vhost, &self.exchange)
    }
}

fn list(api: &Management, caller: &Caller, vhost: Option<&str>, query: &ListQuery) -> Result<Response, ApiError> {
    let mut rows = Vec::new();
    for host in api.vhosts(caller, vhost)? {
        rows.extend(host.exchanges().into_iter().map(|exchange| ExchangeRow { vhost: Arc::clone(&host), exchange }));
    }
    query.answer(rows)
}

async fn list_all(
    caller: Caller,
    State(api): State<Management>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    list(&api, &caller, None, &query)
}

async fn list_vhost(
    caller: Caller,
    State(api): State<Management>,
    Path(vhost): Path<String>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    list(&api, &caller, Some(&vhost), &query)
}

async fn show(
    State(api): State<Management>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let host = api.vhost(&vhost)?;
    let exchange = host.exchange(exchange_name(&name))?;
    Ok(Json(exchange_with_policies(&host, &exchange)))
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
    State(api): State<Management>,
    Path((vhost, name)): Path<(String, String)>,
    JsonBody(body): JsonBody<ExchangeBody>,
) -> Result<StatusCode, ApiError> {
    let host = api.vhost(&vhost)?;
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
    warren_delivery::catalog::change(&host, op).await?;
    Ok(if existed { StatusCode::NO_CONTENT } else { StatusCode::CREATED })
}

/// Deletes the exchange (`?if-unused=true` as RabbitMQ's).
async fn remove(
    State(api): State<Management>,
    Path((vhost, name)): Path<(String, String)>,
    Query(flags): Query<HashMap<String, String>>,
) -> Result<StatusCode, ApiError> {
    let host = api.vhost(&vhost)?;
    let name = exchange_name(&name).to_string();
    host.exchange(&name)?;
    let op = DefinitionOp::DeleteExchange { name, if_unused: flag(flags.get("if-unused")) };
    warren_delivery::catalog::change(&host, op).await?;
    Ok(StatusCode::NO_CONTENT)
}
