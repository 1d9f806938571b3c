//! [`QueueState`]: the deterministic state of a quorum queue and `apply`, the one function
//! that changes it. Every replica applies the same commands in the same order and computes
//! the same state and the same effects; nothing here reads a clock, a random number or a
//! hash order.
//!
//! A live message is ready (in the [`ReadyList`], by priority then id) or held by one
//! consumer. Bodies are not here: a message's id is the index of its entry in the Raft
//! log, where the body is read from.

use super::command::{
    entry_of, Command, ConsumerId, ConsumerSpec, Dequeued, Enqueue, MessageId, Op, Response,
    QUEUE_POLICIES_GROUP_VERSION,
};
use super::consumers::{ConsumerKey, Consumers, Status};
use super::effect::Effect;
use super::settings::{PolicySettings, Settings};
use crate::dead_letter::DeathReason;
use crate::dedup_window::{key_in, DedupEntries, DedupKey, DedupWindow};
use crate::feature_flags::FIRST_MACHINE_VERSION;
use crate::message_ref::MessageRef;
use crate::overflow::Overflow;
use crate::properties::Properties;
use crate::ready_list::ReadyList;
use crate::tag_filter::TagFilter;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// What the state keeps of one live message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct MessageState {
    /// Its priority (`priority` property, capped by the ready list at `x-max-priority`).
    pub(super) priority: u8,
    /// Body bytes (for `x-max-length-bytes`).
    pub(super) size: u64,
    /// Failed deliveries (returns): `x-delivery-count`.
    pub(super) delivery_count: u32,
    /// Times it was handed out: delivered before when non-zero.
    pub(super) acquired: u32,
    /// When its TTL runs out (ms since the epoch), if it has one.
    pub(super) expires_at_ms: Option<u64>,
    /// The consumer holding it; `None` when ready.
    pub(super) holder: Option<ConsumerKey>,
}

/// A message dead-lettered at least once: it waits for the target's confirm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct PendingDeadLetter {
    pub(super) reason: DeathReason,
    /// Body bytes (still counted against `x-max-length-bytes`).
    pub(super) size: u64,
}

/// The replicated state of one quorum queue.
#[derive(Debug)]
pub struct QueueState {
    settings: Settings,
    /// The newest command time applied (never goes back).
    clock_ms: u64,
    /// Every live message, ready or held.
    messages: BTreeMap<MessageId, MessageState>,
    ready: ReadyList,
    /// Body bytes of the ready messages.
    ready_bytes: u64,
    /// `(expires_at_ms, id)` of the ready messages with a TTL.
    expiry: BTreeSet<(u64, MessageId)>,
    consumers: Consumers,
    /// At-least-once dead-lettering: messages waiting for the target's confirm.
    dead_lettering: BTreeMap<MessageId, PendingDeadLetter>,
    /// Their body bytes.
    dead_lettering_bytes: u64,
    /// The tags (`x-stream-filter-value`) of the live messages that have one, for
    /// consumers with a tag filter.
    tags: BTreeMap<MessageId, Vec<u8>>,
    /// Deduplication keys seen lately (`x-message-deduplication`).
    dedup: DedupWindow,
    /// The machine version the entries are applied with ([`Op::SetMachineVersion`]).
    machine_version: u16,
}

impl QueueState {
    /// An empty queue obeying `settings`.
    pub fn new(settings: Settings) -> Self {
        let ready = ReadyList::new(settings.max_priority);
        QueueState {
            settings,
            clock_ms: 0,
            messages: BTreeMap::new(),
            ready,
            ready_bytes: 0,
            expiry: BTreeSet::new(),
            consumers: Consumers::default(),
            dead_lettering: BTreeMap::new(),
            dead_lettering_bytes: 0,
            tags: BTreeMap::new(),
            dedup: DedupWindow::default(),
            machine_version: FIRST_MACHINE_VERSION,
        }
    }

    /// The machine version its entries are applied with. Version 2
    /// ([`QUEUE_POLICIES_GROUP_VERSION`]) applies [`Op::ApplyPolicy`]; every other op is applied
    /// alike by every version so far.
    pub fn machine_version(&self) -> u16 {
        self.machine_version
    }

