//! warren-webui: the HTTP management API in RabbitMQ's shapes, so that its tools work against
//! Warren, and the figures it serves.
//!
//! - `http_listener`: the listener, its connection limits and timeouts (plain and HTTPS);
//! - `route_table`: every route with its rule; `authorization`: the one layer that checks the
//!   rules (RabbitMQ's tags, vhost access and permissions); `authentication`: HTTP Basic and
//!   the UI's sessions (`sessions`); `security_headers`: what every answer carries;
//!   `same_origin`: no changes (nor the live feed) from pages of another origin;
//! - `api`: the routes and their JSON, a module per resource;
//! - `feed`: the WebSocket live feed (`/ws`) the UI renders; `figures`: what it and the
//!   overview show, read once a second for all;
//! - `ui`: the browser UI, static files embedded in the binary;
//! - `listing`: pagination, sorting, filtering and columns of the list endpoints;
//!   `streamed`: large answers written as the client reads them;
//! - `rates`: the sampler behind `message_stats` and the charts;
//! - `metrics`: Prometheus metrics (`/metrics`, `/metrics/per-object`, `/metrics/detailed`),
//!   with RabbitMQ's names;
//! - `json_table`, `message_json`: field tables and messages in the API's JSON;
//! - `error`: errors as RabbitMQ's API answers them (`{"error": ..., "reason": ...}`);
//!   `json_body`: request bodies read as RabbitMQ reads them, refused in that shape.

mod api;
mod authentication;
pub mod authorization;
mod error;
mod feed;
mod figures;
pub mod http_listener;
mod json_body;
mod json_table;
mod lenient;
mod listing;
mod message_json;
mod metrics;
pub mod rates;
pub mod route_table;
mod same_origin;
mod security_headers;
mod sessions;
mod streamed;
mod ui;

pub use api::{
    route_rules, router, ClusterView, Environment, EnvironmentSetting, Listener, ListenerFigure, LogLevels, Management,
    NodeFigures, NodeStatus,
};
pub use http_listener::HttpLimits;
/// RabbitMQ's metric families Warren does not serve, with why (for the coverage test and
/// the docs).
pub use metrics::families::{ERLANG_ONLY as METRICS_ERLANG_ONLY, NOT_SERVED as METRICS_NOT_SERVED};

use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;

/// Starts the rates sampler behind `message_stats` and the charts, until `shutdown`.
pub fn start_sampler(management: &Management, shutdown: watch::Receiver<bool>) {
    let sampler = rates::run(Arc::clone(management.rates()), Arc::clone(management.broker()), shutdown);
    tokio::spawn(sampler);
}

/// Serves the API on `listener` (over TLS with `tls`) within `limits`, until `shutdown` turns
/// true.
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<ServerConfig>>,
    management: Management,
    limits: HttpLimits,
    shutdown: watch::Receiver<bool>,
) {
    let app = router(management.stopping_with(shutdown.clone()));
    http_listener::serve(listener, tls.map(TlsAcceptor::from), app, limits, shutdown).await;
}
