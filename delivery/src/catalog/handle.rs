//! [`Catalog`]: how a node changes definitions through the catalog group. The change is
//! proposed to the leader (this node's member, or another node's through
//! [`CatalogForwarding`]); once it is committed and applied here, and applied on every other
//! node that is reachable (however slow it is, up to [`PEERS_APPLY_MAX_WAIT_MS`]), the caller gets this
//! node's own result. So whatever the client does next, on this node or through a connection
//! to another, sees the change: a queue declared through one node can be published to
//! through the next at once, as with RabbitMQ, whose definitions are changed on every node
//! before the `-ok`.

use super::command::{CatalogCommand, ChangeOutcome, DefinitionOp};
use super::local::Changed;
use super::machine::{CatalogMachine, CatalogRaft};
use crate::error::{BrokerError, BrokerResult, ReplyCode};
use crate::feature_flags::{CATALOG_SNAPSHOTS, POLICIES};
use crate::quorum::{ClusterFuture, Replication};
use openraft::Raft;
use std::sync::Arc;
use std::time::Duration;

/// How long a change waits for the catalog group to have a leader.
const LEADER_WAIT_MS: u64 = 5_000;
/// How long a change waits, at most, for the other nodes to apply it. A node that is
/// reachable is waited for, however slow (a busy machine, a node catching up after a
/// restart); one that is not reachable, or stops being, is not, and learns the change when it
/// comes back. This is a safety net against a node that answers but never applies, not a
/// timing: a wait this long means that node is broken.
pub const PEERS_APPLY_MAX_WAIT_MS: u64 = 30_000;

/// What the catalog group needs of the other nodes.
pub trait CatalogForwarding: Send + Sync + std::fmt::Debug + 'static {
    /// Submits `command` to node `leader`'s member; returns the log index it was committed at.
    fn propose_to(&self, leader: u64, command: CatalogCommand) -> ClusterFuture<Result<u64, String>>;

    /// Resolves once every other node reachable now has applied the entry at `index`, or is
    /// no longer reachable, or `within` has passed.
    fn applied_on_peers(&self, index: u64, within: Duration) -> ClusterFuture<()>;

    /// Node `leader`'s read index ([`Catalog::leader_read_index`]).
    fn read_index_of(&self, leader: u64) -> ClusterFuture<Result<u64, String>>;
}

/// The other nodes of a node alone: there are none. Its catalog is a group of one, which
/// leads itself, so nothing is forwarded and nobody else applies anything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoOtherNodes;

impl CatalogForwarding for NoOtherNodes {
    fn propose_to(&self, leader: u64, _command: CatalogCommand) -> ClusterFuture<Result<u64, String>> {
        Box::pin(async move { Err(format!("node {leader} is not this node, and this node is alone")) })
    }

    fn applied_on_peers(&self, _index: u64, _within: Duration) -> ClusterFuture<()> {
        Box::pin(async {})
    }

    fn read_index_of(&self, leader: u64) -> ClusterFuture<Result<u64, String>> {
        Box::pin(async move { Err(format!("node {leader} is not this node, and this node is alone")) })
    }
}

/// This node's member of the catalog as an operator inspects it (RabbitMQ 3.13's
/// `rabbitmq-diagnostics metadata_store_status` shows the same figures of its store).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StoreStatus {
    /// `leader`, `follower`, `candidate` or `learner`.
    pub raft_state: &'static str,
    /// The member's current term.
    pub term: u64,
    /// The last entry written to this member's log.
    pub last_log_index: u64,
    /// The last entry applied to this node's definitions.
    pub last_applied_index: u64,
    /// The entry the latest snapshot covers.
    pub snapshot_index: u64,
    /// The last entry purged from the log (behind a snapshot); a node further behind than
    /// this receives the snapshot.
    pub purged_index: u64,
    /// The catalog's machine version in effect on this node.
    pub machine_version: u16,
}

