//! The broker's cluster service: binds the inter-node listener, starts the transport with
//! the broker's message types, and answers what no other layer handles yet.
//!
//! [`PeerRequest`] and [`PeerResponse`] are the broker's inter-node messages: a liveness
//! check and Raft RPCs, each tagged with its group (handed to the [`RaftRouter`]); forwarded
//! client operations follow. Changing them changes the wire format: bump
//! [`super::handshake::PROTOCOL_VERSION`] when nodes of two versions could meet.

use super::election::PreVoteAnswer;
use super::inbox::{Inbox, Incoming, IncomingRequest};
use super::peer_address::PeerAddress;
use super::raft_router::RaftRouter;
use super::raft_rpc::{RaftGroupId, RaftReply, RaftRpc};
use super::transport::{Transport, TransportSettings};
use crate::config::ClusterSettings;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use tokio::net::TcpListener;
use warren_delivery::catalog::{CatalogCommand, CatalogRaft};
use warren_delivery::client_text::sanitize;
use warren_delivery::quorum::{CommandBatch, Response};
use warren_delivery::remote::Forwarded;
use warren_delivery::stream::StreamChunk;

/// A request or one-way message between nodes.
#[derive(Debug, Serialize, Deserialize)]
pub enum PeerRequest {
    /// Are you there? Answered with [`PeerResponse::Pong`].
    Ping,
    /// A Raft RPC for the local member of quorum queue group `group`. Answered with
    /// [`PeerResponse::Raft`].
    Raft {
        /// The group.
        group: RaftGroupId,
        /// The RPC (boxed: it is far larger than the other requests).
        rpc: Box<RaftRpc>,
    },
    /// A Raft RPC for the local member of the catalog group. Answered with
    /// [`PeerResponse::Raft`].
    CatalogRaft {
        /// The RPC.
        rpc: Box<RaftRpc<CatalogRaft>>,
    },
    /// Commands for quorum queue group `group`, for its leader to propose. Answered with
    /// [`PeerResponse::Proposed`].
    Propose {
        /// The group.
        group: RaftGroupId,
        /// The commands.
        batch: CommandBatch,
    },
    /// A definition change for the catalog group's leader to propose. Answered with
    /// [`PeerResponse::MetaProposed`].
    ProposeMeta {
        /// The change.
        command: CatalogCommand,
    },
    /// Answer once this node's catalog member has applied the entry at `index`, or after
    /// `within_ms` (capped) with what it has. Answered with [`PeerResponse::MetaApplied`].
    MetaApplied {
        /// The entry's log index.
        index: u64,
        /// How long to wait for it, in ms.
        within_ms: u64,
    },
    /// The catalog group's read index, from its leader: the log index up to which every
    /// change committed before the request lies. Answered with [`PeerResponse::MetaReadIndex`].
    MetaReadIndex,
    /// A client operation on a queue of another node, or what comes back of one (one-way).
    Forwarded(Forwarded),
    /// `join_cluster`: node `node` (its name and where to dial it) asks to become a member.
    /// Answered with [`PeerResponse::Joined`] once it is a voter of the catalog group.
    Join {
        /// The joining node.
        node: PeerAddress,
    },
    /// The records of replicated stream `group` from offset `from` on, about `max_bytes` of
    /// them, for a replica catching up. Answered with [`PeerResponse::StreamRead`].
    ReadStream {
        /// The stream's group.
        group: RaftGroupId,
        /// The first offset wanted.
        from: u64,
        /// Payload bytes wanted, about.
        max_bytes: u32,
    },
    /// The newest version of each replicated state machine this node knows. Answered with
    /// [`PeerResponse::MachineVersions`]; a node of a release before machine versions cannot
    /// read the request (last of the requests, so that the others still decode there).
    MachineVersions,
    /// Would this node's member of `group` vote for the asking node's, whose log ends at
    /// `last_log_index` (see `super::election`)? Answered with [`PeerResponse::PreVote`].
    PreVote {
        /// The group.
        group: RaftGroupId,
        /// The index of the last entry of the candidate's log.
        last_log_index: u64,
    },
    /// This node's figures (memory, disk, descriptors, uptime, listeners), for another
    /// node's `/api/nodes`. Answered with [`PeerResponse::NodeFigures`] (last of the requests:
    /// a node of an earlier release cannot read it, and the asker shows why).
    NodeFigures,
}

