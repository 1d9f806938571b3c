//! The broker's timers: one timing wheel for message TTLs, queue expiry and delayed messages.
//!
//! The core has no runtime of its own: whoever runs the broker calls [`Scheduler::fire_due`]
//! every tick (the server does, from a tokio task). Firing takes the wheel's lock only to
//! collect what is due; the events are handled after it is released, so handlers may lock
//! queues (which themselves insert timers while locked) without any lock-order cycle.
//!
//! The scheduler knows what it fires only through [`TimerTarget`] and [`DelayedTarget`], so
//! that the queues and exchanges above it can arm timers without it knowing them.

use crate::clock::now_ms;
use crate::timing_wheel::{TimerId, TimingWheel};
use parking_lot::Mutex;
use std::sync::{Arc, Weak};

/// The wheel's tick: timers fire at most this late.
pub const TICK_MS: u64 = 5;
/// Handling one tick's timers for longer than this is logged: timers behind it fire late.
const SLOW_TIMERS_MS: u64 = 20;

/// Something to do at a given time.
#[derive(Debug)]
pub enum TimerEvent {
    /// A queue's TTL timer: messages may be due.
    MessageExpiry {
        /// The queue.
        queue: Weak<dyn TimerTarget>,
        /// The time the timer was set for.
        at_ms: u64,
    },
    /// A queue with `x-expires` may have been unused long enough.
    QueueExpiry {
        /// The queue.
        queue: Weak<dyn TimerTarget>,
    },
    /// A stream with `x-max-age` checks for segments old enough to delete.
    StreamRetention {
        /// The stream.
        queue: Weak<dyn TimerTarget>,
    },
    /// A delayed message is due.
    Delayed {
        /// What to call when it is due.
        target: Weak<dyn DelayedTarget>,
        /// Which message.
        key: u64,
        /// When it is due (ms since the epoch), to measure how late it fires.
        due_ms: u64,
    },
}

/// A timer of a queue's, fired by the broker's scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueTimer {
    /// The queue's TTL timer set for this time (ms since the epoch) fired.
    MessageExpiry(u64),
    /// `x-expires`: the queue may have been unused long enough.
    Unused,
    /// A stream's `x-max-age` retention check.
    Retention,
}

/// Something with timers of its own (a queue): told which one fired.
pub trait TimerTarget: Send + Sync + std::fmt::Debug {
    /// `timer` fired.
    fn timer_fired(self: Arc<Self>, timer: QueueTimer);
}

/// Something holding delayed messages (a delayed exchange).
pub trait DelayedTarget: Send + Sync + std::fmt::Debug {
    /// The messages `keys` are due (all those of one tick, so their removal is one write).
    fn fire(&self, keys: &[u64]);
}

/// How late delayed messages fired since the figures were last taken.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FiringLateness {
    /// Delayed messages handed back for routing.
    pub fired: u64,
    /// The latest any of them was handed back after its due time, in ms.
    pub max_late_ms: u64,
    /// How many were handed back more than [`LATE_THRESHOLD_MS`] after their due time.
    pub late: u64,
}

/// How late delayed messages fire after their due time, for the metrics.
pub static FIRING_LATENESS: warren_storage::latency::LatencyHistogram =
    warren_storage::latency::LatencyHistogram::new();

/// Firing this much after the due time counts as late in [`FiringLateness`].
pub const LATE_THRESHOLD_MS: u64 = 50;

/// The broker's timing wheel.
#[derive(Debug)]
pub struct Scheduler {
    wheel: Mutex<TimingWheel<TimerEvent>>,
    lateness: Mutex<FiringLateness>,
}

impl Default for Scheduler {
    fn default() -> Self {
        Scheduler {
            wheel: Mutex::new(TimingWheel::new(TICK_MS, now_ms())),
            lateness: Mutex::new(FiringLateness::default()),
        }
    }
}

impl Scheduler {
    /// Schedules `event` at `deadline_ms`.
    pub fn schedule(&self, deadline_ms: u64, event: TimerEvent) -> TimerId {
        self.wheel.lock().insert(deadline_ms, event)
    }

