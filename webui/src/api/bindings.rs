//! Bindings: listed all, per vhost, per exchange (as source or destination), per queue, and
//! per source and destination pair; created with `POST /api/bindings/{vhost}/e/{source}/q|e/
//! {destination}` and deleted by their properties key, as RabbitMQ's API does. Every queue's
//! binding from the default exchange is listed too, as RabbitMQ lists it.

use super::Management;
use crate::auth::Authenticated;
use crate::error::ApiError;
use crate::json_table;
use crate::listing::ListQuery;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use warren_delivery::exchange::{Binding, Destination};
use warren_delivery::metadata::DefinitionOp;
use warren_delivery::VirtualHost;

/// The binding routes.
pub(super) fn routes() -> Router<Management> {
    Router::new()
        .route("/api/bindings", get(list_all))
        .route("/api/bindings/{vhost}", get(list_vhost))
        .route("/api/bindings/{vhost}/e/{source}/{kind}/{destination}", get(list_pair).post(create))
        .route("/api/bindings/{vhost}/e/{source}/{kind}/{destination}/{props}", get(show).delete(remove))
        .route("/api/exchanges/{vhost}/{name}/bindings/{side}", get(list_exchange))
        .route("/api/queues/{vhost}/{name}/bindings", get(list_queue))
}

/// A binding as listed: its source and everything RabbitMQ shows of it.
#[derive(Debug, Clone)]
struct Listed {
    source: String,
    binding: Binding,
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

fn binding_json(vhost: &str, listed: &Listed) -> Value {
    let (destination, destination_type) = destination_parts(&listed.binding.destination);
    json!({
        "source": listed.source,
        "vhost": vhost,
        "destination": destination,
        "destination_type": destination_type,
        "routing_key": listed.binding.routing_key,
        "arguments": json_table::to_json(&listed.binding.arguments),
        "properties_key": properties_key(&listed.binding),
    })
}

/// Every binding of `vhost`: the default exchange's to each queue first, then the others.
fn bindings_of(vhost: &VirtualHost) -> Vec<Listed> {
    let mut queues: Vec<String> = vhost.queues().iter().map(|q| q.name().to_string()).collect();
    queues.sort();
    let default = queues.into_iter().map(|name| Listed {
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
        exchange.bindings().into_iter().map(move |binding| Listed { source: source.clone(), binding })
    });
    default.chain(explicit).collect()
}

fn answer(
    api: &Management,
    who: &Authenticated,
    vhost: Option<&str>,
    query: &ListQuery,
    keep: impl Fn(&Listed) -> bool,
) -> Result<Json<Value>, ApiError> {
    let mut items = Vec::new();
    for host in api.vhosts(who, vhost)? {
        items.extend(bindings_of(&host).iter().filter(|l| keep(l)).map(|l| binding_json(host.name(), l)));
    }
    Ok(Json(query.apply(items)?))
}

async fn list_all(
    who: Authenticated,
    State(api): State<Management>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    answer(&api, &who, None, &query, |_| true)
}

async fn list_vhost(
    who: Authenticated,
    State(api): State<Management>,
    Path(vhost): Path<String>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    answer(&api, &who, Some(&vhost), &query, |_| true)
}

/// The destination a route names: `q` for a queue, `e` for an exchange (404 otherwise).
fn destination(kind: &str, name: &str) -> Result<Destination, ApiError> {
    match kind {
        "q" => Ok(Destination::Queue(name.into())),
        "e" => Ok(Destination::Exchange(name.into())),
        _ => Err(ApiError::new(StatusCode::NOT_FOUND, format!("no such binding route: {kind}"))),
    }
}

async fn list_pair(
    who: Authenticated,
    State(api): State<Management>,
    Path((vhost, source, kind, name)): Path<(String, String, String, String)>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    let wanted = destination(&kind, &name)?;
    answer(&api, &who, Some(&vhost), &query, |l| l.source == source && l.binding.destination == wanted)
}

async fn list_exchange(
    who: Authenticated,
    State(api): State<Management>,
    Path((vhost, name, side)): Path<(String, String, String)>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    api.vhost(&who, &vhost)?.exchange(&name)?;
    let as_destination = Destination::Exchange(name.as_str().into());
    match side.as_str() {
        "source" => answer(&api, &who, Some(&vhost), &query, |l| l.source == name),
        "destination" => answer(&api, &who, Some(&vhost), &query, |l| l.binding.destination == as_destination),
        _ => Err(ApiError::new(StatusCode::NOT_FOUND, "bindings/source or bindings/destination")),
    }
}

async fn list_queue(
    who: Authenticated,
    State(api): State<Management>,
    Path((vhost, name)): Path<(String, String)>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    api.vhost(&who, &vhost)?.queue(&name)?;
    let as_destination = Destination::Queue(name.as_str().into());
    answer(&api, &who, Some(&vhost), &query, |l| l.binding.destination == as_destination)
}

/// The binding of `source` to `destination` whose properties key is `props` (404 if none).
fn find(vhost: &VirtualHost, source: &str, destination: &Destination, props: &str) -> Result<Listed, ApiError> {
    bindings_of(vhost)
        .into_iter()
        .find(|l| l.source == source && l.binding.destination == *destination && properties_key(&l.binding) == props)
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "no such binding"))
}

async fn show(
    who: Authenticated,
    State(api): State<Management>,
    Path((vhost, source, kind, name, props)): Path<(String, String, String, String, String)>,
) -> Result<Json<Value>, ApiError> {
    let host = api.vhost(&who, &vhost)?;
    let listed = find(&host, &source, &destination(&kind, &name)?, &props)?;
    Ok(Json(binding_json(&vhost, &listed)))
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
    who: Authenticated,
    State(api): State<Management>,
    Path((vhost, source, kind, name)): Path<(String, String, String, String)>,
    Json(body): Json<BindingBody>,
) -> Result<Response, ApiError> {
    let host = api.vhost(&who, &vhost)?;
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
    warren_delivery::metadata::change(&host, op).await?;
    Ok((StatusCode::CREATED, [(header::LOCATION, properties_key(&binding))]).into_response())
}

async fn remove(
    who: Authenticated,
    State(api): State<Management>,
    Path((vhost, source, kind, name, props)): Path<(String, String, String, String, String)>,
) -> Result<StatusCode, ApiError> {
    let host = api.vhost(&who, &vhost)?;
    let listed = find(&host, &source, &destination(&kind, &name)?, &props)?;
    let op = DefinitionOp::Unbind {
        source,
        destination: name,
        to_exchange: kind == "e",
        routing_key: listed.binding.routing_key,
        arguments: listed.binding.arguments,
    };
    warren_delivery::metadata::change(&host, op).await?;
    Ok(StatusCode::NO_CONTENT)
}
