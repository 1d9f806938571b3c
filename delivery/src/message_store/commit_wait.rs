//! Writes that become safe elsewhere, in order: a quorum queue's publishes, safe once their
//! Raft entry is committed on a majority (each member having fsynced it), and refused if the
//! queue's state machine refused them (`x-overflow: reject-publish`).
//!
//! A [`CommitTracker`] numbers the writes of one queue as they are proposed; whoever learns
//! their outcomes (in proposal order) reports them. A confirm waits for a range of numbers
//! through a [`super::DurableMark`], as it waits for an offset of a local log.

use super::StoreError;
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tokio::sync::watch;

/// Outcomes of one queue's proposed writes, numbered from 1 in proposal order.
#[derive(Debug)]
pub struct CommitTracker {
    state: Mutex<Outcomes>,
    /// Every write up to this number has its outcome.
    settled_through: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct Outcomes {
    last_numbered: u64,
    /// Writes the state machine refused.
    refused: BTreeSet<u64>,
    /// Writes that failed (their leader went away, or the group stopped), with why.
    failed: BTreeMap<u64, String>,
}

/// Refused and failed write numbers older than this many writes are forgotten: a confirm waits for its
/// writes long before that many more are proposed.
const REFUSED_KEPT: u64 = 1 << 20;

impl CommitTracker {
    /// A tracker with no writes yet.
    pub fn new() -> Arc<Self> {
        Arc::new(CommitTracker { state: Mutex::new(Outcomes::default()), settled_through: watch::Sender::new(0) })
    }

    /// Numbers the next write.
    pub fn next(&self) -> u64 {
        let mut state = self.state.lock();
        state.last_numbered += 1;
        state.last_numbered
    }

    /// Write `number` (and every one before it) has its outcome: committed, or refused.
    pub fn settled(&self, number: u64, refused: bool) {
        if refused {
            let mut state = self.state.lock();
            state.refused.insert(number);
            let keep_from = number.saturating_sub(REFUSED_KEPT);
            state.refused = state.refused.split_off(&keep_from);
        }
        self.advance(number);
    }

    /// Write `number` failed: it may or may not have been committed, so its publisher gets
    /// a nack. Outcomes still come in order: every write before it has one.
    pub fn fail(&self, number: u64, why: impl Into<String>) {
        {
            let mut state = self.state.lock();
            state.failed.insert(number, why.into());
            let keep_from = number.saturating_sub(REFUSED_KEPT);
            state.failed = state.failed.split_off(&keep_from);
        }
        self.advance(number);
    }

    fn advance(&self, number: u64) {
        self.settled_through.send_if_modified(|through| {
            let moved = number > *through;
            *through = (*through).max(number);
            moved
        });
    }

    /// Waits until writes `first..=last` have their outcomes: an error if one was refused
    /// ([`StoreError::Refused`]) or failed.
    pub async fn wait(&self, first: u64, last: u64) -> Result<(), StoreError> {
        let mut settled = self.settled_through.subscribe();
        // The sender lives as long as this tracker, which the caller holds.
        let _ = settled.wait_for(|through| *through >= last).await;
        let state = self.state.lock();
        if let Some((_, why)) = state.failed.range(first..=last).next() {
            return Err(StoreError::Storage { kind: super::FailureKind::Closed, detail: why.clone() });
        }
        if state.refused.range(first..=last).next().is_some() {
            return Err(StoreError::Refused);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message_store::FailureKind;

    #[tokio::test]
    async fn a_range_waits_for_its_last_write_and_reports_refusals_within_it() {
        let tracker = CommitTracker::new();
        let numbers: Vec<u64> = (0..4).map(|_| tracker.next()).collect();
        assert_eq!(numbers, [1, 2, 3, 4]);
        let waiting = {
            let tracker = Arc::clone(&tracker);
            tokio::spawn(async move { tracker.wait(1, 2).await })
        };
        tracker.settled(1, false);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "write 2 has no outcome yet");
        tracker.settled(2, false);
        assert_eq!(waiting.await.ok(), Some(Ok(())));
        tracker.settled(3, true);
        tracker.settled(4, false);
        assert_eq!(tracker.wait(3, 4).await, Err(StoreError::Refused));
        assert_eq!(tracker.wait(4, 4).await, Ok(()));
    }

    #[tokio::test]
    async fn a_failed_write_fails_the_ranges_holding_it_only() {
        let tracker = CommitTracker::new();
        for _ in 0..3 {
            tracker.next();
        }
        tracker.settled(1, false);
        tracker.fail(2, "leader gone");
        tracker.settled(3, false);
        assert_eq!(tracker.wait(1, 1).await, Ok(()));
        assert!(matches!(tracker.wait(2, 3).await, Err(StoreError::Storage { kind: FailureKind::Closed, .. })));
        assert_eq!(tracker.wait(3, 3).await, Ok(()));
    }
}