/// This node's side of the catalog group.
pub struct Catalog {
    raft: Raft<CatalogRaft>,
    machine: CatalogMachine,
    forwarding: Arc<dyn CatalogForwarding>,
    replication: Arc<dyn Replication>,
    /// The time this node's last change took from proposal to applied here.
    commit_latency: crate::quorum::CommitLatency,
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog").field("machine", &self.machine).finish_non_exhaustive()
    }
}

fn unavailable(why: impl std::fmt::Display) -> BrokerError {
    BrokerError::new(ReplyCode::InternalError, format!("the catalog cannot take the change: {why}"))
}

impl Catalog {
    /// This node's member `raft` over `machine`; changes to make on another node go through
    /// `forwarding`, quorum queues' members are chosen by `replication`.
    pub fn new(
        raft: Raft<CatalogRaft>,
        machine: CatalogMachine,
        forwarding: Arc<dyn CatalogForwarding>,
        replication: Arc<dyn Replication>,
    ) -> Arc<Self> {
        Arc::new(Catalog { raft, machine, forwarding, replication, commit_latency: Default::default() })
    }

    /// This node's member's Raft figures, for the metrics.
    pub fn raft_figures(&self) -> crate::quorum::RaftFigures {
        crate::quorum::RaftFigures::of(&self.raft.metrics().borrow(), &self.commit_latency)
    }

    /// This node's member of the group.
    pub fn raft(&self) -> &Raft<CatalogRaft> {
        &self.raft
    }

    /// This node's state machine.
    pub fn machine(&self) -> &CatalogMachine {
        &self.machine
    }

    /// This node's member as an operator inspects it.
    pub fn store_status(&self) -> StoreStatus {
        let metrics = self.raft.metrics().borrow().clone();
        let index = |id: Option<openraft::LogId<u64>>| id.map_or(0, |id| id.index);
        StoreStatus {
            raft_state: match metrics.state {
                openraft::ServerState::Leader => "leader",
                openraft::ServerState::Follower => "follower",
                openraft::ServerState::Candidate => "candidate",
                openraft::ServerState::Learner => "learner",
                openraft::ServerState::Shutdown => "shut down",
            },
            term: metrics.current_term,
            last_log_index: metrics.last_log_index.unwrap_or(0),
            last_applied_index: index(metrics.last_applied),
            snapshot_index: index(metrics.snapshot),
            purged_index: index(metrics.purged),
            machine_version: self.machine_version(),
        }
    }

    /// Makes `op` in `vhost` on every node; returns this node's result once it is applied
    /// here. A quorum queue's or a stream's members are chosen here, the declaring node first.
    pub async fn change(self: &Arc<Self>, vhost: &str, op: DefinitionOp) -> BrokerResult<ChangeOutcome> {
        self.change_holding(vhost, op).await.map(|changed| changed.outcome)
    }

    /// [`Catalog::change`], with a queue it deleted held for the caller: its consumers here
    /// are told when the caller drops it, after its `-ok`.
    pub async fn change_holding(self: &Arc<Self>, vhost: &str, mut op: DefinitionOp) -> BrokerResult<Changed> {
        if let DefinitionOp::DeclareQueue { name, arguments, members, .. } = &mut op {
            let parsed = self.machine.resolve_queue(vhost, name, arguments)?;
            if parsed.queue_type.is_replicated() {
                let size = parsed.initial_group_size;
                *members = Some(self.replication.initial_members(vhost, name, size, parsed.leader_locator));
            }
        }
        let op = self.replicated_if_delayed(vhost, op);
        let command = CatalogCommand { origin: self.replication.node_id(), vhost: vhost.to_string(), op };
        // Once proposed, a change runs to its end even if the caller goes away (its client hung
        // up while it waited): a queue it deletes is then taken and let go here, so that its
        // consumers are told, instead of being held for a caller that never comes.
        let catalog = Arc::clone(self);
        let (index, result) = tokio::spawn(async move { catalog.propose_and_apply(command).await })
            .await
            .map_err(|error| unavailable(format!("its proposer stopped: {error}")))??;
        self.forwarding.applied_on_peers(index, Duration::from_millis(PEERS_APPLY_MAX_WAIT_MS)).await;
        result
    }

