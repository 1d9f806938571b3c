//! The proposer of a quorum queue's group: feeds the ops this node proposes to Raft in the
//! order they were proposed, batched into entries ([`CommandBatch`]: every op waiting when the
//! proposer is ready, with at most [`ENTRIES_IN_FLIGHT`] entries submitted and not yet
//! applied, so that batches grow under load), to this node's member when it leads, else to
//! the leader's node; and reports their outcomes in that order too. Ops whose entry failed
//! are proposed again where that is safe (see `retried`).

use super::command::{CommandBatch, ConsumerId, Op, Response, MAX_OPS_PER_ENTRY};
use super::group::{GroupError, LEADER_WAIT_MS};
use super::raft::QuorumRaft;
use super::replication::{ProposeError, Replication};
use crate::clock::now_ms;
use crate::message_store::CommitTracker;
use openraft::Raft;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit, Semaphore};

/// How long the proposer waits before sending again after a batch failed (its leader went
/// away: a new one is being elected).
const RETRY_BACKOFF_MS: u64 = 100;
/// Entries submitted to Raft and not yet applied, at most: while they are written, the ops
/// proposed meanwhile gather into the next entry.
pub const ENTRIES_IN_FLIGHT: usize = 2;
/// Message body bytes one entry carries at most (a larger message goes alone), so that an
/// entry stays a modest replication message.
const MAX_ENTRY_BODY_BYTES: usize = 1 << 20;
/// What the proposer tells whoever proposed a command, once it is applied.
pub(super) enum Outcome {
    /// Nobody waits.
    Ignored,
    /// A numbered write: its tracker learns whether it was committed or refused.
    Write(u64),
    /// Someone awaits the response.
    Answer(oneshot::Sender<Result<Response, String>>),
}

