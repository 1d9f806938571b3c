//! The cluster's nodes, and the replicas of quorum queues and streams: what `warren ctl`'s
//! cluster verbs speak (`cluster_status`, `join_cluster`, `forget_cluster_node`, `add_member`
//! and `add_replica`, `delete_member` and `delete_replica`, `grow`, `shrink`).

use super::Management;
use super::NodeFigures;
use crate::authorization::Rule;
use crate::error::ApiError;
use crate::json_body::JsonBody;
use crate::route_table::RouteTable;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use warren_delivery::feature_flags::{self, NodeVersions};
use warren_delivery::queue::QueueType;
use warren_delivery::quorum::ClusterFuture;
use warren_delivery::{Queue, VirtualHost};

/// What the API needs to know of the cluster (the server knows it).
pub trait ClusterView: Send + Sync + 'static {
    /// Every node of the cluster and whether it is reachable from this one.
    fn nodes(&self) -> Vec<NodeStatus>;
    /// The Raft id of node `name`, if it is a node of the cluster.
    fn node_id(&self, name: &str) -> Option<u64>;
    /// This node's name.
    fn local_node(&self) -> String;
    /// The cluster's name.
    fn cluster_name(&self) -> String;
    /// `join_cluster`: makes this node, on its own so far, a node of the cluster of `target`
    /// (`name@host:port`); returns the cluster's nodes.
    fn join_cluster(&self, target: &str) -> ClusterFuture<Result<Vec<String>, String>> {
        let _ = target;
        Box::pin(async {
            Err("this node has no inter-node listener: start it with --cluster-listen and --cluster-secret-file".into())
        })
    }
    /// The figures of every other running node of the cluster, each asked now (an error for
    /// one that did not answer in time); none for a node alone.
    fn peer_figures(&self) -> ClusterFuture<Vec<(String, Result<NodeFigures, String>)>> {
        Box::pin(async { Vec::new() })
    }
    /// The machine versions every node of the cluster knows (what enabling a feature flag
    /// checks); this node's alone by default.
    fn machine_versions(&self) -> ClusterFuture<Vec<NodeVersions>> {
        let local = NodeVersions { node: self.local_node(), known: Ok(feature_flags::known_versions()) };
        Box::pin(async move { vec![local] })
    }
}

/// A node as `GET /api/nodes` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct NodeStatus {
    /// Its name.
    pub name: String,
    /// Whether it is up (this node, or a peer connected to it).
    pub running: bool,
    /// RabbitMQ's node type; Warren's nodes keep their data on disk.
    #[serde(rename = "type")]
    pub kind: &'static str,
}

/// The cluster routes: the nodes are for monitors, changing the cluster for administrators.
pub(super) fn routes(table: &mut RouteTable) {
    use Rule::Administrator;
    table
        .get("/api/nodes", Rule::Monitoring, nodes)
        .delete("/api/nodes/{node}", Administrator, forget_node)
        .post("/api/cluster/join", Administrator, join_cluster)
        .post("/api/queues/quorum/{vhost}/{name}/replicas/add", Administrator, add_replica)
        .post("/api/queues/quorum/{vhost}/{name}/replicas/delete", Administrator, delete_replica)
        .post("/api/queues/quorum/replicas/on/{node}/grow", Administrator, grow)
        .delete("/api/queues/quorum/replicas/on/{node}/shrink", Administrator, shrink);
}

/// The cluster's nodes, each with its figures (memory, disk, descriptors, uptime, listeners:
/// each node reads its own, and the running peers are asked for theirs), and this node with
/// its member of the catalog (`metadata_store`).
async fn nodes(State(api): State<Management>) -> Json<Value> {
    let local = api.node();
    let mut figures: HashMap<String, Result<NodeFigures, String>> =
        api.cluster.peer_figures().await.into_iter().collect();
    figures.insert(local.clone(), Ok(api.node_figures()));
    let nodes = api.cluster.nodes().into_iter().map(|node| {
        let is_local = node.name == local;
        let node_figures = figures.remove(&node.name);
        let mut shown = serde_json::to_value(node).unwrap_or_default();
        let Value::Object(fields) = &mut shown else { return shown };
        match node_figures {
            Some(Ok(figures)) => {
                if let Ok(Value::Object(more)) = serde_json::to_value(figures) {
                    fields.extend(more);
                }
            }
            Some(Err(error)) => {
                fields.insert("figures_error".into(), Value::String(error));
            }
            None => {}
        }
        if let (true, Some(catalog)) = (is_local, api.broker().catalog()) {
            fields.insert("metadata_store".into(), serde_json::to_value(catalog.store_status()).unwrap_or_default());
        }
        shown
    });
    Json(Value::Array(nodes.collect()))
}

/// The body of the routes that name a node (the replica routes, `join_cluster`).
#[derive(Debug, Deserialize)]
struct NodeRequest {
    node: String,
}

async fn add_replica(
    State(api): State<Management>,
    Path((vhost, name)): Path<(String, String)>,
    JsonBody(request): JsonBody<NodeRequest>,
) -> Result<StatusCode, ApiError> {
    change_replicas(&api, &vhost, &name, &request.node, ReplicaChange::Add).await
}

