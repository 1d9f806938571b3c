//! A quorum queue's Raft group as this node runs it: its log and state machine on disk, the
//! openraft `Raft` started on the tokio runtime, and the proposer that feeds it commands in
//! the order the queue issued them.
//!
//! Proposing never waits: a publish, an ack or a checkout hands its op to the proposer
//! (`super::proposer`) and goes on. A publish is numbered by the group's [`CommitTracker`], so
//! a confirm can wait for its commit like an fsync; `basic.get` and `queue.purge` ask, and
//! await the [`Response`].

use super::command::{entry_of, Enqueue, MessageId, Op, Response};
use super::group_machine::ReplicatedMachine;
use super::proposer::{fail, Outcome, Proposal, Proposer};
use super::raft::{QuorumRaft, QuorumStateMachine};
use super::replication::{InitialMembers, Replication};
use super::QuorumError;
use crate::message::Message;
use crate::message_store::{CommitTracker, DurableMark};
use openraft::storage::RaftLogStorage;
use openraft::{BasicNode, EntryPayload, Raft, ServerState};
use std::collections::{BTreeSet, VecDeque};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};
use warren_storage::raft::{RaftLog, RaftLogError};
use warren_storage::LogConfig;

/// This node's id in its one-member groups (a cluster gives each node its own).
pub const LOCAL_NODE_ID: u64 = 1;
/// How long a proposal waits for the group to have a leader before it fails (a nack).
pub(super) const LEADER_WAIT_MS: u64 = 5_000;
/// How often a new group's initializer calls its first election again while it has no leader.
const FIRST_ELECTION_RETRY_MS: u64 = 200;
/// How many times at most (then the failure detector's leaderless rule takes over).
const FIRST_ELECTION_ATTEMPTS: u32 = 25;
/// How often a reader polls for an entry to be applied on this node.
const APPLIED_POLL_MS: u64 = 2;
/// The group's Raft log, in its directory.
const LOG_DIR: &str = "raft-log";
/// The state machine's snapshot file, in its directory.
const SNAPSHOT_FILE: &str = "snapshot";
/// Decoded entries kept for reading message bodies: deliveries go mostly in id order, so
/// the messages of one entry are read one after another.
const DECODED_ENTRIES_KEPT: usize = 4;

/// A quorum queue's group could not start or serve.
#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    /// The Raft log failed.
    #[error("quorum queue log: {0}")]
    Log(#[from] RaftLogError),
    /// The state machine's snapshot failed.
    #[error(transparent)]
    Quorum(#[from] QuorumError),
    /// Raft itself failed or stopped.
    #[error("quorum queue Raft group: {0}")]
    Raft(String),
    /// There is no tokio runtime to run the group on.
    #[error("quorum queues need the broker's runtime")]
    NoRuntime,
    /// The entry of a message is not in the log, or is not a message.
    #[error("message {0} is not in the quorum queue's log")]
    MissingMessage(MessageId),
}

/// A running group: a quorum queue's (the default), or a replicated stream's (`M` is
/// [`crate::stream::StreamStateMachine`]).
pub struct QuorumGroup<M: ReplicatedMachine = QuorumStateMachine> {
    dir: PathBuf,
    name: String,
    replication: Arc<dyn Replication>,
    log: RaftLog<QuorumRaft>,
    machine: M,
    proposals: mpsc::UnboundedSender<Proposal>,
    writes: Arc<CommitTracker>,
    raft: watch::Receiver<Option<Raft<QuorumRaft>>>,
    /// The entries read last, by index, newest last.
    decoded: parking_lot::Mutex<VecDeque<(u64, DecodedEntry)>>,
    /// The time its last own proposal as leader took to apply.
    commit_latency: Arc<super::CommitLatency>,
}

/// A group's membership, whatever its state machine (a quorum queue's or a stream's): what
/// the cluster tools act on (`add_member` and `add_replica`, `quorum_status` and
/// `stream_status`, `grow`, `shrink`, `forget_cluster_node`).
pub trait Membership: Send + Sync {
    /// The voting members now, by Raft id, with their nodes, as this node knows them.
    fn members(&self) -> Vec<(u64, BasicNode)>;
    /// The leader this node knows of, by Raft id.
    fn leader(&self) -> Option<u64>;
    /// Whether this node leads the group.
    fn is_leader(&self) -> bool;
    /// Adds node `id` (`node`) to the voters, once it has caught up. Call on the leader.
    fn add_member(&self, id: u64, node: BasicNode)
        -> Pin<Box<dyn Future<Output = Result<(), GroupError>> + Send + '_>>;
    /// Removes node `id` from the voters. Call on the leader.
    fn remove_member(&self, id: u64) -> Pin<Box<dyn Future<Output = Result<(), GroupError>> + Send + '_>>;
    /// This node's member's Raft figures, once it runs.
    fn raft_figures(&self) -> Option<super::RaftFigures>;
}

impl<M: ReplicatedMachine> Membership for QuorumGroup<M> {
    fn members(&self) -> Vec<(u64, BasicNode)> {
        QuorumGroup::members(self)
    }

    fn leader(&self) -> Option<u64> {
        QuorumGroup::leader(self)
    }

    fn is_leader(&self) -> bool {
        QuorumGroup::is_leader(self)
    }

    fn add_member(
        &self,
        id: u64,
        node: BasicNode,
    ) -> Pin<Box<dyn Future<Output = Result<(), GroupError>> + Send + '_>> {
        Box::pin(QuorumGroup::add_member(self, id, node))
    }

    fn remove_member(&self, id: u64) -> Pin<Box<dyn Future<Output = Result<(), GroupError>> + Send + '_>> {
        Box::pin(QuorumGroup::remove_member(self, id))
    }

    fn raft_figures(&self) -> Option<super::RaftFigures> {
        let raft = self.raft.borrow();
        let metrics = raft.as_ref()?.metrics();
        let metrics = metrics.borrow();
        Some(super::RaftFigures::of(&metrics, &self.commit_latency))
    }
}

