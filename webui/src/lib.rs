//! warren-webui: the HTTP management API in RabbitMQ's shapes, so that its tools work against
//! Warren, and the figures it serves.
//!
//! - `auth`: HTTP Basic authentication against the broker's users, and the UI's sessions.
//! - `feed`: the WebSocket live feed (`/ws`) the UI renders.
//! - `ui`: the browser UI, static files embedded in the binary.
//! - `api`: the routes and their JSON, a module per resource.
//! - `listing`: pagination, sorting, filtering and columns of the list endpoints.
//! - `rates`: the sampler behind `message_stats` and the charts.
//! - `metrics`: Prometheus metrics (`/metrics`, `/metrics/per-object`).
//! - `json_table`, `message_json`: field tables and messages in the API's JSON.
//! - `error`: errors as RabbitMQ's API answers them (`{"error": ..., "reason": ...}`).

mod api;
mod auth;
mod error;
mod feed;
mod json_table;
mod lenient;
mod listing;
mod message_json;
mod metrics;
pub mod rates;
mod ui;

pub use api::{router, ClusterView, Listener, Management, NodeStatus};

use std::net::SocketAddr;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Serves the API on `listener` until `shutdown` turns true; samples the rates meanwhile.
pub async fn serve(listener: TcpListener, management: Management, mut shutdown: watch::Receiver<bool>) {
    let sampler = rates::run(
        std::sync::Arc::clone(management.rates()),
        std::sync::Arc::clone(management.broker()),
        shutdown.clone(),
    );
    tokio::spawn(sampler);
    let app = router(management.stopping_with(shutdown.clone()));
    let stopping = async move {
        let _ = shutdown.wait_for(|stop| *stop).await;
    };
    let served = axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
        .with_graceful_shutdown(stopping)
        .await;
    if let Err(error) = served {
        tracing::error!(%error, "the management API stopped");
    }
}