async fn delete_replica(
    State(api): State<Management>,
    Path((vhost, name)): Path<(String, String)>,
    JsonBody(request): JsonBody<NodeRequest>,
) -> Result<StatusCode, ApiError> {
    change_replicas(&api, &vhost, &name, &request.node, ReplicaChange::Delete).await
}

/// What a replica route asks for.
#[derive(Debug, Clone, Copy)]
enum ReplicaChange {
    Add,
    Delete,
}

async fn change_replicas(
    api: &Management,
    vhost: &str,
    queue: &str,
    node: &str,
    change: ReplicaChange,
) -> Result<StatusCode, ApiError> {
    let host = api.vhost(vhost)?;
    let catalog = host.catalog().ok_or_else(not_clustered)?;
    known_node(api, node)?;
    match change {
        ReplicaChange::Add => catalog.add_member(&host, queue, node).await?,
        ReplicaChange::Delete => catalog.delete_member(vhost, queue, node).await?,
    }
    Ok(StatusCode::NO_CONTENT)
}

/// The replicated queues of `kinds` this node has, with their vhosts, for which `wanted`
/// holds of whether `node` is one of their members.
fn replicated_queues(
    api: &Management,
    kinds: &[QueueType],
    node: &str,
    wanted: bool,
) -> Vec<(Arc<VirtualHost>, Arc<Queue>)> {
    let mut found = Vec::new();
    for vhost in api.broker().vhosts() {
        for queue in vhost.queues().into_iter().filter(|queue| kinds.contains(&queue.arguments().queue_type)) {
            let member = queue.replicas().map(|group| group.members().iter().any(|(_, n)| n.addr == node));
            if member == Some(wanted) {
                found.push((Arc::clone(&vhost), queue));
            }
        }
    }
    found
}

/// rabbitmq-queues `grow NODE all`: every quorum queue here without a replica on `node` gets one.
async fn grow(State(api): State<Management>, Path(node): Path<String>) -> Result<StatusCode, ApiError> {
    known_node(&api, &node)?;
    for (vhost, queue) in replicated_queues(&api, &[QueueType::Quorum], &node, false) {
        let catalog = vhost.catalog().ok_or_else(not_clustered)?;
        catalog.add_member(&vhost, queue.name(), &node).await?;
    }
    Ok(StatusCode::NO_CONTENT)
}

/// rabbitmq-queues `shrink NODE`: every quorum queue here with a replica on `node` loses it.
async fn shrink(State(api): State<Management>, Path(node): Path<String>) -> Result<StatusCode, ApiError> {
    for (vhost, queue) in replicated_queues(&api, &[QueueType::Quorum], &node, true) {
        let catalog = vhost.catalog().ok_or_else(not_clustered)?;
        catalog.delete_member(vhost.name(), queue.name(), &node).await?;
    }
    Ok(StatusCode::NO_CONTENT)
}

/// rabbitmqctl `forget_cluster_node NODE` (a Warren extension of the API: RabbitMQ has no
/// route for it): `node`, stopped, leaves the cluster. Its replicas of quorum queues and
/// streams are removed first (as `shrink` does), then the catalog group stops counting it.
async fn forget_node(State(api): State<Management>, Path(node): Path<String>) -> Result<StatusCode, ApiError> {
    let bad_request = |text: String| ApiError::new(StatusCode::BAD_REQUEST, text);
    if node == api.cluster.local_node() {
        return Err(bad_request(format!("{node} cannot forget itself: run forget_cluster_node on another node")));
    }
    let node_id = known_node(&api, &node)?;
    if api.cluster.nodes().iter().any(|n| n.name == node && n.running) {
        return Err(bad_request(format!("{node} is running: stop it first, then forget it")));
    }
    for (vhost, queue) in replicated_queues(&api, &[QueueType::Quorum, QueueType::Stream], &node, true) {
        let catalog = vhost.catalog().ok_or_else(not_clustered)?;
        catalog.delete_member(vhost.name(), queue.name(), &node).await?;
    }
    // Any vhost's handle reaches the catalog group; the change is not about one.
    let vhost = api.broker().vhosts().into_iter().next().ok_or_else(not_clustered)?;
    let catalog = vhost.catalog().ok_or_else(not_clustered)?;
    catalog.change(vhost.name(), warren_delivery::catalog::DefinitionOp::ForgetNode { node_id }).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// rabbitmqctl `join_cluster NODE` (a Warren extension of the API, as `forget_node`): this
/// node joins the cluster of the node named in the body (`{"node": "name@host:port"}`, its
/// inter-node address). Answers the cluster's nodes once this one votes in its catalog group.
async fn join_cluster(
    State(api): State<Management>,
    JsonBody(request): JsonBody<NodeRequest>,
) -> Result<Json<Vec<String>>, ApiError> {
    let joined = api.cluster.join_cluster(&request.node).await;
    let nodes = joined.map_err(|why| ApiError::new(StatusCode::BAD_REQUEST, why))?;
    Ok(Json(nodes))
}

/// Node `node`'s Raft id; 404 if it is not a node of this cluster (a replica there would be
/// a member that never answers).
fn known_node(api: &Management, node: &str) -> Result<u64, ApiError> {
    let unknown = || ApiError::new(StatusCode::NOT_FOUND, format!("{node} is not a node of this cluster"));
    api.cluster.node_id(node).ok_or_else(unknown)
}

fn not_clustered() -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "this node is not in a cluster: a queue's only replica is on its own node")
}
