//! The state behind a queue's lock, and the operations on it that need no other lock.
//!
//! Everything here runs with the queue locked. What must happen after the lock is released
//! (publishing dead letters to other queues) is collected in `dead_letters`.

use super::arguments::QueueArguments;
use super::consumer::Consumer;
use super::deadlines::Deadlines;
use crate::clock::now_ms;
use crate::dead_letter::{self, DeathReason};
use crate::message::Message;
use crate::message_ref::MessageRef;
use crate::message_store::{MessageStore, StoreError, TransientStore};
use crate::overflow::Overflow;
use crate::ready_list::ReadyList;
use crate::scheduler::{SchedulerHandle, TimerEvent};
use std::collections::HashMap;
use std::sync::{Arc, Weak};

/// A message on its way to the dead-letter exchange.
#[derive(Debug)]
pub(super) struct DeadLetter {
    pub message: Message,
}

pub(super) struct QueueState {
    pub durable_store: Option<Box<dyn MessageStore>>,
    /// Transient messages (and persistent ones of a queue that is not durable), in memory
    /// up to a budget, paged past it.
    pub transient_store: TransientStore,
    pub ready: ReadyList,
    /// Body bytes of the ready messages (kept only under `x-max-length-bytes`).
    pub ready_bytes: u64,
    pub next_position: u64,
    /// Recovered messages below this position may have been delivered before a restart.
    pub redelivered_below: u64,
    /// Deliveries so far of messages that came back to the queue, by position.
    pub delivery_counts: HashMap<u64, u32>,
    /// TTL deadlines of messages that have one, and the queue's TTL timer.
    pub deadlines: Deadlines,
    pub unacked: usize,
    pub consumers: Vec<Arc<Consumer>>,
    pub next_consumer: usize,
    pub deleted: bool,
    /// For `x-expires`: when the queue was last used (consumer, get, declare).
    pub last_used_ms: u64,
    pub dead_letters: Vec<DeadLetter>,
    /// Under tag filters: ready positions no current consumer wants (cleared when the
    /// consumers change), so dispatch does not read them again and again.
    pub unwanted: std::collections::HashSet<u64>,
    /// Reused by `remove`.
    pub scratch_offsets: Vec<u64>,
    pub scheduler: SchedulerHandle,
    pub me: Weak<super::Queue>,
}

impl QueueState {
    pub fn store(&mut self, message: MessageRef) -> &mut dyn MessageStore {
        match (&mut self.durable_store, message.in_memory()) {
            (Some(store), false) => store.as_mut(),
            _ => &mut self.transient_store,
        }
    }

    pub fn read(&mut self, message: MessageRef) -> Result<Arc<Message>, StoreError> {
        self.store(message).read(message.offset())
    }

    pub fn is_redelivered(&self, message: MessageRef) -> bool {
        message.position < self.redelivered_below
            || (!self.delivery_counts.is_empty() && self.delivery_counts.contains_key(&message.position))
    }

    /// Removes settled messages from their stores and forgets their bookkeeping.
    pub fn remove(&mut self, messages: &[MessageRef]) -> Result<(), StoreError> {
        for message in messages {
            if !self.delivery_counts.is_empty() {
                self.delivery_counts.remove(&message.position);
            }
            if !self.deadlines.is_empty() {
                self.deadlines.remove(message.position);
            }
        }
        // One batch per store (a durable store writes one ack record per batch), built in a
        // reused buffer: settling runs once per ack.
        let mut offsets = std::mem::take(&mut self.scratch_offsets);
        for in_memory in [true, false] {
            offsets.clear();
            offsets.extend(messages.iter().filter(|m| m.in_memory() == in_memory).map(|m| m.offset()));
            if offsets.is_empty() {
                continue;
            }
            match (&mut self.durable_store, in_memory) {
                (Some(store), false) => store.remove(&offsets)?,
                _ => self.transient_store.remove(&offsets)?,
            }
        }
        self.scratch_offsets = offsets;
        Ok(())
    }

    /// Past its deadline. A message due this very millisecond (TTL 0) is not expired yet: a
    /// consumer that can take it at once gets it, as in RabbitMQ.
    pub fn is_expired(&self, message: MessageRef, now: u64) -> bool {
        !self.deadlines.is_empty() && self.deadlines.get(message.position).is_some_and(|deadline| deadline < now)
    }

    /// The time, read only when some message has a deadline (reading the clock per message
    /// shows up in profiles).
    pub fn clock(&self) -> u64 {
        if self.deadlines.is_empty() {
            0
        } else {
            now_ms()
        }
    }

    /// Adds a message that just entered the ready list to the byte count, if counted.
    pub fn count_bytes(&mut self, arguments: &QueueArguments, size: usize, entering: bool) {
        if arguments.max_length_bytes.is_some() {
            if entering {
                self.ready_bytes += size as u64;
            } else {
                self.ready_bytes = self.ready_bytes.saturating_sub(size as u64);
            }
        }
    }

    /// Gives a message its TTL deadline, arming the queue's TTL timer if it comes first.
    pub fn set_deadline(&mut self, position: u64, deadline_ms: u64) {
        if let Some(at_ms) = self.deadlines.insert(position, deadline_ms) {
            self.arm_ttl_timer(at_ms);
        }
    }