    /// Proposes `command`, waits until it is applied here; its index and this node's result,
    /// with the queue it deleted.
    async fn propose_and_apply(&self, command: CatalogCommand) -> BrokerResult<(u64, BrokerResult<Changed>)> {
        let proposed = std::time::Instant::now();
        let index = self.submit(command).await.map_err(unavailable)?;
        let result = match self.machine.applied(index).await {
            Some(result) => result,
            None => Err(unavailable("its result here was lost")),
        };
        self.commit_latency.record(proposed.elapsed());
        let deleted = self.machine.take_deleted(index);
        Ok((index, result.map(|outcome| Changed { outcome, deleted })))
    }

    /// A durable delayed exchange's declare, with the members its pending set is replicated
    /// on, when there is more than one; any other op as it is.
    fn replicated_if_delayed(&self, vhost: &str, op: DefinitionOp) -> DefinitionOp {
        let DefinitionOp::DeclareExchange { name, kind, durable: true, auto_delete, internal, arguments } = op else {
            return op;
        };
        let group = crate::exchange::replicated_delays::group_name(vhost, &name);
        let members = self.replication.initial_members(vhost, &group, None, crate::queue::LeaderLocator::ClientLocal);
        if kind != crate::exchange::DELAYED_TYPE || members.members.len() < 2 {
            return DefinitionOp::DeclareExchange { name, kind, durable: true, auto_delete, internal, arguments };
        }
        DefinitionOp::DeclareReplicatedExchange { name, kind, auto_delete, internal, arguments, members }
    }

    /// Makes an access control change on every node; returns once it is applied here.
    pub async fn change_access(self: &Arc<Self>, change: crate::access::AccessChange) -> BrokerResult<()> {
        // A node of a release before policies could not read the entry.
        if change.needs_policies_flag() && !POLICIES.enabled_at(self.machine_version()) {
            return Err(BrokerError::precondition_failed(format!(
                "policies and topic permissions need feature flag '{}': enable it (warren ctl enable_feature_flag {}) once every node runs \
                 a release that has it",
                POLICIES.name, POLICIES.name
            )));
        }
        self.change("", DefinitionOp::Access(change)).await.map(|_| ())
    }

    /// Adds a member on node `node` to quorum queue or replicated stream `queue` of `vhost` (this node must have
    /// the queue: its definition goes to the new member).
    pub async fn add_member(
        self: &Arc<Self>,
        vhost: &crate::vhost::VirtualHost,
        queue: &str,
        node: &str,
    ) -> BrokerResult<()> {
        let local = vhost.queue(queue)?;
        if local.replicas().is_none() {
            let text = format!("queue '{queue}' is not a quorum queue or a replicated stream on this node");
            return Err(BrokerError::precondition_failed(text));
        }
        let op = DefinitionOp::AddMember {
            name: queue.to_string(),
            node: node.to_string(),
            node_id: crate::node::NodeId::of(node).raft_id(),
            arguments: local.definition().arguments.clone(),
        };
        self.change(vhost.name(), op).await.map(|_| ())
    }

    /// Removes quorum queue or replicated stream `queue`'s member on node `node`.
    pub async fn delete_member(self: &Arc<Self>, vhost: &str, queue: &str, node: &str) -> BrokerResult<()> {
        let op =
            DefinitionOp::DeleteMember { name: queue.to_string(), node_id: crate::node::NodeId::of(node).raft_id() };
        self.change(vhost, op).await.map(|_| ())
    }

    /// The catalog's machine version in effect on this node.
    pub fn machine_version(&self) -> u16 {
        self.machine.machine_version()
    }

