//! Queues: the ready list, the consumers, and dispatch from one to the other.
//!
//! Each queue owns its state behind its own lock; there is no broker-wide lock on the publish
//! or deliver path. Dispatch runs inline, on the task that made progress possible (a publish,
//! an ack, a new consumer), and hands deliveries to each consumer's session without waiting.
//!
//! A queue has two message stores: persistent messages of a durable queue go to its
//! [`LogStore`], everything else to a [`MemoryStore`]. The ready list orders messages by their
//! position in the queue, whichever store holds them.

mod log_store;
mod message_codec;
mod message_store;

pub use log_store::{LogStore, LogStoreConfig};
pub use message_store::{Appended, DurableMark, MemoryStore, MessageStore, StoreError};

use crate::consumer::Consumer;
use crate::error::{BrokerError, BrokerResult};
use crate::message::Message;
use crate::session::Session;
use amq_protocol::types::FieldTable;
use parking_lot::Mutex;
use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

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

/// The bit of [`MessageRef::location`] that says the message is in the memory store.
const IN_MEMORY_BIT: u64 = 1 << 63;

/// A queued message: its place in the queue, and where it is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageRef {
    position: u64,
    /// The store offset, with [`IN_MEMORY_BIT`] set for the memory store.
    location: u64,
}

impl MessageRef {
    fn new(position: u64, offset: u64, in_memory: bool) -> Self {
        MessageRef { position, location: offset | if in_memory { IN_MEMORY_BIT } else { 0 } }
    }

    fn offset(self) -> u64 {
        self.location & !IN_MEMORY_BIT
    }

    fn in_memory(self) -> bool {
        self.location & IN_MEMORY_BIT != 0
    }
}

struct QueueState {
    /// Persistent messages of a durable queue (`None` for other queues).
    durable_store: Option<Box<dyn MessageStore>>,
    memory_store: MemoryStore,
    /// Sorted by position, so a requeued message goes back to its place.
    ready: VecDeque<MessageRef>,
    next_position: u64,
    /// Recovered messages below this position may have been delivered before a restart.
    redelivered_below: u64,
    /// Positions delivered at least once and returned to the queue.
    requeued: HashSet<u64>,
    unacked: usize,
    consumers: Vec<Arc<Consumer>>,
    next_consumer: usize,
    deleted: bool,
}

impl QueueState {
    fn store(&mut self, message: MessageRef) -> &mut dyn MessageStore {
        match (&mut self.durable_store, message.in_memory()) {
            (Some(store), false) => store.as_mut(),
            _ => &mut self.memory_store,
        }
    }

    fn read(&mut self, message: MessageRef) -> Result<Arc<Message>, StoreError> {
        let store = self.store(message);
        let read = store.read(message.offset());
        if read.is_ok() {
            store.delivered(message.offset());
        }
        read
    }

    fn is_redelivered(&self, message: MessageRef) -> bool {
        message.position < self.redelivered_below || self.requeued.contains(&message.position)
    }

    /// Removes settled messages from their stores.
    fn remove(&mut self, messages: &[MessageRef]) -> Result<(), StoreError> {
        let (in_memory, durable): (Vec<MessageRef>, Vec<MessageRef>) = messages.iter().partition(|m| m.in_memory());
        for message in messages {
            self.requeued.remove(&message.position);
        }
        let offsets = |list: &[MessageRef]| list.iter().map(|m| m.offset()).collect::<Vec<u64>>();
        self.memory_store.remove(&offsets(&in_memory))?;
        if let Some(store) = &mut self.durable_store {
            store.remove(&offsets(&durable))?;
        }
        Ok(())
    }
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

/// A queue.
pub struct Queue {
    definition: QueueDefinition,
    state: Mutex<QueueState>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").field("name", &self.definition.name).finish_non_exhaustive()
    }
}

impl Queue {
    /// A new, empty queue; `durable_store` holds the persistent messages of a durable queue.
    pub fn new(definition: QueueDefinition, durable_store: Option<Box<dyn MessageStore>>) -> Self {
        Self::with_backlog(definition, durable_store, VecDeque::new(), 0, 0)
    }

    /// A durable queue reopened from its store: the unsettled messages are ready again.
    pub fn recover(definition: QueueDefinition, store: LogStore) -> Self {
        let ready: VecDeque<MessageRef> =
            store.unsettled().map(|offset| MessageRef::new(offset, offset, false)).collect();
        let redelivered_below = store.delivered_up_to().map_or(0, |d| d + 1);
        let next_position = store.next_offset();
        Self::with_backlog(definition, Some(Box::new(store)), ready, next_position, redelivered_below)
    }

    fn with_backlog(
        definition: QueueDefinition,
        durable_store: Option<Box<dyn MessageStore>>,
        ready: VecDeque<MessageRef>,
        next_position: u64,
        redelivered_below: u64,
    ) -> Self {
        let state = QueueState {
            durable_store,
            memory_store: MemoryStore::default(),
            ready,
            next_position,
            redelivered_below,
            requeued: HashSet::new(),
            unacked: 0,
            consumers: Vec::new(),
            next_consumer: 0,
            deleted: false,
        };
        Queue { definition, state: Mutex::new(state) }
    }

    /// Its definition.
    pub fn definition(&self) -> &QueueDefinition {
        &self.definition
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.definition.name
    }

    /// Messages ready for delivery.
    pub fn message_count(&self) -> u32 {
        self.state.lock().ready.len() as u32
    }

    /// Messages delivered and not yet settled.
    pub fn unacked_count(&self) -> u32 {
        self.state.lock().unacked as u32
    }