    /// Applies the command of log entry `index`: the response for its proposer and the
    /// effects for the leader.
    pub fn apply(&mut self, index: u64, command: &Command) -> (Response, Vec<Effect>) {
        let mut effects = Vec::new();
        self.clock_ms = self.clock_ms.max(command.at_ms);
        self.expire_due(Due::AtOrBefore, &mut effects);
        let response = match &command.op {
            Op::Enqueue(message) => self.enqueue(index, message, &mut effects),
            Op::Checkout { consumer, spec } => self.checkout(consumer, *spec, None),
            Op::CheckoutFiltered { consumer, spec, filter } => self.checkout(consumer, *spec, Some(filter.clone())),
            Op::Cancel { consumer } => self.cancel(consumer),
            Op::Down { node, channel } => self.down(*node, *channel, &mut effects),
            Op::Dequeue { consumer, settle } => self.dequeue(consumer, *settle),
            Op::Settle { consumer, ids } => self.settle(consumer, ids, None, &mut effects),
            Op::Return { consumer, ids } => self.return_held(consumer, ids, &mut effects),
            Op::Discard { consumer, ids } => self.settle(consumer, ids, Some(DeathReason::Rejected), &mut effects),
            Op::DeadLettered { ids } => self.dead_lettered(ids),
            Op::Purge => Response::Purged(self.purge()),
            Op::SetMachineVersion { version } => {
                self.machine_version = *version;
                Response::Done
            }
            Op::ApplyPolicy { settings } => self.apply_policy(*settings, &mut effects),
            Op::Expire | Op::CommitOffset { .. } | Op::Sync | Op::Group(_) | Op::ApplyRetention { .. } => {
                Response::Done
            }
        };
        // Returned messages may be past their TTL; one of 0 (due now) still lets a message
        // through to a consumer ready for it at once, as in RabbitMQ.
        self.expire_due(Due::Before, &mut effects);
        self.dispatch(&mut effects);
        self.expire_due(Due::AtOrBefore, &mut effects);
        (response, effects)
    }

    fn enqueue(&mut self, id: MessageId, message: &Enqueue, effects: &mut Vec<Effect>) -> Response {
        // Properties that do not decode were refused before they reached the log; if one
        // does anyway, it is a plain message without TTL (the same on every replica).
        let properties = Properties::decode(message.properties.clone()).ok();
        let dedup_key = self.dedup_key(properties.as_ref());
        if let (Some(key), Some(settings)) = (&dedup_key, &self.settings.deduplication) {
            if self.dedup.contains(key, self.clock_ms, settings) {
                return Response::Duplicate;
            }
        }
        let size = message.body.len() as u64;
        if self.settings.policy.overflow != Overflow::DropHead && self.would_overflow(size) {
            if self.settings.policy.overflow == Overflow::RejectPublishDlx {
                self.dead_letter(id, DeathReason::Maxlen, size, effects);
            }
            return Response::Rejected;
        }
        let priority = properties.as_ref().and_then(Properties::priority).unwrap_or(0);
        let ttl_ms = if self.settings.ttl_from_delay {
            Some(properties.as_ref().and_then(crate::exchange::delayed::delay_in).unwrap_or(0))
        } else {
            [self.settings.policy.message_ttl_ms, properties.as_ref().and_then(Properties::expiration_ms)]
                .into_iter()
                .flatten()
                .min()
        };
        let expires_at_ms = ttl_ms.map(|ttl| self.clock_ms.saturating_add(ttl));
        let state = MessageState { priority, size, delivery_count: 0, acquired: 0, expires_at_ms, holder: None };
        self.messages.insert(id, state);
        if let Some(tag) = properties.as_ref().and_then(crate::tag_filter::tag_of) {
            self.tags.insert(id, tag.to_vec());
        }
        self.make_ready(id, state);
        // Only a message the queue took counts: one refused for overflow may be sent again.
        if let (Some(key), Some(settings)) = (dedup_key, &self.settings.deduplication) {
            self.dedup.insert(key, self.clock_ms, settings);
        }
        self.drop_head(effects);
        Response::Enqueued(id)
    }