    /// Moves the catalog to machine version `version` on every node (a feature flag is
    /// enabled); the caller has checked that every node knows it.
    pub async fn set_machine_version(self: &Arc<Self>, version: u16) -> BrokerResult<()> {
        self.change("", DefinitionOp::SetMachineVersion { version }).await.map(|_| ())
    }

    /// Snapshots the catalog every `interval_entries` applied entries, once the cluster has
    /// enabled [`CATALOG_SNAPSHOTS`] (a node of an earlier release could not install one);
    /// openraft then purges the log behind each snapshot.
    pub fn snapshot_every(self: &Arc<Self>, interval_entries: u64) {
        let (metadata, mut applied) = (Arc::downgrade(self), self.machine.applied_index());
        tokio::spawn(async move {
            let mut requested_at = 0;
            while applied.changed().await.is_ok() {
                let index = *applied.borrow_and_update();
                let Some(metadata) = metadata.upgrade() else { return };
                if !CATALOG_SNAPSHOTS.enabled_at(metadata.machine_version()) {
                    continue;
                }
                let last = metadata.raft.metrics().borrow().snapshot.map_or(0, |id| id.index);
                if index.saturating_sub(last.max(requested_at)) < interval_entries {
                    continue;
                }
                requested_at = index;
                if let Err(error) = metadata.raft.trigger().snapshot().await {
                    tracing::warn!(%error, "cannot snapshot the catalog");
                }
            }
        });
    }

    /// Submits `command` to the leader (this node's member, or through forwarding); returns
    /// the log index it was committed at. What a forwarded proposal runs on the leader.
    pub async fn submit(&self, command: CatalogCommand) -> Result<u64, String> {
        let leader = self.leader().await?;
        if leader == self.replication.node_id() {
            let written = self.raft.client_write(command).await.map_err(|e| e.to_string())?;
            Ok(written.log_id.index)
        } else {
            self.forwarding.propose_to(leader, command).await
        }
    }

    /// Waits at most `within` until this node has applied every change the group committed
    /// before the call; whether it has. What a node acting on definitions it may have missed
    /// (a new leader of a group routing by bindings declared through another node) awaits
    /// first: a `-ok` waits only for the nodes that are reachable.
    pub async fn caught_up(&self, within: Duration) -> bool {
        let index = match tokio::time::timeout(within, self.read_index()).await {
            Ok(Ok(index)) => index,
            Ok(Err(error)) => {
                tracing::debug!(%error, "the catalog group's read index is unknown");
                return false;
            }
            Err(_) => return false,
        };
        self.machine.applied_within(index, within).await
    }

    /// The log index up to which every change committed before the call lies, as the leader
    /// (this node's member, or another node's through forwarding) confirms it.
    async fn read_index(&self) -> Result<u64, String> {
        let leader = self.leader().await?;
        if leader == self.replication.node_id() {
            self.leader_read_index().await
        } else {
            self.forwarding.read_index_of(leader).await
        }
    }

    /// On the leader: its read index, once a quorum has confirmed it still leads (so no
    /// other leader can have committed past it). An error on a node that does not lead.
    pub async fn leader_read_index(&self) -> Result<u64, String> {
        let (read, _applied) = self.raft.get_read_log_id().await.map_err(|e| e.to_string())?;
        Ok(read.map_or(0, |id| id.index))
    }

    /// The group's leader, once it has one (waits [`LEADER_WAIT_MS`] at most).
    async fn leader(&self) -> Result<u64, String> {
        if let Some(leader) = self.raft.metrics().borrow().current_leader {
            return Ok(leader);
        }
        let wait = self.raft.wait(Some(Duration::from_millis(LEADER_WAIT_MS)));
        let metrics = wait.metrics(|m| m.current_leader.is_some(), "a leader").await.map_err(|e| e.to_string())?;
        metrics.current_leader.ok_or_else(|| "no leader".to_string())
    }
}
