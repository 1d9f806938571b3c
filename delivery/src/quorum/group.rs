//! A quorum queue's Raft group as this node runs it: its log and state machine on disk, the
//! openraft `Raft` started on the tokio runtime, and the proposer that feeds it commands in
//! the order the queue issued them.
//!
//! Proposing never waits: a publish, an ack or a checkout hands its op to the proposer and
//! goes on; ops reach Raft in that order, batched into entries ([`CommandBatch`]: every op
//! waiting when the proposer is ready, with at most [`ENTRIES_IN_FLIGHT`] entries submitted
//! and not yet applied, so that batches grow under load), and their outcomes come back in
//! that order too. A publish is numbered by the group's [`CommitTracker`], so a confirm can
//! wait for its commit like an fsync; `basic.get` and `queue.purge` ask, and await the
//! [`Response`].

use super::command::{entry_of, CommandBatch, ConsumerId, Enqueue, MessageId, Op, Response, MAX_OPS_PER_ENTRY};
use super::raft::{AppliedEffects, QuorumRaft, QuorumStateMachine};
use super::replication::{InitialMembers, ProposeError, Replication};
use super::settings::Settings;
use super::snapshot::DEFAULT_CHECKPOINT_INTERVAL_ENTRIES;
use super::QuorumError;
use crate::message::Message;
use crate::message_store::{CommitTracker, DurableMark};
use crate::properties::Properties;
use crate::scheduler::now_ms;
use openraft::storage::RaftLogStorage;
use openraft::{BasicNode, EntryPayload, Raft, ServerState};
use std::collections::{BTreeSet, VecDeque};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit, Semaphore};
use warren_storage::raft::{RaftLog, RaftLogError};
use warren_storage::LogConfig;

/// This node's id in its one-member groups (a cluster gives each node its own).
pub const LOCAL_NODE_ID: u64 = 1;
/// How long a proposal waits for the group to have a leader before it fails (a nack).
const LEADER_WAIT_MS: u64 = 5_000;
/// How often a reader polls for an entry to be applied on this node.
const APPLIED_POLL_MS: u64 = 2;
/// How long the proposer waits before sending again after a batch failed (its leader went
/// away: a new one is being elected).
const RETRY_BACKOFF_MS: u64 = 100;
/// The group's Raft log, in its directory.
const LOG_DIR: &str = "raft-log";
/// The state machine's snapshot file, in its directory.
const SNAPSHOT_FILE: &str = "snapshot";
/// Entries submitted to Raft and not yet applied, at most: while they are written, the ops
/// proposed meanwhile gather into the next entry.
pub const ENTRIES_IN_FLIGHT: usize = 2;
/// Message body bytes one entry carries at most (a larger message goes alone), so that an
/// entry stays a modest replication message.
const MAX_ENTRY_BODY_BYTES: usize = 1 << 20;
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

/// What the proposer tells whoever proposed a command, once it is applied.
enum Outcome {
    /// Nobody waits.
    Ignored,
    /// A numbered write: its tracker learns whether it was committed or refused.
    Write(u64),
    /// Someone awaits the response.
    Answer(oneshot::Sender<Result<Response, String>>),
}

struct Proposal {
    op: Op,
    outcome: Outcome,
    /// Times it was proposed and its entry failed.
    failures: u32,
}

/// Failed attempts after which an op that is proposed again is given up (the group is gone
/// for good: deleted, or never regains a leader).
const MAX_PROPOSAL_FAILURES: u32 = 100;

impl Proposal {
    fn body_bytes(&self) -> usize {
        match &self.op {
            Op::Enqueue(enqueue) => enqueue.body.len(),
            _ => 0,
        }
    }
}

/// The responses of an entry's ops, once applied.
type Applied = Pin<Box<dyn Future<Output = Result<Vec<Response>, ProposeError>> + Send>>;

/// An entry submitted to Raft: its responses to come, who waits for them, and its slot.
struct Submitted {
    applied: Applied,
    outcomes: Vec<Outcome>,
    /// The ops proposed again if the entry fails: those whose outcome nobody waits for
    /// (acks, returns, checkouts, cancels, channel-downs); `None` for the others.
    retry: Vec<Option<Op>>,
    /// How often each op failed before.
    failures: Vec<u32>,
    _slot: OwnedSemaphorePermit,
}

/// Whether `op` is proposed again when its entry fails. A publish is not (its publisher
/// gets a nack and decides), nor what a client waits for (it gets an error); the rest would
/// otherwise be lost, and a lost ack leaves its consumer without credit for good. Each of
/// them is harmless applied twice.
fn retried(op: &Op, outcome: &Outcome) -> Option<Op> {
    match (op, outcome) {
        (Op::Enqueue(_), _) | (_, Outcome::Write(_) | Outcome::Answer(_)) => None,
        (op, Outcome::Ignored) => Some(op.clone()),
    }
}

