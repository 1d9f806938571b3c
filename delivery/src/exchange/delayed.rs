//! Delayed messages: exchange type `x-delayed-message` holds a message with an `x-delay`
//! header until that many milliseconds have passed, then routes it by its `x-delayed-type`.
//!
//! A held message waits in a store, as a queue's messages do: persistent messages of a durable
//! delayed exchange in a log (so they survive a restart and are confirmed only once on disk),
//! others in memory. Only a timer entry per message stays in memory, on the broker's timing
//! wheel; no body is kept in RAM beyond the store's bounded cache. On recovery every held
//! message is scheduled again at its original due time; those due while the broker was down
//! fire at once.

use crate::clock::now_ms;
use crate::field_value::number_of;
use crate::message::Message;
use crate::message_store::{DurableMark, LogStore, MemoryStore, MessageStore, StoreError};
use crate::scheduler::{DelayedTarget, SchedulerHandle, TimerEvent};
use crate::vhost::VirtualHost;
use parking_lot::Mutex;
use std::sync::{Arc, Weak};

/// The header giving a message's delay in milliseconds.
pub const DELAY_HEADER: &str = "x-delay";
/// Marks a timer key as naming the memory store.
const IN_MEMORY_KEY_BIT: u64 = 1 << 63;

/// The delay a message asks for; absent, zero or negative means none.
pub fn delay_of(message: &Message) -> Option<u64> {
    delay_in(&message.properties)
}

/// The delay a message with `properties` asks for (see [`delay_of`]).
pub fn delay_in(properties: &crate::properties::Properties) -> Option<u64> {
    let value = properties.headers()?.inner().get(DELAY_HEADER)?;
    let delay = number_of(value)?;
    (delay >= 1.0).then_some(delay as u64)
}

/// What holds a delayed exchange's messages until they are due: this node's stores
/// ([`DelayedMessages`]) or, for a durable delayed exchange in a cluster, a replicated pending
/// set (`super::replicated_delays::ReplicatedDelays`).
pub trait HeldMessages: Send + Sync + std::fmt::Debug {
    /// Holds `message` for `delay_ms`; returns what a confirm must wait for, if anything.
    fn hold(&self, message: &Arc<Message>, delay_ms: u64) -> Result<Option<DurableMark>, StoreError>;

    /// Messages held now (on this node's view).
    fn pending(&self) -> u64;

    /// Flushes what is stored (the broker is stopping).
    fn close(&self);

    /// The exchange was deleted: its held messages go with it.
    fn destroy(&self);
}

struct Stores {
    durable: Option<Box<dyn MessageStore>>,
    memory: MemoryStore,
}

/// The messages an `x-delayed-message` exchange holds.
pub struct DelayedMessages {
    exchange: String,
    vhost: Weak<VirtualHost>,
    scheduler: SchedulerHandle,
    stores: Mutex<Stores>,
    /// Messages held now, for the metrics.
    pending: std::sync::atomic::AtomicU64,
    me: Weak<DelayedMessages>,
}

impl std::fmt::Debug for DelayedMessages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelayedMessages").field("exchange", &self.exchange).finish_non_exhaustive()
    }
}

impl DelayedMessages {
    /// Holds messages for `exchange`; `durable` stores persistent ones on disk.
    pub fn new(
        exchange: &str,
        vhost: Weak<VirtualHost>,
        scheduler: SchedulerHandle,
        durable: Option<Box<dyn MessageStore>>,
    ) -> Arc<Self> {
        Arc::new_cyclic(|me| DelayedMessages {
            exchange: exchange.to_string(),
            vhost,
            scheduler,
            stores: Mutex::new(Stores { durable, memory: MemoryStore::default() }),
            pending: std::sync::atomic::AtomicU64::new(0),
            me: Weak::clone(me),
        })
    }

