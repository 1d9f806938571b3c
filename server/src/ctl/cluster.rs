//! The cluster verbs of rabbitmqctl and rabbitmq-queues: `cluster_status`, `join_cluster`,
//! `forget_cluster_node`, `quorum_status`, `add_member`, `delete_member`, `grow`, `shrink`.

use super::client::{encode, Client};
use super::output::say;
use super::CtlError;
use serde_json::json;

/// `cluster_status`: the nodes, running or down.
pub fn cluster_status(client: &Client) -> Result<(), CtlError> {
    let nodes = client.get("/api/nodes")?;
    for node in nodes.as_array().into_iter().flatten() {
        let running = if node["running"].as_bool() == Some(true) { "running" } else { "down" };
        say(&format!("{} {running}\n", node["name"].as_str().unwrap_or("?")));
    }
    Ok(())
}

/// `quorum_status QUEUE`: its leader, members and messages.
pub fn quorum_status(client: &Client, vhost: &str, queue: &str) -> Result<(), CtlError> {
    let info = client.get(&format!("/api/queues/{}/{}", encode(vhost), encode(queue)))?;
    say(&format!("leader: {}\n", info["leader"].as_str().unwrap_or("(none known)")));
    for member in info["members"].as_array().into_iter().flatten() {
        say(&format!("member: {}\n", member.as_str().unwrap_or("?")));
    }
    say(&format!("messages: {}\n", info["messages"]));
    Ok(())
}

/// `add_member QUEUE NODE` / `delete_member QUEUE NODE`.
pub fn change_member(client: &Client, vhost: &str, queue: &str, node: &str, add: bool) -> Result<(), CtlError> {
    let action = if add { "add" } else { "delete" };
    let path = format!("/api/queues/quorum/{}/{}/replicas/{action}", encode(vhost), encode(queue));
    client.send("POST", &path, &json!({ "node": node }))?;
    let doing = if add { "adding" } else { "removing" };
    say(&format!("{doing} {node} {} quorum queue '{queue}'\n", if add { "to" } else { "from" }));
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
