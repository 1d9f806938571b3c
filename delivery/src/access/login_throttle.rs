//! Failed logins per peer address. Each is counted; it is logged at most once a second per
//! address (a guessing client cannot flood the log); and once an address has failed
//! [`FAILURES_BEFORE_DELAY`] times within [`FAILURE_WINDOW_MS`], its failures are answered
//! one per [`LOGIN_DELAY_MS`] at most (each waits for its turn), until it has gone
//! [`COOLDOWN_MS`] without failing. Other addresses are not slowed.
//!
//! The throttle charges failures, not the address: a login with the right password is
//! answered at once however many wrong guesses from its address are waiting (as `pam_faildelay`
//! delays only failures). A guesser that waits for its answers gets one a second; the
//! owner of the password sharing its address (a NAT, a proxy) is never locked out.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Failures within a window that make an address wait.
pub const FAILURES_BEFORE_DELAY: u32 = 10;
/// The window failures are counted in.
pub const FAILURE_WINDOW_MS: u64 = 1_000;
/// How long each attempt of a slowed address waits at least, after the one before.
pub const LOGIN_DELAY_MS: u64 = 1_000;
/// How long a slowed address must go without a failure to be let through at once again.
pub const COOLDOWN_MS: u64 = 10_000;
/// Addresses tracked at most (idle ones are forgotten first), so that the table is bounded.
const MAX_TRACKED_ADDRESSES: usize = 65_536;

#[derive(Debug)]
struct AddressRecord {
    window_start: Instant,
    failures_in_window: u32,
    last_failure: Instant,
    /// While slowed: when the next attempt may be answered.
    slowed_until: Option<Instant>,
    last_logged: Option<Instant>,
}

/// What to do with one failed login.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    /// Whether to log it (at most once a second per address).
    pub log: bool,
    /// How long to hold back the refusal, if the address has been failing too often.
    pub delay: Option<Duration>,
}

/// The failed-login table and the login counters.
#[derive(Debug, Default)]
pub struct LoginThrottle {
    by_address: Mutex<HashMap<IpAddr, AddressRecord>>,
    failed_total: AtomicU64,
    succeeded_total: AtomicU64,
}

fn ms(value: u64) -> Duration {
    Duration::from_millis(value)
}

impl LoginThrottle {
    /// A login from `address` failed: whether to log it, and how long its refusal waits.
    pub fn failed(&self, address: IpAddr) -> Failure {
        self.failed_total.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let mut table = self.by_address.lock();
        if table.len() >= MAX_TRACKED_ADDRESSES && !table.contains_key(&address) {
            table.retain(|_, r| r.slowed_until.is_some() || now.duration_since(r.last_failure) < ms(FAILURE_WINDOW_MS));
            if table.len() >= MAX_TRACKED_ADDRESSES {
                return Failure { log: false, delay: None };
            }
        }
        let record = table.entry(address).or_insert(AddressRecord {
            window_start: now,
            failures_in_window: 0,
            last_failure: now,
            slowed_until: None,
            last_logged: None,
        });
        if now.duration_since(record.last_failure) >= ms(COOLDOWN_MS) {
            record.slowed_until = None;
        }
        // Only an address slowed before this failure waits: the failures that slow it do not.
        let delay = record.slowed_until.map(|turn| {
            let answered_at = turn.max(now) + ms(LOGIN_DELAY_MS);
            record.slowed_until = Some(answered_at);
            answered_at.duration_since(now)
        });
        if now.duration_since(record.window_start) >= ms(FAILURE_WINDOW_MS) {
            record.window_start = now;
            record.failures_in_window = 0;
        }
        record.failures_in_window += 1;
        record.last_failure = now;
        if record.failures_in_window >= FAILURES_BEFORE_DELAY && record.slowed_until.is_none() {
            record.slowed_until = Some(now);
        }
        let log = record.last_logged.is_none_or(|at| now.duration_since(at) >= ms(1_000));
        if log {
            record.last_logged = Some(now);
        }
        Failure { log, delay }
    }

    /// A login succeeded.
    pub fn succeeded(&self) {
        self.succeeded_total.fetch_add(1, Ordering::Relaxed);
    }

    /// Failed logins since start.
    pub fn failed_total(&self) -> u64 {
        self.failed_total.load(Ordering::Relaxed)
    }

    /// Successful logins since start.
    pub fn succeeded_total(&self) -> u64 {
        self.succeeded_total.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_slowed_after_ten_failures_and_others_are_not() {
        let throttle = LoginThrottle::default();
        let guesser: IpAddr = "10.0.0.1".parse().unwrap();
        let other: IpAddr = "10.0.0.2".parse().unwrap();
        let answers: Vec<Failure> = (0..FAILURES_BEFORE_DELAY).map(|_| throttle.failed(guesser)).collect();
        assert_eq!(answers.iter().filter(|a| a.log).count(), 1, "logged once within the second");
        assert!(answers.iter().all(|a| a.delay.is_none()), "the first failures are answered at once");
        let first = throttle.failed(guesser).delay.expect("slowed");
        let second = throttle.failed(guesser).delay.expect("slowed");
        assert!(first >= ms(LOGIN_DELAY_MS - 50), "{first:?}");
        assert!(second >= first + ms(LOGIN_DELAY_MS - 50), "failures take turns: {second:?}");
        assert_eq!(throttle.failed(other).delay, None, "one failure elsewhere does not slow");
        assert_eq!(throttle.failed_total(), u64::from(FAILURES_BEFORE_DELAY) + 3);
    }
}
