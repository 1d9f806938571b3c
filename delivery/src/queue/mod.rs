//! Queues: the ready list, the consumers, and dispatch from one to the other.
//!
//! Each queue owns its state behind its own lock; there is no broker-wide lock on the publish
//! or deliver path. Dispatch runs inline, on the task that made progress possible (a publish,
//! an ack, a new consumer), and hands deliveries to each consumer's session without waiting.

mod message_store;

pub use message_store::{MemoryStore, MessageStore, StoreError};

use crate::consumer::Consumer;
use crate::error::{BrokerError, BrokerResult};
use crate::message::Message;
use crate::session::Session;
use amq_protocol::types::FieldTable;
use parking_lot::Mutex;
use std::collections::VecDeque;
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

/// A message waiting for a consumer.
#[derive(Debug, Clone, Copy)]
struct Ready {
    offset: u64,
    redelivered: bool,
}

struct QueueState {
    store: Box<dyn MessageStore>,
    /// Sorted by offset, so a requeued message goes back to its place.
    ready: VecDeque<Ready>,
    unacked: usize,
    consumers: Vec<Arc<Consumer>>,
    next_consumer: usize,
    deleted: bool,
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
    /// A new, empty queue over `store`.
    pub fn new(definition: QueueDefinition, store: Box<dyn MessageStore>) -> Self {
        let state = QueueState {
            store,
            ready: VecDeque::new(),
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

    /// Stores a message and dispatches it if a consumer has credit.
    pub fn publish(self: &Arc<Self>, message: Arc<Message>) -> Result<(), StoreError> {
        let mut state = self.state.lock();
        if state.deleted {
            return Ok(());
        }
        let offset = state.store.append(message)?;
        state.ready.push_back(Ready { offset, redelivered: false });
        self.dispatch_locked(&mut state);
        Ok(())
    }

    /// Delivers ready messages to consumers with credit.
    pub fn dispatch(self: &Arc<Self>) {
        let mut state = self.state.lock();
        self.dispatch_locked(&mut state);
    }

    fn dispatch_locked(self: &Arc<Self>, state: &mut QueueState) {
        while !state.ready.is_empty() {
            let Some(consumer) = Self::next_consumer_with_credit(state) else { return };
            let Some(ready) = state.ready.pop_front() else { return };
            let message = match state.store.read(ready.offset) {
                Ok(message) => message,
                Err(error) => {
                    tracing::error!(queue = self.name(), %error, "cannot read message; dispatch paused");
                    state.ready.push_front(ready);
                    return;
                }
            };
            if consumer.no_ack() {
                state.store.remove(ready.offset);
            } else {
                state.unacked += 1;
            }
            consumer.session().push(&consumer, self, ready.offset, ready.redelivered, message);
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
        let ready = state.ready.pop_front()?;
        let message = match state.store.read(ready.offset) {
            Ok(message) => message,
            Err(error) => {
                tracing::error!(queue = self.name(), %error, "cannot read message for basic.get");
                state.ready.push_front(ready);
                return None;
            }
        };
        if no_ack {
            state.store.remove(ready.offset);
        } else {
            state.unacked += 1;
        }
        let delivery_tag = session.record_get(self, ready.offset, no_ack);
        Some(GetResult {
            delivery_tag,
            redelivered: ready.redelivered,
            message,
            message_count: state.ready.len() as u32,
        })
    }

    /// Settles delivered messages (ack, or reject without requeue).
    pub fn settle(&self, offsets: &[u64]) {
        let mut state = self.state.lock();
        for &offset in offsets {
            state.store.remove(offset);
        }
        state.unacked = state.unacked.saturating_sub(offsets.len());
    }

    /// Puts delivered messages back at their places, marked redelivered, and dispatches.
    pub fn requeue(self: &Arc<Self>, offsets: &[u64]) {
        let mut state = self.state.lock();
        if state.deleted {
            return;
        }
        state.unacked = state.unacked.saturating_sub(offsets.len());
        for &offset in offsets {
            let place = state.ready.partition_point(|r| r.offset < offset);
            state.ready.insert(place, Ready { offset, redelivered: true });
        }
        self.dispatch_locked(&mut state);
    }

    /// Drops every ready message; returns how many.
    pub fn purge(&self) -> u32 {
        let mut state = self.state.lock();
        let ready = std::mem::take(&mut state.ready);
        for entry in &ready {
            state.store.remove(entry.offset);
        }
        ready.len() as u32
    }

    /// Marks the queue deleted and detaches its consumers, which are returned for cancelling.
    pub(crate) fn mark_deleted(&self) -> (u32, Vec<Arc<Consumer>>) {
        let mut state = self.state.lock();
        state.deleted = true;
        let count = state.ready.len() as u32;
        state.ready.clear();
        (count, std::mem::take(&mut state.consumers))
    }
}