    /// Reopens the held messages of a durable delayed exchange and schedules each again.
    pub fn recover(
        exchange: &str,
        vhost: Weak<VirtualHost>,
        scheduler: SchedulerHandle,
        mut store: LogStore,
    ) -> Result<Arc<Self>, StoreError> {
        let mut due: Vec<(u64, u64)> = Vec::new();
        store.for_each_unsettled(|offset, timestamp_ms, message| {
            let held_since = u64::try_from(timestamp_ms).unwrap_or(0);
            due.push((offset, held_since + delay_of(&message).unwrap_or(0)));
        })?;
        let delayed = Self::new(exchange, vhost, scheduler, Some(Box::new(store)));
        tracing::info!(exchange, held = due.len(), "recovered delayed messages");
        for (offset, at) in due {
            delayed.schedule(offset, at);
        }
        Ok(delayed)
    }

    fn schedule(&self, key: u64, at_ms: u64) {
        self.pending.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let target: Weak<dyn DelayedTarget> = Weak::clone(&self.me) as Weak<dyn DelayedTarget>;
        self.scheduler.schedule(at_ms, TimerEvent::Delayed { target, key, due_ms: at_ms });
    }
}

impl HeldMessages for DelayedMessages {
    /// Persistent messages of a durable exchange on disk (the confirm waits for the fsync),
    /// others in memory.
    fn hold(&self, message: &Arc<Message>, delay_ms: u64) -> Result<Option<DurableMark>, StoreError> {
        let mut stores = self.stores.lock();
        let persistent = message.properties.is_persistent() && stores.durable.is_some();
        let (appended, key_bit) = match (&mut stores.durable, persistent) {
            (Some(store), true) => (store.append(message)?, 0),
            _ => (stores.memory.append(message)?, IN_MEMORY_KEY_BIT),
        };
        drop(stores);
        self.schedule(appended.offset | key_bit, now_ms().saturating_add(delay_ms));
        Ok(appended.durable)
    }

    fn pending(&self) -> u64 {
        self.pending.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn close(&self) {
        if let Some(store) = &mut self.stores.lock().durable {
            if let Err(error) = store.close() {
                tracing::error!(exchange = self.exchange, %error, "cannot close the delayed-message store");
            }
        }
    }

    fn destroy(&self) {
        self.pending.store(0, std::sync::atomic::Ordering::Relaxed);
        let mut stores = self.stores.lock();
        stores.memory = MemoryStore::default();
        if let Some(store) = stores.durable.take() {
            store.destroy();
        }
    }
}

impl DelayedMessages {
    /// Takes the messages `keys` out of the stores: one removal (one ack-log record) per store.
    fn take(&self, keys: &[u64]) -> Vec<Message> {
        self.pending
            .fetch_sub((keys.len() as u64).min(HeldMessages::pending(self)), std::sync::atomic::Ordering::Relaxed);
        let mut stores = self.stores.lock();
        let mut taken = Vec::with_capacity(keys.len());
        for in_memory in [true, false] {
            let offsets: Vec<u64> = keys
                .iter()
                .filter(|key| (*key & IN_MEMORY_KEY_BIT != 0) == in_memory)
                .map(|key| key & !IN_MEMORY_KEY_BIT)
                .collect();
            if offsets.is_empty() {
                continue;
            }
            let store: &mut dyn MessageStore = match (&mut stores.durable, in_memory) {
                (Some(store), false) => store.as_mut(),
                _ => &mut stores.memory,
            };
            taken.extend(offsets.iter().filter_map(|offset| store.read(*offset).ok()).map(|m| m.compacted()));
            if let Err(error) = store.remove(&offsets) {
                tracing::error!(exchange = self.exchange, %error, "cannot record delayed messages as routed");
            }
        }
        taken
    }
}

impl DelayedTarget for DelayedMessages {
    fn fire(&self, keys: &[u64]) {
        let messages = self.take(keys);
        if let Some(vhost) = self.vhost.upgrade() {
            for message in messages {
                // Held on this node alone: fired once, as taken out of its store.
                let _ = vhost.route_due(&self.exchange, message);
            }
        }
    }
}
