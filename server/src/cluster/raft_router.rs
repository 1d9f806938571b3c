//! The receiving side of Raft RPCs and forwarded proposals: which local `Raft` runs each
//! group, and handing each incoming RPC or proposal to it; forwarded client operations go to
//! the broker core's `Forwarder`.
//!
//! Owns: the registry of this node's group members ([`RaftRouter::register`] when a replica
//! starts, [`RaftRouter::unregister`] when it stops; the catalog group's member once it
//! runs), and the bound on requests being handled at once ([`MAX_CONCURRENT_RAFT_RPCS`],
//! for all groups together). A request is handled on its own
//! task, so a slow group (a snapshot being installed) does not hold up the others; when the
//! bound is reached the service stops taking requests from the inbox, and the transport's
//! back-pressure does the rest. Nothing is queued per group. An RPC for a group this node
//! does not run is answered [`RaftReply::UnknownGroup`].

use super::catalog_group::METADATA_GROUP;
use super::election::answer_pre_vote;
use super::inbox::Responder;
use super::peer_address::PeerAddress;
use super::raft_rpc::{RaftGroupId, RaftReply, RaftRpc, WireGroup};
use super::service::{PeerRequest, PeerResponse};
use openraft::Raft;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;
use tokio::sync::Semaphore;
use warren_delivery::catalog::Catalog;
use warren_delivery::clock::now_ms;
use warren_delivery::quorum::{CommandBatch, QuorumRaft};
use warren_delivery::remote::{Forwarded, Forwarder};
use warren_delivery::stream::{StreamChunk, StreamStateMachine};

/// Raft RPCs handled at once on this node, over all groups.
pub const MAX_CONCURRENT_RAFT_RPCS: usize = 64;
/// The longest a peer may have this node wait for a catalog entry to be applied.
const MAX_META_APPLIED_WAIT_MS: u64 = 10_000;
/// Payload bytes one answer to a catching-up replica carries at most (a peer asking for more
/// gets this much), well within a frame.
pub const MAX_STREAM_READ_BYTES: u32 = 4 << 20;

/// This node's Raft group members, by group. Cheap to clone.
/// Reads this node's figures (the management API's, installed once it runs).
pub type FiguresSource = Arc<dyn Fn() -> warren_webui::NodeFigures + Send + Sync>;

#[derive(Clone)]
pub struct RaftRouter {
    shared: Arc<Shared>,
}

struct Shared {
    groups: Mutex<HashMap<RaftGroupId, Raft<QuorumRaft>>>,
    /// The replicated streams among the groups: their logs serve replicas catching up.
    streams: Mutex<HashMap<RaftGroupId, StreamStateMachine>>,
    /// This node's catalog member; replaced when the node joins a cluster.
    catalog: Mutex<Option<Arc<Catalog>>>,
    /// Answers nodes asking to join the cluster.
    joins: OnceLock<Arc<dyn JoinDesk>>,
    /// Where forwarded client operations go.
    forwarder: OnceLock<Arc<Forwarder>>,
    /// Reads this node's figures for the peers that ask.
    figures: OnceLock<FiguresSource>,
    /// The peers the failure detector counts as up (see [`RaftRouter::set_peers_up`]).
    peers_up: Mutex<HashSet<u64>>,
    in_flight: Arc<Semaphore>,
}

impl Default for RaftRouter {
    fn default() -> Self {
        RaftRouter::new()
    }
}

impl RaftRouter {
    /// A router with no groups.
    pub fn new() -> Self {
        let in_flight = Arc::new(Semaphore::new(MAX_CONCURRENT_RAFT_RPCS));
        let shared = Shared {
            groups: Mutex::default(),
            streams: Mutex::default(),
            catalog: Mutex::default(),
            joins: OnceLock::new(),
            forwarder: OnceLock::new(),
            figures: OnceLock::new(),
            peers_up: Mutex::default(),
            in_flight,
        };
        RaftRouter { shared: Arc::new(shared) }
    }

    /// Routes `group`'s RPCs to `raft`; returns the member it replaces, if any.
    pub fn register(&self, group: RaftGroupId, raft: Raft<QuorumRaft>) -> Option<Raft<QuorumRaft>> {
        self.groups().insert(group, raft)
    }

    /// Stops routing `group`'s RPCs (they are answered as for an unknown group); returns its
    /// member, if any.
    pub fn unregister(&self, group: &RaftGroupId) -> Option<Raft<QuorumRaft>> {
        self.streams().remove(group);
        self.groups().remove(group)
    }