impl<M: ReplicatedMachine> std::fmt::Debug for QuorumGroup<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuorumGroup").field("dir", &self.dir).finish_non_exhaustive()
    }
}

/// Where a group kept in `dir` keeps its state machine's snapshot.
pub fn snapshot_path(dir: &Path) -> PathBuf {
    dir.join(SNAPSHOT_FILE)
}

/// Whether `dir` holds a group's Raft log.
pub fn holds_group(dir: &Path) -> bool {
    dir.join(LOG_DIR).is_dir()
}

impl<M: ReplicatedMachine> QuorumGroup<M> {
    /// Opens this node's member of group `name`, kept in `dir`, over `machine` (its snapshot
    /// at [`snapshot_path`]), and starts it on `replication`'s network; a new group
    /// (`members` given) is initialized by the member they name. Entries already in the log
    /// are replayed as such (see [`ReplicatedMachine::replayed_through`]).
    pub fn open(
        name: &str,
        dir: &Path,
        log_config: LogConfig,
        machine: M,
        replication: Arc<dyn Replication>,
        members: Option<InitialMembers>,
    ) -> Result<Self, GroupError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| GroupError::NoRuntime)?;
        let log = RaftLog::<QuorumRaft>::open(dir.join(LOG_DIR), log_config)?;
        let stored_last = log.next_index().checked_sub(1).filter(|_| log.next_index() > log.first_stored_index());
        if let Some(last) = stored_last {
            machine.replayed_through(last);
        }
        let (proposals, queued) = mpsc::unbounded_channel();
        let (raft_slot, raft) = watch::channel(None);
        let writes = CommitTracker::new();
        let start = start_raft(name.to_string(), log.clone(), machine.clone(), Arc::clone(&replication), members);
        let commit_latency = Arc::new(super::CommitLatency::default());
        let proposer = Proposer {
            group: name.to_string(),
            replication: Arc::clone(&replication),
            writes: Arc::clone(&writes),
            commit_latency: Arc::clone(&commit_latency),
        };
        runtime.spawn(proposer.run(start, queued, raft_slot));
        let decoded = parking_lot::Mutex::new(VecDeque::new());
        let dir = dir.to_path_buf();
        let name = name.to_string();
        Ok(QuorumGroup { dir, name, replication, log, machine, proposals, writes, raft, decoded, commit_latency })
    }

    /// The state machine, for counts and queries.
    pub fn machine(&self) -> &M {
        &self.machine
    }

    /// Proposes `op`; nobody waits for its outcome.
    pub fn propose(&self, op: Op) {
        self.send(op, Outcome::Ignored);
    }

    /// Proposes a publish; the mark is safe once it is committed (an error if refused).
    pub fn enqueue(&self, enqueue: Enqueue) -> DurableMark {
        let number = self.writes.next();
        self.send(Op::Enqueue(enqueue), Outcome::Write(number));
        DurableMark::commit(&self.writes, number)
    }

    /// Proposes `op` and returns its response once applied.
    pub fn ask(&self, op: Op) -> impl Future<Output = Result<Response, GroupError>> + Send + 'static {
        let (tx, rx) = oneshot::channel();
        self.send(op, Outcome::Answer(tx));
        async move {
            match rx.await {
                Ok(result) => result.map_err(GroupError::Raft),
                Err(_) => Err(GroupError::Raft("the group stopped".into())),
            }
        }
    }

    fn send(&self, op: Op, outcome: Outcome) {
        let proposal = Proposal { op, outcome, failures: 0 };
        if let Err(mpsc::error::SendError(proposal)) = self.proposals.send(proposal) {
            fail(proposal.outcome, &self.writes, "the quorum queue's group stopped");
        }
    }

    /// This node's Raft id.
    pub fn node_id(&self) -> u64 {
        self.replication.node_id()
    }

    /// Whether node `id` is reachable now.
    pub fn is_node_up(&self, id: u64) -> bool {
        self.replication.is_node_up(id)
    }

    /// Whether this node leads the group now.
    pub fn is_leader(&self) -> bool {
        self.raft.borrow().as_ref().is_some_and(|raft| raft.metrics().borrow().state == ServerState::Leader)
    }

    /// The term of this node's leadership, if it leads.
    pub fn leader_term(&self) -> Option<u64> {
        let raft = self.raft.borrow();
        let metrics = raft.as_ref()?.metrics();
        let metrics = metrics.borrow();
        (metrics.state == ServerState::Leader).then_some(metrics.current_term)
    }

    /// This node's member, once it runs (an error if it could not start).
    pub async fn running(&self) -> Result<Raft<QuorumRaft>, GroupError> {
        let mut slot = self.raft.clone();
        loop {
            if let Some(raft) = slot.borrow_and_update().clone() {
                return Ok(raft);
            }
            slot.changed().await.map_err(|_| GroupError::Raft("the group did not start".into()))?;
        }
    }

    /// The group's voting members now, by Raft id, with their nodes (a node's name in a
    /// cluster), as this node knows them.
    pub fn members(&self) -> Vec<(u64, BasicNode)> {
        let Some(raft) = self.raft.borrow().clone() else { return Vec::new() };
        let metrics = raft.metrics().borrow().clone();
        let membership = metrics.membership_config.membership();
        let voters: BTreeSet<u64> = membership.voter_ids().collect();
        membership.nodes().filter(|(id, _)| voters.contains(id)).map(|(id, node)| (*id, node.clone())).collect()
    }

    /// The leader this node knows of, by Raft id.
    pub fn leader(&self) -> Option<u64> {
        self.raft.borrow().as_ref().and_then(|raft| raft.metrics().borrow().current_leader)
    }

    /// Adds node `id` (`node`) to the group's voters: it joins as a learner, catches up from
    /// the log (or a snapshot and the log after it), then votes. Call on the leader.
    pub async fn add_member(&self, id: u64, node: BasicNode) -> Result<(), GroupError> {
        let raft = self.running().await?;
        raft.add_learner(id, node, true).await.map_err(|e| GroupError::Raft(e.to_string()))?;
        change_voters(&raft, |voters| {
            voters.insert(id);
        })
        .await
    }

    /// Removes node `id` from the group's voters. Call on the leader.
    pub async fn remove_member(&self, id: u64) -> Result<(), GroupError> {
        let raft = self.running().await?;
        change_voters(&raft, |voters| {
            voters.remove(&id);
        })
        .await
    }

    /// Waits until this node has applied the entry at `index` (a message's body read here
    /// after another node's answer names it).
    pub async fn applied(&self, index: u64) -> Result<(), GroupError> {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(LEADER_WAIT_MS);
        while self.machine.last_applied().is_none_or(|applied| applied.index < index) {
            if tokio::time::Instant::now() > deadline {
                return Err(GroupError::Raft(format!("entry {index} was not applied on this node in time")));
            }
            tokio::time::sleep(Duration::from_millis(APPLIED_POLL_MS)).await;
        }
        Ok(())
    }

    /// The message published by the entry at `id`, as stored.
    pub fn message(&self, id: MessageId) -> Result<Arc<Message>, GroupError> {
        let (index, position) = entry_of(id);
        let messages = self.messages_at(index)?.ok_or(GroupError::MissingMessage(id))?;
        messages.get(position).cloned().flatten().ok_or(GroupError::MissingMessage(id))
    }

    /// The messages the entry at `index` published, by position (`None` for its other ops,
    /// and for a publish whose properties do not decode); `None` if it is not an entry of
    /// commands.
    fn messages_at(&self, index: u64) -> Result<Option<DecodedEntry>, GroupError> {
        if let Some((_, messages)) = self.decoded.lock().iter().find(|(at, _)| *at == index) {
            return Ok(Some(Arc::clone(messages)));
        }
        let Some(entry) = self.log.entry(index)? else { return Ok(None) };
        let EntryPayload::Normal(batch) = entry.payload else { return Ok(None) };
        let messages: DecodedEntry = Arc::new(batch.ops.into_iter().map(published).collect());
        let mut decoded = self.decoded.lock();
        if decoded.len() == DECODED_ENTRIES_KEPT {
            decoded.pop_front();
        }
        decoded.push_back((index, Arc::clone(&messages)));
        Ok(Some(messages))
    }

    /// Bytes the group's log holds on disk.
    pub fn size_bytes(&self) -> u64 {
        self.log.size_bytes()
    }

    /// The broker is stopping: what the log holds is made durable, and Raft stops.
    pub fn close(&self) {
        self.stop();
        if let Err(error) = self.log.close() {
            tracing::error!(dir = %self.dir.display(), %error, "cannot close a quorum queue's log");
        }
    }

    /// The queue was deleted: the group stops and its files go.
    pub fn destroy(&self) {
        self.close();
        if let Err(error) = std::fs::remove_dir_all(&self.dir) {
            tracing::warn!(dir = %self.dir.display(), %error, "cannot remove a deleted quorum queue's files");
        }
    }

    fn stop(&self) {
        self.replication.stop_member(&self.name);
        if let Some(raft) = self.raft.borrow().clone() {
            tokio::spawn(async move {
                if let Err(error) = raft.shutdown().await {
                    tracing::debug!(%error, "a quorum queue's Raft stopped uncleanly");
                }
            });
        }
    }
}

