//! The routes of the management API and their JSON, in the shapes of RabbitMQ's, so that its
//! tools (rabbitmqadmin, dashboards, scripts) work against Warren. One module per resource:
//!
//! - `overview`: the overview, nodes, virtual hosts, health checks;
//! - `access`: users, permissions, vhost limits;
//! - `exchanges`, `queues`, `bindings`: definitions, declared and deleted as AMQP would;
//! - `connections`: connections (closed with a reason), channels, consumers;
//! - `definitions`: export and import in RabbitMQ's definitions format;
//! - `messages`: publish, get, and replay by offset (an extension);
//! - `cluster`: the cluster's nodes and quorum queues' replicas (`warren ctl`'s cluster verbs).

mod access;
mod alarms;
mod bindings;
mod cluster;
mod connections;
mod definitions;
mod exchanges;
mod messages;
mod overview;
mod queues;

pub use cluster::{ClusterView, NodeStatus};
pub(crate) use messages::{read_log, ReplayQuery};
pub(crate) use queues::{queue_json, QueueRow};

use crate::auth::{Authenticated, Sessions};
use crate::error::ApiError;
use crate::rates::{QueueRates, Rates};
use axum::http::StatusCode;
use axum::Router;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::Arc;
use warren_delivery::{Broker, VirtualHost};

/// A listener the overview names.
#[derive(Debug, Clone)]
pub struct Listener {
    /// `amqp`, `http`, `clustering`.
    pub protocol: &'static str,
    /// Where it listens.
    pub addr: SocketAddr,
}

/// The API's state: the broker, the cluster, the rates.
#[derive(Clone)]
pub struct Management {
    broker: Arc<Broker>,
    cluster: Arc<dyn ClusterView>,
    rates: Arc<Rates>,
    sessions: Arc<Sessions>,
    listeners: Arc<Vec<Listener>>,
    started_at_ms: u64,
    shutdown: tokio::sync::watch::Receiver<bool>,
}

impl Management {
    /// The API of `broker`, in `cluster`, listening on `listeners`.
    pub fn new(broker: Arc<Broker>, cluster: Arc<dyn ClusterView>, listeners: Vec<Listener>) -> Self {
        Management {
            broker,
            cluster,
            rates: Arc::new(Rates::default()),
            sessions: Arc::new(Sessions::default()),
            listeners: Arc::new(listeners),
            started_at_ms: warren_delivery::scheduler::now_ms(),
            shutdown: tokio::sync::watch::channel(false).1,
        }
    }

    /// The same API, stopping its long-lived parts (WebSockets) when `shutdown` turns true.
    pub fn stopping_with(mut self, shutdown: tokio::sync::watch::Receiver<bool>) -> Self {
        self.shutdown = shutdown;
        self
    }

    /// Turns true when the broker stops.
    pub(crate) fn shutdown(&self) -> tokio::sync::watch::Receiver<bool> {
        self.shutdown.clone()
    }

    /// The UI's login sessions.
    pub(crate) fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    /// The broker.
    pub fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }

    /// The rates the sampler keeps.
    pub fn rates(&self) -> &Arc<Rates> {
        &self.rates
    }

    /// This node's name.
    pub fn node(&self) -> String {
        self.cluster.local_node()
    }

    /// The cluster's nodes as the API lists them.
    pub(crate) fn cluster_nodes(&self) -> Vec<NodeStatus> {
        self.cluster.nodes()
    }

    /// The listeners.
    pub fn listeners(&self) -> &[Listener] {
        &self.listeners
    }

    /// Virtual host `name` as `who` may see it: 404 if there is none, 401 if `who` is neither
    /// allowed every vhost nor has permissions in this one.
    pub(crate) fn vhost(&self, who: &Authenticated, name: &str) -> Result<Arc<VirtualHost>, ApiError> {
        let vhost = self
            .broker
            .vhost(name)
            .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("no vhost '{name}'")))?;
        if !self.may_see(who, name) {
            return Err(ApiError::new(StatusCode::UNAUTHORIZED, format!("access to vhost '{name}' refused"))
                .without_challenge());
        }
        Ok(vhost)
    }

    /// The vhosts a route names: one (`Some(name)`) or all that `who` may see.
    pub(crate) fn vhosts(&self, who: &Authenticated, name: Option<&str>) -> Result<Vec<Arc<VirtualHost>>, ApiError> {
        match name {
            Some(name) => Ok(vec![self.vhost(who, name)?]),
            None => Ok(self.broker.vhosts().into_iter().filter(|v| self.may_see(who, v.name())).collect()),
        }
    }

    /// Whether `who` may see vhost `name`'s objects.
    fn may_see(&self, who: &Authenticated, name: &str) -> bool {
        who.sees_everything || self.broker.access().permissions_of(name, &who.user).is_some()
    }
}

/// The API's routes.
pub fn router(management: Management) -> Router {
    Router::new()
        .merge(overview::routes())
        .merge(access::routes())
        .merge(alarms::routes())
        .merge(exchanges::routes())
        .merge(queues::routes())
        .merge(bindings::routes())
        .merge(connections::routes())
        .merge(definitions::routes())
        .merge(messages::routes())
        .merge(cluster::routes())
        .merge(crate::metrics::routes())
        .merge(crate::auth::routes())
        .merge(crate::feed::routes())
        .merge(crate::ui::routes())
        .with_state(management)
}

/// RabbitMQ's `message_stats` of counters and their rates: each counter and its
/// `_details.rate`.
pub(crate) fn message_stats(sampled: &QueueRates) -> Value {
    let (counts, rates) = (&sampled.counts, &sampled.rates);
    let pairs = [
        ("publish", counts.publish, rates.publish),
        ("deliver_get", counts.deliver_get(), rates.deliver_get),
        ("deliver", counts.deliver, rates.deliver),
        ("deliver_no_ack", counts.deliver_no_ack, rates.deliver_no_ack),
        ("get", counts.get, rates.get),
        ("get_no_ack", counts.get_no_ack, rates.get_no_ack),
        ("ack", counts.ack, rates.ack),
        ("redeliver", counts.redeliver, rates.redeliver),
    ];
    let mut stats = serde_json::Map::new();
    for (name, count, rate) in pairs {
        stats.insert(name.to_string(), json!(count));
        stats.insert(format!("{name}_details"), json!({ "rate": rate }));
    }
    Value::Object(stats)
}

/// The exchange a route names: `amq.default` is the default exchange, as in RabbitMQ's API.
pub(crate) fn exchange_name(name: &str) -> &str {
    if name == "amq.default" {
        ""
    } else {
        name
    }
}

/// A query flag as RabbitMQ reads it (`?if-unused=true`).
pub(crate) fn flag(value: Option<&String>) -> bool {
    value.is_some_and(|v| v == "true")
}