    /// Consumers attached.
    pub fn consumer_count(&self) -> u32 {
        self.state.lock().consumers.len() as u32
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

    /// Stores a message and dispatches it if a consumer has credit. Returns what a publisher
    /// confirm must wait for, if the message went to disk.
    pub fn publish(self: &Arc<Self>, message: Arc<Message>) -> Result<Option<DurableMark>, StoreError> {
        let mut state = self.state.lock();
        if state.deleted {
            return Ok(None);
        }
        let persistent = message.properties.is_persistent() && state.durable_store.is_some();
        let appended = match (&mut state.durable_store, persistent) {
            (Some(store), true) => store.append(&message)?,
            _ => state.memory_store.append(&message)?,
        };
        let position = state.next_position;
        state.next_position += 1;
        state.ready.push_back(MessageRef::new(position, appended.offset, !persistent));
        self.dispatch_locked(&mut state);
        Ok(appended.durable)
    }

    /// Delivers ready messages to consumers with credit.
    pub fn dispatch(self: &Arc<Self>) {
        let mut state = self.state.lock();
        self.dispatch_locked(&mut state);
    }

    fn dispatch_locked(self: &Arc<Self>, state: &mut QueueState) {
        while !state.ready.is_empty() {
            let Some(consumer) = Self::next_consumer_with_credit(state) else { break };
            let Some(next) = state.ready.pop_front() else { break };
            let message = match state.read(next) {
                Ok(message) => message,
                Err(error) => {
                    tracing::error!(queue = self.name(), %error, "cannot read message; dispatch paused");
                    state.ready.push_front(next);
                    break;
                }
            };
            let redelivered = state.is_redelivered(next);
            if consumer.no_ack() {
                self.settle_locked(state, &[next]);
            } else {
                state.unacked += 1;
            }
            consumer.session().push(&consumer, self, next, redelivered, message);
        }
        self.sync_locked(state);
    }

    fn sync_locked(&self, state: &mut QueueState) {
        if let Some(store) = &mut state.durable_store {
            if let Err(error) = store.sync() {
                tracing::error!(queue = self.name(), %error, "cannot record deliveries");
            }
        }
    }

    /// Round-robin from where the last delivery left off, skipping consumers without credit.
    fn next_consumer_with_credit(state: &mut QueueState) -> Option<Arc<Consumer>> {
        let count = state.consumers.len();
        (0..count).find_map(|step| {
            let index = (state.next_consumer + step) % count;
            let consumer = &state.consumers[index];
            consumer.has_credit().then(|| {
                state.next_consumer = (index + 1) % count;
                Arc::clone(consumer)
            })
        })
    }

    /// Attaches a consumer; exclusivity conflicts are 403 ACCESS_REFUSED, as in RabbitMQ.
    /// Dispatch does not start here: the caller first tells the client (`consume-ok`), then
    /// calls [`Queue::dispatch`].
    pub fn add_consumer(&self, consumer: Arc<Consumer>) -> BrokerResult<()> {
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
        Ok(())
    }

    /// Detaches a consumer; returns true if the queue now has none.
    pub fn remove_consumer(&self, consumer: &Arc<Consumer>) -> bool {
        let mut state = self.state.lock();
        state.consumers.retain(|c| !Arc::ptr_eq(c, consumer));
        state.consumers.is_empty()
    }

    /// Takes the next ready message for `basic.get`, recorded on `session`.
    pub fn get(self: &Arc<Self>, session: &Session, no_ack: bool) -> Option<GetResult> {
        let mut state = self.state.lock();
        let next = state.ready.pop_front()?;
        let message = match state.read(next) {
            Ok(message) => message,
            Err(error) => {
                tracing::error!(queue = self.name(), %error, "cannot read message for basic.get");
                state.ready.push_front(next);
                return None;
            }
        };
        let redelivered = state.is_redelivered(next);
        if no_ack {
            self.settle_locked(&mut state, &[next]);
        } else {
            state.unacked += 1;
        }
        self.sync_locked(&mut state);
        let delivery_tag = session.record_get(self, next, no_ack);
        Some(GetResult { delivery_tag, redelivered, message, message_count: state.ready.len() as u32 })
    }

    fn settle_locked(&self, state: &mut QueueState, messages: &[MessageRef]) {
        if let Err(error) = state.remove(messages) {
            tracing::error!(queue = self.name(), %error, "cannot record settlement");
        }
    }

    /// Settles delivered messages (ack, or reject without requeue).
    pub fn settle(&self, messages: &[MessageRef]) {
        let mut state = self.state.lock();
        state.unacked = state.unacked.saturating_sub(messages.len());
        self.settle_locked(&mut state, messages);
    }

    /// Puts delivered messages back at their places, marked redelivered, and dispatches.
    pub fn requeue(self: &Arc<Self>, messages: &[MessageRef]) {
        let mut state = self.state.lock();
        if state.deleted {
            return;
        }
        state.unacked = state.unacked.saturating_sub(messages.len());
        for &message in messages {
            state.requeued.insert(message.position);
            let place = state.ready.partition_point(|r| r.position < message.position);
            state.ready.insert(place, message);
        }
        self.dispatch_locked(&mut state);
    }

    /// Drops every ready message; returns how many.
    pub fn purge(&self) -> u32 {
        let mut state = self.state.lock();
        let ready: Vec<MessageRef> = std::mem::take(&mut state.ready).into();
        self.settle_locked(&mut state, &ready);
        ready.len() as u32
    }

    /// Makes what the queue stores durable (the broker is stopping).
    pub fn close(&self) {
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
        let count = state.ready.len() as u32;
        state.ready.clear();
        state.memory_store = MemoryStore::default();
        if let Some(store) = state.durable_store.take() {
            store.destroy();
        }
        (count, std::mem::take(&mut state.consumers))
    }
}
