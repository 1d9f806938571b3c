//! A classic queue's message TTL deadlines, and the one timer that serves them all.
//!
//! Each message with a TTL has a deadline, but the queue keeps a single timer in the broker's
//! wheel, set for the earliest deadline that has not come yet: a timer per message would
//! never be cancelled when its message is consumed first, so the wheel would hold
//! rate × TTL timers (six million at 100,000 msg/s and a one-minute TTL). Messages under one
//! `x-message-ttl` arrive in deadline order, so publishing arms nothing new; only a message
//! whose own `expiration` is earlier than every pending deadline arms one more timer.

use std::collections::{BTreeSet, HashMap};

/// The deadlines (ms since the epoch) of a queue's messages that have one, by position.
#[derive(Debug, Default)]
pub struct Deadlines {
    by_position: HashMap<u64, u64>,
    /// Deadlines whose timer has not fired yet, as (deadline, position), earliest first.
    pending: BTreeSet<(u64, u64)>,
    /// Times at which a timer of this queue is in the wheel.
    armed: BTreeSet<u64>,
}

impl Deadlines {
    /// Whether no message has a deadline.
    pub fn is_empty(&self) -> bool {
        self.by_position.is_empty()
    }

    /// How many timers this queue has in the wheel.
    #[cfg(test)]
    pub fn armed_timers(&self) -> usize {
        self.armed.len()
    }

    /// The deadline of the message at `position`, if it has one.
    pub fn get(&self, position: u64) -> Option<u64> {
        self.by_position.get(&position).copied()
    }

    /// Gives the message at `position` a deadline; returns the time to arm a timer for, when
    /// no armed timer comes at or before it.
    #[must_use = "the returned time needs a timer"]
    pub fn insert(&mut self, position: u64, deadline_ms: u64) -> Option<u64> {
        if let Some(old) = self.by_position.insert(position, deadline_ms) {
            self.pending.remove(&(old, position));
        }
        self.pending.insert((deadline_ms, position));
        self.arm_for(deadline_ms)
    }

    /// Forgets the deadline of a message that left the queue.
    pub fn remove(&mut self, position: u64) {
        if let Some(deadline) = self.by_position.remove(&position) {
            self.pending.remove(&(deadline, position));
        }
    }

    /// Forgets every deadline (the queue was deleted); armed timers find nothing when they fire.
    pub fn clear(&mut self) {
        self.by_position.clear();
        self.pending.clear();
    }

    /// The timer set for `fired_ms` fired at `now`: the positions whose deadline has come
    /// (they keep their deadline, so a delivered one is still expired if it comes back), and
    /// the time to arm the next timer for, if one is needed.
    pub fn fire(&mut self, fired_ms: u64, now: u64) -> (Vec<u64>, Option<u64>) {
        self.armed.remove(&fired_ms);
        let mut due = Vec::new();
        while let Some(&(deadline, position)) = self.pending.first() {
            if deadline > now {
                break;
            }
            self.pending.pop_first();
            due.push(position);
        }
        let next = self.pending.first().map(|&(deadline, _)| deadline).and_then(|deadline| self.arm_for(deadline));
        (due, next)
    }

    /// Arms a timer for `deadline_ms` unless one comes at or before it.
    fn arm_for(&mut self, deadline_ms: u64) -> Option<u64> {
        if self.armed.first().is_some_and(|&first| first <= deadline_ms) {
            return None;
        }
        self.armed.insert(deadline_ms);
        Some(deadline_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_under_one_ttl_share_a_single_timer() {
        let mut deadlines = Deadlines::default();
        assert_eq!(deadlines.insert(0, 1_000), Some(1_000));
        for position in 1..10_000 {
            assert_eq!(deadlines.insert(position, 1_000 + position), None, "position {position}");
        }
        assert_eq!(deadlines.armed_timers(), 1);
    }

    #[test]
    fn a_firing_returns_what_is_due_and_arms_for_the_next() {
        let mut deadlines = Deadlines::default();
        let _ = deadlines.insert(0, 100);
        let _ = deadlines.insert(1, 200);
        let _ = deadlines.insert(2, 300);
        deadlines.remove(1);
        assert_eq!(deadlines.fire(100, 150), (vec![0], Some(300)));
        assert_eq!(deadlines.fire(300, 300), (vec![2], None));
        assert_eq!(deadlines.armed_timers(), 0);
        assert_eq!(deadlines.get(2), Some(300), "a due message keeps its deadline");
    }

    #[test]
    fn an_earlier_deadline_arms_an_earlier_timer_and_the_later_one_finds_nothing_twice() {
        let mut deadlines = Deadlines::default();
        assert_eq!(deadlines.insert(0, 500), Some(500));
        assert_eq!(deadlines.insert(1, 100), Some(100));
        // The timer at 100 fires: 500 is already armed, so nothing more is.
        assert_eq!(deadlines.fire(100, 100), (vec![1], None));
        assert_eq!(deadlines.fire(500, 501), (vec![0], None));
        assert_eq!(deadlines.armed_timers(), 0);
    }

    #[test]
    fn a_timer_that_fires_early_is_armed_again() {
        let mut deadlines = Deadlines::default();
        assert_eq!(deadlines.insert(7, 1_000), Some(1_000));
        assert_eq!(deadlines.fire(1_000, 999), (vec![], Some(1_000)));
        assert_eq!(deadlines.fire(1_000, 1_000), (vec![7], None));
    }

    #[test]
    fn removed_and_cleared_deadlines_are_never_due() {
        let mut deadlines = Deadlines::default();
        let _ = deadlines.insert(0, 10);
        let _ = deadlines.insert(1, 20);
        deadlines.remove(0);
        assert_eq!(deadlines.fire(10, 15), (vec![], Some(20)));
        deadlines.clear();
        assert!(deadlines.is_empty());
        assert_eq!(deadlines.fire(20, 25), (vec![], None));
    }
}