    /// The deduplication key of a message with `properties`, if the queue deduplicates and
    /// the message has one (no header, or a value that is no key, means none).
    fn dedup_key(&self, properties: Option<&Properties>) -> Option<DedupKey> {
        key_in(properties?, self.settings.deduplication.as_ref()?)
    }

    /// Whether `extra` more messages of `size` bytes in all would pass a length limit. The
    /// limits count the ready messages and those waiting for a dead-letter confirm (so that
    /// a dead-letter target that stops confirming fills the queue up, as in RabbitMQ).
    fn exceeds_limits(&self, extra: u64, size: u64) -> bool {
        let count = (self.ready.len() + self.dead_lettering.len()) as u64 + extra;
        let bytes = self.ready_bytes + self.dead_lettering_bytes + size;
        self.settings.policy.max_length.is_some_and(|max| count > max)
            || self.settings.policy.max_length_bytes.is_some_and(|max| bytes > max)
    }

    fn would_overflow(&self, size: u64) -> bool {
        self.exceeds_limits(1, size)
    }

    fn is_over_limit(&self) -> bool {
        self.exceeds_limits(0, 0)
    }

    /// `x-overflow: drop-head`: the oldest ready messages go until the limits hold.
    fn drop_head(&mut self, effects: &mut Vec<Effect>) {
        while self.is_over_limit() {
            let Some(oldest) = self.ready.pop_oldest() else { break };
            let id = oldest.position();
            let size = self.forget_ready(id).map_or(0, |m| m.size);
            self.forget_message(id);
            self.dead_letter(id, DeathReason::Maxlen, size, effects);
        }
    }

    /// A policy change ([`Op::ApplyPolicy`]): the queue obeys `settings` from this entry on.
    /// New limits apply at once under `drop-head`, as a message that finds the queue too full
    /// would; under `reject-publish` the messages stay and new ones are refused until the
    /// queue is under them. A TTL applies to the messages published from now on (each
    /// message's expiry was set when it came). Before the machine version that has the op,
    /// it is nothing (no leader proposes it there).
    fn apply_policy(&mut self, settings: PolicySettings, effects: &mut Vec<Effect>) -> Response {
        if self.machine_version < QUEUE_POLICIES_GROUP_VERSION {
            return Response::Done;
        }
        self.settings.policy = settings;
        if self.settings.policy.overflow == Overflow::DropHead {
            self.drop_head(effects);
        }
        Response::Done
    }

    fn checkout(&mut self, consumer: &ConsumerId, spec: ConsumerSpec, filter: Option<TagFilter>) -> Response {
        if !consumer.is_getter() {
            let key = self.consumers.attach(consumer, spec, Status::Up);
            self.consumers.set_filter(key, filter);
        }
        Response::Done
    }

    /// A message leaves the queue (settled, dropped, dead-lettered or expired).
    fn forget_message(&mut self, id: MessageId) -> Option<MessageState> {
        self.tags.remove(&id);
        self.messages.remove(&id)
    }

    fn cancel(&mut self, consumer: &ConsumerId) -> Response {
        if let Some(key) = self.consumers.key_of(consumer) {
            if let Some(c) = self.consumers.get_mut(key) {
                if c.status == Status::Up {
                    c.status = Status::Cancelled;
                }
            }
            self.consumers.remove_if_finished(key);
        }
        Response::Done
    }

    fn down(&mut self, node: u64, channel: u64, effects: &mut Vec<Effect>) -> Response {
        for key in self.consumers.of_channel(node, channel) {
            if let Some(consumer) = self.consumers.remove(key) {
                for id in consumer.held {
                    self.requeue(id, effects);
                }
            }
        }
        Response::Done
    }