/// A running quorum queue group.
pub struct QuorumGroup {
    dir: PathBuf,
    name: String,
    replication: Arc<dyn Replication>,
    log: RaftLog<QuorumRaft>,
    machine: QuorumStateMachine,
    proposals: mpsc::UnboundedSender<Proposal>,
    writes: Arc<CommitTracker>,
    raft: watch::Receiver<Option<Raft<QuorumRaft>>>,
    /// The entries read last, by index, newest last.
    decoded: parking_lot::Mutex<VecDeque<(u64, DecodedEntry)>>,
}

impl std::fmt::Debug for QuorumGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuorumGroup").field("dir", &self.dir).finish_non_exhaustive()
    }
}

impl QuorumGroup {
    /// Opens this node's member of group `name`, kept in `dir`, for a queue obeying
    /// `settings`, and starts it on `replication`'s network; a new group (`members` given)
    /// is initialized by the member they name. Effects of entries applied from now on go to
    /// `effects`; entries already in the log are replayed without effects.
    pub fn open(
        name: &str,
        dir: &Path,
        log_config: LogConfig,
        settings: Settings,
        effects: mpsc::UnboundedSender<AppliedEffects>,
        replication: Arc<dyn Replication>,
        members: Option<InitialMembers>,
    ) -> Result<Self, GroupError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| GroupError::NoRuntime)?;
        let log = RaftLog::<QuorumRaft>::open(dir.join(LOG_DIR), log_config)?;
        let machine =
            QuorumStateMachine::open(dir.join(SNAPSHOT_FILE), settings, DEFAULT_CHECKPOINT_INTERVAL_ENTRIES, effects)?;
        let stored_last = log.next_index().checked_sub(1).filter(|_| log.next_index() > log.first_stored_index());
        if let Some(last) = stored_last {
            machine.skip_effects_through(last);
        }
        let (proposals, queued) = mpsc::unbounded_channel();
        let (raft_slot, raft) = watch::channel(None);
        let writes = CommitTracker::new();
        let start = start_raft(name.to_string(), log.clone(), machine.clone(), Arc::clone(&replication), members);
        let proposer =
            Proposer { group: name.to_string(), replication: Arc::clone(&replication), writes: Arc::clone(&writes) };
        runtime.spawn(proposer.run(start, queued, raft_slot));
        let decoded = parking_lot::Mutex::new(VecDeque::new());
        let dir = dir.to_path_buf();
        Ok(QuorumGroup { dir, name: name.to_string(), replication, log, machine, proposals, writes, raft, decoded })
    }

    /// The state machine, for counts and queries.
    pub fn machine(&self) -> &QuorumStateMachine {
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

/// Sends the followers a heartbeat, which carries the leader's commit index. Groups send no
/// heartbeats of their own (see [`super::raft::HEARTBEAT_INTERVAL_MS`]), and openraft sends a
/// new commit index only with the next entries: without this, a follower could go on without
/// applying (nor delivering to its consumers) the last entries before a quiet spell until the
/// next write.
pub async fn tell_followers_the_commit(leader: &Raft<QuorumRaft>) {
    let _ = leader.trigger().heartbeat().await;
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
    let properties = Properties::decode(enqueue.properties).ok()?;
    Some(Arc::new(Message {
        exchange: enqueue.exchange.as_str().into(),
        routing_key: enqueue.routing_key.as_str().into(),
        properties,
        body: enqueue.body,
    }))
}

fn fail(outcome: Outcome, writes: &CommitTracker, why: &str) {
    match outcome {
        Outcome::Ignored => {}
        Outcome::Write(number) => writes.fail(number, why),
        Outcome::Answer(tx) => {
            let _ = tx.send(Err(why.to_string()));
        }
    }
}

/// Starts this node's member over the group's log and state machine; a new group is
/// initialized by the member its members name. Returns once the group has a leader.
async fn start_raft(
    group: String,
    log: RaftLog<QuorumRaft>,
    machine: QuorumStateMachine,
    replication: Arc<dyn Replication>,
    members: Option<InitialMembers>,
) -> Result<Raft<QuorumRaft>, GroupError> {
    let mut reader = log.clone();
    let fresh = reader.get_log_state().await.map_err(|e| GroupError::Raft(e.to_string()))?.last_log_id.is_none();
    let raft = replication.start_member(&group, log, machine).await.map_err(GroupError::Raft)?;
    if let Some(members) = members.filter(|m| fresh && m.leader == replication.node_id()) {
        if let Err(error) = raft.initialize(members.members).await {
            tracing::warn!(%group, %error, "a new quorum queue's group was initialized already");
        }
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

/// Feeds a group's proposals to Raft in order, batched into entries: to this node's member
/// when it leads, else to the leader's node.
struct Proposer {
    group: String,
    replication: Arc<dyn Replication>,
    writes: Arc<CommitTracker>,
}

impl Proposer {
    /// Runs until the group stops; a second task reports outcomes, in order.
    async fn run(
        self,
        start: impl Future<Output = Result<Raft<QuorumRaft>, GroupError>>,
        mut proposals: mpsc::UnboundedReceiver<Proposal>,
        raft_slot: watch::Sender<Option<Raft<QuorumRaft>>>,
    ) {
        let raft = match start.await {
            Ok(raft) => raft,
            Err(error) => {
                tracing::error!(group = %self.group, %error, "a quorum queue's Raft group cannot start");
                let why = format!("the quorum queue's group cannot start: {error}");
                proposals.close();
                while let Some(proposal) = proposals.recv().await {
                    fail(proposal.outcome, &self.writes, &why);
                }
                return;
            }
        };
        raft_slot.send_replace(Some(raft.clone()));
        let (submitted_tx, submitted_rx) = mpsc::unbounded_channel();
        let (retry_tx, mut retries) = mpsc::unbounded_channel();
        tokio::spawn(report_in_order(submitted_rx, Arc::clone(&self.writes), retry_tx));
        let slots = Arc::new(Semaphore::new(ENTRIES_IN_FLIGHT));
        let mut waiting: VecDeque<Proposal> = VecDeque::new();
        let mut received = Vec::new();
        loop {
            let Ok(slot) = Arc::clone(&slots).acquire_owned().await else { return };
            if let Ok(failed) = retries.try_recv() {
                // A batch failed: after a pause for the election, its ops go first.
                tokio::time::sleep(Duration::from_millis(RETRY_BACKOFF_MS)).await;
                let mut again: Vec<Proposal> = failed;
                while let Ok(more) = retries.try_recv() {
                    again.extend(more);
                }
                for proposal in again.into_iter().rev() {
                    waiting.push_front(proposal);
                }
            }
            // Everything proposed meanwhile joins the next entry.
            if waiting.is_empty() {
                tokio::select! {
                    failed = retries.recv() => {
                        waiting.extend(failed.into_iter().flatten());
                        tokio::time::sleep(Duration::from_millis(RETRY_BACKOFF_MS)).await;
                    }
                    count = proposals.recv_many(&mut received, MAX_OPS_PER_ENTRY) => if count == 0 { return },
                }
            }
            while let Ok(proposal) = proposals.try_recv() {
                received.push(proposal);
            }
            waiting.extend(received.drain(..));
            if waiting.is_empty() {
                continue;
            }
            let (ops, outcomes, failures) = next_batch(&mut waiting);
            let retry = ops.iter().zip(&outcomes).map(|(op, outcome)| retried(op, outcome)).collect();
            let batch = CommandBatch { at_ms: now_ms(), ops };
            let Some(applied) = self.submit(&raft, batch).await else {
                fail_all(outcomes, &self.writes, "the quorum queue's group has no leader");
                continue;
            };
            let remote = applied.1;
            let submitted = Submitted { applied: applied.0, outcomes, retry, failures, _slot: slot };
            if let Err(mpsc::error::SendError(submitted)) = submitted_tx.send(submitted) {
                fail_all(submitted.outcomes, &self.writes, "the quorum queue's group stopped");
            }
            if remote {
                // Batches sent to another node keep their order only one at a time.
                let Ok(all) = Arc::clone(&slots).acquire_many_owned(ENTRIES_IN_FLIGHT as u32).await else { return };
                drop(all);
            }
        }
    }

    /// Hands `batch` to the leader; its responses to come, and whether it went to another
    /// node. `None` if the group has no leader in time.
    async fn submit(&self, raft: &Raft<QuorumRaft>, batch: CommandBatch) -> Option<(Applied, bool)> {
        let me = self.replication.node_id();
        let mut leader = raft.metrics().borrow().current_leader;
        if leader.is_none() {
            let wait = raft.wait(Some(Duration::from_millis(LEADER_WAIT_MS)));
            leader = wait.metrics(|m| m.current_leader.is_some(), "a leader").await.ok()?.current_leader;
        }
        let leader = leader?;
        if leader != me {
            return Some((self.replication.propose_to(leader, &self.group, batch), true));
        }
        let leader = raft.clone();
        let applied: Applied = match raft.client_write_ff(batch).await {
            Ok(receiver) => Box::pin(async move {
                match receiver.await {
                    Ok(Ok(written)) => {
                        tell_followers_the_commit(&leader).await;
                        Ok(written.data)
                    }
                    Ok(Err(error)) => Err(ProposeError::Failed(error.to_string())),
                    Err(_) => Err(ProposeError::Failed("the group stopped before applying the command".to_string())),
                }
            }),
            Err(fatal) => {
                let why = format!("the quorum queue's Raft group stopped: {fatal}");
                Box::pin(async move { Err(ProposeError::Failed(why)) })
            }
        };
        Some((applied, false))
    }
}

/// Takes the ops of the next entry off `waiting`: as many as fit in one.
///
/// Acks of one consumer are merged into one [`Op::Settle`] (a consumer acking every message
/// would otherwise put one op per message in the log): an ack joins the consumer's earlier
/// ack in the batch unless an op other than a publish or an ack came between (a return,
/// cancel or channel-down must see the acks before it applied first).
fn next_batch(waiting: &mut VecDeque<Proposal>) -> (Vec<Op>, Vec<Outcome>, Vec<u32>) {
    let (mut ops, mut outcomes, mut failures) = (Vec::new(), Vec::new(), Vec::new());
    let mut open_settles: Vec<(ConsumerId, usize)> = Vec::new();
    let mut bytes = 0;
    while let Some(next) = waiting.front() {
        let full =
            ops.len() == MAX_OPS_PER_ENTRY || (!ops.is_empty() && bytes + next.body_bytes() > MAX_ENTRY_BODY_BYTES);
        if full {
            break;
        }
        let Some(proposal) = waiting.pop_front() else { break };
        bytes += proposal.body_bytes();
        match (proposal.op, &proposal.outcome) {
            (Op::Settle { consumer, ids }, Outcome::Ignored) => {
                let open = open_settles.iter().find(|(c, _)| *c == consumer).map(|(_, at)| *at);
                if let Some(Op::Settle { ids: earlier, .. }) = open.and_then(|at| ops.get_mut(at)) {
                    earlier.extend(ids);
                    continue;
                }
                open_settles.push((consumer.clone(), ops.len()));
                ops.push(Op::Settle { consumer, ids });
            }
            (op @ Op::Enqueue(_), _) => ops.push(op),
            (op, _) => {
                open_settles.clear();
                ops.push(op);
            }
        }
        outcomes.push(proposal.outcome);
        failures.push(proposal.failures);
    }
    (ops, outcomes, failures)
}

fn fail_all(outcomes: Vec<Outcome>, writes: &CommitTracker, why: &str) {
    for outcome in outcomes {
        fail(outcome, writes, why);
    }
}

async fn report_in_order(
    mut submitted: mpsc::UnboundedReceiver<Submitted>,
    writes: Arc<CommitTracker>,
    retries: mpsc::UnboundedSender<Vec<Proposal>>,
) {
    while let Some(Submitted { applied, outcomes, retry, failures, _slot }) = submitted.recv().await {
        let responses = match applied.await {
            Ok(responses) => responses,
            Err(ProposeError::NotSent(batch)) => {
                // Nothing of it was applied: every op goes again, publishes included.
                let mut again = Vec::new();
                for ((op, outcome), failures) in batch.ops.into_iter().zip(outcomes).zip(failures) {
                    if failures < MAX_PROPOSAL_FAILURES {
                        again.push(Proposal { op, outcome, failures: failures + 1 });
                    } else {
                        fail(outcome, &writes, "the quorum queue's leader stayed unreachable");
                    }
                }
                let _ = retries.send(again);
                continue;
            }
            Err(ProposeError::Failed(error)) => {
                tracing::debug!(%error, "a quorum queue batch failed; its acks and the like are proposed again");
                let mut again = Vec::new();
                for ((outcome, op), failures) in outcomes.into_iter().zip(retry).zip(failures) {
                    match op {
                        Some(op) if failures < MAX_PROPOSAL_FAILURES => {
                            again.push(Proposal { op, outcome, failures: failures + 1 })
                        }
                        Some(op) => tracing::warn!(?op, %error, "a quorum queue command is given up"),
                        None => fail(outcome, &writes, &error),
                    }
                }
                // Sent before the slot is released, so the proposer sees them before it
                // forms its next batch.
                let _ = retries.send(again);
                continue;
            }
        };
        for (outcome, response) in outcomes.into_iter().zip(responses) {
            match outcome {
                Outcome::Ignored => {}
                Outcome::Write(number) => writes.settled(number, response == Response::Rejected),
                Outcome::Answer(tx) => {
                    let _ = tx.send(Ok(response));
                }
            }
        }
    }
}
