//! A classic queue: ready messages wait in a [`ReadyList`] (by priority, then position), go to
//! consumers with credit, and leave once settled. Persistent messages of a durable queue are
//! in its [`LogStore`](crate::message_store::LogStore), everything else in a [`TransientStore`]
//! (in memory up to a budget, paged to disk past it); the ready list orders them all.
//!
//! All state is behind the queue's own lock; there is no broker-wide lock on the publish or
//! deliver path. Dispatch runs inline, on the task that made progress possible (a publish, an
//! ack, a new consumer), and hands deliveries to each consumer's session without waiting.
//! Messages leaving for the dead-letter exchange are published after the lock is released.

use super::consumer::Consumer;
use super::context::QueueContext;
use super::kind::{Holder, QueueKind};
use super::state::QueueState;
use super::{DeliveryChannel, GetResult, Published, Queue, QueueArguments, QueueDefinition, Reply};
use crate::clock::now_ms;
use crate::dead_letter::{self, DeathReason};
use crate::definitions::VhostStorage;
use crate::error::{internal_error, BrokerError, BrokerResult, ReplyCode};
use crate::message::Message;
use crate::message_ref::MessageRef;
use crate::message_store::log_browser::LogBrowser;
use crate::message_store::{MessageStore, StoreError, TransientStore};
use crate::overflow::Overflow;
use crate::ready_list::ReadyList;
use crate::scheduler::{QueueTimer, TimerEvent};
use parking_lot::{Mutex, MutexGuard};
use std::collections::HashMap;
use std::sync::{Arc, Weak};

/// A recovered offset, with its append time and content (for queues whose recovery reads them).
type RecoveredMessage = (u64, i64, Arc<Message>);

/// A classic queue's state and behaviour.
pub(crate) struct ClassicQueue {
    pub(super) state: Mutex<QueueState>,
}

/// A new, empty classic queue; a durable one (not exclusive) keeps its persistent messages in
/// a [`LogStore`](crate::message_store::LogStore) created in `storage`.
pub(super) fn declare(
    definition: QueueDefinition,
    arguments: QueueArguments,
    storage: Option<&VhostStorage>,
    context: QueueContext,
) -> BrokerResult<Arc<Queue>> {
    let durable_store = match storage {
        Some(storage) if definition.durable && definition.exclusive_owner.is_none() => {
            let store = storage.create_queue(&definition.name).map_err(|e| internal_error("cannot create queue", e))?;
            Some(Box::new(store) as Box<dyn MessageStore>)
        }
        _ => None,
    };
    let transient_store = TransientStore::new(storage.map(|storage| storage.page_file(&definition.name)));
    Ok(ClassicQueue::build(definition, arguments, (durable_store, transient_store), context, |_, _| {}))
}

/// A durable classic queue reopened from its store: the unsettled messages are ready again.
/// Queues with priorities, a TTL or a byte limit read each message once to learn its
/// priority, size and age.
pub(super) fn recover(
    definition: QueueDefinition,
    arguments: QueueArguments,
    storage: &VhostStorage,
    context: QueueContext,
) -> BrokerResult<Arc<Queue>> {
    let opened = storage.open_queue(&definition.name).map_err(|e| internal_error("cannot recover a queue", e))?;
    let Some(mut store) = opened else {
        // It never held a persistent message: there is nothing to recover.
        return declare(definition, arguments, Some(storage), context);
    };
    // Only these arguments need each message's properties; a plain queue recovers from
    // offsets alone, without reading its backlog.
    let read_each =
        arguments.max_priority.is_some() || arguments.message_ttl_ms.is_some() || arguments.max_length_bytes.is_some();
    let mut recovered: Vec<RecoveredMessage> = Vec::new();
    // A plain queue's backlog goes straight into a ready list of its final size: millions of
    // offsets, with no intermediate copy and no doubling on the way.
    let mut plain_ready = None;
    if read_each {
        let visit = |offset, timestamp_ms, message| recovered.push((offset, timestamp_ms, message));
        store.for_each_unsettled(visit).map_err(|e| BrokerError::new(ReplyCode::InternalError, e.to_string()))?;
    } else {
        let mut ready = ReadyList::new(None);
        ready.reserve_plain(store.unsettled_count());
        store.unsettled().for_each(|offset| ready.push_back(MessageRef::new(offset, offset, false, 0)));
        plain_ready = Some(ready);
    }
    let redelivered_below = store.delivered_up_to().map_or(0, |d| d + 1);
    let next_position = store.next_offset();
    let restore = |state: &mut QueueState, arguments: &QueueArguments| {
        state.next_position = next_position;
        state.redelivered_below = redelivered_below;
        if let Some(ready) = plain_ready {
            state.ready = ready;
        }
        for (offset, timestamp_ms, message) in recovered {
            // TTLs count from when the message was first stored, as before the restart.
            let published = u64::try_from(timestamp_ms).unwrap_or(0);
            ClassicQueue::enqueue_locked(arguments, state, offset, offset, false, &message, published);
        }
    };
    let transient_store = TransientStore::new(Some(storage.page_file(&definition.name)));
    Ok(ClassicQueue::build(definition, arguments, (Some(Box::new(store)), transient_store), context, restore))
}

