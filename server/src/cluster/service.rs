//! The broker's cluster service: binds the inter-node listener, starts the transport with
//! the broker's message types, and answers what no other layer handles yet.
//!
//! [`PeerRequest`] and [`PeerResponse`] are the broker's inter-node messages. Today they hold
//! only a liveness check; the Raft layer adds its RPCs here, each tagged with its group, and
//! forwarded client operations follow. Changing them changes the wire format: bump
//! [`super::handshake::PROTOCOL_VERSION`] when nodes of two versions could meet.

use super::inbox::{Inbox, Incoming};
use super::transport::{Transport, TransportSettings};
use crate::config::ClusterSettings;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use tokio::net::TcpListener;
use warren_delivery::client_text::sanitize;

/// A request or one-way message between nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PeerRequest {
    /// Are you there? Answered with [`PeerResponse::Pong`].
    Ping,
}

/// An answer to a [`PeerRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PeerResponse {
    /// The answer to [`PeerRequest::Ping`].
    Pong,
}

/// The transport as the broker uses it.
pub type ClusterTransport = Transport<PeerRequest, PeerResponse>;

/// The cluster service could not start.
#[derive(Debug, thiserror::Error)]
pub enum ClusterStartError {
    /// The inter-node address cannot be bound.
    #[error("cannot listen for cluster peers on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// Peers or a listener are configured but no secret: the configuration should have said so.
    #[error("the cluster needs a secret (--cluster-secret-file)")]
    NoSecret,
}

/// Starts the transport if this node talks to others (`None` for a one-node cluster).
pub async fn start(settings: &ClusterSettings) -> Result<Option<ClusterTransport>, ClusterStartError> {
    if !settings.is_networked() {
        return Ok(None);
    }
    let secret = settings.secret.clone().ok_or(ClusterStartError::NoSecret)?;
    let listener = match settings.listen {
        Some(addr) => Some(TcpListener::bind(addr).await.map_err(|source| ClusterStartError::Listen { addr, source })?),
        None => None,
    };
    let transport_settings = TransportSettings::new(&settings.node_name, &settings.cluster_name, secret);
    let (transport, inbox) = Transport::start(transport_settings, listener, &settings.peers);
    tokio::spawn(answer(inbox));
    tracing::info!(
        node = %settings.node_name,
        cluster = %settings.cluster_name,
        listen = ?transport.local_addr(),
        peers = settings.peers.len(),
        "cluster transport started"
    );
    Ok(Some(transport))
}

/// Most bytes of a peer's message logged when nothing handles it.
const MAX_LOGGED_MESSAGE_BYTES: usize = 256;

/// Answers pings; logs one-way messages nothing handles yet.
async fn answer(mut inbox: Inbox<PeerRequest, PeerResponse>) {
    while let Some(incoming) = inbox.recv().await {
        match incoming {
            Incoming::Request(request) => match request.body {
                PeerRequest::Ping => {
                    tokio::spawn(request.responder.respond(PeerResponse::Pong));
                }
            },
            Incoming::Message { from, body } => {
                let body = sanitize(&format!("{body:?}"), MAX_LOGGED_MESSAGE_BYTES);
                tracing::debug!(peer = %from, %body, "cluster message with no handler");
            }
        }
    }
}
