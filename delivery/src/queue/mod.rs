//! Queues: the ready list, the consumers, and dispatch from one to the other.
//!
//! Each queue owns its state behind its own lock; there is no broker-wide lock on the publish
//! or deliver path. Dispatch runs inline, on the task that made progress possible (a publish,
//! an ack, a new consumer), and hands deliveries to each consumer's session without waiting.
//!
//! A queue has two message stores: persistent messages of a durable queue go to its
//! [`LogStore`], everything else to a [`MemoryStore`]. The ready list orders messages by
//! priority (for `x-max-priority` queues) and then by position, whichever store holds them.
//! Messages leaving for the dead-letter exchange are published after the lock is released.
//! A message whose record turns out damaged on disk when read ([`StoreError::Damaged`]; the
//! store reports it) is dropped from the ready list and settled, and dispatch goes on.
//!
//! A queue declared with `x-queue-type: stream` hands every operation to its [`Stream`]
//! (`crate::stream`): it keeps its messages, and consumers read it by offset.

mod arguments;
pub mod dead_letter;
mod expiry;
mod log_store;
pub(crate) mod message_codec;
mod message_ref;
mod message_store;
mod ready_list;
mod state;
mod stream_queue;

pub use arguments::{Overflow, QueueArguments, QueueType, MAX_PRIORITY};
pub use log_store::{LogStore, LogStoreConfig};
pub use message_store::{Appended, DurableMark, MemoryStore, MessageStore, StoreError};

use crate::consumer::Consumer;
use crate::error::{BrokerError, BrokerResult, ReplyCode};
use crate::message::Message;
use crate::scheduler::{now_ms, SchedulerHandle, TimerEvent};
use crate::session::Session;
use crate::stream::Stream;
use crate::vhost::VirtualHost;
use amq_protocol::types::{AMQPValue, FieldTable};
use dead_letter::DeathReason;
pub use message_ref::MessageRef;
use parking_lot::{Mutex, MutexGuard};
use ready_list::ReadyList;
use state::QueueState;
use std::collections::HashMap;
use std::sync::{Arc, Weak};

/// Identifies a client connection, for exclusive queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnectionId(pub u64);

/// What `queue.declare` asked for; compared on redeclaration.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueDefinition {
    /// The queue's name.
    pub name: String,
    /// Whether it survives a broker restart.
    pub durable: bool,
    /// The connection that owns it, for exclusive queues.
    pub exclusive_owner: Option<ConnectionId>,
    /// Whether it is deleted when its last consumer goes.
    pub auto_delete: bool,
    /// Declared arguments.
    pub arguments: FieldTable,
}

/// The header a redelivery carries under `x-delivery-limit`: deliveries before this one.
const DELIVERY_COUNT_HEADER: &str = "x-delivery-count";

/// A recovered offset, with its append time and content (for queues whose recovery reads them).
type RecoveredMessage = (u64, i64, Arc<Message>);

/// What became of a published message.
#[derive(Debug)]
pub enum Published {
    /// Queued; a confirm must wait for the mark, if any.
    Stored(Option<DurableMark>),
    /// Refused by `x-overflow: reject-publish(-dlx)`: the publisher gets a nack.
    Rejected,
}

/// A message taken by `basic.get`.
#[derive(Debug)]
pub struct GetResult {
    /// The delivery tag on the getting channel.
    pub delivery_tag: u64,
    /// Whether it was delivered before.
    pub redelivered: bool,
    /// The message.
    pub message: Arc<Message>,
    /// Messages still ready after this one.
    pub message_count: u32,
}

/// What a queue needs from the broker around it.
#[derive(Debug, Clone)]
pub struct QueueContext {
    /// Its virtual host, where dead letters are routed.
    pub vhost: Weak<VirtualHost>,
    /// The broker's timers.
    pub scheduler: SchedulerHandle,
}

/// A queue.
pub struct Queue {
    definition: QueueDefinition,
    arguments: QueueArguments,
    vhost: Weak<VirtualHost>,
    state: Mutex<QueueState>,
    /// A stream's log and consumers (`x-queue-type: stream`); the state above stays empty.
    stream: Option<Stream>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").field("name", &self.definition.name).finish_non_exhaustive()
    }
}

