//! The cluster's networking: node names and peer addresses, the shared secret, and the
//! inter-node transport (authenticated, length-delimited, multiplexed TCP connections, one
//! per pair of nodes) that Raft RPCs and forwarded client operations travel on.
//!
//! - [`peer_address`]: `name@host:port` entries of the seed list, name rules.
//! - [`secret`]: the shared secret file and its HMAC proofs.
//! - [`handshake`]: mutual proof of the secret, cluster name, node names, protocol version.
//! - `handshake_slots`: how many incoming handshakes may run at once, in all and per source.
//! - `log_limiter`: one warning per source address per interval, for events anybody can cause.
//! - [`transport`]: connections, dialling and backoff, requests, timeouts, back-pressure.
//! - [`inbox`]: what peers send, handed to the layer above.
//! - [`service`]: the broker's inter-node message types and the transport as `warren` runs it.
//! - [`raft_rpc`]: Raft RPCs on the wire, tagged with their group; node ids; frame-size bounds.
//! - [`raft_network`]: openraft's network for one group (sending RPCs, mapping errors).
//! - [`raft_router`]: the local group members, by group, that incoming RPCs are handed to.
//! - [`replication`]: the cluster as the broker core sees it (quorum queues' members, the
//!   catalog group's forwarding).
//! - [`catalog_group`]: starting this node's member of the catalog group.
//! - [`forwarding`]: client operations on queues of other nodes, in order per peer.
//! - [`failure_detector`]: one watch per pair of nodes; heartbeats and elections of quorum
//!   queues' groups when a node comes or goes.
//! - [`nodes`]: the cluster's nodes as this node knows them, read by all of the above.
//! - [`join`]: `join_cluster`, both sides: the joining node, and the node it joins through.

pub mod catalog_group;
mod connection;
pub mod election;
mod envelope;
pub mod failure_detector;
pub mod forwarding;
pub mod frame;
pub mod handshake;
mod handshake_slots;
pub mod inbox;
pub mod join;
mod log_limiter;
pub mod nodes;
pub mod peer_address;
pub mod raft_network;
pub mod raft_router;
pub mod raft_rpc;
pub mod replication;
pub mod secret;
pub mod service;
pub mod transport;

pub use envelope::RequestId;
pub use inbox::{Inbox, Incoming, IncomingRequest, Responder};
pub use nodes::Nodes;
pub use peer_address::PeerAddress;
pub use raft_network::{GroupNetwork, PeerClient, RaftNetworkError};
pub use raft_router::RaftRouter;
pub use raft_rpc::{fit_to_transport, raft_member, raft_members, raft_node_id, RaftGroupId, RaftReply, RaftRpc};
pub use secret::ClusterSecret;
pub use service::{ClusterTransport, PeerRequest, PeerResponse};
pub use transport::{Transport, TransportError, TransportSettings, Wire};
