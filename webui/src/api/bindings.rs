//! Bindings: listed all, per vhost, per exchange (as source or destination), per queue, and
//! per source and destination pair; created with `POST /api/bindings/{vhost}/e/{source}/q|e/
//! {destination}` and deleted by their properties key, as RabbitMQ's API does. Every queue's
//! binding from the default exchange is listed too, as RabbitMQ lists it.

use super::Management;
use crate::authorization::{Caller, ObjectOp, Rule};
use crate::error::ApiError;
use crate::json_body::JsonBody;
use crate::json_table;
use crate::listing::{field, ListQuery, Listed, SortKey};
use crate::route_table::RouteTable;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use warren_delivery::catalog::DefinitionOp;
use warren_delivery::exchange::{Binding, Destination};
use warren_delivery::VirtualHost;

/// The binding routes.
pub(super) fn routes(table: &mut RouteTable) {
    let pair = "/api/bindings/{vhost}/e/{source}/{kind}/{destination}";
    let one = "/api/bindings/{vhost}/e/{source}/{kind}/{destination}/{props}";
    table
        .get("/api/bindings", Rule::Management, list_all)
        .get("/api/bindings/{vhost}", Rule::Vhost, list_vhost)
        .get(pair, Rule::Vhost, list_pair)
        .post(pair, Rule::Object(ObjectOp::Bind), create)
        .get(one, Rule::Vhost, show)
        .delete(one, Rule::Object(ObjectOp::Bind), remove)
        .get("/api/exchanges/{vhost}/{name}/bindings/{side}", Rule::Vhost, list_exchange)
        .get("/api/queues/{vhost}/{name}/bindings", Rule::Vhost, list_queue);
}

/// A binding as listed: its vhost, its source and everything RabbitMQ shows of it.
#[derive(Debug, Clone)]
struct BindingRow {
    vhost: String,
    source: String,
    binding: Binding,
}

impl Listed for BindingRow {
    /// Bindings have no name (the default order is their listing order).
    fn name(&self) -> &str {
        ""
    }

    fn sort_key(&self, path: &str) -> SortKey {
        match path {
            "name" => SortKey::Missing,
            _ => SortKey::of(field(&binding_json(self), path)),
        }
    }

    fn into_json(self) -> Value {
        binding_json(&self)
    }
}

/// The key that names a binding among those of one source and destination: its routing key
/// alone ("~" for an empty one) when it has no arguments, the key and a digest of them else.
fn properties_key(binding: &Binding) -> String {
    let key = if binding.routing_key.is_empty() { "~".to_string() } else { binding.routing_key.replace('~', "%7E") };
    if binding.arguments.inner().is_empty() {
        return key;
    }
    let arguments = json_table::to_json(&binding.arguments).to_string();
    let digest = Sha256::digest(arguments.as_bytes());
    let short: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
    format!("{key}~{short}")
}

fn destination_parts(destination: &Destination) -> (&str, &'static str) {
    match destination {
        Destination::Queue(name) => (name, "queue"),
        Destination::Exchange(name) => (name, "exchange"),
    }
}

fn binding_json(listed: &BindingRow) -> Value {
    let (destination, destination_type) = destination_parts(&listed.binding.destination);
    json!({
        "source": listed.source,
        "vhost": listed.vhost,
        "destination": destination,
        "destination_type": destination_type,
        "routing_key": listed.binding.routing_key,
        "arguments": json_table::to_json(&listed.binding.arguments),
        "properties_key": properties_key(&listed.binding),
    })
}

/// Every binding of `vhost`: the default exchange's to each queue first, then the others.
fn bindings_of(vhost: &VirtualHost) -> Vec<BindingRow> {
    let mut queues: Vec<String> = vhost.queues().iter().map(|q| q.name().to_string()).collect();
    queues.sort();
    let host = vhost.name().to_string();
    let default = queues.into_iter().map(|name| BindingRow {
        vhost: host.clone(),
        source: String::new(),
        binding: Binding {
            destination: Destination::Queue(name.as_str().into()),
            routing_key: name,
            arguments: Default::default(),
        },
    });
    let mut exchanges = vhost.exchanges();
    exchanges.sort_by(|a, b| a.name().cmp(b.name()));
    let explicit = exchanges.into_iter().flat_map(|exchange| {
        let source = exchange.name().to_string();
        let host = host.clone();
        exchange.bindings().into_iter().map(move |binding| BindingRow {
            vhost: host.clone(),
            source: source.clone(),
            binding,
        })
    });
    default.chain(explicit).collect()
}

fn answer(
    api: &Management,
    caller: &Caller,
    vhost: Option<&str>,
    query: &ListQuery,
    keep: impl Fn(&BindingRow) -> bool,
) -> Result<Response, ApiError> {
    let mut rows = Vec::new();
    for host in api.vhosts(caller, vhost)? {
        rows.extend(bindings_of(&host).into_iter().filter(|row| keep(row)));
    }
    query.answer(rows)
}

