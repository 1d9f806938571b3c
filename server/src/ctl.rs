//! `warren ctl`: the command line of a running broker, with the verbs of rabbitmqctl and
//! rabbitmq-queues. It speaks the management HTTP API (`--node`, default the local node's).
//!
//! Verbs so far: `cluster_status`, `join_cluster NODE@HOST:PORT`, `forget_cluster_node NODE`, `quorum_status QUEUE`,
//! `add_member QUEUE NODE`, `delete_member QUEUE NODE`, `grow NODE all`, `shrink NODE`
//! (issue 13; the rest of the API and the verbs come with 14).

use clap::{Parser, Subcommand};
use serde_json::Value;

/// warren ctl: manage a running Warren through its management API.
#[derive(Debug, Parser)]
#[command(
    name = "warren ctl",
    about = "Manages a running Warren through its management HTTP API, with rabbitmqctl's and rabbitmq-queues' verbs.",
    long_about = None
)]
pub struct Ctl {
    /// The management API to talk to.
    #[arg(long, env = "WARREN_CTL_NODE", default_value = "http://127.0.0.1:15672")]
    node: String,
    /// User name.
    #[arg(long, env = "WARREN_CTL_USERNAME", default_value = "guest")]
    username: String,
    /// Password.
    #[arg(long, env = "WARREN_CTL_PASSWORD", default_value = "guest")]
    password: String,
    /// Virtual host of the queue verbs.
    #[arg(long, short = 'p', default_value = "/")]
    vhost: String,
    #[command(subcommand)]
    verb: Verb,
}

#[derive(Debug, Subcommand)]
enum Verb {
    /// The cluster's nodes and which are running.
    #[command(name = "cluster_status")]
    ClusterStatus,
    /// A quorum queue's members and leader.
    #[command(name = "quorum_status")]
    QuorumStatus {
        /// The queue.
        queue: String,
    },
    /// Adds a replica of a quorum queue on a node.
    #[command(name = "add_member")]
    AddMember {
        /// The queue.
        queue: String,
        /// The node (its name, e.g. warren@b).
        node: String,
    },
    /// Removes a quorum queue's replica from a node.
    #[command(name = "delete_member")]
    DeleteMember {
        /// The queue.
        queue: String,
        /// The node.
        node: String,
    },
    /// Adds a replica on a node to every quorum queue without one there.
    Grow {
        /// The node.
        node: String,
        /// Which queues: `all` (RabbitMQ's `even` is not offered).
        #[arg(default_value = "all", value_parser = ["all"])]
        strategy: String,
    },
    /// Removes every quorum queue's replica from a node.
    Shrink {
        /// The node.
        node: String,
    },
    /// Makes this node, on its own so far and empty, a node of another node's cluster.
    #[command(name = "join_cluster")]
    JoinCluster {
        /// The node to join through, with its inter-node address: name@host:port (as in --peers).
        node: String,
    },
    /// Removes a stopped node from the cluster (its quorum queue replicas first).
    #[command(name = "forget_cluster_node")]
    ForgetClusterNode {
        /// The node.
        node: String,
    },
}

/// A ctl run failed; the text says what to fix.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CtlError(String);