/// How long a membership change waits for the one before it to finish.
const MEMBERSHIP_CHANGE_WAIT_MS: u64 = 30_000;

/// Changes the group's voters by `change` (applied to the last committed membership's
/// voters), waiting for a change still in progress to finish first.
async fn change_voters(raft: &Raft<QuorumRaft>, change: impl Fn(&mut BTreeSet<u64>)) -> Result<(), GroupError> {
    use openraft::error::{ChangeMembershipError, ClientWriteError, RaftError};
    let deadline = tokio::time::Instant::now() + Duration::from_millis(MEMBERSHIP_CHANGE_WAIT_MS);
    loop {
        let mut voters: BTreeSet<u64> = raft.metrics().borrow().membership_config.membership().voter_ids().collect();
        change(&mut voters);
        match raft.change_membership(voters, false).await {
            Ok(_) => return Ok(()),
            Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(ChangeMembershipError::InProgress(_))))
                if tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(APPLIED_POLL_MS * 50)).await;
            }
            Err(error) => return Err(GroupError::Raft(error.to_string())),
        }
    }
}

/// The messages of an entry, by position in its batch.
type DecodedEntry = Arc<Vec<Option<Arc<Message>>>>;

/// The message `op` published, if it is a publish.
fn published(op: Op) -> Option<Arc<Message>> {
    let Op::Enqueue(enqueue) = op else { return None };
    enqueue.into_message().map(Arc::new)
}

