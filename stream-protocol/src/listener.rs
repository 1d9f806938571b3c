//! The Stream protocol's listener (`--stream-listen`, RabbitMQ's port 5552): a task per
//! connection, all of them ended when the broker stops.

use crate::connection::serve;
use crate::settings::StreamSettings;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use warren_delivery::Broker;

/// Pause after a failed accept, so that a persistent failure (no descriptors left) does not
/// spin.
const ACCEPT_RETRY_DELAY: Duration = Duration::from_millis(50);

/// Accepts connections until `shutdown` turns true, then ends them.
pub async fn run(
    listener: TcpListener,
    broker: Arc<Broker>,
    settings: Arc<StreamSettings>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((socket, peer)) => {
                    let _ = socket.set_nodelay(true);
                    let local = socket.local_addr().unwrap_or_else(|_| std::net::SocketAddr::from(([0, 0, 0, 0], 0)));
                    connections.spawn(serve(socket, (peer, local), Arc::clone(&broker), Arc::clone(&settings)));
                }
                Err(error) => {
                    tracing::warn!(%error, "stream listener: accept failed");
                    tokio::time::sleep(ACCEPT_RETRY_DELAY).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = shutdown.changed() => break,
        }
    }
    // Stream clients reconnect and resume from their offsets: nothing is lost by ending them.
    connections.abort_all();
    while connections.join_next().await.is_some() {}
}