/// An answer to a [`PeerRequest`].
#[derive(Debug, Serialize, Deserialize)]
pub enum PeerResponse {
    /// The answer to [`PeerRequest::Ping`].
    Pong,
    /// The answer to [`PeerRequest::Raft`] and [`PeerRequest::CatalogRaft`].
    Raft(Box<RaftReply>),
    /// The answer to [`PeerRequest::Propose`]: the responses of the commands once applied,
    /// or why they were not.
    Proposed(Result<Vec<Response>, String>),
    /// The answer to [`PeerRequest::ProposeMeta`]: the log index the change was committed
    /// at, or why it was not.
    MetaProposed(Result<u64, String>),
    /// The answer to [`PeerRequest::MetaApplied`]: whether the entry is applied.
    MetaApplied(bool),
    /// The answer to [`PeerRequest::MetaReadIndex`]: the index, or why this node cannot say
    /// (it does not lead).
    MetaReadIndex(Result<u64, String>),
    /// The answer to [`PeerRequest::Join`]: the other nodes of the cluster the joining node
    /// should know of (the answering node aside: the joining node dialled it), or why not.
    Joined(Result<Vec<PeerAddress>, String>),
    /// The answer to [`PeerRequest::ReadStream`].
    StreamRead(Result<StreamChunk, String>),
    /// The answer to [`PeerRequest::MachineVersions`]: by machine name.
    MachineVersions(Vec<(String, u16)>),
    /// The answer to [`PeerRequest::PreVote`]; `None` if this node runs no member of the group.
    PreVote(Option<PreVoteAnswer>),
    /// The answer to [`PeerRequest::NodeFigures`]; `None` before the management API runs.
    NodeFigures(Option<Box<warren_webui::NodeFigures>>),
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

/// Starts the transport if this node talks to others (`None` for a one-node cluster); Raft
/// RPCs go to groups registered with a router of its own, which no group uses yet.
pub async fn start(settings: &ClusterSettings) -> Result<Option<ClusterTransport>, ClusterStartError> {
    start_with(settings, RaftRouter::new()).await
}

/// As [`start`], handing Raft RPCs to the groups registered with `router`.
pub async fn start_with(
    settings: &ClusterSettings,
    router: RaftRouter,
) -> Result<Option<ClusterTransport>, ClusterStartError> {
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
    tokio::spawn(serve(inbox, router));
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

/// Answers what peers send until the transport shuts down: pings here, Raft RPCs through
/// `router`; logs one-way messages nothing handles yet.
pub async fn serve(mut inbox: Inbox<PeerRequest, PeerResponse>, router: RaftRouter) {
    while let Some(incoming) = inbox.recv().await {
        match incoming {
            Incoming::Request(request) => answer(request, &router).await,
            Incoming::Message { from, body: PeerRequest::Forwarded(message) } => router.forwarded(&from, message),
            Incoming::Message { from, body } => {
                let body = sanitize(&format!("{body:?}"), MAX_LOGGED_MESSAGE_BYTES);
                tracing::debug!(peer = %from, %body, "cluster message with no handler");
            }
        }
    }
}

/// Answers one request (waiting only while the router is at its bound of RPCs in flight).
async fn answer(request: IncomingRequest<PeerRequest, PeerResponse>, router: &RaftRouter) {
    let IncomingRequest { from, body, responder } = request;
    match body {
        PeerRequest::Ping => {
            tokio::spawn(responder.respond(PeerResponse::Pong));
        }
        other => router.dispatch(from, other, responder).await,
    }
}
