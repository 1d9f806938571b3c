//! Queues: `GET /api/queues[/{vhost}[/{name}]]`, `PUT` and `DELETE /api/queues/{vhost}/{name}`,
//! `DELETE /api/queues/{vhost}/{name}/contents` (purge). Declares and deletes go through the
//! same path as AMQP's (the catalog). Another connection's exclusive
//! queue is not the API's to purge (405, as over AMQP).

use super::{flag, message_stats, Management};
use crate::authorization::{Caller, ObjectOp, Rule};
use crate::error::ApiError;
use crate::json_body::JsonBody;
use crate::json_table;
use crate::listing::{field, ListQuery, Listed, SortKey};
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
use warren_delivery::vhost::VirtualHost;
use warren_delivery::Queue;

/// The connection the API acts as: none, so another connection's exclusive queue is locked.
pub(crate) const API_CONNECTION: warren_delivery::ConnectionId = warren_delivery::ConnectionId(0);

/// The queue routes.
pub(super) fn routes(table: &mut RouteTable) {
    table
        .get("/api/queues", Rule::Management, list_all)
        .get("/api/queues/{vhost}", Rule::Vhost, list_vhost)
        .get("/api/queues/{vhost}/{name}", Rule::Vhost, show)
        .put("/api/queues/{vhost}/{name}", Rule::Object(ObjectOp::DeclareQueue), declare)
        .delete("/api/queues/{vhost}/{name}", Rule::Object(ObjectOp::DeleteQueue), remove)
        .delete("/api/queues/{vhost}/{name}/contents", Rule::Object(ObjectOp::ReadQueue), purge);
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
    super::policies::insert_applied(&mut item, queue.applied_policy());
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
/// it is on the page asked for (or when a streamed list reaches it).
pub(crate) struct QueueRow {
    api: Arc<Management>,
    vhost: Arc<VirtualHost>,
    queue: Arc<Queue>,
}

impl QueueRow {
    /// `queue` of `vhost`, shown by `api`.
    pub(crate) fn new(api: Arc<Management>, vhost: Arc<VirtualHost>, queue: Arc<Queue>) -> Self {
        QueueRow { api, vhost, queue }
    }

    /// Every queue of `vhost` (all the vhosts `caller` may see if `None`).
    pub(crate) fn all(api: &Management, caller: &Caller, vhost: Option<&str>) -> Result<Vec<QueueRow>, ApiError> {
        let shared = Arc::new(api.clone());
        let mut rows = Vec::new();
        for host in api.vhosts(caller, vhost)? {
            let of_host = host.queues().into_iter();
            rows.extend(of_host.map(|queue| QueueRow { api: Arc::clone(&shared), vhost: host.clone(), queue }));
        }
        Ok(rows)
    }
}

impl Listed for QueueRow {
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
            _ => SortKey::of(field(&queue_json(&self.api, self.vhost.name(), queue), path)),
        }
    }

    fn into_json(self) -> Value {
        queue_json(&self.api, self.vhost.name(), &self.queue)
    }
}

async fn list_all(
    caller: Caller,
    State(api): State<Management>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    query.answer(QueueRow::all(&api, &caller, None)?)
}

async fn list_vhost(
    caller: Caller,
    State(api): State<Management>,
    Path(vhost): Path<String>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    query.answer(QueueRow::all(&api, &caller, Some(&vhost))?)
}

async fn show(
    State(api): State<Management>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let queue = api.vhost(&vhost)?.queue(&name)?;
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
    State(api): State<Management>,
    Path((vhost, name)): Path<(String, String)>,
    JsonBody(body): JsonBody<QueueBody>,
) -> Result<StatusCode, ApiError> {
    let host = api.vhost(&vhost)?;
    let arguments = json_table::from_json(&body.arguments).map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e))?;
    let existed = host.queue(&name).is_ok();
    let op = DefinitionOp::DeclareQueue {
        name,
        durable: body.durable.unwrap_or(true),
        auto_delete: body.auto_delete,
        arguments,
        members: None,
    };
    warren_delivery::catalog::change(&host, op).await?;
    Ok(if existed { StatusCode::NO_CONTENT } else { StatusCode::CREATED })
}

/// Deletes the queue (`?if-unused=true`, `?if-empty=true` as RabbitMQ's).
async fn remove(
    State(api): State<Management>,
    Path((vhost, name)): Path<(String, String)>,
    Query(flags): Query<HashMap<String, String>>,
) -> Result<StatusCode, ApiError> {
    let host = api.vhost(&vhost)?;
    host.queue(&name)?;
    let op = DefinitionOp::DeleteQueue {
        name,
        if_unused: flag(flags.get("if-unused")),
        if_empty: flag(flags.get("if-empty")),
    };
    warren_delivery::catalog::change(&host, op).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Purges the queue.
async fn purge(
    State(api): State<Management>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let queue = api.vhost(&vhost)?.queue(&name)?;
    queue.check_owner(API_CONNECTION)?;
    queue.purge().wait().await?;
    Ok(StatusCode::NO_CONTENT)
}