    /// Lets other replicas of replicated stream `group` read `machine`'s log to catch up.
    pub fn register_stream(&self, group: RaftGroupId, machine: StreamStateMachine) {
        self.streams().insert(group, machine);
    }

    /// This replica's records of stream `group` from `from` on (see
    /// [`StreamStateMachine::read_chunk`]).
    pub fn read_stream(&self, group: &RaftGroupId, from: u64, max_bytes: u32) -> Result<StreamChunk, String> {
        let machine = self.streams().get(group).cloned();
        let machine = machine.ok_or_else(|| format!("this node runs no replica of {group}"))?;
        machine.read_chunk(from, max_bytes.min(MAX_STREAM_READ_BYTES)).map_err(|e| e.to_string())
    }

    /// Routes the catalog group's RPCs and proposals to this node's member (in place of
    /// the one before, if any).
    pub fn set_catalog(&self, catalog: Arc<Catalog>) {
        *self.shared.catalog.lock().unwrap_or_else(PoisonError::into_inner) = Some(catalog);
    }

    /// This node's member of the catalog group, once it runs.
    pub fn catalog(&self) -> Option<Arc<Catalog>> {
        self.shared.catalog.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Hands nodes asking to join the cluster to `desk` (once).
    pub fn set_join_desk(&self, desk: Arc<dyn JoinDesk>) {
        let _ = self.shared.joins.set(desk);
    }

    /// Answers peers asking for this node's figures with what `source` reads (once).
    pub fn set_figures_source(&self, source: FiguresSource) {
        let _ = self.shared.figures.set(source);
    }

    /// Hands forwarded client operations to `forwarder` (once).
    pub fn set_forwarder(&self, forwarder: Arc<Forwarder>) {
        let _ = self.shared.forwarder.set(forwarder);
    }

    /// Hands a forwarded message from node `from` to the core, in the order it came (it
    /// does not wait: what waits is spawned by the core).
    pub fn forwarded(&self, from: &str, message: Forwarded) {
        match self.shared.forwarder.get() {
            Some(forwarder) => forwarder.receive(super::raft_node_id(from), message),
            None => tracing::debug!(peer = from, "a forwarded message came before the broker started"),
        }
    }

    /// Records which peers the failure detector counts as up: a pre-vote is granted only by
    /// a member whose leader's node is not among them.
    pub fn set_peers_up(&self, up: HashSet<u64>) {
        *self.shared.peers_up.lock().unwrap_or_else(PoisonError::into_inner) = up;
    }

    /// Whether the failure detector counts node `id` as up.
    pub fn peer_is_up(&self, id: u64) -> bool {
        self.shared.peers_up.lock().unwrap_or_else(PoisonError::into_inner).contains(&id)
    }

    /// The local member of `group`, if any.
    pub fn get(&self, group: &RaftGroupId) -> Option<Raft<QuorumRaft>> {
        self.groups().get(group).cloned()
    }

    /// This node's members, with their groups.
    pub fn members(&self) -> Vec<(RaftGroupId, Raft<QuorumRaft>)> {
        self.groups().iter().map(|(group, raft)| (group.clone(), raft.clone())).collect()
    }

    /// The groups this node runs a member of, sorted.
    pub fn group_ids(&self) -> Vec<RaftGroupId> {
        let mut ids: Vec<RaftGroupId> = self.groups().keys().cloned().collect();
        ids.sort();
        ids
    }

    /// Handles `request` from node `from` on its own task and answers through `responder`;
    /// waits first while [`MAX_CONCURRENT_RAFT_RPCS`] are being handled.
    pub async fn dispatch(&self, from: String, request: PeerRequest, responder: Responder<PeerResponse>) {
        // A wait for the catalog to be applied takes no permit: it lasts while this node
        // catches up, through the very RPCs the permits are for. A pre-vote takes none either:
        // it is answered at once, and an election should not queue behind a snapshot.
        let permit = match request {
            PeerRequest::MetaApplied { .. } | PeerRequest::PreVote { .. } => None,
            _ => match Arc::clone(&self.shared.in_flight).acquire_owned().await {
                Ok(permit) => Some(permit),
                Err(_) => return, // Never closed; the requester times out if it were.
            },
        };
        let router = self.clone();
        tokio::spawn(async move {
            let response = router.answer(request).await;
            if let Err(error) = responder.respond(response).await {
                tracing::debug!(peer = %from, %error, "answer to a peer not sent");
            }
            drop(permit);
        });
    }

    async fn answer(&self, request: PeerRequest) -> PeerResponse {
        match request {
            PeerRequest::Ping => PeerResponse::Pong,
            PeerRequest::Raft { group, rpc } => PeerResponse::Raft(Box::new(self.handle(&group, *rpc).await)),
            PeerRequest::CatalogRaft { rpc } => {
                let reply = match self.catalog() {
                    Some(catalog) => handle_rpc(&catalog.raft().clone(), *rpc).await,
                    None => RaftReply::UnknownGroup,
                };
                PeerResponse::Raft(Box::new(reply))
            }
            PeerRequest::Propose { group, batch } => PeerResponse::Proposed(match self.get(&group) {
                // Commands run on the leader's clock (TTLs, delays, stream timestamps), not on
                // the clock of the node that forwarded them, which may be ahead.
                Some(raft) => match raft.client_write(CommandBatch { at_ms: now_ms(), ..batch }).await {
                    Ok(written) => {
                        warren_delivery::quorum::tell_followers_the_commit(&raft).await;
                        Ok(written.data)
                    }
                    Err(error) => Err(error.to_string()),
                },
                None => Err(format!("this node runs no member of {group}")),
            }),
            PeerRequest::ProposeMeta { command } => PeerResponse::MetaProposed(match self.catalog() {
                Some(catalog) => catalog.submit(command).await,
                None => Err("this node's catalog member is not running yet".into()),
            }),
            PeerRequest::MetaApplied { index, within_ms } => {
                let within = Duration::from_millis(within_ms.min(MAX_META_APPLIED_WAIT_MS));
                PeerResponse::MetaApplied(match self.catalog() {
                    Some(catalog) => catalog.machine().applied_within(index, within).await,
                    None => false,
                })
            }
            PeerRequest::MetaReadIndex => PeerResponse::MetaReadIndex(match self.catalog() {
                Some(catalog) => catalog.leader_read_index().await,
                None => Err("this node's catalog member is not running yet".into()),
            }),
            PeerRequest::Join { node } => PeerResponse::Joined(match self.shared.joins.get() {
                Some(desk) => desk.admit(node).await,
                None => Err("this node does not take joining nodes yet".into()),
            }),
            PeerRequest::ReadStream { group, from, max_bytes } => {
                PeerResponse::StreamRead(self.read_stream(&group, from, max_bytes))
            }
            PeerRequest::MachineVersions => {
                PeerResponse::MachineVersions(warren_delivery::feature_flags::known_versions())
            }
            PeerRequest::PreVote { group, last_log_index } => {
                let is_up = |id| self.peer_is_up(id);
                PeerResponse::PreVote(match self.catalog().filter(|_| group.0 == METADATA_GROUP) {
                    Some(catalog) => Some(answer_pre_vote(catalog.raft(), last_log_index, is_up)),
                    None => self.get(&group).map(|raft| answer_pre_vote(&raft, last_log_index, is_up)),
                })
            }
            PeerRequest::NodeFigures => {
                PeerResponse::NodeFigures(self.shared.figures.get().map(|read| Box::new(read())))
            }
            // Forwarded operations are one-way, in order: as a request, one would be out of it.
            PeerRequest::Forwarded(_) => {
                tracing::debug!("a forwarded operation sent as a request was ignored");
                PeerResponse::Pong
            }
        }
    }

    /// The local member's answer to `rpc`.
    pub async fn handle(&self, group: &RaftGroupId, rpc: RaftRpc) -> RaftReply {
        match self.get(group) {
            Some(raft) => handle_rpc(&raft, rpc).await,
            None => RaftReply::UnknownGroup,
        }
    }

    fn groups(&self) -> std::sync::MutexGuard<'_, HashMap<RaftGroupId, Raft<QuorumRaft>>> {
        self.shared.groups.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn streams(&self) -> std::sync::MutexGuard<'_, HashMap<RaftGroupId, StreamStateMachine>> {
        self.shared.streams.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Takes a node into the cluster (see `super::join`).
pub trait JoinDesk: Send + Sync + 'static {
    /// Makes `node` a member of the cluster; answers the other nodes it should know of.
    fn admit(&self, node: PeerAddress) -> warren_delivery::quorum::ClusterFuture<Result<Vec<PeerAddress>, String>>;
}

/// `raft`'s answer to `rpc`.
async fn handle_rpc<C: WireGroup>(raft: &Raft<C>, rpc: RaftRpc<C>) -> RaftReply {
    match rpc {
        RaftRpc::AppendEntries(request) => RaftReply::AppendEntries(raft.append_entries(request).await),
        RaftRpc::Vote(request) => RaftReply::Vote(raft.vote(request).await),
        RaftRpc::InstallSnapshot(request) => RaftReply::InstallSnapshot(raft.install_snapshot(request).await),
    }
}