/// The first election of a new group may come before the other members started theirs (they
/// create them as they apply the same declare): until a leader is known, the initializer
/// calls it again every [`FIRST_ELECTION_RETRY_MS`], at most [`FIRST_ELECTION_ATTEMPTS`]
/// times. Groups call no elections on their own (the failure detector does, after seconds),
/// and until the others hold the group's membership, only the initializer can form it: were
/// it to die first, the queue would wait for its return.
async fn elect_until_led(group: &str, raft: &Raft<QuorumRaft>) {
    for _ in 0..FIRST_ELECTION_ATTEMPTS {
        let wait = raft.wait(Some(Duration::from_millis(FIRST_ELECTION_RETRY_MS)));
        if wait.metrics(|m| m.current_leader.is_some(), "a leader").await.is_ok() {
            return;
        }
        tracing::debug!(%group, "a new quorum queue's group has no leader yet: electing again");
        let _ = raft.trigger().elect().await;
    }
}

/// Starts this node's member over the group's log and state machine; a new group is
/// initialized by the member its members name. Returns once the group has a leader.
async fn start_raft(
    group: String,
    log: RaftLog<QuorumRaft>,
    machine: impl ReplicatedMachine,
    replication: Arc<dyn Replication>,
    members: Option<InitialMembers>,
) -> Result<Raft<QuorumRaft>, GroupError> {
    let mut reader = log.clone();
    let fresh = reader.get_log_state().await.map_err(|e| GroupError::Raft(e.to_string()))?.last_log_id.is_none();
    let raft = replication.start_member(&group, log, machine.into_group_machine()).await.map_err(GroupError::Raft)?;
    if let Some(members) = members.filter(|m| fresh && m.leader == replication.node_id()) {
        if let Err(error) = raft.initialize(members.members).await {
            tracing::warn!(%group, %error, "a new quorum queue's group was initialized already");
        }
        elect_until_led(&group, &raft).await;
    }
    loop {
        let wait = raft.wait(Some(Duration::from_millis(LEADER_WAIT_MS)));
        match wait.metrics(|m| m.current_leader.is_some(), "a leader").await {
            Ok(_) => return Ok(raft),
            Err(openraft::metrics::WaitError::Timeout(..)) => {
                tracing::warn!(%group, "a quorum queue's group has no leader yet (waiting for a majority of its members)")
            }
            Err(error) => return Err(GroupError::Raft(error.to_string())),
        }
    }
}