    /// Puts the queue's TTL timer in the broker's wheel for `at_ms`.
    pub fn arm_ttl_timer(&self, at_ms: u64) {
        let event = TimerEvent::MessageExpiry { queue: Weak::<super::Queue>::clone(&self.me), at_ms };
        self.scheduler.schedule(at_ms, event);
    }

    /// Queues a message for the dead-letter exchange, if the queue has one.
    pub fn dead_letter(&mut self, queue: &str, arguments: &QueueArguments, message: &Message, reason: DeathReason) {
        use crate::node_counters::{of_queue_type, DeadLetterStrategy};
        let strategy = match arguments.dead_letter_exchange {
            Some(_) => DeadLetterStrategy::AtMostOnce,
            None => DeadLetterStrategy::Disabled,
        };
        of_queue_type(super::QueueType::Classic).dead_lettered(strategy, reason);
        let Some(exchange) = &arguments.dead_letter_exchange else { return };
        let routing_key = arguments.dead_letter_routing_key.as_deref().unwrap_or(message.routing_key.as_str());
        let seconds = now_ms() / 1000;
        match dead_letter::dead_letter(message, queue, reason, &routing_key.into(), &exchange.as_str().into(), seconds)
        {
            Ok(message) => self.dead_letters.push(DeadLetter { message }),
            Err(error) => tracing::error!(queue, %error, "cannot dead-letter a message; dropped"),
        }
    }

    /// Removes a ready or returned message for good, dead-lettering it for `reason`.
    pub fn discard(&mut self, queue: &str, arguments: &QueueArguments, message: MessageRef, reason: DeathReason) {
        match self.read(message) {
            Ok(content) => {
                self.dead_letter(queue, arguments, &content, reason);
            }
            // Reported where it was found; there is nothing to dead-letter.
            Err(StoreError::Damaged(_)) => {}
            Err(error) => tracing::error!(queue, %error, "cannot read a message being discarded"),
        }
        if let Err(error) = self.remove(&[message]) {
            tracing::error!(queue, %error, "cannot record a discarded message");
        }
    }

    /// Drops a message whose record is damaged on disk ([`StoreError::Damaged`]; the store
    /// reported it): it leaves the ready list and is recorded as settled, so it is never
    /// delivered and is not counted (nor read and reported) again, also after a restart.
    pub fn drop_damaged(&mut self, queue: &str, message: MessageRef) {
        self.ready.remove_ref(message);
        if !self.unwanted.is_empty() {
            self.unwanted.remove(&message.position);
        }
        tracing::debug!(queue, offset = message.offset(), "dropped a damaged message");
        if let Err(error) = self.remove(&[message]) {
            tracing::error!(queue, %error, "cannot record a damaged message as settled");
        }
    }

    /// Whether one more message of `size` bytes would exceed a length limit.
    pub fn would_overflow(&self, arguments: &QueueArguments, size: usize) -> bool {
        let by_count = arguments.max_length.is_some_and(|max| self.ready.len() as u64 >= max);
        let by_bytes = arguments.max_length_bytes.is_some_and(|max| self.ready_bytes + size as u64 > max);
        by_count || by_bytes
    }

    fn over_limits(&self, arguments: &QueueArguments) -> bool {
        let by_count = arguments.max_length.is_some_and(|max| self.ready.len() as u64 > max);
        let by_bytes = arguments.max_length_bytes.is_some_and(|max| self.ready_bytes > max);
        by_count || by_bytes
    }

    /// `x-overflow: drop-head`: drops (dead-letters) the oldest ready messages until the queue
    /// is within its limits.
    pub fn drop_head(&mut self, queue: &str, arguments: &QueueArguments) {
        if arguments.overflow != Overflow::DropHead {
            return;
        }
        while self.over_limits(arguments) {
            let Some(oldest) = self.ready.pop_oldest() else { return };
            if let Ok(content) = self.read(oldest) {
                self.count_bytes(arguments, content.body.len(), false);
            }
            self.discard(queue, arguments, oldest, DeathReason::Maxlen);
        }
    }

    /// Picks the consumer for `message`: one with credit that wants it, highest `x-priority`
    /// first, round-robin among equals; only the first consumer under single-active-consumer.
    pub fn choose_consumer(&mut self, arguments: &QueueArguments, message: &Message) -> Option<Arc<Consumer>> {
        let count = if arguments.single_active_consumer { self.consumers.len().min(1) } else { self.consumers.len() };
        let mut best: Option<(i64, usize)> = None;
        for step in 0..count {
            let index = if arguments.single_active_consumer { 0 } else { (self.next_consumer + step) % count };
            let consumer = &self.consumers[index];
            if !consumer.has_credit() || !consumer.wants(message) {
                continue;
            }
            if best.is_none_or(|(priority, _)| consumer.priority() > priority) {
                best = Some((consumer.priority(), index));
            }
        }
        let (_, index) = best?;
        self.next_consumer = (index + 1) % count.max(1);
        Some(Arc::clone(&self.consumers[index]))
    }

    pub fn any_credit(&self) -> bool {
        self.consumers.iter().any(|c| c.has_credit())
    }

    pub fn any_filter(&self) -> bool {
        self.consumers.iter().any(|c| c.filters())
    }
}
