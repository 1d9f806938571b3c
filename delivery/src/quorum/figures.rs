//! What a Raft member reports to the metrics: RabbitMQ's `rabbitmq_raft_*` figures (term,
//! snapshot, applied, commit and written indexes, commit latency) and, on a leader, how far
//! each follower is behind. Read from openraft's metrics of the member, for any group's
//! Raft types with u64 node ids (quorum queues, streams, the catalog).

use openraft::{BasicNode, RaftMetrics, ServerState};
use std::sync::atomic::{AtomicU64, Ordering};

/// One member's figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RaftFigures {
    /// Its current term.
    pub term: u64,
    /// The index its last snapshot covers (0 if none).
    pub snapshot_index: u64,
    /// The index of the last entry it applied.
    pub last_applied_index: u64,
    /// The commit index: on the leader, the highest index a majority of voters hold; on a
    /// follower the last it applied (openraft does not tell a follower more).
    pub commit_index: u64,
    /// The index of the last entry in its log.
    pub last_written_index: u64,
    /// How long the last entry this member proposed as leader took from proposal to
    /// applied, in seconds (0 if it has not led).
    pub commit_latency_seconds: f64,
    /// On the leader, each other voter's node (its name in a cluster) and how many entries
    /// it is behind the leader's log; empty on a follower.
    pub followers_behind: Vec<(String, u64)>,
}

impl RaftFigures {
    /// The figures of the member whose metrics are `metrics`, with its last commit latency.
    pub fn of(metrics: &RaftMetrics<u64, BasicNode>, commit_latency: &CommitLatency) -> Self {
        let index = |id: Option<openraft::LogId<u64>>| id.map_or(0, |id| id.index);
        let last_written_index = metrics.last_log_index.unwrap_or(0);
        let last_applied_index = index(metrics.last_applied);
        let mut figures = RaftFigures {
            term: metrics.current_term,
            snapshot_index: index(metrics.snapshot),
            last_applied_index,
            commit_index: last_applied_index,
            last_written_index,
            commit_latency_seconds: commit_latency.seconds(),
            followers_behind: Vec::new(),
        };
        let (ServerState::Leader, Some(replication)) = (metrics.state, &metrics.replication) else {
            return figures;
        };
        let membership = metrics.membership_config.membership();
        let voters: Vec<u64> = membership.voter_ids().collect();
        let mut held: Vec<u64> = Vec::with_capacity(voters.len());
        for voter in &voters {
            if *voter == metrics.id {
                held.push(last_written_index);
                continue;
            }
            let matched = replication.get(voter).copied().flatten().map_or(0, |id| id.index);
            held.push(matched);
            let node = membership.get_node(voter).map_or_else(|| voter.to_string(), |node| node.addr.clone());
            figures.followers_behind.push((node, last_written_index.saturating_sub(matched)));
        }
        held.sort_unstable_by(|a, b| b.cmp(a));
        if let Some(majority) = held.get(voters.len() / 2) {
            figures.commit_index = (*majority).max(last_applied_index);
        }
        figures
    }
}

/// The last commit latency of a member's own proposals, in microseconds.
#[derive(Debug, Default)]
pub struct CommitLatency(AtomicU64);

impl CommitLatency {
    /// Records one proposal's time from proposal to applied.
    pub fn record(&self, took: std::time::Duration) {
        self.0.store(u64::try_from(took.as_micros()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// The last recorded, in seconds.
    pub fn seconds(&self) -> f64 {
        self.0.load(Ordering::Relaxed) as f64 / 1e6
    }
}