    fn dequeue(&mut self, consumer: &ConsumerId, settle: bool) -> Response {
        let Some(next) = self.ready.pop_front() else { return Response::Dequeued(None) };
        let id = next.position();
        let Some(state) = self.forget_ready(id) else { return Response::Dequeued(None) };
        let taken = Dequeued {
            id,
            delivery_count: state.delivery_count,
            redelivered: state.acquired > 0,
            ready_after: self.ready.len() as u64,
        };
        if !settle && consumer.is_getter() {
            let spec = ConsumerSpec { prefetch: 0, priority: 0 };
            let key = self.consumers.attach(consumer, spec, Status::Getter);
            self.hold(id, key);
        } else {
            self.forget_message(id);
        }
        Response::Dequeued(Some(taken))
    }

    /// Settles (`reason: None`) or discards (dead-letters with `reason`) what `consumer`
    /// holds of `ids`; ids it does not hold are ignored (a retried command is harmless).
    fn settle(
        &mut self,
        consumer: &ConsumerId,
        ids: &[MessageId],
        reason: Option<DeathReason>,
        effects: &mut Vec<Effect>,
    ) -> Response {
        let Some(key) = self.consumers.key_of(consumer) else { return Response::Done };
        for id in self.release(key, ids) {
            let removed = self.forget_message(id);
            if let (Some(reason), Some(message)) = (reason, removed) {
                self.dead_letter(id, reason, message.size, effects);
            }
        }
        self.consumers.remove_if_finished(key);
        Response::Done
    }

    fn return_held(&mut self, consumer: &ConsumerId, ids: &[MessageId], effects: &mut Vec<Effect>) -> Response {
        let Some(key) = self.consumers.key_of(consumer) else { return Response::Done };
        for id in self.release(key, ids) {
            self.requeue(id, effects);
        }
        self.consumers.remove_if_finished(key);
        Response::Done
    }

    /// Takes from `key` the ids of `ids` it holds.
    fn release(&mut self, key: ConsumerKey, ids: &[MessageId]) -> Vec<MessageId> {
        let Some(consumer) = self.consumers.get_mut(key) else { return Vec::new() };
        ids.iter().copied().filter(|id| consumer.held.remove(id)).collect()
    }

    /// A held message comes back after a failed delivery: in place, or gone past the
    /// delivery limit.
    fn requeue(&mut self, id: MessageId, effects: &mut Vec<Effect>) {
        let Some(state) = self.messages.get_mut(&id) else { return };
        state.holder = None;
        state.delivery_count = state.delivery_count.saturating_add(1);
        let state = *state;
        if state.delivery_count > self.settings.policy.delivery_limit {
            self.forget_message(id);
            self.dead_letter(id, DeathReason::DeliveryLimit, state.size, effects);
        } else {
            self.make_ready(id, state);
        }
    }

    fn purge(&mut self) -> u64 {
        let all = self.ready.take_all();
        for message in &all {
            self.forget_message(message.position());
        }
        self.ready_bytes = 0;
        self.expiry.clear();
        all.len() as u64
    }

    /// Ready messages whose TTL ran out by the clock leave.
    fn expire_due(&mut self, due: Due, effects: &mut Vec<Effect>) {
        while let Some(&(at, id)) = self.expiry.first() {
            if at > self.clock_ms || (due == Due::Before && at == self.clock_ms) {
                break;
            }
            let Some(state) = self.forget_ready(id) else {
                self.expiry.remove(&(at, id));
                continue;
            };
            self.ready.remove_ref(message_ref(id, state.priority));
            self.forget_message(id);
            self.dead_letter(id, DeathReason::Expired, state.size, effects);
        }
    }

    /// Hands ready messages to consumers while any can take one.
    fn dispatch(&mut self, effects: &mut Vec<Effect>) {
        if self.settings.single_active_consumer {
            // Settles who is active even with nothing ready, so that it is told at once.
            self.consumers.active_target(effects);
        }
        if self.consumers.any_filter() {
            return self.dispatch_filtered(effects);
        }
        while self.ready.len() > 0 {
            let Some(key) = self.consumers.next_target(self.settings.single_active_consumer, effects) else { break };
            let Some(next) = self.ready.pop_front() else { break };
            self.deliver(next, key, effects);
        }
    }

