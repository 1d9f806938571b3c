//! The cluster verbs of rabbitmqctl, rabbitmq-queues and rabbitmq-streams: `cluster_status`,
//! `metadata_store_status`, `join_cluster`, `forget_cluster_node`, `quorum_status`, `add_member`, `delete_member`,
//! `grow`, `shrink`, `stream_status`, `add_replica`, `delete_replica`; `enable_feature_flag`.

use super::client::{encode, Client};
use super::output::say;
use super::CtlError;
use serde_json::json;
use warren_delivery::queue::QueueType;

/// `cluster_status`: the nodes, running or down.
pub fn cluster_status(client: &Client) -> Result<(), CtlError> {
    let nodes = client.get("/api/nodes")?;
    for node in nodes.as_array().into_iter().flatten() {
        let running = if node["running"].as_bool() == Some(true) { "running" } else { "down" };
        say(&format!("{} {running}\n", node["name"].as_str().unwrap_or("?")));
    }
    Ok(())
}

/// `metadata_store_status`: this node's member of the catalog, a `key value` line per figure.
pub fn metadata_store_status(client: &Client) -> Result<(), CtlError> {
    let nodes = client.get("/api/nodes")?;
    let status = nodes.as_array().into_iter().flatten().find_map(|node| node["metadata_store"].as_object());
    let status =
        status.ok_or_else(|| CtlError::Failed("the node did not report its catalog (metadata store)".into()))?;
    for (key, value) in status {
        let value = value.as_str().map_or_else(|| value.to_string(), str::to_string);
        say(&format!("{key} {value}\n"));
    }
    Ok(())
}

/// `enable_feature_flag NAME`, or `all`: each flag not enabled yet, oldest first.
pub fn enable_feature_flag(client: &Client, name: &str) -> Result<(), CtlError> {
    let names: Vec<String> = if name == "all" {
        let flags = client.get("/api/feature-flags")?;
        let disabled = flags.as_array().into_iter().flatten().filter(|flag| flag["state"] != "enabled");
        disabled.filter_map(|flag| flag["name"].as_str().map(str::to_string)).collect()
    } else {
        vec![name.to_string()]
    };
    for name in names {
        client.send("PUT", &format!("/api/feature-flags/{}/enable", encode(&name)), &json!({}))?;
        say(&format!("Enabled feature flag {name}\n"));
    }
    Ok(())
}

/// The kind of replicated queue a verb is about: the words it prints (the API route is the
/// same for both).
#[derive(Debug, Clone, Copy)]
pub enum Replicated {
    /// rabbitmq-queues' verbs: a leader and members.
    QuorumQueue,
    /// rabbitmq-streams' verbs: a writer and replicas.
    Stream,
}

impl Replicated {
    fn noun(self) -> &'static str {
        match self {
            Replicated::QuorumQueue => "quorum queue",
            Replicated::Stream => "stream",
        }
    }

    /// What the leader and the members are called, and whether the leader is listed among
    /// the members too (rabbitmq-queues lists every member; rabbitmq-streams gives each node
    /// one role).
    fn roles(self) -> (&'static str, &'static str, bool) {
        match self {
            Replicated::QuorumQueue => ("leader", "member", true),
            Replicated::Stream => ("writer", "replica", false),
        }
    }

    fn queue_type(self) -> QueueType {
        match self {
            Replicated::QuorumQueue => QueueType::Quorum,
            Replicated::Stream => QueueType::Stream,
        }
    }
}

/// `quorum_status QUEUE` / `stream_status STREAM`: its leader (writer), the other members
/// (replicas), and its messages.
pub fn replica_status(client: &Client, vhost: &str, queue: &str, kind: Replicated) -> Result<(), CtlError> {
    let info = client.get(&format!("/api/queues/{}/{}", encode(vhost), encode(queue)))?;
    if info["type"].as_str() != Some(kind.queue_type().name()) {
        return Err(CtlError::Failed(format!("'{queue}' is not a {}", kind.noun())));
    }
    let (leader_role, member_role, leader_is_member) = kind.roles();
    let leader = info["leader"].as_str();
    say(&format!("{leader_role}: {}\n", leader.unwrap_or("(none known)")));
    let members = info["members"].as_array().into_iter().flatten().filter_map(|member| member.as_str());
    for member in members.filter(|member| leader_is_member || Some(*member) != leader) {
        say(&format!("{member_role}: {member}\n"));
    }
    say(&format!("messages: {}\n", info["messages"]));
    Ok(())
}

/// `add_member QUEUE NODE` / `delete_member QUEUE NODE`, `add_replica STREAM NODE` /
/// `delete_replica STREAM NODE`.
pub fn change_member(
    client: &Client,
    vhost: &str,
    queue: &str,
    node: &str,
    kind: Replicated,
    add: bool,
) -> Result<(), CtlError> {
    let action = if add { "add" } else { "delete" };
    let path = format!("/api/queues/quorum/{}/{}/replicas/{action}", encode(vhost), encode(queue));
    client.send("POST", &path, &json!({ "node": node }))?;
    let doing = if add { "adding" } else { "removing" };
    say(&format!("{doing} {node} {} {} '{queue}'\n", if add { "to" } else { "from" }, kind.noun()));
    Ok(())
}

/// `grow NODE all`.
pub fn grow(client: &Client, node: &str) -> Result<(), CtlError> {
    client.send("POST", &format!("/api/queues/quorum/replicas/on/{}/grow", encode(node)), &json!({ "node": node }))?;
    say(&format!("adding replicas on {node}\n"));
    Ok(())
}

/// `shrink NODE`.
pub fn shrink(client: &Client, node: &str) -> Result<(), CtlError> {
    client.delete(&format!("/api/queues/quorum/replicas/on/{}/shrink", encode(node)), &[])?;
    say(&format!("removing the replicas on {node}\n"));
    Ok(())
}

/// `join_cluster NAME@HOST:PORT`.
pub fn join_cluster(client: &Client, node: &str) -> Result<(), CtlError> {
    client.send("POST", "/api/cluster/join", &json!({ "node": node }))?;
    say(&format!("joined the cluster of {node}\n"));
    Ok(())
}

/// `forget_cluster_node NODE`.
pub fn forget_cluster_node(client: &Client, node: &str) -> Result<(), CtlError> {
    client.delete(&format!("/api/nodes/{}", encode(node)), &[])?;
    say(&format!("{node} was removed from the cluster\n"));
    Ok(())
}
