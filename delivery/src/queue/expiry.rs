//! Running out: message TTLs (`x-message-ttl`, `expiration`) and unused queues (`x-expires`).
//!
//! A message with a TTL gets a deadline and leaves when due, even behind others: the queue's
//! one TTL timer (see [`super::deadlines`]) fires for the earliest deadline and is armed again
//! for the next. A queue with `x-expires` re-arms its timer while it is in use.

use super::classic::ClassicQueue;
use super::state::QueueState;
use super::{Queue, QueueArguments};
use crate::clock::now_ms;
use crate::dead_letter::DeathReason;
use crate::message::Message;
use crate::scheduler::{SchedulerHandle, TimerEvent};
use std::sync::Arc;

impl ClassicQueue {
    /// The TTL deadline of a message published now: the lower of the queue's and its own.
    pub(super) fn deadline(arguments: &QueueArguments, message: &Message, now: u64) -> Option<u64> {
        let own = message.properties.expiration_ms();
        let ttl = match (arguments.message_ttl_ms, own) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        ttl.map(|ttl| now.saturating_add(ttl))
    }

    pub(super) fn expire_ready(&self, queue: &Queue, state: &mut QueueState, position: u64) {
        if let Some(removed) = state.ready.remove(position) {
            if let Ok(content) = state.read(removed) {
                state.count_bytes(&queue.arguments(), content.body.len(), false);
            }
            state.discard(queue.name(), &queue.arguments(), removed, DeathReason::Expired);
        }
    }

    /// Discards ready messages whose TTL has passed (those at the head first).
    pub(super) fn expire_due_locked(&self, queue: &Queue, state: &mut QueueState, now: u64) {
        while let Some(head) = state.ready.front() {
            if !state.is_expired(head, now) {
                return;
            }
            self.expire_ready(queue, state, head.position);
        }
    }

    /// The TTL timer set for `at_ms` fired: the messages due that still wait in the queue go
    /// (delivered ones keep their deadline, and go if they come back), and the timer is armed
    /// for the next deadline.
    pub(super) fn expire(&self, queue: &Arc<Queue>, at_ms: u64) {
        self.with_state(queue, |state| {
            let (due, next) = state.deadlines.fire(at_ms, now_ms());
            for position in due {
                self.expire_ready(queue, state, position);
            }
            if let Some(next) = next {
                state.arm_ttl_timer(next);
            }
        });
    }

    /// `x-expires`: deletes the queue if it has been unused for that long, or re-arms.
    pub(super) fn check_unused(&self, queue: &Arc<Queue>) {
        let (in_use, last_used_ms, scheduler) = {
            let state = self.state.lock();
            if state.deleted {
                return;
            }
            (!state.consumers.is_empty(), state.last_used_ms, std::sync::Arc::clone(&state.scheduler))
        };
        delete_if_unused(queue, &scheduler, in_use, last_used_ms);
    }
}

/// `x-expires` of any kind of queue: deletes `queue` if it is not `in_use` and was last used
/// at `last_used_ms` longer ago than that; else re-arms its timer.
pub(super) fn delete_if_unused(queue: &Arc<Queue>, scheduler: &SchedulerHandle, in_use: bool, last_used_ms: u64) {
    let Some(expires) = queue.arguments().expires_ms else { return };
    let idle_since = if in_use { now_ms() } else { last_used_ms };
    if in_use || now_ms() < idle_since.saturating_add(expires) {
        let event = TimerEvent::QueueExpiry { queue: Arc::<Queue>::downgrade(queue) };
        scheduler.schedule(idle_since.saturating_add(expires), event);
        return;
    }
    tracing::info!(queue = queue.name(), idle_since, "queue unused for x-expires; deleting it");
    if let Some(vhost) = queue.vhost.upgrade() {
        vhost.delete_expired_queue(queue);
    }
}
