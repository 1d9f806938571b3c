//! Queues: `GET /api/queues[/{vhost}[/{name}]]`, `PUT` and `DELETE /api/queues/{vhost}/{name}`,
//! `DELETE /api/queues/{vhost}/{name}/contents` (purge). Declares and deletes go through the
//! same path as AMQP's (the metadata group in a cluster).

use super::{flag, message_stats, Management};
use crate::auth::Authenticated;
use crate::error::ApiError;
use crate::json_table;
use crate::listing::{field, ListQuery, Listed, SortKey};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{delete, get};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use warren_delivery::metadata::DefinitionOp;
use warren_delivery::vhost::{DeleteCondition, VirtualHost};
use warren_delivery::Queue;

/// The queue routes.
pub(super) fn routes() -> Router<Management> {
    Router::new()
        .route("/api/queues", get(list_all))
        .route("/api/queues/{vhost}", get(list_vhost))
        .route("/api/queues/{vhost}/{name}", get(show).put(declare).delete(remove))
        .route("/api/queues/{vhost}/{name}/contents", delete(purge))
}

/// The queue's kind as RabbitMQ names it.
fn kind(queue: &Queue) -> &'static str {
    queue.arguments().queue_type.name()
}

/// A queue as RabbitMQ's API shows it.
pub(crate) fn queue_json(api: &Management, vhost: &str, queue: &Queue) -> Value {
    let definition = queue.definition();
    let (ready, unacked) = (u64::from(queue.message_count()), u64::from(queue.unacked_count()));
    let sampled = api.rates().queue(vhost, queue.name());
    let mut item = json!({
        "name": definition.name,
        "vhost": vhost,
        "type": kind(queue),
        "durable": definition.durable,
        "auto_delete": definition.auto_delete,
        "exclusive": definition.exclusive_owner.is_some(),
        "arguments": json_table::to_json(&definition.arguments),
        "node": api.node(),
        "state": "running",
        "messages": ready + unacked,
        "messages_ready": ready,
        "messages_unacknowledged": unacked,
        "consumers": queue.consumer_count(),
        "message_stats": message_stats(&sampled),
    });
    if let Some(group) = queue.replicas() {
        let members = group.members();
        let leader = group.leader().and_then(|id| members.iter().find(|(m, _)| *m == id)).map(|(_, n)| n.addr.clone());
        item["leader"] = json!(leader);
        item["members"] = json!(members.into_iter().map(|(_, node)| node.addr).collect::<Vec<_>>());
    }
    if let Some(homes) = queue.homes() {
        item["state"] = json!("remote");
        item["homes"] = json!(homes);
    }
    item
}

/// A queue in a list: filtered and sorted on what the queue holds, shown as JSON only if
/// it is on the page asked for.
pub(crate) struct QueueRow<'a> {
    api: &'a Management,
    vhost: Arc<VirtualHost>,
    queue: Arc<Queue>,
}

impl QueueRow<'_> {
    /// Every queue of `vhost` (all vhosts if `None`).
    pub(crate) fn all<'a>(
        api: &'a Management,
        who: &Authenticated,
        vhost: Option<&str>,
    ) -> Result<Vec<QueueRow<'a>>, ApiError> {
        let mut rows = Vec::new();
        for host in api.vhosts(who, vhost)? {
            rows.extend(host.queues().into_iter().map(|queue| QueueRow { api, vhost: host.clone(), queue }));
        }
        Ok(rows)
    }
}

impl Listed for QueueRow<'_> {
    fn name(&self) -> &str {
        self.queue.name()
    }

    /// The columns a table sorts on most come straight from the queue; any other from its
    /// JSON.
    fn sort_key(&self, path: &str) -> SortKey {
        let queue = &self.queue;
        let count = |n: u64| SortKey::Number(n as f64);
        match path {
            "name" => SortKey::text(queue.name()),
            "vhost" => SortKey::text(self.vhost.name()),
            "type" => SortKey::text(kind(queue)),
            "durable" => SortKey::Bool(queue.definition().durable),
            "auto_delete" => SortKey::Bool(queue.definition().auto_delete),
            "exclusive" => SortKey::Bool(queue.definition().exclusive_owner.is_some()),
            "messages" => count(u64::from(queue.message_count()) + u64::from(queue.unacked_count())),
            "messages_ready" => count(queue.message_count().into()),
            "messages_unacknowledged" => count(queue.unacked_count().into()),
            "consumers" => count(queue.consumer_count().into()),
            _ => SortKey::of(field(&queue_json(self.api, self.vhost.name(), queue), path)),
        }
    }

    fn into_json(self) -> Value {
        queue_json(self.api, self.vhost.name(), &self.queue)
    }
}

fn list(
    api: &Management,
    who: &Authenticated,
    vhost: Option<&str>,
    query: &ListQuery,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(query.apply(QueueRow::all(api, who, vhost)?)?))
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
    let queue = api.vhost(&who, &vhost)?.queue(&name)?;
    Ok(Json(queue_json(&api, &vhost, &queue)))
}

/// The body of `PUT /api/queues/{vhost}/{name}`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct QueueBody {
    #[serde(deserialize_with = "crate::lenient::optional_boolean")]
    durable: Option<bool>,
    #[serde(deserialize_with = "crate::lenient::boolean")]
    auto_delete: bool,
    arguments: Value,
}

/// Declares the queue: 201 if it is new, 204 if an equivalent one was there.
async fn declare(
    who: Authenticated,
    State(api): State<Management>,
    Path((vhost, name)): Path<(String, String)>,
    Json(body): Json<QueueBody>,
) -> Result<StatusCode, ApiError> {
    let host = api.vhost(&who, &vhost)?;
    let arguments = json_table::from_json(&body.arguments).map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e))?;
    let existed = host.queue(&name).is_ok();
    let op = DefinitionOp::DeclareQueue {
        name,
        durable: body.durable.unwrap_or(true),
        auto_delete: body.auto_delete,
        arguments,
        members: None,
    };
    warren_delivery::metadata::change(&host, op).await?;
    Ok(if existed { StatusCode::NO_CONTENT } else { StatusCode::CREATED })
}

/// Deletes the queue (`?if-unused=true`, `?if-empty=true` as RabbitMQ's).
async fn remove(
    who: Authenticated,
    State(api): State<Management>,
    Path((vhost, name)): Path<(String, String)>,
    Query(flags): Query<HashMap<String, String>>,
) -> Result<StatusCode, ApiError> {
    let host = api.vhost(&who, &vhost)?;
    host.queue(&name)?;
    let condition = DeleteCondition { if_unused: flag(flags.get("if-unused")), if_empty: flag(flags.get("if-empty")) };
    warren_delivery::metadata::delete_queue(&host, &name, condition).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Purges the queue.
async fn purge(
    who: Authenticated,
    State(api): State<Management>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let queue = api.vhost(&who, &vhost)?.queue(&name)?;
    queue.purge().wait().await?;
    Ok(StatusCode::NO_CONTENT)
}
