//! warren-webui: the HTTP management API in RabbitMQ's shapes, so that its tools work against
//! Warren, and the figures it serves.
//!
//! - `auth`: HTTP Basic authentication against the broker's users, and the UI's sessions.
//! - `feed`: the WebSocket live feed (`/ws`) the UI renders.
//! - `ui`: the browser UI, static files embedded in the binary.
//! - `https`: the TLS listener of HTTPS.
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
pub mod https;
mod json_table;
mod lenient;
mod listing;
mod message_json;
mod metrics;
pub mod rates;
mod ui;

pub use api::{router, ClusterView, Listener, Management, NodeStatus};

use std::net::SocketAddr;
use tokio::sync::watch;

/// Starts the rates sampler behind `message_stats` and the charts, until `shutdown`.
pub fn start_sampler(management: &Management, shutdown: watch::Receiver<bool>) {
    let sampler =
        rates::run(std::sync::Arc::clone(management.rates()), std::sync::Arc::clone(management.broker()), shutdown);
    tokio::spawn(sampler);
}

/// Serves the API on `listener` (TCP, or [`https::TlsListener`]) until `shutdown` turns true.
pub async fn serve<L>(listener: L, management: Management, mut shutdown: watch::Receiver<bool>)
where
    L: axum::serve::Listener<Addr = SocketAddr>,
{
    let app = router(management.stopping_with(shutdown.clone()));
    let stopping = async move {
        let _ = shutdown.wait_for(|stop| *stop).await;
    };
    // Through tap_io, any listener's address is the requests' `ConnectInfo<SocketAddr>`.
    let listener = axum::serve::ListenerExt::tap_io(listener, |_| {});
    let served = axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
        .with_graceful_shutdown(stopping)
        .await;
    if let Err(error) = served {
        tracing::error!(%error, "the management API stopped");
    }
}