/// Runs `warren ctl` with `args` (after `ctl`); prints the answer to stdout.
pub fn run(args: impl IntoIterator<Item = String>) -> Result<(), CtlError> {
    let ctl = match Ctl::try_parse_from(std::iter::once("warren ctl".to_string()).chain(args)) {
        Ok(ctl) => ctl,
        Err(help) if !help.use_stderr() => {
            say(&help.to_string());
            return Ok(());
        }
        Err(error) => return Err(CtlError(error.to_string())),
    };
    let vhost = encode(&ctl.vhost);
    match &ctl.verb {
        Verb::ClusterStatus => {
            let nodes = ctl.get("/api/nodes")?;
            for node in nodes.as_array().into_iter().flatten() {
                let running = if node["running"].as_bool() == Some(true) { "running" } else { "down" };
                say(&format!("{} {running}\n", node["name"].as_str().unwrap_or("?")));
            }
        }
        Verb::QuorumStatus { queue } => {
            let info = ctl.get(&format!("/api/queues/{vhost}/{}", encode(queue)))?;
            say(&format!("leader: {}\n", info["leader"].as_str().unwrap_or("(none known)")));
            for member in info["members"].as_array().into_iter().flatten() {
                say(&format!("member: {}\n", member.as_str().unwrap_or("?")));
            }
            say(&format!("messages: {}\n", info["messages"]));
        }
        Verb::AddMember { queue, node } => {
            ctl.post(&format!("/api/queues/quorum/{vhost}/{}/replicas/add", encode(queue)), node)?;
            say(&format!("adding {node} to quorum queue '{queue}'\n"));
        }
        Verb::DeleteMember { queue, node } => {
            ctl.post(&format!("/api/queues/quorum/{vhost}/{}/replicas/delete", encode(queue)), node)?;
            say(&format!("removing {node} from quorum queue '{queue}'\n"));
        }
        Verb::Grow { node, .. } => {
            ctl.post(&format!("/api/queues/quorum/replicas/on/{}/grow", encode(node)), node)?;
            say(&format!("adding replicas on {node}\n"));
        }
        Verb::Shrink { node } => {
            ctl.delete(&format!("/api/queues/quorum/replicas/on/{}/shrink", encode(node)))?;
            say(&format!("removing the replicas on {node}\n"));
        }
        Verb::JoinCluster { node } => {
            ctl.post("/api/cluster/join", node)?;
            say(&format!("joined the cluster of {node}\n"));
        }
        Verb::ForgetClusterNode { node } => {
            ctl.delete(&format!("/api/nodes/{}", encode(node)))?;
            say(&format!("{node} was removed from the cluster\n"));
        }
    }
    Ok(())
}

/// Writes `text` to stdout; a closed pipe (`warren ctl ... | head`) is not an error.
fn say(text: &str) {
    use std::io::Write;
    let _ = std::io::stdout().write_all(text.as_bytes());
}

/// Percent-encodes a path segment (a vhost "/" is "%2F", as RabbitMQ's API expects).
fn encode(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl Ctl {
    fn agent(&self, request: ureq::Request) -> ureq::Request {
        use base64::Engine;
        let credentials =
            base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", self.username, self.password));
        request.set("Authorization", &format!("Basic {credentials}"))
    }

    fn get(&self, path: &str) -> Result<Value, CtlError> {
        let url = format!("{}{path}", self.node.trim_end_matches('/'));
        let response = self.agent(ureq::get(&url)).call().map_err(|e| self.failed(&url, e))?;
        response.into_json().map_err(|e| CtlError(format!("{url}: the answer is not JSON: {e}")))
    }

    fn post(&self, path: &str, node: &str) -> Result<(), CtlError> {
        let url = format!("{}{path}", self.node.trim_end_matches('/'));
        let body = serde_json::json!({ "node": node });
        self.agent(ureq::post(&url)).send_json(body).map_err(|e| self.failed(&url, e))?;
        Ok(())
    }

    fn delete(&self, path: &str) -> Result<(), CtlError> {
        let url = format!("{}{path}", self.node.trim_end_matches('/'));
        self.agent(ureq::delete(&url)).call().map_err(|e| self.failed(&url, e))?;
        Ok(())
    }

    fn failed(&self, url: &str, error: ureq::Error) -> CtlError {
        match error {
            ureq::Error::Status(status, response) => {
                let body: Value = response.into_json().unwrap_or(Value::Null);
                let reason = body["reason"].as_str().unwrap_or("");
                CtlError(format!("{url}: {status} {reason}"))
            }
            ureq::Error::Transport(transport) => CtlError(format!(
                "cannot reach the management API at {}: {transport} (is the broker running with --http-listen? \
                 give --node http://HOST:PORT)",
                self.node
            )),
        }
    }
}
