//! The sending side of Raft RPCs: openraft's `RaftNetworkFactory` / `RaftNetwork` for one
//! quorum queue's group, over the cluster transport.
//!
//! Owns: addressing (a member's [`BasicNode`] holds its node name, which the transport dials
//! by; see [`super::raft_rpc`]), tagging each RPC with its group, the per-RPC timeout (the
//! one openraft passes in [`RPCOption`]), and turning transport failures and remote answers
//! into openraft's [`RPCError`]:
//! - not connected, or the connection lost: `Unreachable` (openraft backs off);
//! - no answer within openraft's timeout: `Timeout`;
//! - an `AppendEntries` too large for one frame: `PayloadTooLarge` with an entry count that
//!   fits (openraft retries with fewer entries); a single entry too large cannot be sent
//!   ([`super::raft_rpc::MAX_REPLICATED_ENTRY_BYTES`]) and is a `Network` error;
//! - the target runs no member of the group: `Unreachable` carrying
//!   [`RaftNetworkError::UnknownGroup`];
//! - the target `Raft`'s own error: `RemoteError`.

use super::frame::FrameError;
use super::raft_rpc::{raft_node_id, raft_reply, RaftGroupId, RaftReply, RaftRpc, WireGroup};
use super::service::ClusterTransport;
use super::transport::TransportError;
use openraft::error::{
    InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError, Timeout, Unreachable,
};
use openraft::network::{RPCOption, RPCTypes, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::BasicNode;
use std::marker::PhantomData;
use std::time::Duration;
use warren_delivery::quorum::QuorumRaft;

/// A Raft RPC that did not get a `Raft`'s answer.
#[derive(Debug, thiserror::Error)]
pub enum RaftNetworkError {
    /// The transport could not deliver it or bring the answer back.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The target node runs no member of the group.
    #[error("node {node} runs no member of Raft group {group}")]
    UnknownGroup {
        /// The target node.
        node: String,
        /// The group.
        group: RaftGroupId,
    },
    /// The target answered with a response of another RPC or another kind of message.
    #[error("node {node} answered a {expected} RPC of group {group} with something else")]
    UnexpectedReply {
        /// The target node.
        node: String,
        /// The group.
        group: RaftGroupId,
        /// The RPC sent.
        expected: RPCTypes,
    },
    /// The member's id is not the id of the node name it carries: the membership is wrong.
    #[error("Raft member {id} of group {group} names node {node}, whose id is {actual}")]
    MemberMismatch {
        /// The member's id.
        id: u64,
        /// The node name it carries.
        node: String,
        /// The id of that name.
        actual: u64,
        /// The group.
        group: RaftGroupId,
    },
}

/// Makes openraft's per-target clients for one group of kind `C`; one per local `Raft`.
pub struct GroupNetwork<C = QuorumRaft> {
    transport: ClusterTransport,
    group: RaftGroupId,
    kind: PhantomData<fn() -> C>,
}

impl<C> Clone for GroupNetwork<C> {
    fn clone(&self) -> Self {
        GroupNetwork { transport: self.transport.clone(), group: self.group.clone(), kind: PhantomData }
    }
}

impl<C> GroupNetwork<C> {
    /// The network of group `group` from this node (the one `transport` runs as).
    pub fn new(transport: ClusterTransport, group: RaftGroupId) -> Self {
        GroupNetwork { transport, group, kind: PhantomData }
    }
}

impl<C: WireGroup> RaftNetworkFactory<C> for GroupNetwork<C> {
    type Network = PeerClient<C>;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> PeerClient<C> {
        PeerClient {
            transport: self.transport.clone(),
            group: self.group.clone(),
            local_id: raft_node_id(self.transport.node_name()),
            target,
            node: node.addr.clone(),
            node_id: raft_node_id(&node.addr),
            kind: PhantomData,
        }
    }
}

/// Sends one group's RPCs to one member.
pub struct PeerClient<C = QuorumRaft> {
    kind: PhantomData<fn() -> C>,
    transport: ClusterTransport,
    group: RaftGroupId,
    local_id: u64,
    target: u64,
    /// The target's node name.
    node: String,
    /// The id of that name: `target` unless the membership is wrong.
    node_id: u64,
}

/// An RPC's failure, before it is typed for the RPC's own error.
enum Failure<E: std::error::Error> {
    /// No answer from a `Raft`.
    Network(RaftNetworkError),
    /// The target `Raft`'s error.
    Remote(E),
}

impl<C: WireGroup> PeerClient<C> {
    /// Sends `rpc` and waits for the answer within openraft's timeout.
    async fn call(&self, rpc: RaftRpc<C>, timeout: Duration) -> Result<RaftReply, RaftNetworkError> {
        if self.node_id != self.target {
            return Err(RaftNetworkError::MemberMismatch {
                id: self.target,
                node: self.node.clone(),
                actual: self.node_id,
                group: self.group.clone(),
            });
        }
        let action = rpc.action();
        let request = C::request(self.group.clone(), rpc);
        match raft_reply(self.transport.request_within(&self.node, request, timeout).await?) {
            Some(RaftReply::UnknownGroup) => {
                Err(RaftNetworkError::UnknownGroup { node: self.node.clone(), group: self.group.clone() })
            }
            Some(reply) => Ok(reply),
            None => Err(self.unexpected(action)),
        }
    }

    fn unexpected(&self, expected: RPCTypes) -> RaftNetworkError {
        RaftNetworkError::UnexpectedReply { node: self.node.clone(), group: self.group.clone(), expected }
    }

    /// `failure` as openraft's error for an RPC of type `action` with `entries` log entries
    /// (0 unless it is an `AppendEntries`), sent with `timeout`.
    fn rpc_error<E: std::error::Error>(
        &self,
        action: RPCTypes,
        timeout: Duration,
        entries: usize,
        failure: Failure<E>,
    ) -> RPCError<u64, BasicNode, E> {
        let error = match failure {
            Failure::Remote(source) => {
                let node = BasicNode::new(&self.node);
                return RPCError::RemoteError(RemoteError::new_with_node(self.target, node, source));
            }
            Failure::Network(error) => error,
        };
        match &error {
            RaftNetworkError::Transport(TransportError::Timeout { .. }) => {
                RPCError::Timeout(Timeout { action, id: self.local_id, target: self.target, timeout })
            }
            RaftNetworkError::Transport(TransportError::Frame(FrameError::TooLarge { len, max }))
                if action == RPCTypes::AppendEntries && entries > 1 =>
            {
                RPCError::PayloadTooLarge(PayloadTooLarge::new_entries_hint(entries_that_fit(entries, *len, *max)))
            }
            RaftNetworkError::Transport(TransportError::NotConnected(_) | TransportError::Disconnected(_))
            | RaftNetworkError::UnknownGroup { .. }
            | RaftNetworkError::MemberMismatch { .. } => RPCError::Unreachable(Unreachable::new(&error)),
            RaftNetworkError::Transport(TransportError::Frame(_)) | RaftNetworkError::UnexpectedReply { .. } => {
                RPCError::Network(NetworkError::new(&error))
            }
        }
    }
}

/// How many of `entries` entries, which encoded to `len` bytes, fit in `max` bytes: in
/// proportion, with room to spare, at least one.
fn entries_that_fit(entries: usize, len: usize, max: usize) -> u64 {
    /// Fraction of the proportional count kept, in percent, since entries differ in size.
    const MARGIN_PERCENT: u128 = 80;
    let fit = (entries as u128) * (max as u128) * MARGIN_PERCENT / 100 / (len.max(1) as u128);
    u64::try_from(fit).unwrap_or(u64::MAX).clamp(1, entries as u64 - 1)
}

impl<C: WireGroup> RaftNetwork<C> for PeerClient<C> {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<C>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        let (action, timeout, entries) = (RPCTypes::AppendEntries, option.hard_ttl(), rpc.entries.len());
        let outcome = match self.call(RaftRpc::AppendEntries(rpc), timeout).await {
            Ok(RaftReply::AppendEntries(Ok(response))) => return Ok(response),
            Ok(RaftReply::AppendEntries(Err(error))) => Failure::Remote(error),
            Ok(_) => Failure::Network(self.unexpected(action)),
            Err(error) => Failure::Network(error),
        };
        Err(self.rpc_error(action, timeout, entries, outcome))
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<C>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<u64>, RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>> {
        let (action, timeout) = (RPCTypes::InstallSnapshot, option.hard_ttl());
        let outcome = match self.call(RaftRpc::InstallSnapshot(rpc), timeout).await {
            Ok(RaftReply::InstallSnapshot(Ok(response))) => return Ok(response),
            Ok(RaftReply::InstallSnapshot(Err(error))) => Failure::Remote(error),
            Ok(_) => Failure::Network(self.unexpected(action)),
            Err(error) => Failure::Network(error),
        };
        Err(self.rpc_error(action, timeout, 0, outcome))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        let (action, timeout) = (RPCTypes::Vote, option.hard_ttl());
        let outcome = match self.call(RaftRpc::Vote(rpc), timeout).await {
            Ok(RaftReply::Vote(Ok(response))) => return Ok(response),
            Ok(RaftReply::Vote(Err(error))) => Failure::Remote(error),
            Ok(_) => Failure::Network(self.unexpected(action)),
            Err(error) => Failure::Network(error),
        };
        Err(self.rpc_error(action, timeout, 0, outcome))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{ClusterSecret, Transport, TransportSettings};
    use openraft::error::Infallible;

    #[test]
    fn an_oversized_batch_is_cut_in_proportion_and_never_to_zero() {
        assert_eq!(entries_that_fit(100, 200, 100), 40);
        assert_eq!(entries_that_fit(2, 1_000_000, 10), 1);
        assert_eq!(entries_that_fit(10, 11, 10), 7);
        assert_eq!(entries_that_fit(3, 4, 1_000), 2, "never the whole batch again");
    }

    /// A client of node `warren@b` from a transport connected to nobody.
    async fn client() -> PeerClient {
        let settings = TransportSettings::new("warren@a", "test", ClusterSecret::from_bytes(vec![7; 32]));
        let (transport, _inbox) = Transport::start(settings, None, &[]);
        let mut network: GroupNetwork = GroupNetwork::new(transport, RaftGroupId::new("g"));
        network.new_client(raft_node_id("warren@b"), &BasicNode::new("warren@b")).await
    }

    fn mapped(client: &PeerClient, error: TransportError, entries: usize) -> RPCError<u64, BasicNode, Infallible> {
        let timeout = Duration::from_millis(250);
        client.rpc_error(RPCTypes::AppendEntries, timeout, entries, Failure::Network(error.into()))
    }

    #[tokio::test]
    async fn transport_failures_become_openraft_errors() {
        let client = client().await;
        let peer = "warren@b".to_string();
        assert!(matches!(mapped(&client, TransportError::NotConnected(peer.clone()), 1), RPCError::Unreachable(_)));
        assert!(matches!(mapped(&client, TransportError::Disconnected(peer.clone()), 1), RPCError::Unreachable(_)));
        let timeout = TransportError::Timeout { peer, timeout: Duration::from_millis(250) };
        match mapped(&client, timeout, 1) {
            RPCError::Timeout(t) => {
                assert_eq!((t.id, t.target), (raft_node_id("warren@a"), raft_node_id("warren@b")));
                assert_eq!(t.timeout, Duration::from_millis(250));
            }
            other => panic!("{other:?}"),
        }
        let too_large = || TransportError::Frame(FrameError::TooLarge { len: 300, max: 100 });
        match mapped(&client, too_large(), 30) {
            RPCError::PayloadTooLarge(hint) => assert_eq!(hint.entries_hint(), 8),
            other => panic!("{other:?}"),
        }
        assert!(matches!(mapped(&client, too_large(), 1), RPCError::Network(_)), "one entry cannot shrink");
    }

    #[tokio::test]
    async fn a_peer_that_is_not_connected_is_unreachable_at_once() {
        let mut client = client().await;
        let vote = VoteRequest::new(openraft::Vote::new(1, raft_node_id("warren@a")), None);
        let result = client.vote(vote, RPCOption::new(Duration::from_secs(5))).await;
        assert!(matches!(result, Err(RPCError::Unreachable(_))), "{result:?}");
    }

    #[tokio::test]
    async fn a_member_whose_id_does_not_match_its_name_is_refused() {
        let settings = TransportSettings::new("warren@a", "test", ClusterSecret::from_bytes(vec![7; 32]));
        let (transport, _inbox) = Transport::start(settings, None, &[]);
        let mut network: GroupNetwork = GroupNetwork::new(transport, RaftGroupId::new("g"));
        let mut client = network.new_client(42, &BasicNode::new("warren@b")).await;
        let vote = VoteRequest::new(openraft::Vote::new(1, raft_node_id("warren@a")), None);
        match client.vote(vote, RPCOption::new(Duration::from_secs(5))).await {
            Err(RPCError::Unreachable(error)) => assert!(error.to_string().contains("names node warren@b"), "{error}"),
            other => panic!("{other:?}"),
        }
    }
}