/// The body bytes of every ready message, read from the stores (a byte limit that was not
/// set did not count them).
fn ready_bytes(state: &mut QueueState) -> u64 {
    let ready: Vec<MessageRef> = state.ready.iter().collect();
    ready.into_iter().map(|message| state.read(message).map_or(0, |m| m.body.len() as u64)).sum()
}

impl ClassicQueue {
    /// Attaches `consumer` (see [`QueueKind::add_consumer`]).
    fn attach(&self, queue: &Arc<Queue>, consumer: Arc<Consumer>) -> BrokerResult<()> {
        let mut state = self.state.lock();
        if state.deleted {
            return Err(BrokerError::not_found(format!(
                "no queue '{}' in vhost '{}'",
                queue.name(),
                queue.vhost_name()
            )));
        }
        let exclusive_attached = state.consumers.iter().any(|c| c.is_exclusive());
        super::check_exclusive_consume(queue, exclusive_attached, !state.consumers.is_empty(), &consumer)?;
        state.consumers.push(consumer);
        state.unwanted.clear();
        state.last_used_ms = now_ms();
        Ok(())
    }

    fn build(
        definition: QueueDefinition,
        arguments: QueueArguments,
        (durable_store, transient_store): (Option<Box<dyn MessageStore>>, TransientStore),
        context: QueueContext,
        adjust: impl FnOnce(&mut QueueState, &QueueArguments),
    ) -> Arc<Queue> {
        let expires = arguments.expires_ms;
        let scheduler = Arc::clone(&context.scheduler);
        let queue = Queue::with_kind(
            definition,
            arguments,
            Weak::clone(&context.vhost),
            context.vhost_name.clone(),
            |me, arguments| {
                let mut state = QueueState {
                    durable_store,
                    transient_store,
                    ready: ReadyList::new(arguments.max_priority),
                    ready_bytes: 0,
                    next_position: 0,
                    redelivered_below: 0,
                    delivery_counts: HashMap::new(),
                    deadlines: Default::default(),
                    unacked: 0,
                    consumers: Vec::new(),
                    next_consumer: 0,
                    deleted: false,
                    last_used_ms: now_ms(),
                    dead_letters: Vec::new(),
                    unwanted: std::collections::HashSet::new(),
                    scratch_offsets: Vec::new(),
                    scheduler: Arc::clone(&context.scheduler),
                    me: Weak::clone(me),
                };
                adjust(&mut state, arguments);
                Box::new(ClassicQueue { state: Mutex::new(state) })
            },
        );
        if let Some(expires) = expires {
            let event = TimerEvent::QueueExpiry { queue: Arc::<Queue>::downgrade(&queue) };
            scheduler.schedule(now_ms().saturating_add(expires), event);
        }
        queue
    }