    /// Dispatch when a consumer filters by tag: each ready message, in delivery order, goes
    /// to the consumer next in line among those that want it; one nobody wants stays (for a
    /// consumer that comes later, or `basic.get`). Scans the ready list while any consumer
    /// has credit, so a filter that matches little costs a scan per command.
    fn dispatch_filtered(&mut self, effects: &mut Vec<Effect>) {
        let single_active = self.settings.single_active_consumer;
        let candidates: Vec<MessageRef> = self.ready.iter().collect();
        for message in candidates {
            if !self.consumers.any_with_credit() {
                break;
            }
            let tag = self.tags.get(&message.position()).map(Vec::as_slice);
            let Some(key) = self.consumers.next_target_for(single_active, tag, effects) else { continue };
            if let Some(taken) = self.ready.remove_ref(message) {
                self.deliver(taken, key, effects);
            }
        }
    }

    /// Gives ready message `next` (just taken off the ready list) to consumer `key`.
    fn deliver(&mut self, next: MessageRef, key: ConsumerKey, effects: &mut Vec<Effect>) {
        let id = next.position();
        let Some(state) = self.forget_ready(id) else { return };
        self.hold(id, key);
        if let Some(consumer) = self.consumers.get(key) {
            effects.push(Effect::Deliver {
                consumer: consumer.id.clone(),
                id,
                delivery_count: state.delivery_count,
                redelivered: state.acquired > 0,
            });
        }
    }

    /// Puts a live message among the ready ones.
    fn make_ready(&mut self, id: MessageId, state: MessageState) {
        self.ready.insert(message_ref(id, state.priority));
        self.ready_bytes += state.size;
        if let Some(at) = state.expires_at_ms {
            self.expiry.insert((at, id));
        }
    }

    /// A message just taken off the ready list (by the caller) is no longer counted as
    /// ready; returns its state.
    fn forget_ready(&mut self, id: MessageId) -> Option<MessageState> {
        let state = *self.messages.get(&id)?;
        self.ready_bytes -= state.size;
        if let Some(at) = state.expires_at_ms {
            self.expiry.remove(&(at, id));
        }
        Some(state)
    }

    /// `key` now holds message `id` (taken off the ready list).
    fn hold(&mut self, id: MessageId, key: ConsumerKey) {
        if let Some(state) = self.messages.get_mut(&id) {
            state.holder = Some(key);
            state.acquired = state.acquired.saturating_add(1);
        }
        if let Some(consumer) = self.consumers.get_mut(key) {
            consumer.held.insert(id);
        }
    }

    /// A message left unsettled: dead-lettered if the queue has a dead-letter exchange, and
    /// kept until the target confirms it if that is the strategy.
    fn dead_letter(&mut self, id: MessageId, reason: DeathReason, size: u64, effects: &mut Vec<Effect>) {
        if !self.settings.policy.dead_letter {
            return;
        }
        let confirm = self.settings.dead_letters_at_least_once();
        if confirm {
            self.dead_lettering.insert(id, PendingDeadLetter { reason, size });
            self.dead_lettering_bytes += size;
        }
        effects.push(Effect::DeadLetter { id, reason, confirm });
    }

    fn dead_lettered(&mut self, ids: &[MessageId]) -> Response {
        for id in ids {
            if let Some(pending) = self.dead_lettering.remove(id) {
                self.dead_lettering_bytes -= pending.size;
            }
        }
        Response::Done
    }
}

/// Which expiry times count as run out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Due {
    /// Before the clock.
    Before,
    /// Before or at the clock.
    AtOrBefore,
}

/// The ready-list entry of message `id`: its position is its id.
fn message_ref(id: MessageId, priority: u8) -> MessageRef {
    MessageRef::new(id, id, false, priority)
}

/// Queries: counts for the management API and `queue.declare-ok`, and what the leader
/// needs to act (timers, re-delivery after a leader change, the release cursor).
impl QueueState {
    /// The arguments it obeys.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Messages ready for delivery.
    pub fn ready_count(&self) -> u64 {
        self.ready.len() as u64
    }