async fn list_all(
    caller: Caller,
    State(api): State<Management>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    answer(&api, &caller, None, &query, |_| true)
}

async fn list_vhost(
    caller: Caller,
    State(api): State<Management>,
    Path(vhost): Path<String>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    answer(&api, &caller, Some(&vhost), &query, |_| true)
}

/// The destination a route names: `q` for a queue, `e` for an exchange (404 otherwise).
fn destination(kind: &str, name: &str) -> Result<Destination, ApiError> {
    if to_exchange(kind)? {
        Ok(Destination::Exchange(name.into()))
    } else {
        Ok(Destination::Queue(name.into()))
    }
}

/// Whether a binding route's `{kind}` names an exchange (`e`) rather than a queue (`q`); 404
/// for anything else.
pub(crate) fn to_exchange(kind: &str) -> Result<bool, ApiError> {
    match kind {
        "q" => Ok(false),
        "e" => Ok(true),
        _ => Err(ApiError::new(StatusCode::NOT_FOUND, format!("no such binding route: {kind}"))),
    }
}

async fn list_pair(
    caller: Caller,
    State(api): State<Management>,
    Path((vhost, source, kind, name)): Path<(String, String, String, String)>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    let wanted = destination(&kind, &name)?;
    answer(&api, &caller, Some(&vhost), &query, |l| l.source == source && l.binding.destination == wanted)
}

async fn list_exchange(
    caller: Caller,
    State(api): State<Management>,
    Path((vhost, name, side)): Path<(String, String, String)>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    api.vhost(&vhost)?.exchange(&name)?;
    let as_destination = Destination::Exchange(name.as_str().into());
    match side.as_str() {
        "source" => answer(&api, &caller, Some(&vhost), &query, |l| l.source == name),
        "destination" => answer(&api, &caller, Some(&vhost), &query, |l| l.binding.destination == as_destination),
        _ => Err(ApiError::new(StatusCode::NOT_FOUND, "bindings/source or bindings/destination")),
    }
}

async fn list_queue(
    caller: Caller,
    State(api): State<Management>,
    Path((vhost, name)): Path<(String, String)>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    api.vhost(&vhost)?.queue(&name)?;
    let as_destination = Destination::Queue(name.as_str().into());
    answer(&api, &caller, Some(&vhost), &query, |l| l.binding.destination == as_destination)
}

/// The binding of `source` to `destination` whose properties key is `props` (404 if none).
fn find(vhost: &VirtualHost, source: &str, destination: &Destination, props: &str) -> Result<BindingRow, ApiError> {
    bindings_of(vhost)
        .into_iter()
        .find(|l| l.source == source && l.binding.destination == *destination && properties_key(&l.binding) == props)
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "no such binding"))
}

async fn show(
    State(api): State<Management>,
    Path((vhost, source, kind, name, props)): Path<(String, String, String, String, String)>,
) -> Result<Json<Value>, ApiError> {
    let host = api.vhost(&vhost)?;
    let listed = find(&host, &source, &destination(&kind, &name)?, &props)?;
    Ok(Json(binding_json(&listed)))
}

/// The body of a binding's creation.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct BindingBody {
    routing_key: String,
    arguments: Value,
}

/// Binds, as `queue.bind` or `exchange.bind`: 201, with the new binding's properties key as
/// the `Location`.
async fn create(
    State(api): State<Management>,
    Path((vhost, source, kind, name)): Path<(String, String, String, String)>,
    JsonBody(body): JsonBody<BindingBody>,
) -> Result<Response, ApiError> {
    let host = api.vhost(&vhost)?;
    let to = destination(&kind, &name)?;
    let arguments = json_table::from_json(&body.arguments).map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e))?;
    let binding = Binding { destination: to, routing_key: body.routing_key.clone(), arguments: arguments.clone() };
    let op = DefinitionOp::Bind {
        source,
        destination: name,
        to_exchange: kind == "e",
        routing_key: body.routing_key,
        arguments,
    };
    warren_delivery::catalog::change(&host, op).await?;
    Ok((StatusCode::CREATED, [(header::LOCATION, properties_key(&binding))]).into_response())
}

async fn remove(
    State(api): State<Management>,
    Path((vhost, source, kind, name, props)): Path<(String, String, String, String, String)>,
) -> Result<StatusCode, ApiError> {
    let host = api.vhost(&vhost)?;
    let listed = find(&host, &source, &destination(&kind, &name)?, &props)?;
    let op = DefinitionOp::Unbind {
        source,
        destination: name,
        to_exchange: kind == "e",
        routing_key: listed.binding.routing_key,
        arguments: listed.binding.arguments,
    };
    warren_delivery::catalog::change(&host, op).await?;
    Ok(StatusCode::NO_CONTENT)
}