pub(super) struct Proposal {
    pub(super) op: Op,
    pub(super) outcome: Outcome,
    /// Times it was proposed and its entry failed.
    pub(super) failures: u32,
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

/// How long after the last entry it proposed a leader tells its followers the commit once
/// more. The heartbeat after each write is dropped for a follower whose replication is in
/// backoff (it was unreachable a moment ago): one coming back while the last writes were
/// committed would otherwise hold them uncommitted until the next write (a stream's readers
/// on its node would wait for them). Longer than openraft's replication backoff (500 ms).
const TRAILING_HEARTBEAT_MS: u64 = 1_000;

/// Sends the followers a heartbeat, which carries the leader's commit index. Groups send no
/// heartbeats of their own (see [`super::raft::HEARTBEAT_INTERVAL_MS`]), and openraft sends a
/// new commit index only with the next entries: without this, a follower could go on without
/// applying (nor delivering to its consumers) the last entries before a quiet spell until the
/// next write.
pub async fn tell_followers_the_commit(leader: &Raft<QuorumRaft>) {
    let _ = leader.trigger().heartbeat().await;
}

pub(super) fn fail(outcome: Outcome, writes: &CommitTracker, why: &str) {
    match outcome {
        Outcome::Ignored => {}
        Outcome::Write(number) => writes.fail(number, why),
        Outcome::Answer(tx) => {
            let _ = tx.send(Err(why.to_string()));
        }
    }
}

/// Feeds a group's proposals to Raft in order, batched into entries: to this node's member
/// when it leads, else to the leader's node.
pub(super) struct Proposer {
    pub(super) group: String,
    pub(super) replication: Arc<dyn Replication>,
    pub(super) writes: Arc<CommitTracker>,
    /// Where the time of its entries from proposal to applied goes, for the metrics.
    pub(super) commit_latency: Arc<super::CommitLatency>,
}

impl Proposer {
    /// Runs until the group stops; a second task reports outcomes, in order.
    pub(super) async fn run(
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
        // When to tell the followers the commit once more after the last entry this node led.
        let mut trailing_heartbeat: Option<tokio::time::Instant> = None;
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
            if waiting.is_empty() {
                match proposals.try_recv() {
                    Ok(proposal) => waiting.push_back(proposal),
                    Err(mpsc::error::TryRecvError::Disconnected) => return,
                    Err(mpsc::error::TryRecvError::Empty) => {
                        // Idle: wait without the buffer, which keeps the size of the group's
                        // busiest moment (and a thousand idle queues would each hold one).
                        waiting = VecDeque::new();
                        let due = trailing_heartbeat.unwrap_or_else(tokio::time::Instant::now);
                        tokio::select! {
                            failed = retries.recv() => {
                                waiting.extend(failed.into_iter().flatten());
                                tokio::time::sleep(Duration::from_millis(RETRY_BACKOFF_MS)).await;
                            }
                            proposal = proposals.recv() => match proposal {
                                Some(proposal) => waiting.push_back(proposal),
                                None => return,
                            },
                            _ = tokio::time::sleep_until(due), if trailing_heartbeat.is_some() => {
                                trailing_heartbeat = None;
                                tell_followers_the_commit(&raft).await;
                            }
                        }
                    }
                }
            }
            // Everything proposed meanwhile joins the next entry.
            while let Ok(proposal) = proposals.try_recv() {
                waiting.push_back(proposal);
            }
            if waiting.is_empty() {
                continue;
            }
            let (ops, outcomes, failures) = next_batch(&mut waiting);
            let retry: Vec<Option<Op>> = ops.iter().zip(&outcomes).map(|(op, outcome)| retried(op, outcome)).collect();
            let batch = CommandBatch { at_ms: now_ms(), ops };
            let Some(applied) = self.submit(&raft, batch).await else {
                // No leader in time: what may go again waits for one, in front of the rest.
                let again =
                    again_or_fail(outcomes, retry, failures, &self.writes, "the quorum queue's group has no leader");
                for proposal in again.into_iter().rev() {
                    waiting.push_front(proposal);
                }
                continue;
            };
            let remote = applied.1;
            if !remote {
                let due = tokio::time::Instant::now() + Duration::from_millis(TRAILING_HEARTBEAT_MS);
                trailing_heartbeat = Some(due);
            }
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
        let (proposed, latency) = (std::time::Instant::now(), Arc::clone(&self.commit_latency));
        let applied: Applied = match raft.client_write_ff(batch).await {
            Ok(receiver) => Box::pin(async move {
                match receiver.await {
                    Ok(Ok(written)) => {
                        latency.record(proposed.elapsed());
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

/// The ops of a batch that was not applied which go again (see [`retried`]), unless they
/// failed too often; the others fail with `why`.
fn again_or_fail(
    outcomes: Vec<Outcome>,
    retry: Vec<Option<Op>>,
    failures: Vec<u32>,
    writes: &CommitTracker,
    why: &str,
) -> Vec<Proposal> {
    let mut again = Vec::new();
    for ((outcome, op), failures) in outcomes.into_iter().zip(retry).zip(failures) {
        match op {
            Some(op) if failures < MAX_PROPOSAL_FAILURES => {
                again.push(Proposal { op, outcome, failures: failures + 1 })
            }
            Some(op) => tracing::warn!(?op, why, "a quorum queue command is given up"),
            None => fail(outcome, writes, why),
        }
    }
    again
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
                let again = again_or_fail(outcomes, retry, failures, &writes, &error);
                // Sent before the slot is released, so the proposer sees them before it
                // forms its next batch.
                let _ = retries.send(again);
                continue;
            }
        };
        for (outcome, response) in outcomes.into_iter().zip(responses) {
            match outcome {
                Outcome::Ignored => {}
                Outcome::Write(number) => {
                    if response == Response::Duplicate {
                        crate::dedup_window::note_dropped();
                    }
                    writes.settled(number, response == Response::Rejected)
                }
                Outcome::Answer(tx) => {
                    let _ = tx.send(Ok(response));
                }
            }
        }
    }
}