    /// Cancels a timer.
    pub fn cancel(&self, id: TimerId) {
        self.wheel.lock().cancel(id);
    }

    /// Timers waiting.
    pub fn pending(&self) -> usize {
        self.wheel.lock().len()
    }

    /// Takes the firing-lateness figures gathered since the last call.
    pub fn take_lateness(&self) -> FiringLateness {
        std::mem::take(&mut *self.lateness.lock())
    }

    /// Handles every timer due at `now_ms`.
    pub fn fire_due(&self, now_ms: u64) {
        let due = self.wheel.lock().advance(now_ms);
        let (started, count) = (std::time::Instant::now(), due.len());
        let mut delayed: Vec<(Arc<dyn DelayedTarget>, Vec<u64>)> = Vec::new();
        for event in due {
            match event {
                TimerEvent::MessageExpiry { queue, at_ms } => {
                    if let Some(queue) = queue.upgrade() {
                        queue.timer_fired(QueueTimer::MessageExpiry(at_ms));
                    }
                }
                TimerEvent::QueueExpiry { queue } => {
                    if let Some(queue) = queue.upgrade() {
                        queue.timer_fired(QueueTimer::Unused);
                    }
                }
                TimerEvent::StreamRetention { queue } => {
                    if let Some(queue) = queue.upgrade() {
                        queue.timer_fired(QueueTimer::Retention);
                    }
                }
                TimerEvent::Delayed { target, key, due_ms } => {
                    self.note_firing(now_ms.saturating_sub(due_ms));
                    if let Some(target) = target.upgrade() {
                        match delayed.iter_mut().find(|(t, _)| Arc::ptr_eq(t, &target)) {
                            Some((_, keys)) => keys.push(key),
                            None => delayed.push((target, vec![key])),
                        }
                    }
                }
            }
        }
        for (target, keys) in delayed {
            target.fire(&keys);
        }
        let elapsed = started.elapsed();
        if elapsed.as_millis() >= u128::from(SLOW_TIMERS_MS) {
            tracing::warn!(timers = count, elapsed_ms = elapsed.as_millis() as u64, "timers were slow to handle");
        }
    }

    fn note_firing(&self, late_ms: u64) {
        FIRING_LATENESS.record(std::time::Duration::from_millis(late_ms));
        let mut lateness = self.lateness.lock();
        lateness.fired += 1;
        lateness.max_late_ms = lateness.max_late_ms.max(late_ms);
        lateness.late += u64::from(late_ms > LATE_THRESHOLD_MS);
    }
}

/// A shared handle, cheap to clone into queues.
pub type SchedulerHandle = Arc<Scheduler>;

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default)]
    struct Recorder(Mutex<Vec<u64>>);

    impl DelayedTarget for Recorder {
        fn fire(&self, keys: &[u64]) {
            self.0.lock().extend_from_slice(keys);
        }
    }

    #[test]
    fn delayed_timers_fire_once_in_a_batch_and_their_lateness_is_measured() {
        let scheduler = Scheduler::default();
        let recorder = Arc::new(Recorder::default());
        let target: Weak<dyn DelayedTarget> = Arc::downgrade(&(Arc::clone(&recorder) as Arc<dyn DelayedTarget>));
        let due = now_ms() + 20;
        for key in [1, 2] {
            scheduler.schedule(due, TimerEvent::Delayed { target: Weak::clone(&target), key, due_ms: due });
        }
        scheduler.schedule(due + 100, TimerEvent::Delayed { target, key: 3, due_ms: due + 100 });
        scheduler.fire_due(due - 10);
        assert!(recorder.0.lock().is_empty(), "nothing before its due time");
        scheduler.fire_due(due + 30);
        assert_eq!(*recorder.0.lock(), vec![1, 2]);
        assert_eq!(scheduler.take_lateness(), FiringLateness { fired: 2, max_late_ms: 30, late: 0 });
        scheduler.fire_due(due + 100 + 80);
        assert_eq!(*recorder.0.lock(), vec![1, 2, 3]);
        assert_eq!(scheduler.take_lateness(), FiringLateness { fired: 1, max_late_ms: 80, late: 1 });
    }
}
