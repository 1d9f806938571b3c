//! The routes of the management API and their JSON, in the shapes of RabbitMQ's, so that its
//! tools (rabbitmqadmin, dashboards, scripts) work against Warren. One module per resource:
//!
//! - `overview`: the overview, nodes, virtual hosts, health checks;
//! - `access`: users, permissions, vhost limits;
//! - `exchanges`, `queues`, `bindings`: definitions, declared and deleted as AMQP would;
//! - `connections`: connections (closed with a reason), channels, consumers;
//! - `stream_consumers`: stream consumers and consumer groups with their offsets and lag;
//! - `definitions`: export and import in RabbitMQ's definitions format;
//! - `messages`: publish, get, and replay by offset (an extension);
//! - `cluster`: the cluster's nodes and quorum queues' replicas (`warren ctl`'s cluster verbs).

mod access;
mod alarms;
mod bindings;
mod cluster;
pub(crate) mod connections;
mod definitions;
mod environment;
mod exchanges;
mod feature_flags;
mod health;
mod log_level;
mod messages;
mod node_figures;
mod overview;
mod parameters;
mod policies;
mod queues;
pub(crate) mod stream_consumers;
mod stream_publishers;
mod topic_permissions;

pub(crate) use bindings::to_exchange;
pub use cluster::{ClusterView, NodeStatus};
pub use environment::{Environment, EnvironmentSetting};
pub use log_level::LogLevels;
pub(crate) use messages::{read_log, ReplayQuery};
pub use node_figures::{ListenerFigure, NodeFigures};
pub(crate) use overview::COMPATIBLE_RABBITMQ_VERSION;
pub(crate) use queues::{queue_json, QueueRow};

use crate::authorization::{Caller, Rule};
use crate::error::ApiError;
use crate::rates::{QueueRates, Rates};
use crate::route_table::{RouteRule, RouteTable};
use crate::sessions::Sessions;
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
    /// Turns of the log reads behind replay and browse.
    log_reads: Arc<tokio::sync::Semaphore>,
    /// The overview's and the live feed's figures, read at most once a second for all.
    figures: Arc<crate::figures::Figures>,
    /// The broker's log filter, if the server lets it change.
    log_levels: Option<Arc<dyn LogLevels>>,
    /// The node's settings and files.
    environment: Arc<Environment>,
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
            started_at_ms: warren_delivery::clock::now_ms(),
            shutdown: tokio::sync::watch::channel(false).1,
            log_reads: Arc::new(tokio::sync::Semaphore::new(messages::MAX_CONCURRENT_LOG_READS)),
            figures: Arc::default(),
            log_levels: None,
            environment: Arc::default(),
        }
    }

    /// The same API, showing `environment` as the node's.
    pub fn with_environment(mut self, environment: Environment) -> Self {
        self.environment = Arc::new(environment);
        self
    }

    /// The node's settings and files.
    pub(crate) fn environment(&self) -> &Environment {
        &self.environment
    }

    /// The same API, changing the broker's log filter through `levels`.
    pub fn with_log_levels(mut self, levels: Arc<dyn LogLevels>) -> Self {
        self.log_levels = Some(levels);
        self
    }

    /// The broker's log filter, if it may change.
    pub(crate) fn log_levels(&self) -> Option<&dyn LogLevels> {
        self.log_levels.as_deref()
    }

    /// Milliseconds since the API (and so the broker) started.
    pub(crate) fn uptime_ms(&self) -> u64 {
        warren_delivery::clock::now_ms().saturating_sub(self.started_at_ms)
    }

    /// Turns of the log reads behind replay and browse.
    pub(crate) fn log_reads(&self) -> &tokio::sync::Semaphore {
        &self.log_reads
    }

    /// The overview's and the live feed's shared figures.
    pub(crate) fn figures(&self) -> &Arc<crate::figures::Figures> {
        &self.figures
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

    /// The cluster's name (a broker alone: its node's, as in RabbitMQ).
    pub(crate) fn cluster_name(&self) -> String {
        self.cluster.cluster_name()
    }

    /// The cluster's nodes as the API lists them.
    pub(crate) fn cluster_nodes(&self) -> Vec<NodeStatus> {
        self.cluster.nodes()
    }

    /// The listeners.
    pub fn listeners(&self) -> &[Listener] {
        &self.listeners
    }

    /// Virtual host `name` (404 if there is none). Whether the caller may see it is the
    /// authorization layer's to decide, before the handler runs.
    pub(crate) fn vhost(&self, name: &str) -> Result<Arc<VirtualHost>, ApiError> {
        self.broker.vhost(name).ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("no vhost '{name}'")))
    }

    /// The vhosts a list route names: one (`Some(name)`, visible to the caller: the layer
    /// checked) or all that `caller` may see.
    pub(crate) fn vhosts(&self, caller: &Caller, name: Option<&str>) -> Result<Vec<Arc<VirtualHost>>, ApiError> {
        match name {
            Some(name) => Ok(vec![self.vhost(name)?]),
            None => {
                Ok(self.broker.vhosts().into_iter().filter(|v| caller.may_see_vhost(&self.broker, v.name())).collect())
            }
        }
    }
}

/// Every route of the API, each with its rule (the one place routes are declared).
pub fn route_table() -> RouteTable {
    let mut table = RouteTable::default();
    overview::routes(&mut table);
    access::routes(&mut table);
    policies::routes(&mut table);
    parameters::routes(&mut table);
    topic_permissions::routes(&mut table);
    alarms::routes(&mut table);
    log_level::routes(&mut table);
    environment::routes(&mut table);
    health::routes(&mut table);
    exchanges::routes(&mut table);
    queues::routes(&mut table);
    bindings::routes(&mut table);
    connections::routes(&mut table);
    stream_consumers::routes(&mut table);
    stream_publishers::routes(&mut table);
    definitions::routes(&mut table);
    messages::routes(&mut table);
    cluster::routes(&mut table);
    feature_flags::routes(&mut table);
    crate::metrics::routes(&mut table);
    table
        .post("/api/login", Rule::Public, crate::authentication::login)
        .post("/api/logout", Rule::Public, crate::authentication::logout)
        .get("/ws", Rule::Management, crate::feed::upgrade);
    crate::ui::routes(&mut table);
    table
}

/// Every route of the API with its rule, as README's route table lists them.
pub fn route_rules() -> Vec<RouteRule> {
    route_table().rules()
}

/// The API's routes, behind the authorization layer, the same-origin rule for changes and the
/// security headers; no handler reads a body longer than the layer does.
pub fn router(management: Management) -> Router {
    let body_limit = axum::extract::DefaultBodyLimit::max(crate::authorization::MAX_BODY_BYTES);
    route_table()
        .into_router(management)
        .layer(body_limit)
        .layer(axum::middleware::from_fn(crate::same_origin::refuse_cross_origin_changes))
        .layer(axum::middleware::from_fn(crate::security_headers::add))
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