impl Queue {
    /// A new, empty queue; `durable_store` holds the persistent messages of a durable queue.
    /// Malformed `x-` arguments are 406.
    pub fn new(
        definition: QueueDefinition,
        durable_store: Option<Box<dyn MessageStore>>,
        context: QueueContext,
    ) -> BrokerResult<Arc<Self>> {
        let arguments = QueueArguments::parse(&definition.arguments)?;
        Ok(Self::build(definition, arguments, durable_store, None, context, |_| {}))
    }

    /// A durable queue reopened from its store: the unsettled messages are ready again.
    /// Queues with priorities, a TTL or a byte limit read each message once to learn its
    /// priority, size and age.
    pub fn recover(definition: QueueDefinition, mut store: LogStore, context: QueueContext) -> BrokerResult<Arc<Self>> {
        let arguments = QueueArguments::parse(&definition.arguments)?;
        // Only these arguments need each message's properties; a plain queue recovers from
        // offsets alone, without reading its backlog.
        let read_each = arguments.max_priority.is_some()
            || arguments.message_ttl_ms.is_some()
            || arguments.max_length_bytes.is_some();
        let mut recovered: Vec<RecoveredMessage> = Vec::new();
        // A plain queue's backlog goes straight into a ready list of its final size: millions
        // of offsets, with no intermediate copy and no doubling on the way.
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
        let queue = Self::build(definition, arguments, Some(Box::new(store)), None, context, |state| {
            state.next_position = next_position;
            state.redelivered_below = redelivered_below;
            if let Some(ready) = plain_ready {
                state.ready = ready;
            }
        });
        let mut state = queue.state.lock();
        for (offset, timestamp_ms, message) in recovered {
            // TTLs count from when the message was first stored, as before the restart.
            let published = u64::try_from(timestamp_ms).unwrap_or(0);
            queue.enqueue_locked(&mut state, offset, offset, false, &message, published);
        }
        drop(state);
        Ok(queue)
    }

    fn build(
        definition: QueueDefinition,
        arguments: QueueArguments,
        durable_store: Option<Box<dyn MessageStore>>,
        stream: Option<Stream>,
        context: QueueContext,
        adjust: impl FnOnce(&mut QueueState),
    ) -> Arc<Self> {
        let expires = arguments.expires_ms;
        let queue = Arc::new_cyclic(|me: &Weak<Queue>| {
            let mut state = QueueState {
                durable_store,
                memory_store: MemoryStore::default(),
                ready: ReadyList::new(arguments.max_priority),
                ready_bytes: 0,
                next_position: 0,
                redelivered_below: 0,
                delivery_counts: HashMap::new(),
                deadlines: HashMap::new(),
                unacked: 0,
                consumers: Vec::new(),
                next_consumer: 0,
                deleted: false,
                last_used_ms: now_ms(),
                dead_letters: Vec::new(),
                unwanted: std::collections::HashSet::new(),
                scratch_offsets: Vec::new(),
                scheduler: context.scheduler,
                me: Weak::clone(me),
            };
            adjust(&mut state);
            Queue { definition, arguments, vhost: context.vhost, state: Mutex::new(state), stream }
        });
        if let Some(expires) = expires {
            let state = queue.state.lock();
            let event = TimerEvent::QueueExpiry { queue: Arc::downgrade(&queue) };
            state.scheduler.schedule(state.last_used_ms + expires, event);
        }
        queue
    }

    /// Its definition.
    pub fn definition(&self) -> &QueueDefinition {
        &self.definition
    }

    /// Its parsed arguments.
    pub fn arguments(&self) -> &QueueArguments {
        &self.arguments
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.definition.name
    }

    /// Messages ready for delivery.
    pub fn message_count(&self) -> u32 {
        match &self.stream {
            Some(stream) => u32::try_from(stream.message_count()).unwrap_or(u32::MAX),
            None => self.state.lock().ready.len() as u32,
        }
    }

    /// Messages delivered and not yet settled.
    pub fn unacked_count(&self) -> u32 {
        match &self.stream {
            Some(stream) => stream.unacked_count(),
            None => self.state.lock().unacked as u32,
        }
    }

    /// Consumers attached.
    pub fn consumer_count(&self) -> u32 {
        match &self.stream {
            Some(stream) => stream.consumer_count() as u32,
            None => self.state.lock().consumers.len() as u32,
        }
    }

    /// Refuses access from another connection to an exclusive queue (405 RESOURCE_LOCKED).
    pub fn check_owner(&self, connection: ConnectionId) -> BrokerResult<()> {
        match self.definition.exclusive_owner {
            Some(owner) if owner != connection => Err(BrokerError::resource_locked(format!(
                "cannot obtain exclusive access to locked queue '{}' in vhost '/'",
                self.name()
            ))),
            _ => Ok(()),
        }
    }

