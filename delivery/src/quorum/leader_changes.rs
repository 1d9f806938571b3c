//! Leader changes of the Raft groups this node runs a member of: counted (the metric
//! `warren_raft_leader_changes_total`) and logged, once per change, at INFO.
//!
//! A new leader's first entry of its term is a blank one (openraft commits it to learn the
//! commit point), and every member applies each entry once: so applying it is where a member
//! learns that its group has a new leader, once per term, at no cost to an idle group (a
//! watcher per group would cost memory and wake-ups for every one of thousands of queues).
//! The first leader a member sees after it starts is not a change it saw happen: neither
//! counted nor logged, so a node starting with 10,000 queues logs nothing for them.

use crate::raft_adapter::typ::LogId;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

static LEADER_CHANGES: AtomicU64 = AtomicU64::new(0);

/// Leader changes seen by this node's members since it started (every member counts its
/// group's change: a change in a group of three members on three nodes counts once per node).
pub fn leader_changes_total() -> u64 {
    LEADER_CHANGES.load(Ordering::Relaxed)
}

/// What a member remembers of its group's leader.
#[derive(Debug)]
pub struct LeaderChanges {
    group: Arc<str>,
    /// The term and node id of the leader whose blank entry was applied last.
    leader: Option<(u64, u64)>,
}

impl LeaderChanges {
    /// For the member of `group` (its name, as the logs and the API show it).
    pub fn new(group: &str) -> Self {
        LeaderChanges { group: group.into(), leader: None }
    }

    /// The group's name.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// The blank entry `log_id` of a new leader was applied here; whether it was reported as
    /// a change. Entries the member applies again at startup (`replayed`) are changes of the
    /// past: remembered, not reported.
    pub fn blank_applied(&mut self, log_id: &LogId, replayed: bool) -> bool {
        let now = (log_id.leader_id.term, log_id.leader_id.node_id);
        let previous = self.leader.replace(now);
        let Some((_, previous_leader)) = previous.filter(|&(term, _)| term < now.0) else { return false };
        if replayed {
            return false;
        }
        LEADER_CHANGES.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            group = %self.group,
            term = now.0,
            leader = now.1,
            previous_leader,
            "a Raft group has a new leader"
        );
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft_adapter::typ::CommittedLeaderId;

    fn blank(term: u64, node: u64, index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(term, node), index)
    }

    #[test]
    fn the_first_leader_is_not_a_change_and_later_ones_count_once_each() {
        let mut changes = LeaderChanges::new("q");
        let before = leader_changes_total();
        assert!(!changes.blank_applied(&blank(1, 7, 1), false), "the first leader seen");
        assert!(changes.blank_applied(&blank(2, 8, 5), false), "a new term's leader");
        assert!(!changes.blank_applied(&blank(2, 8, 5), false), "the same term again");
        assert!(!changes.blank_applied(&blank(3, 7, 9), true), "replayed");
        assert!(changes.blank_applied(&blank(4, 9, 12), false), "after a replayed one");
        // Other tests in this process count too: at least these two.
        assert!(leader_changes_total() >= before + 2);
    }
}