    /// Runs `work` under the lock, then publishes the dead letters it produced.
    pub(super) fn with_state<R>(
        &self,
        queue: &Arc<Queue>,
        work: impl FnOnce(&mut MutexGuard<'_, QueueState>) -> R,
    ) -> R {
        let (result, letters) = {
            let mut state = self.state.lock();
            let result = work(&mut state);
            (result, std::mem::take(&mut state.dead_letters))
        };
        if !letters.is_empty() {
            if let Some(vhost) = queue.vhost.upgrade() {
                for letter in letters {
                    vhost.publish_dead_letter(queue.name(), letter.message);
                }
            }
        }
        result
    }

    /// Adds a stored message to the ready list, with its TTL deadline if it has one.
    pub(super) fn enqueue_locked(
        arguments: &QueueArguments,
        state: &mut QueueState,
        position: u64,
        offset: u64,
        in_memory: bool,
        message: &Message,
        now: u64,
    ) {
        let priority = if arguments.max_priority.is_some() { message.properties.priority().unwrap_or(0) } else { 0 };
        state.ready.push_back(MessageRef::new(position, offset, in_memory, priority));
        state.count_bytes(arguments, message.body.len(), true);
        if let Some(deadline) = Self::deadline(arguments, message, now) {
            state.set_deadline(position, deadline);
        }
    }

    pub(super) fn dispatch_locked(&self, queue: &Arc<Queue>, state: &mut QueueState) {
        let now = state.clock();
        while state.any_credit() {
            let candidates: Vec<MessageRef> = if state.any_filter() {
                state.ready.iter().filter(|m| !state.unwanted.contains(&m.position)).collect()
            } else {
                state.ready.front().into_iter().collect()
            };
            let mut delivered = false;
            for next in candidates {
                if !state.any_credit() {
                    break;
                }
                delivered |= self.try_deliver(queue, state, next, now);
            }
            if !delivered {
                break;
            }
        }
        if let Some(store) = &mut state.durable_store {
            if let Err(error) = store.sync() {
                tracing::error!(queue = queue.name(), %error, "cannot record deliveries");
            }
        }
    }

    /// Delivers one ready message if a consumer wants it; expired ones are discarded instead.
    pub(super) fn try_deliver(&self, queue: &Arc<Queue>, state: &mut QueueState, next: MessageRef, now: u64) -> bool {
        if state.is_expired(next, now) {
            self.expire_ready(queue, state, next.position);
            return true;
        }
        let message = match state.read(next) {
            Ok(message) => message,
            // Lost to damage on disk: dropped, and dispatch goes on with the next message.
            Err(StoreError::Damaged(_)) => {
                state.drop_damaged(queue.name(), next);
                return true;
            }
            Err(error) => {
                tracing::error!(queue = queue.name(), %error, "cannot read message; dispatch paused");
                return false;
            }
        };
        let arguments = queue.arguments();
        let Some(consumer) = state.choose_consumer(&arguments, &message) else {
            if state.any_filter() && !state.consumers.iter().any(|c| c.wants(&message)) {
                state.unwanted.insert(next.position);
            }
            return false;
        };
        state.ready.remove_ref(next);
        state.count_bytes(&arguments, message.body.len(), false);
        let message = self.with_delivery_count(queue, state, next, message);
        let redelivered = state.is_redelivered(next);
        state.store(next).delivered(next.offset());
        if consumer.no_ack() {
            self.settle_locked(queue, state, &[next]);
        } else {
            state.unacked += 1;
        }
        consumer.session().push(&consumer, queue, next, redelivered, message);
        true
    }

    /// Under `x-delivery-limit`, a redelivery carries `x-delivery-count` (deliveries so far).
    pub(super) fn with_delivery_count(
        &self,
        queue: &Queue,
        state: &QueueState,
        next: MessageRef,
        message: Arc<Message>,
    ) -> Arc<Message> {
        if queue.arguments().delivery_limit.is_none() {
            return message;
        }
        let Some(&count) = state.delivery_counts.get(&next.position) else { return message };
        dead_letter::with_delivery_count(message, count)
    }

    pub(super) fn settle_locked(&self, queue: &Queue, state: &mut QueueState, messages: &[MessageRef]) {
        if let Err(error) = state.remove(messages) {
            tracing::error!(queue = queue.name(), %error, "cannot record settlement");
        }
    }
}

impl QueueKind for ClassicQueue {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn browser(&self) -> Option<LogBrowser> {
        self.state.lock().durable_store.as_ref().and_then(|store| store.browser())
    }

    fn disk_bytes(&self) -> u64 {
        self.state.lock().durable_store.as_ref().map_or(0, |store| store.disk_bytes())
    }

