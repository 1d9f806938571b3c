//! Who calls an election in a Raft group of a cluster (a quorum queue's, a stream's, a delayed
//! exchange's, the catalog's), and when. This node calls it for its member (openraft's own
//! election timer is off, see `warren_delivery::quorum::ELECTION_TIMEOUT_MS`) once the
//! failure detector says the group's
//! leader is gone or the group has had none for a while, and only after a **pre-vote**
//! (Ongaro's thesis, §9.6): the member asks the group's other voters whether they would vote
//! for it, and nobody's term changes on the way.
//!
//! A voter says yes only if it has lost the leader too (the leader's node is down here, or it
//! knows of no leader) and the candidate's log is at least as long as its own. So a member cut
//! off from the others, or from the leader alone, never raises the group's term, and when its
//! links heal the leader goes on undisturbed (without this, the healed member's higher term
//! made a healthy leader step down and the group wait seconds for a new one).
//!
//! Each answer carries the voter's log length. A member that meets a voter who also lost the
//! leader and has a longer log, or an equal one and a higher [`rank`], lets that voter run and
//! asks again a little later; so the first election after a leader's death is called by the
//! most up-to-date member and wins in one round, where members with shorter logs used to take
//! each new term first and split the votes.

use super::raft_rpc::RaftGroupId;
use openraft::{BasicNode, Raft, RaftMetrics, RaftTypeConfig, ServerState};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::future::Future;
use std::time::Duration;

/// How long a candidate waits for the pre-vote answers.
pub const PRE_VOTE_TIMEOUT_MS: u64 = 300;
/// How long a member that let a more up-to-date one run waits before it asks again, and how
/// long a candidate gives its election before it looks again (plus [`JITTER_MS`] at random).
const RETRY_AFTER_MS: u64 = 300;
/// The random share added to each wait, so that members that met once do not meet again.
const JITTER_MS: u64 = 200;
/// Rounds a member waits for a more up-to-date one before it runs whatever it hears.
const YIELD_ROUNDS: u32 = 3;
/// Rounds of one campaign; a group still without a leader after them gets a new campaign from
/// the failure detector.
const CAMPAIGN_ROUNDS: u32 = 10;

/// The groups elections are called for: openraft groups whose members are node ids and
/// [`BasicNode`]s (quorum queues' and streams' groups, and the catalog's).
pub trait Group: RaftTypeConfig<NodeId = u64, Node = BasicNode> {}

impl<C: RaftTypeConfig<NodeId = u64, Node = BasicNode>> Group for C {}

/// A voter's answer to a pre-vote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreVoteAnswer {
    /// Whether it would vote for the candidate.
    pub granted: bool,
    /// The index of the last entry of its log (0 for none).
    pub last_log_index: u64,
}

/// Whether this node's member, as `metrics` shows it, has no leader to follow: none known,
/// one whose node `is_up` says is down, or one that is no longer a voter of the group (it
/// removed itself).
pub fn leader_lost(metrics: &RaftMetrics<u64, BasicNode>, is_up: impl Fn(u64) -> bool) -> bool {
    if metrics.state == ServerState::Leader {
        return false;
    }
    let membership = metrics.membership_config.membership();
    let voter = |id: u64| membership.voter_ids().any(|v| v == id);
    match metrics.current_leader {
        None => true,
        Some(leader) if leader == metrics.id => false,
        Some(leader) => !voter(leader) || !is_up(leader),
    }
}

/// A voter's answer to a candidate whose log ends at `last_log_index`; `is_up` says which
/// nodes this node hears from.
pub fn answer_pre_vote<C: Group>(raft: &Raft<C>, last_log_index: u64, is_up: impl Fn(u64) -> bool) -> PreVoteAnswer {
    let metrics = raft.metrics().borrow().clone();
    let mine = metrics.last_log_index.unwrap_or(0);
    PreVoteAnswer { granted: leader_lost(&metrics, is_up) && last_log_index >= mine, last_log_index: mine }
}

/// Where a candidate's pre-votes go: `ask(voter, group, last_log_index)` is the voter's answer,
/// `None` when it cannot be had in time.
pub trait PreVoter: Send + Sync + 'static {
    /// Asks node `voter` about `group`.
    fn ask(
        &self,
        voter: u64,
        group: RaftGroupId,
        last_log_index: u64,
    ) -> impl Future<Output = Option<PreVoteAnswer>> + Send;
}