    /// Body bytes of the ready messages.
    pub fn ready_bytes(&self) -> u64 {
        self.ready_bytes
    }

    /// Messages handed out and not settled.
    pub fn unacked_count(&self) -> u64 {
        self.messages.len() as u64 - self.ready_count()
    }

    /// Consumers taking deliveries.
    pub fn consumer_count(&self) -> u64 {
        self.consumers.up_count() as u64
    }

    /// The ready messages' ids in delivery order.
    pub fn ready_ids(&self) -> Vec<MessageId> {
        self.ready.iter().map(MessageRef::position).collect()
    }

    /// What `consumer` holds, by id.
    pub fn held_by(&self, consumer: &ConsumerId) -> Vec<MessageId> {
        let key = self.consumers.key_of(consumer);
        key.and_then(|key| self.consumers.get(key)).map(|c| c.held.iter().copied().collect()).unwrap_or_default()
    }

    /// A live message's failed deliveries, if it is live.
    pub fn delivery_count(&self, id: MessageId) -> Option<u32> {
        self.messages.get(&id).map(|m| m.delivery_count)
    }

    /// The channels of `node` that have consumers or hold messages (an [`Op::Down`] for one
    /// of them returns what it holds).
    pub fn channels_of(&self, node: u64) -> BTreeSet<u64> {
        self.consumers.iter().filter(|(_, c)| c.id.node == node).map(|(_, consumer)| consumer.id.channel).collect()
    }

    /// The nodes that have channels with consumers or held messages.
    pub fn nodes_with_channels(&self) -> BTreeSet<u64> {
        self.consumers.iter().map(|(_, consumer)| consumer.id.node).collect()
    }

    /// Whether `consumer` is attached and taking deliveries.
    pub fn is_attached(&self, consumer: &ConsumerId) -> bool {
        self.consumers.key_of(consumer).and_then(|key| self.consumers.get(key)).is_some_and(|c| c.status == Status::Up)
    }

    /// The single active consumer, if the queue has one.
    pub fn active_consumer(&self) -> Option<&ConsumerId> {
        self.consumers.active()
    }

    /// When the next ready message expires (ms since the epoch): when the leader should
    /// propose [`Op::Expire`].
    pub fn next_expiry_ms(&self) -> Option<u64> {
        self.expiry.first().map(|(at, _)| *at)
    }

    /// The time of the newest command applied.
    pub fn clock_ms(&self) -> u64 {
        self.clock_ms
    }

    /// The messages waiting for a dead-letter confirm, with why they were dead-lettered:
    /// what a new leader dead-letters again.
    pub fn dead_lettering(&self) -> Vec<(MessageId, DeathReason)> {
        self.dead_lettering.iter().map(|(id, pending)| (*id, pending.reason)).collect()
    }

    /// The oldest live message's id (waiting for a dead-letter confirm counts as live).
    pub fn lowest_live_id(&self) -> Option<MessageId> {
        let waiting = self.dead_lettering.keys().next().copied();
        self.messages.keys().next().copied().into_iter().chain(waiting).min()
    }

    /// The release cursor once entries up to `applied` are applied: the highest log index
    /// at or below which every message is settled, so that no entry up to it is needed again
    /// once a snapshot covers it.
    pub fn release_cursor(&self, applied: u64) -> u64 {
        self.lowest_live_id().map_or(applied, |lowest| entry_of(lowest).0.saturating_sub(1).min(applied))
    }
}

