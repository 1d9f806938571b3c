//! warren-webui: the HTTP management API, in RabbitMQ's shapes so that its tools work
//! against Warren (the WebSocket live feed and the browser UI come with issue 14).
//!
//! What is served today is what `warren ctl`'s cluster verbs need: the nodes
//! (`GET /api/nodes`), a queue with its replicas (`GET /api/queues/{vhost}/{name}`), and a
//! quorum queue's members (`POST /api/queues/quorum/{vhost}/{name}/replicas/add|delete`).
//!
//! - `auth`: HTTP Basic authentication against the broker's users.
//! - `api`: the routes and their JSON.
//! - `error`: errors as RabbitMQ's API answers them (`{"error": ..., "reason": ...}`).

mod api;
mod auth;
mod error;

pub use api::{router, ClusterView, Management, NodeStatus};

use std::net::SocketAddr;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Serves the API on `listener` until `shutdown` turns true.
pub async fn serve(listener: TcpListener, management: Management, mut shutdown: watch::Receiver<bool>) {
    let app = router(management);
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