    /// Marks the queue used now (for `x-expires`).
    pub fn touch(&self) {
        self.state.lock().last_used_ms = now_ms();
    }

    /// Runs `work` under the lock, then publishes the dead letters it produced.
    fn with_state<R>(self: &Arc<Self>, work: impl FnOnce(&mut MutexGuard<'_, QueueState>) -> R) -> R {
        let (result, letters) = {
            let mut state = self.state.lock();
            let result = work(&mut state);
            (result, std::mem::take(&mut state.dead_letters))
        };
        if !letters.is_empty() {
            if let Some(vhost) = self.vhost.upgrade() {
                for letter in letters {
                    vhost.publish_dead_letter(self.name(), letter.message);
                }
            }
        }
        result
    }

    fn enqueue_locked(
        &self,
        state: &mut QueueState,
        position: u64,
        offset: u64,
        in_memory: bool,
        message: &Message,
        now: u64,
    ) {
        let priority =
            if self.arguments.max_priority.is_some() { message.properties.priority().unwrap_or(0) } else { 0 };
        state.ready.push_back(MessageRef::new(position, offset, in_memory, priority));
        state.count_bytes(&self.arguments, message.body.len(), true);
        if let Some(deadline) = self.deadline(message, now) {
            state.set_deadline(position, deadline);
        }
    }

    /// Stores a message and dispatches it if a consumer has credit.
    pub fn publish(self: &Arc<Self>, message: Arc<Message>) -> Result<Published, StoreError> {
        if let Some(stream) = &self.stream {
            return stream.publish(self, &message);
        }
        self.with_state(|state| {
            if state.deleted {
                return Ok(Published::Stored(None));
            }
            if self.arguments.overflow != Overflow::DropHead
                && state.would_overflow(&self.arguments, message.body.len())
            {
                if self.arguments.overflow == Overflow::RejectPublishDlx {
                    state.dead_letter(self.name(), &self.arguments, &message, DeathReason::Maxlen);
                }
                return Ok(Published::Rejected);
            }
            let persistent = message.properties.is_persistent() && state.durable_store.is_some();
            let appended = match (&mut state.durable_store, persistent) {
                (Some(store), true) => store.append(&message)?,
                _ => state.memory_store.append(&message)?,
            };
            let position = state.next_position;
            state.next_position += 1;
            let may_expire = self.arguments.message_ttl_ms.is_some() || message.properties.expiration().is_some();
            let now = if may_expire { now_ms() } else { 0 };
            self.enqueue_locked(state, position, appended.offset, !persistent, &message, now);
            state.drop_head(self.name(), &self.arguments);
            self.dispatch_locked(state);
            if may_expire {
                // What a TTL of 0 left undelivered goes now rather than at the next tick.
                self.expire_due_locked(state, now + 1);
            }
            Ok(Published::Stored(appended.durable))
        })
    }

    /// Delivers ready messages to consumers with credit.
    pub fn dispatch(self: &Arc<Self>) {
        if let Some(stream) = &self.stream {
            return stream.dispatch(self);
        }
        self.with_state(|state| self.dispatch_locked(state));
    }

    fn dispatch_locked(self: &Arc<Self>, state: &mut QueueState) {
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
                delivered |= self.try_deliver(state, next, now);
            }
            if !delivered {
                break;
            }
        }
        if let Some(store) = &mut state.durable_store {
            if let Err(error) = store.sync() {
                tracing::error!(queue = self.name(), %error, "cannot record deliveries");
            }
        }
    }

    /// Delivers one ready message if a consumer wants it; expired ones are discarded instead.
    fn try_deliver(self: &Arc<Self>, state: &mut QueueState, next: MessageRef, now: u64) -> bool {
        if state.is_expired(next, now) {
            self.expire_ready(state, next.position);
            return true;
        }
        let message = match state.read(next) {
            Ok(message) => message,
            // Lost to damage on disk: dropped, and dispatch goes on with the next message.
            Err(StoreError::Damaged(_)) => {
                state.drop_damaged(self.name(), next);
                return true;
            }
            Err(error) => {
                tracing::error!(queue = self.name(), %error, "cannot read message; dispatch paused");
                return false;
            }
        };
        let Some(consumer) = state.choose_consumer(&self.arguments, &message) else {
            if state.any_filter() && !state.consumers.iter().any(|c| c.wants(&message)) {
                state.unwanted.insert(next.position);
            }
            return false;
        };
        state.ready.remove_ref(next);
        state.count_bytes(&self.arguments, message.body.len(), false);
        let message = self.with_delivery_count(state, next, message);
        let redelivered = state.is_redelivered(next);
        state.store(next).delivered(next.offset());
        if consumer.no_ack() {
            self.settle_locked(state, &[next]);
        } else {
            state.unacked += 1;
        }
        consumer.session().push(&consumer, self, next, redelivered, message);
        true
    }

    /// Under `x-delivery-limit`, a redelivery carries `x-delivery-count` (deliveries so far).
    fn with_delivery_count(&self, state: &QueueState, next: MessageRef, message: Arc<Message>) -> Arc<Message> {
        if self.arguments.delivery_limit.is_none() {
            return message;
        }
        let Some(&count) = state.delivery_counts.get(&next.position) else { return message };
        let counted = dead_letter::rewrite(&message, |_, headers| {
            headers.insert(DELIVERY_COUNT_HEADER.into(), AMQPValue::LongLongInt(i64::from(count)));
        });
        counted.map(Arc::new).unwrap_or(message)
    }

    /// Attaches a consumer; exclusivity conflicts are 403 ACCESS_REFUSED, as in RabbitMQ.
    /// Dispatch does not start here: the caller first tells the client (`consume-ok`), then
    /// calls [`Queue::dispatch`].
    pub fn add_consumer(&self, consumer: Arc<Consumer>) -> BrokerResult<()> {
        if let Some(stream) = &self.stream {
            return stream.add_consumer(consumer);
        }
        let mut state = self.state.lock();
        if state.deleted {
            return Err(BrokerError::not_found(format!("no queue '{}' in vhost '/'", self.name())));
        }
        if state.consumers.iter().any(|c| c.is_exclusive()) {
            return Err(BrokerError::access_refused(format!(
                "queue '{}' in vhost '/' has an exclusive consumer",
                self.name()
            )));
        }
        if consumer.is_exclusive() && !state.consumers.is_empty() {
            return Err(BrokerError::access_refused(format!(
                "queue '{}' in vhost '/' already has consumers; cannot consume exclusively",
                self.name()
            )));
        }
        state.consumers.push(consumer);
        state.unwanted.clear();
        state.last_used_ms = now_ms();
        Ok(())
    }

    /// Detaches a consumer; returns true if the queue now has none.
    pub fn remove_consumer(&self, consumer: &Arc<Consumer>) -> bool {
        if let Some(stream) = &self.stream {
            return stream.remove_consumer(consumer);
        }
        let mut state = self.state.lock();
        state.consumers.retain(|c| !Arc::ptr_eq(c, consumer));
        state.unwanted.clear();
        state.last_used_ms = now_ms();
        state.consumers.is_empty()
    }

    /// Takes the next ready message for `basic.get`, recorded on `session`. Streams refuse
    /// it (406): they are read by consumers from an offset.
    pub fn get(self: &Arc<Self>, session: &Session, no_ack: bool) -> BrokerResult<Option<GetResult>> {
        if self.stream.is_some() {
            return Err(BrokerError::precondition_failed(format!(
                "basic.get is not supported on stream '{}': consume with basic.consume (after basic.qos) and an \
                 x-stream-offset argument",
                self.name()
            )));
        }
        Ok(self.with_state(|state| {
            state.last_used_ms = now_ms();
            let now = state.clock();
            self.expire_due_locked(state, now);
            let (next, message) = loop {
                let next = state.ready.pop_front()?;
                match state.read(next) {
                    Ok(message) => break (next, message),
                    // Lost to damage on disk: dropped; the next message is the answer.
                    Err(StoreError::Damaged(_)) => state.drop_damaged(self.name(), next),
                    Err(error) => {
                        tracing::error!(queue = self.name(), %error, "cannot read message for basic.get");
                        state.ready.insert(next);
                        return None;
                    }
                }
            };
            state.count_bytes(&self.arguments, message.body.len(), false);
            let message = self.with_delivery_count(state, next, message);
            let redelivered = state.is_redelivered(next);
            state.store(next).delivered(next.offset());
            if no_ack {
                self.settle_locked(state, &[next]);
            } else {
                state.unacked += 1;
            }
            if let Some(store) = &mut state.durable_store {
                let _ = store.sync();
            }
            let delivery_tag = session.record_get(self, next, no_ack);
            Some(GetResult { delivery_tag, redelivered, message, message_count: state.ready.len() as u32 })
        }))
    }

    fn settle_locked(&self, state: &mut QueueState, messages: &[MessageRef]) {
        if let Err(error) = state.remove(messages) {
            tracing::error!(queue = self.name(), %error, "cannot record settlement");
        }
    }

    /// Settles acknowledged messages (delivered to `consumer`, if by one) and dispatches
    /// what their credit allows.
    pub fn settle(self: &Arc<Self>, messages: &[MessageRef], consumer: Option<&Arc<Consumer>>) {
        if let Some(stream) = &self.stream {
            return self.settle_stream(stream, consumer, messages, false);
        }
        self.with_state(|state| {
            state.unacked = state.unacked.saturating_sub(messages.len());
            self.settle_locked(state, messages);
            self.dispatch_locked(state);
        });
    }

    /// Settles rejected messages (reject, or nack without requeue): dead-lettered if the queue
    /// has a dead-letter exchange, dropped otherwise.
    pub fn reject(self: &Arc<Self>, messages: &[MessageRef], consumer: Option<&Arc<Consumer>>) {
        if let Some(stream) = &self.stream {
            return self.settle_stream(stream, consumer, messages, false);
        }
        self.with_state(|state| {
            state.unacked = state.unacked.saturating_sub(messages.len());
            for &message in messages {
                state.discard(self.name(), &self.arguments, message, DeathReason::Rejected);
            }
            self.dispatch_locked(state);
        });
    }

    /// Puts delivered messages back at their places, marked redelivered, and dispatches.
    /// A message past `x-delivery-limit`, or past its TTL, is discarded instead.
    pub fn requeue(self: &Arc<Self>, messages: &[MessageRef], consumer: Option<&Arc<Consumer>>) {
        if let Some(stream) = &self.stream {
            return self.settle_stream(stream, consumer, messages, true);
        }
        self.with_state(|state| {
            if state.deleted {
                return;
            }
            state.unacked = state.unacked.saturating_sub(messages.len());
            let now = now_ms();
            for &message in messages {
                let count = state.delivery_counts.get(&message.position).copied().unwrap_or(0) + 1;
                if self.arguments.delivery_limit.is_some_and(|limit| u64::from(count) > limit) {
                    state.discard(self.name(), &self.arguments, message, DeathReason::DeliveryLimit);
                } else if state.is_expired(message, now) {
                    state.discard(self.name(), &self.arguments, message, DeathReason::Expired);
                } else {
                    state.delivery_counts.insert(message.position, count);
                    if self.arguments.max_length_bytes.is_some() {
                        let size = state.read(message).map_or(0, |m| m.body.len());
                        state.count_bytes(&self.arguments, size, true);
                    }
                    state.ready.insert(message);
                }
            }
            self.dispatch_locked(state);
        });
    }

    /// Drops every ready message; returns how many. A stream keeps its messages (0, as
    /// RabbitMQ answers): only retention removes them.
    pub fn purge(self: &Arc<Self>) -> u32 {
        if self.stream.is_some() {
            return 0;
        }
        self.with_state(|state| {
            let ready = state.ready.take_all();
            state.ready_bytes = 0;
            self.settle_locked(state, &ready);
            ready.len() as u32
        })
    }

    /// Makes what the queue stores durable (the broker is stopping).
    pub fn close(&self) {
        if let Some(stream) = &self.stream {
            stream.close();
        }
        let mut state = self.state.lock();
        if let Some(store) = &mut state.durable_store {
            if let Err(error) = store.close() {
                tracing::error!(queue = self.name(), %error, "cannot close the queue's store");
            }
        }
    }

    /// Marks the queue deleted, releases its stores, and detaches its consumers, which are
    /// returned for cancelling.
    pub(crate) fn mark_deleted(&self) -> (u32, Vec<Arc<Consumer>>) {
        let mut state = self.state.lock();
        state.deleted = true;
        if let Some(stream) = &self.stream {
            return (self.message_count(), stream.destroy());
        }
        let count = state.ready.len() as u32;
        state.ready.take_all();
        state.deadlines.clear();
        state.memory_store = MemoryStore::default();
        if let Some(store) = state.durable_store.take() {
            store.destroy();
        }
        (count, std::mem::take(&mut state.consumers))
    }
}
