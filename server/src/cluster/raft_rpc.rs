//! What a quorum queue's Raft RPCs look like between nodes, and who the members are.
//!
//! Owns: the group id every RPC is tagged with ([`RaftGroupId`]; many groups share one
//! connection per pair of nodes), the RPCs and their answers as they travel inside
//! [`super::PeerRequest::Raft`] and [`super::PeerResponse::Raft`], the sizes that keep them
//! within one transport frame, and the rule that turns a node name into a Raft node id.
//!
//! Node ids: openraft needs u64 ids; a member's id is
//! [`warren_delivery::node::NodeId::raft_id`] of its name (a hash every node computes alike),
//! and its [`BasicNode`]'s `addr` holds the node *name*, which is what the transport dials by.
//! So a group's membership is itself the map from id to node.

use super::frame::MAX_FRAME_BYTES;
use super::service::{PeerRequest, PeerResponse};
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::network::RPCTypes;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::RaftTypeConfig;
use openraft::{BasicNode, Config, ConfigError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::io::Cursor;
use warren_delivery::catalog::CatalogRaft;
use warren_delivery::node::NodeId;
use warren_delivery::quorum::QuorumRaft;

/// A Raft group's name, unique in the cluster (for a quorum queue: derived from its vhost
/// and name by the wiring). Every RPC carries it so that the receiving node can hand it to
/// the right local [`openraft::Raft`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RaftGroupId(pub String);

impl RaftGroupId {
    /// The group called `name`.
    pub fn new(name: impl Into<String>) -> Self {
        RaftGroupId(name.into())
    }
}

impl fmt::Display for RaftGroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One Raft RPC of a group of kind `C` (a quorum queue's by default), as openraft's network
/// hands it over.
#[derive(Debug, Serialize, Deserialize)]
#[serde(bound = "")]
pub enum RaftRpc<C: RaftTypeConfig = QuorumRaft> {
    /// Replication and heartbeats.
    AppendEntries(AppendEntriesRequest<C>),
    /// A candidate asks for a vote.
    Vote(VoteRequest<u64>),
    /// One chunk of a snapshot (at most [`SNAPSHOT_CHUNK_BYTES`] of data).
    InstallSnapshot(InstallSnapshotRequest<C>),
}

/// A kind of Raft group the cluster runs (quorum queues, the catalog group): its type
/// config, and how its RPCs travel in the broker's inter-node messages.
pub trait WireGroup: RaftTypeConfig<NodeId = u64, Node = BasicNode, SnapshotData = Cursor<Vec<u8>>> {
    /// `rpc` for this node's member of `group`, as a request.
    fn request(group: RaftGroupId, rpc: RaftRpc<Self>) -> PeerRequest;
}

impl WireGroup for QuorumRaft {
    fn request(group: RaftGroupId, rpc: RaftRpc<Self>) -> PeerRequest {
        PeerRequest::Raft { group, rpc: Box::new(rpc) }
    }
}

impl WireGroup for CatalogRaft {
    fn request(_group: RaftGroupId, rpc: RaftRpc<Self>) -> PeerRequest {
        PeerRequest::CatalogRaft { rpc: Box::new(rpc) }
    }
}

/// The answer a Raft RPC got, whatever the group's kind.
pub(crate) fn raft_reply(response: PeerResponse) -> Option<RaftReply> {
    match response {
        PeerResponse::Raft(reply) => Some(*reply),
        _ => None,
    }
}

impl<C: RaftTypeConfig> RaftRpc<C> {
    /// Which RPC this is.
    pub fn action(&self) -> RPCTypes {
        match self {
            RaftRpc::AppendEntries(_) => RPCTypes::AppendEntries,
            RaftRpc::Vote(_) => RPCTypes::Vote,
            RaftRpc::InstallSnapshot(_) => RPCTypes::InstallSnapshot,
        }
    }
}

/// The answer to a [`RaftRpc`]: the local `Raft`'s own result, or why no `Raft` took it.
#[derive(Debug, Serialize, Deserialize)]
pub enum RaftReply {
    /// The answer to [`RaftRpc::AppendEntries`].
    AppendEntries(Result<AppendEntriesResponse<u64>, RaftError<u64>>),
    /// The answer to [`RaftRpc::Vote`].
    Vote(Result<VoteResponse<u64>, RaftError<u64>>),
    /// The answer to [`RaftRpc::InstallSnapshot`].
    InstallSnapshot(Result<InstallSnapshotResponse<u64>, RaftError<u64, InstallSnapshotError>>),
    /// The receiving node runs no member of this group (not created yet, or deleted).
    UnknownGroup,
}

/// Bytes of snapshot data per `InstallSnapshot` chunk: well under a frame, and small enough
/// that other groups' heartbeats on the same connection do not queue long behind it.
pub const SNAPSHOT_CHUNK_BYTES: u64 = 1024 * 1024;

/// Log entries per `AppendEntries` at most.
///
/// Sizes of `AppendEntries`: a batch is bounded three ways. openraft reads it with
/// `limited_get_log_entries`, which `RaftLog` caps at
/// [`warren_storage::raft::LIMITED_READ_MAX_BYTES`] of payload (but always one entry); it
/// holds at most this many entries; and if it still does not fit in a frame, the network
/// answers openraft with `PayloadTooLarge` and a smaller count, which openraft retries at once.
/// One entry is never split: see [`MAX_REPLICATED_ENTRY_BYTES`].
pub const MAX_PAYLOAD_ENTRIES: u64 = 256;

/// Bytes of a frame reserved for everything around a lone entry's message (envelope, group
/// id, request fields, the entry's own header).
pub const RPC_OVERHEAD_BYTES: usize = 64 * 1024;

/// The largest encoded log entry that can be replicated: one entry must fit in one
/// `AppendEntries` frame. The quorum queue's publish path must refuse larger messages
/// (AMQP allows 128 MiB by default); a larger entry could be appended by the leader but sent
/// to no follower, which would stall the group.
pub const MAX_REPLICATED_ENTRY_BYTES: usize = MAX_FRAME_BYTES - RPC_OVERHEAD_BYTES;

/// `config` with the replication sizes above, so that every RPC fits in a transport frame.
pub fn fit_to_transport(config: &Config) -> Result<Config, Box<ConfigError>> {
    Config { snapshot_max_chunk_size: SNAPSHOT_CHUNK_BYTES, max_payload_entries: MAX_PAYLOAD_ENTRIES, ..config.clone() }
        .validate()
        .map_err(Box::new)
}

/// The Raft node id of the node called `name`.
pub fn raft_node_id(name: &str) -> u64 {
    NodeId::of(name).raft_id()
}

/// The node called `name` as a Raft member: its id and a [`BasicNode`] holding its name.
pub fn raft_member(name: &str) -> (u64, BasicNode) {
    (raft_node_id(name), BasicNode::new(name))
}

/// Two node names hash to the same Raft node id: one of them must be renamed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("nodes {first} and {second} have the same Raft node id {id}; rename one of them")]
pub struct NodeIdCollision {
    /// The shared id.
    pub id: u64,
    /// One node.
    pub first: String,
    /// The other.
    pub second: String,
}

/// The members called `names`, by Raft node id, as `Raft::initialize` and membership
/// changes take them. Fails if two names share an id.
pub fn raft_members<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<BTreeMap<u64, BasicNode>, NodeIdCollision> {
    let mut members = BTreeMap::new();
    for name in names {
        let (id, node) = raft_member(name);
        if let Some(existing) = members.get(&id).filter(|n: &&BasicNode| n.addr != name) {
            return Err(NodeIdCollision { id, first: existing.addr.clone(), second: name.to_string() });
        }
        members.insert(id, node);
    }
    Ok(members)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_keyed_by_the_hash_of_their_names() {
        let members = raft_members(["warren@a", "warren@b", "warren@a"]).expect("distinct ids");
        assert_eq!(members.len(), 2);
        assert_eq!(members[&raft_node_id("warren@b")], BasicNode::new("warren@b"));
        assert_eq!(raft_node_id("warren@a"), u64::from(NodeId::of("warren@a").0));
    }

    #[test]
    fn the_transport_config_bounds_chunks_and_payloads() {
        let config = fit_to_transport(&Config::default()).expect("valid");
        assert_eq!(config.snapshot_max_chunk_size, SNAPSHOT_CHUNK_BYTES);
        assert_eq!(config.max_payload_entries, MAX_PAYLOAD_ENTRIES);
        assert!(usize::try_from(SNAPSHOT_CHUNK_BYTES).is_ok_and(|chunk| chunk + RPC_OVERHEAD_BYTES < MAX_FRAME_BYTES));
    }
}