    /// Stores a message and dispatches it if a consumer has credit.
    fn publish(&self, queue: &Arc<Queue>, message: Arc<Message>) -> Result<Published, StoreError> {
        let arguments = queue.arguments();
        self.with_state(queue, |state| {
            if state.deleted {
                return Ok(Published::Stored(None));
            }
            if arguments.overflow != Overflow::DropHead && state.would_overflow(&arguments, message.body.len()) {
                if arguments.overflow == Overflow::RejectPublishDlx {
                    state.dead_letter(queue.name(), &arguments, &message, DeathReason::Maxlen);
                }
                return Ok(Published::Rejected);
            }
            let persistent = message.properties.is_persistent() && state.durable_store.is_some();
            let appended = match (&mut state.durable_store, persistent) {
                (Some(store), true) => store.append(&message)?,
                _ => state.transient_store.append(&message)?,
            };
            let position = state.next_position;
            state.next_position += 1;
            let may_expire = arguments.message_ttl_ms.is_some() || message.properties.expiration().is_some();
            let now = if may_expire { now_ms() } else { 0 };
            Self::enqueue_locked(&arguments, state, position, appended.offset, !persistent, &message, now);
            state.drop_head(queue.name(), &arguments);
            self.dispatch_locked(queue, state);
            if may_expire {
                // What a TTL of 0 left undelivered goes now rather than at the next tick.
                self.expire_due_locked(queue, state, now + 1);
            }
            Ok(Published::Stored(appended.durable))
        })
    }

    /// Delivers ready messages to consumers with credit.
    fn dispatch(&self, queue: &Arc<Queue>) {
        self.with_state(queue, |state| self.dispatch_locked(queue, state));
    }

    /// Attaches a consumer; exclusivity conflicts are 403 ACCESS_REFUSED, as in RabbitMQ.
    /// Dispatch does not start here: the caller first tells the client (`consume-ok`), then
    /// calls [`Queue::dispatch`].
    fn add_consumer(&self, queue: &Arc<Queue>, consumer: Arc<Consumer>) -> Reply<BrokerResult<()>> {
        Reply::Now(self.attach(queue, consumer))
    }

    /// Detaches a consumer; returns true if the queue now has none.
    fn remove_consumer(&self, _queue: &Arc<Queue>, consumer: &Arc<Consumer>) -> bool {
        let mut state = self.state.lock();
        state.consumers.retain(|c| !Arc::ptr_eq(c, consumer));
        state.unwanted.clear();
        state.last_used_ms = now_ms();
        state.consumers.is_empty()
    }

    /// Takes the next ready message for `basic.get`, recorded on `session`.
    fn get(
        &self,
        queue: &Arc<Queue>,
        session: &Arc<dyn DeliveryChannel>,
        no_ack: bool,
    ) -> Reply<BrokerResult<Option<GetResult>>> {
        Reply::Now(Ok(self.with_state(queue, |state| {
            state.last_used_ms = now_ms();
            let now = state.clock();
            self.expire_due_locked(queue, state, now);
            let (next, message) = loop {
                let next = state.ready.pop_front()?;
                match state.read(next) {
                    Ok(message) => break (next, message),
                    // Lost to damage on disk: dropped; the next message is the answer.
                    Err(StoreError::Damaged(_)) => state.drop_damaged(queue.name(), next),
                    Err(error) => {
                        tracing::error!(queue = queue.name(), %error, "cannot read message for basic.get");
                        state.ready.insert(next);
                        return None;
                    }
                }
            };
            state.count_bytes(&queue.arguments(), message.body.len(), false);
            let message = self.with_delivery_count(queue, state, next, message);
            let redelivered = state.is_redelivered(next);
            state.store(next).delivered(next.offset());
            if no_ack {
                self.settle_locked(queue, state, &[next]);
            } else {
                state.unacked += 1;
            }
            if let Some(store) = &mut state.durable_store {
                let _ = store.sync();
            }
            let delivery_tag = session.record_get(queue, next, no_ack);
            Some(GetResult { delivery_tag, redelivered, message, message_count: state.ready.len() as u32 })
        })))
    }

    /// Settles acknowledged messages (delivered to `consumer`, if by one) and dispatches
    /// what their credit allows.
    fn settle(&self, queue: &Arc<Queue>, messages: &[MessageRef], _holder: Holder<'_>) {
        self.with_state(queue, |state| {
            state.unacked = state.unacked.saturating_sub(messages.len());
            self.settle_locked(queue, state, messages);
            self.dispatch_locked(queue, state);
        });
    }

    /// Settles rejected messages (reject, or nack without requeue): dead-lettered if the queue
    /// has a dead-letter exchange, dropped otherwise.
    fn reject(&self, queue: &Arc<Queue>, messages: &[MessageRef], _holder: Holder<'_>) {
        self.with_state(queue, |state| {
            state.unacked = state.unacked.saturating_sub(messages.len());
            for &message in messages {
                state.discard(queue.name(), &queue.arguments(), message, DeathReason::Rejected);
            }
            self.dispatch_locked(queue, state);
        });
    }

