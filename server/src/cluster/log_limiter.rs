//! At most one log line per key (a source address) per interval, for events an unauthenticated
//! party can cause at will: without it, sockets that connect to the cluster port and say
//! nothing made a node write 311,000 warnings (50 MB) in a minute (security issue #28).
//!
//! The first event of a key is logged; those that follow within the interval are counted,
//! and the next line of that key carries the count. The table of keys is bounded: keys whose
//! interval has passed are forgotten when room is needed, and while it is full of keys seen
//! within the interval, further keys share one entry. So an attacker with many addresses
//! gets at most `capacity + 1` lines per interval. What forgotten and sharing keys left out
//! is reported by the next line logged, whatever its key, so no count is lost.

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// What a caller should add to the line of an event it may log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct LogLine {
    /// Events of this key not logged since its previous line.
    pub suppressed: u64,
    /// Events of keys without an entry (the table was full, or they were forgotten) not
    /// logged since the previous line that reported such events.
    pub suppressed_untracked: u64,
}

impl fmt::Display for LogLine {
    /// Nothing when nothing was left out, else "; N more ... not logged".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.suppressed, self.suppressed_untracked) {
            (0, 0) => Ok(()),
            (own, 0) => write!(f, "; {own} more from this address not logged"),
            (0, other) => write!(f, "; {other} more from untracked addresses not logged"),
            (own, other) => {
                write!(f, "; {own} more from this address and {other} from untracked addresses not logged")
            }
        }
    }
}

/// The window of one key: when its last line was logged, and what was left out since.
#[derive(Debug, Clone, Copy)]
struct Window {
    logged_at: Instant,
    suppressed: u64,
}

/// Decides which events of which keys are logged. Not synchronised: callers share it behind
/// a mutex (each decision is a hash lookup; a scan of the table only when it is full).
#[derive(Debug)]
pub(crate) struct LogLimiter<K> {
    interval: Duration,
    capacity: usize,
    windows: HashMap<K, Window>,
    /// When a key without an entry last had a line; `None` until one did.
    untracked_logged_at: Option<Instant>,
    /// Events of keys without an entry not reported yet.
    untracked_suppressed: u64,
}

impl<K: Hash + Eq> LogLimiter<K> {
    /// A limiter allowing one line per key per `interval`, tracking at most `capacity` keys.
    pub(crate) fn new(interval: Duration, capacity: usize) -> Self {
        LogLimiter { interval, capacity, windows: HashMap::new(), untracked_logged_at: None, untracked_suppressed: 0 }
    }

    /// Records an event of `key` at `now`: what to add to its line, or `None` to stay quiet.
    pub(crate) fn event(&mut self, key: K, now: Instant) -> Option<LogLine> {
        let interval = self.interval;
        if let Some(window) = self.windows.get_mut(&key) {
            if now.saturating_duration_since(window.logged_at) < interval {
                window.suppressed = window.suppressed.saturating_add(1);
                return None;
            }
            let suppressed = std::mem::take(&mut window.suppressed);
            window.logged_at = now;
            return Some(self.line(suppressed));
        }
        if self.windows.len() >= self.capacity {
            self.forget_quiet_keys(now);
        }
        if self.windows.len() < self.capacity {
            self.windows.insert(key, Window { logged_at: now, suppressed: 0 });
            return Some(self.line(0));
        }
        self.untracked_event(now)
    }

    /// A line with `suppressed` of its own key and the untracked events not reported yet.
    fn line(&mut self, suppressed: u64) -> LogLine {
        LogLine { suppressed, suppressed_untracked: std::mem::take(&mut self.untracked_suppressed) }
    }

    /// Drops the keys whose interval has passed; what they left out is reported later as
    /// untracked.
    fn forget_quiet_keys(&mut self, now: Instant) {
        let interval = self.interval;
        let mut orphaned = 0u64;
        self.windows.retain(|_, window| {
            let keep = now.saturating_duration_since(window.logged_at) < interval;
            if !keep {
                orphaned = orphaned.saturating_add(window.suppressed);
            }
            keep
        });
        self.untracked_suppressed = self.untracked_suppressed.saturating_add(orphaned);
    }