/// Runs one campaign for this node's member `raft` of `group`: while the member has no leader
/// it can follow, a pre-vote, then an election if a majority would vote for it and no more
/// up-to-date member is there to run instead. Ends when the group has a leader, or after
/// [`CAMPAIGN_ROUNDS`].
pub async fn campaign<C: Group>(group: RaftGroupId, raft: Raft<C>, voters: impl PreVoter, is_up: impl Fn(u64) -> bool) {
    for round in 0..CAMPAIGN_ROUNDS {
        let metrics = raft.metrics().borrow().clone();
        if !leader_lost(&metrics, &is_up) {
            return;
        }
        let me = metrics.id;
        let membership = metrics.membership_config.membership();
        let others: Vec<u64> = membership.voter_ids().filter(|v| *v != me).collect();
        if others.len() == membership.voter_ids().count() {
            return; // Not a voter: nothing to run for.
        }
        let mine = metrics.last_log_index.unwrap_or(0);
        let asked = others.iter().map(|voter| voters.ask(*voter, group.clone(), mine));
        let answers = futures_util::future::join_all(asked).await;
        let granted = 1 + answers.iter().flatten().filter(|a| a.granted).count();
        let majority = majority_of(others.len() + 1);
        let outranked = others.iter().zip(&answers).any(|(voter, answer)| {
            answer.is_some_and(|a| a.granted && (a.last_log_index, rank(&group, *voter)) > (mine, rank(&group, me)))
        });
        if granted >= majority && (!outranked || round >= YIELD_ROUNDS) {
            tracing::debug!(%group, term = metrics.current_term + 1, "pre-vote won: calling an election");
            if raft.trigger().elect().await.is_err() {
                return; // The member stopped.
            }
        }
        tokio::time::sleep(retry_wait()).await;
    }
}

/// A member's place among a group's members when their logs are equally long: the higher
/// runs first. A hash of the group and the member, so that leadership spreads over the nodes,
/// and one that every node and release computes alike (SHA-256, as node ids are).
pub fn rank(group: &RaftGroupId, member: u64) -> u64 {
    let digest = Sha256::new().chain_update(group.0.as_bytes()).chain_update(member.to_be_bytes()).finalize();
    u64::from_be_bytes([digest[0], digest[1], digest[2], digest[3], digest[4], digest[5], digest[6], digest[7]])
}

/// The votes that elect a leader among `voters`.
fn majority_of(voters: usize) -> usize {
    voters / 2 + 1
}

fn retry_wait() -> Duration {
    let jitter = rand::Rng::gen_range(&mut rand::thread_rng(), 0..JITTER_MS);
    Duration::from_millis(RETRY_AFTER_MS + jitter)
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{Membership, StoredMembership};
    use std::collections::{BTreeMap, BTreeSet};

    fn metrics(id: u64, state: ServerState, leader: Option<u64>) -> RaftMetrics<u64, BasicNode> {
        let voters: BTreeSet<u64> = [1, 2, 3].into();
        let nodes: BTreeMap<u64, BasicNode> = voters.iter().map(|v| (*v, BasicNode::default())).collect();
        let membership = Membership::new(vec![voters], nodes);
        let mut metrics = RaftMetrics::new_initial(id);
        metrics.state = state;
        metrics.current_leader = leader;
        metrics.membership_config = std::sync::Arc::new(StoredMembership::new(None, membership));
        metrics
    }

    #[test]
    fn ranks_are_stable_and_differ_by_group_and_member() {
        let group = RaftGroupId::new("quorum:/:q");
        assert_eq!(rank(&group, 1), rank(&RaftGroupId::new("quorum:/:q"), 1), "every node computes the same");
        assert_ne!(rank(&group, 1), rank(&group, 2));
        assert_ne!(rank(&group, 1), rank(&RaftGroupId::new("quorum:/:r"), 1));
    }

    #[test]
    fn a_leader_is_lost_only_when_none_is_known_or_its_node_is_down() {
        let all_up = |_| true;
        let none_up = |_| false;
        assert!(!leader_lost(&metrics(2, ServerState::Follower, Some(1)), all_up), "the leader's node is up");
        assert!(leader_lost(&metrics(2, ServerState::Follower, Some(1)), none_up), "the leader's node is down");
        assert!(leader_lost(&metrics(2, ServerState::Candidate, None), all_up), "no leader known");
        assert!(!leader_lost(&metrics(1, ServerState::Leader, Some(1)), none_up), "a leader has not lost itself");
        assert!(leader_lost(&metrics(2, ServerState::Follower, Some(9)), all_up), "a leader no longer a voter");
    }
}