    /// Puts delivered messages back at their places, marked redelivered, and dispatches.
    /// A message past `x-delivery-limit`, or past its TTL, is discarded instead.
    fn requeue(&self, queue: &Arc<Queue>, messages: &[MessageRef], _holder: Holder<'_>) {
        self.with_state(queue, |state| {
            if state.deleted {
                return;
            }
            state.unacked = state.unacked.saturating_sub(messages.len());
            let now = now_ms();
            let arguments = queue.arguments();
            for &message in messages {
                let count = state.delivery_counts.get(&message.position).copied().unwrap_or(0) + 1;
                if arguments.delivery_limit.is_some_and(|limit| u64::from(count) > limit) {
                    state.discard(queue.name(), &arguments, message, DeathReason::DeliveryLimit);
                } else if state.is_expired(message, now) {
                    state.discard(queue.name(), &arguments, message, DeathReason::Expired);
                } else {
                    state.delivery_counts.insert(message.position, count);
                    if arguments.max_length_bytes.is_some() {
                        let size = state.read(message).map_or(0, |m| m.body.len());
                        state.count_bytes(&arguments, size, true);
                    }
                    state.ready.insert(message);
                }
            }
            self.dispatch_locked(queue, state);
        });
    }

    /// Drops every ready message; returns how many.
    fn purge(&self, queue: &Arc<Queue>) -> Reply<BrokerResult<u32>> {
        Reply::Now(Ok(self.with_state(queue, |state| {
            let ready = state.ready.take_all();
            state.ready_bytes = 0;
            self.settle_locked(queue, state, &ready);
            ready.len() as u32
        })))
    }

    /// Makes what the queue stores durable (the broker is stopping).
    fn close(&self, queue: &Arc<Queue>) {
        let mut state = self.state.lock();
        if let Some(store) = &mut state.durable_store {
            if let Err(error) = store.close() {
                tracing::error!(queue = queue.name(), %error, "cannot close the queue's store");
            }
        }
    }

    /// Marks the queue deleted, releases its stores, and detaches its consumers, which are
    /// returned for cancelling.
    fn mark_deleted(&self, _queue: &Arc<Queue>) -> (u32, Vec<Arc<Consumer>>) {
        let mut state = self.state.lock();
        state.deleted = true;
        let count = state.ready.len() as u32;
        state.ready.take_all();
        state.deadlines.clear();
        state.transient_store.clear();
        if let Some(store) = state.durable_store.take() {
            store.destroy();
        }
        (count, std::mem::take(&mut state.consumers))
    }

    fn message_count(&self) -> u32 {
        self.state.lock().ready.len() as u32
    }

    fn unacked_count(&self) -> u32 {
        self.state.lock().unacked as u32
    }

    fn consumer_count(&self) -> u32 {
        self.state.lock().consumers.len() as u32
    }

    /// A policy changed the limits: a byte limit that was not counted before counts the
    /// ready messages now, and lower limits drop (dead-letter) the oldest at once, as the next
    /// publish would have; a new `x-expires` counts from the last use. A new TTL applies to
    /// messages published from now on, as in RabbitMQ: each message's deadline was fixed when
    /// it was stored.
    fn arguments_changed(&self, queue: &Arc<Queue>, before: &QueueArguments) {
        let arguments = queue.arguments();
        let last_used_ms = self.with_state(queue, |state| {
            if state.deleted {
                return None;
            }
            if arguments.max_length_bytes.is_some() && before.max_length_bytes.is_none() {
                state.ready_bytes = ready_bytes(state);
            }
            state.drop_head(queue.name(), &arguments);
            Some(state.last_used_ms)
        });
        if let (Some(expires), Some(last_used_ms)) = (arguments.expires_ms, last_used_ms) {
            if arguments.expires_ms != before.expires_ms {
                let event = TimerEvent::QueueExpiry { queue: Arc::<Queue>::downgrade(queue) };
                self.state.lock().scheduler.schedule(last_used_ms.saturating_add(expires), event);
            }
        }
    }

    fn touch(&self) {
        self.state.lock().last_used_ms = now_ms();
    }

    fn timer_fired(&self, queue: &Arc<Queue>, timer: QueueTimer) {
        match timer {
            QueueTimer::MessageExpiry(at_ms) => self.expire(queue, at_ms),
            QueueTimer::Unused => self.check_unused(queue),
            QueueTimer::Retention => {}
        }
    }
}