    /// An event of a key that finds the table full: keys without an entry share one window.
    fn untracked_event(&mut self, now: Instant) -> Option<LogLine> {
        let quiet = self.untracked_logged_at.is_some_and(|at| now.saturating_duration_since(at) < self.interval);
        if quiet {
            self.untracked_suppressed = self.untracked_suppressed.saturating_add(1);
            return None;
        }
        self.untracked_logged_at = Some(now);
        Some(self.line(0))
    }

    /// Keys tracked now.
    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.windows.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTERVAL_MS: u64 = 10_000;

    fn limiter(capacity: usize) -> LogLimiter<u32> {
        LogLimiter::new(Duration::from_millis(INTERVAL_MS), capacity)
    }

    fn after(start: Instant, ms: u64) -> Instant {
        start + Duration::from_millis(ms)
    }

    fn line(suppressed: u64, suppressed_untracked: u64) -> Option<LogLine> {
        Some(LogLine { suppressed, suppressed_untracked })
    }

    #[test]
    fn the_first_event_is_logged_then_one_line_per_interval_with_the_count_left_out() {
        let (mut limiter, t0) = (limiter(8), Instant::now());
        assert_eq!(limiter.event(1, t0), line(0, 0));
        for ms in 1..=1000 {
            assert_eq!(limiter.event(1, after(t0, ms)), None);
        }
        assert_eq!(limiter.event(1, after(t0, INTERVAL_MS)), line(1000, 0));
        assert_eq!(limiter.event(1, after(t0, INTERVAL_MS + 1)), None);
        assert_eq!(limiter.event(1, after(t0, 2 * INTERVAL_MS + 5)), line(1, 0));
    }

    #[test]
    fn keys_are_limited_independently() {
        let (mut limiter, t0) = (limiter(8), Instant::now());
        assert_eq!(limiter.event(1, t0), line(0, 0));
        assert_eq!(limiter.event(1, after(t0, 1)), None);
        assert_eq!(limiter.event(2, after(t0, 2)), line(0, 0));
    }

    #[test]
    fn a_full_table_makes_new_keys_share_one_window() {
        let (mut limiter, t0) = (limiter(2), Instant::now());
        assert_eq!(limiter.event(1, t0), line(0, 0));
        assert_eq!(limiter.event(2, t0), line(0, 0));
        assert_eq!(limiter.event(3, after(t0, 1)), line(0, 0));
        for key in 4..100 {
            assert_eq!(limiter.event(key, after(t0, 2)), None);
        }
        assert_eq!(limiter.tracked(), 2);
        // The interval has passed for keys 1 and 2: new keys take their places, and the first
        // line reports what the sharing keys left out.
        assert_eq!(limiter.event(100, after(t0, INTERVAL_MS + 1)), line(0, 96));
        assert_eq!(limiter.event(101, after(t0, INTERVAL_MS + 1)), line(0, 0));
        assert_eq!(limiter.event(102, after(t0, INTERVAL_MS + 2)), line(0, 0));
        assert_eq!(limiter.event(103, after(t0, INTERVAL_MS + 3)), None);
    }

    #[test]
    fn counts_of_forgotten_keys_are_reported_by_the_next_line() {
        let (mut limiter, t0) = (limiter(1), Instant::now());
        assert_eq!(limiter.event(1, t0), line(0, 0));
        assert_eq!(limiter.event(1, after(t0, 1)), None);
        assert_eq!(limiter.event(1, after(t0, 2)), None);
        // Key 1 is forgotten with 2 events left out; key 2 takes its place and reports them.
        assert_eq!(limiter.event(2, after(t0, INTERVAL_MS + 10)), line(0, 2));
        assert_eq!(limiter.event(2, after(t0, INTERVAL_MS + 11)), None);
        assert_eq!(limiter.event(2, after(t0, 2 * INTERVAL_MS + 10)), line(1, 0));
    }

    #[test]
    fn a_line_says_what_was_left_out_only_when_something_was() {
        assert_eq!(LogLine::default().to_string(), "");
        let line = LogLine { suppressed: 5, suppressed_untracked: 0 };
        assert_eq!(line.to_string(), "; 5 more from this address not logged");
        let line = LogLine { suppressed: 5, suppressed_untracked: 7 };
        assert!(line.to_string().contains("5 more from this address and 7 from untracked"));
    }
}