/// Snapshot support: the state as plain data, and back (see `super::snapshot`).
impl QueueState {
    pub(super) fn parts(&self) -> StateParts<'_> {
        StateParts {
            clock_ms: self.clock_ms,
            messages: &self.messages,
            consumers: &self.consumers,
            dead_lettering: &self.dead_lettering,
            tags: &self.tags,
            dedup: &self.dedup,
            machine_version: self.machine_version,
        }
    }

    /// This state, applying its entries with machine `version` (a snapshot's).
    pub(super) fn at_machine_version(mut self, version: u16) -> Self {
        self.machine_version = version;
        self
    }

    pub(super) fn from_parts(
        settings: Settings,
        clock_ms: u64,
        messages: BTreeMap<MessageId, MessageState>,
        mut consumers: Consumers,
        dead_lettering: BTreeMap<MessageId, PendingDeadLetter>,
        tags: BTreeMap<MessageId, Vec<u8>>,
        dedup: DedupEntries,
    ) -> Result<Self, MissingHolder> {
        let mut state = QueueState::new(settings);
        state.clock_ms = clock_ms;
        state.tags = tags;
        state.dedup = DedupWindow::restore(dedup);
        state.dead_lettering_bytes = dead_lettering.values().map(|pending| pending.size).sum();
        state.dead_lettering = dead_lettering;
        for (&id, message) in &messages {
            match message.holder {
                None => state.make_ready(id, *message),
                Some(key) => {
                    consumers.get_mut(key).ok_or(MissingHolder { id, key })?.held.insert(id);
                }
            }
        }
        state.messages = messages;
        state.consumers = consumers;
        Ok(state)
    }
}

#[cfg(test)]
impl QueueState {
    /// Checks that the derived structures agree with the messages: the ready list, ready
    /// bytes, expiry set and consumers' holdings.
    pub(super) fn check_invariants(&self) -> Result<(), String> {
        let ready: BTreeSet<MessageId> = self.ready.iter().map(MessageRef::position).collect();
        let unheld: BTreeSet<MessageId> =
            self.messages.iter().filter(|(_, m)| m.holder.is_none()).map(|(id, _)| *id).collect();
        if ready != unheld || ready.len() != self.ready.len() {
            return Err(format!("ready list {ready:?} but unheld messages {unheld:?}"));
        }
        let bytes: u64 = unheld.iter().filter_map(|id| self.messages.get(id)).map(|m| m.size).sum();
        if bytes != self.ready_bytes {
            return Err(format!("ready bytes {} but {bytes} counted", self.ready_bytes));
        }
        let expiring: BTreeSet<(u64, MessageId)> = unheld
            .iter()
            .filter_map(|id| self.messages.get(id).and_then(|m| m.expires_at_ms).map(|at| (at, *id)))
            .collect();
        if expiring != self.expiry {
            return Err(format!("expiry set {:?} but {expiring:?}", self.expiry));
        }
        for (key, consumer) in self.consumers.iter() {
            for id in &consumer.held {
                if self.messages.get(id).and_then(|m| m.holder) != Some(key) {
                    return Err(format!("consumer #{key} holds {id}, which it is not the holder of"));
                }
            }
            if consumer.is_finished() {
                return Err(format!("consumer #{key} is finished but kept"));
            }
        }
        let waiting: u64 = self.dead_lettering.values().map(|pending| pending.size).sum();
        if waiting != self.dead_lettering_bytes {
            return Err(format!("dead-lettering bytes {} but {waiting} counted", self.dead_lettering_bytes));
        }
        let held: usize = self.consumers.iter().map(|(_, c)| c.held.len()).sum();
        if held + ready.len() != self.messages.len() {
            return Err(format!("{held} held + {} ready != {} live", ready.len(), self.messages.len()));
        }
        Ok(())
    }
}

/// Borrowed views of the state a snapshot is made of.
pub(super) struct StateParts<'a> {
    pub(super) clock_ms: u64,
    pub(super) messages: &'a BTreeMap<MessageId, MessageState>,
    pub(super) consumers: &'a Consumers,
    pub(super) dead_lettering: &'a BTreeMap<MessageId, PendingDeadLetter>,
    pub(super) tags: &'a BTreeMap<MessageId, Vec<u8>>,
    pub(super) dedup: &'a DedupWindow,
    pub(super) machine_version: u16,
}

/// A snapshot names a holder that it does not list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("message {id} is held by consumer #{key}, which the snapshot does not list")]
pub struct MissingHolder {
    id: MessageId,
    key: ConsumerKey,
}
