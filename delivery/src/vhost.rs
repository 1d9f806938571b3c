//! A virtual host: its exchanges, its queues, and routing between them.
//!
//! The name maps are read on every publish and written only by declare and delete, so they sit
//! behind read-write locks that are never held while a queue's own lock is taken.

use crate::definitions::{BindingRecord, Definitions, ExchangeRecord, QueueRecord, VhostStorage};
use crate::equivalence;
use crate::error::{BrokerError, BrokerResult, ReplyCode};
use crate::exchange::{Binding, Destination, Exchange, ExchangeDefinition, ExchangeKind};
use crate::message::Message;
use crate::queue::dead_letter;
use crate::queue::{ConnectionId, MessageStore, Published, Queue, QueueArguments, QueueContext, QueueDefinition};
use crate::scheduler::SchedulerHandle;
use amq_protocol::types::FieldTable;
use parking_lot::RwLock;
use rand::distributions::{Alphanumeric, DistString};
use std::collections::HashMap;
use std::sync::{Arc, Weak};

/// The prefix of names only the broker may create.
const RESERVED_PREFIX: &str = "amq.";
/// Length of the random part of a server-named queue, as RabbitMQ's `amq.gen-` names.
const GENERATED_NAME_CHARS: usize = 22;

/// How a `queue.declare` went.
#[derive(Debug)]
pub struct DeclaredQueue {
    /// The queue (new or existing).
    pub queue: Arc<Queue>,
    /// Ready messages.
    pub message_count: u32,
    /// Attached consumers.
    pub consumer_count: u32,
}

/// One virtual host.
#[derive(Debug)]
pub struct VirtualHost {
    name: String,
    exchanges: RwLock<HashMap<String, Arc<Exchange>>>,
    queues: RwLock<HashMap<String, Arc<Queue>>>,
    /// Where durable definitions and messages go; `None` keeps everything in memory.
    storage: Option<VhostStorage>,
    scheduler: SchedulerHandle,
    me: Weak<VirtualHost>,
}

fn internal_error(what: &str, error: impl std::fmt::Display) -> BrokerError {
    tracing::error!(%error, "{what}");
    BrokerError::new(ReplyCode::InternalError, format!("{what}: {error}"))
}

impl VirtualHost {
    /// A virtual host kept in memory, with the standard exchanges.
    pub fn new(name: &str, scheduler: SchedulerHandle) -> Arc<Self> {
        Self::with_standard_exchanges(name, None, scheduler)
    }

    /// A virtual host on disk: its durable definitions and queues are recovered from `storage`.
    pub fn open(name: &str, storage: VhostStorage, scheduler: SchedulerHandle) -> Result<Arc<Self>, BrokerError> {
        let definitions = storage.load().map_err(|e| internal_error("cannot read definitions", e))?;
        storage.remove_orphan_queue_dirs(&definitions.queues);
        let vhost = Self::with_standard_exchanges(name, Some(storage), scheduler);
        vhost.restore(definitions)?;
        Ok(vhost)
    }

    fn with_standard_exchanges(name: &str, storage: Option<VhostStorage>, scheduler: SchedulerHandle) -> Arc<Self> {
        let vhost = Arc::new_cyclic(|me| VirtualHost {
            name: name.to_string(),
            exchanges: RwLock::new(HashMap::new()),
            queues: RwLock::new(HashMap::new()),
            storage,
            scheduler,
            me: Weak::clone(me),
        });
        for (name, kind) in [
            ("", ExchangeKind::Direct),
            ("amq.direct", ExchangeKind::Direct),
            ("amq.fanout", ExchangeKind::Fanout),
            ("amq.topic", ExchangeKind::Topic),
            ("amq.headers", ExchangeKind::Headers),
            ("amq.match", ExchangeKind::Headers),
        ] {
            let definition = ExchangeDefinition {
                name: name.to_string(),
                kind,
                durable: true,
                auto_delete: false,
                internal: false,
                arguments: FieldTable::default(),
            };
            vhost.exchanges.write().insert(name.to_string(), Arc::new(Exchange::new(definition)));
        }
        vhost
    }

    fn restore(&self, definitions: Definitions) -> BrokerResult<()> {
        let Some(storage) = &self.storage else { return Ok(()) };
        for record in definitions.exchanges {
            let definition = ExchangeDefinition {
                kind: ExchangeKind::parse(&record.kind)?,
                name: record.name,
                durable: true,
                auto_delete: record.auto_delete,
                internal: record.internal,
                arguments: record.arguments,
            };
            self.exchanges.write().insert(definition.name.clone(), Arc::new(Exchange::new(definition)));
        }
        for record in definitions.queues {
            let store = storage.open_queue(&record.name).map_err(|e| internal_error("cannot recover a queue", e))?;
            let definition = QueueDefinition {
                name: record.name,
                durable: true,
                exclusive_owner: None,
                auto_delete: record.auto_delete,
                arguments: record.arguments,
            };
            let queue = Queue::recover(definition, store, self.queue_context())?;
            tracing::info!(queue = queue.name(), messages = queue.message_count(), "recovered queue");
            self.queues.write().insert(queue.name().to_string(), queue);
        }
        for record in definitions.bindings {
            let destination = if record.to_exchange {
                Destination::Exchange(record.destination.as_str().into())
            } else {
                Destination::Queue(record.destination.as_str().into())
            };
            let binding = Binding { destination, routing_key: record.routing_key, arguments: record.arguments };
            if let Ok(source) = self.exchange(&record.source) {
                source.bind(binding)?;
            }
        }
        Ok(())
    }

    fn queue_context(&self) -> QueueContext {
        QueueContext { vhost: Weak::clone(&self.me), scheduler: Arc::clone(&self.scheduler) }
    }

    /// Writes the durable definitions, if this virtual host is on disk.
    fn save_definitions(&self) -> BrokerResult<()> {
        let Some(storage) = &self.storage else { return Ok(()) };
        storage.save(|| self.durable_definitions()).map_err(|e| internal_error("cannot save definitions", e))
    }

    fn durable_definitions(&self) -> Definitions {
        let exchanges = self.exchanges();
        let queues = self.queues();
        let durable_exchange = |name: &str| exchanges.iter().any(|e| e.name() == name && e.definition().durable);
        let durable_queue = |name: &str| queues.iter().any(|q| q.name() == name && is_stored(q.definition()));
        let mut definitions = Definitions::default();
        for exchange in &exchanges {
            let d = exchange.definition();
            if d.durable && !is_standard_exchange(&d.name) {
                definitions.exchanges.push(ExchangeRecord {
                    name: d.name.clone(),
                    kind: d.kind.as_str().to_string(),
                    auto_delete: d.auto_delete,
                    internal: d.internal,
                    arguments: d.arguments.clone(),
                });
            }
            if !d.durable {
                continue;
            }
            for binding in exchange.bindings() {
                let (destination, to_exchange) = match &binding.destination {
                    Destination::Queue(name) => (name.to_string(), false),
                    Destination::Exchange(name) => (name.to_string(), true),
                };
                let durable = if to_exchange { durable_exchange(&destination) } else { durable_queue(&destination) };
                if durable {
                    definitions.bindings.push(BindingRecord {
                        source: d.name.clone(),
                        destination,
                        to_exchange,
                        routing_key: binding.routing_key,
                        arguments: binding.arguments,
                    });
                }
            }
        }
        for queue in &queues {
            let d = queue.definition();
            if is_stored(d) {
                definitions.queues.push(QueueRecord {
                    name: d.name.clone(),
                    auto_delete: d.auto_delete,
                    arguments: d.arguments.clone(),
                });
            }
        }
        definitions
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn exchange_not_found(&self, name: &str) -> BrokerError {
        BrokerError::not_found(format!("no exchange '{name}' in vhost '{}'", self.name))
    }

    fn queue_not_found(&self, name: &str) -> BrokerError {
        BrokerError::not_found(format!("no queue '{name}' in vhost '{}'", self.name))
    }

    /// Looks an exchange up (404 if missing).
    pub fn exchange(&self, name: &str) -> BrokerResult<Arc<Exchange>> {
        self.exchanges.read().get(name).cloned().ok_or_else(|| self.exchange_not_found(name))
    }

    /// Looks a queue up (404 if missing).
    pub fn queue(&self, name: &str) -> BrokerResult<Arc<Queue>> {
        self.queues.read().get(name).cloned().ok_or_else(|| self.queue_not_found(name))
    }

    /// All exchanges, for listings.
    pub fn exchanges(&self) -> Vec<Arc<Exchange>> {
        self.exchanges.read().values().cloned().collect()
    }

    /// All queues, for listings.
    pub fn queues(&self) -> Vec<Arc<Queue>> {
        self.queues.read().values().cloned().collect()
    }

    fn check_not_reserved(kind: &str, name: &str) -> BrokerResult<()> {
        if name.is_empty() || name.starts_with(RESERVED_PREFIX) {
            let shown = if name.is_empty() { "the default exchange" } else { name };
            return Err(BrokerError::access_refused(format!(
                "{kind} name '{shown}' is reserved: names starting with 'amq.' belong to the broker"
            )));
        }
        Ok(())
    }

    /// `exchange.declare` (not passive): creates it, or checks that it is equivalent.
    pub fn declare_exchange(&self, definition: ExchangeDefinition) -> BrokerResult<()> {
        if definition.name.is_empty() {
            return Self::check_not_reserved("exchange", "");
        }
        let durable = definition.durable;
        {
            let mut exchanges = self.exchanges.write();
            if let Some(existing) = exchanges.get(&definition.name) {
                return equivalence::check_exchange(existing.definition(), &definition, &self.name);
            }
            Self::check_not_reserved("exchange", &definition.name)?;
            let name = definition.name.clone();
            exchanges.insert(name, Arc::new(Exchange::new(definition)));
        }
        if durable {
            self.save_definitions()?;
        }
        Ok(())
    }

    /// `exchange.delete`.
    /// Deleting an exchange that does not exist succeeds, as in RabbitMQ.
    pub fn delete_exchange(&self, name: &str, if_unused: bool) -> BrokerResult<()> {
        Self::check_not_reserved("exchange", name)?;
        let exchange = {
            let mut exchanges = self.exchanges.write();
            let Some(exchange) = exchanges.get(name) else { return Ok(()) };
            if if_unused && exchange.binding_count() > 0 {
                return Err(BrokerError::precondition_failed(format!(
                    "exchange '{name}' in vhost '{}' in use",
                    self.name
                )));
            }
            exchanges.remove(name)
        };
        if let Some(exchange) = exchange {
            self.remove_bindings_to(&Destination::Exchange(name.into()));
            if exchange.definition().durable {
                self.save_definitions()?;
            }
        }
        Ok(())
    }

    fn remove_bindings_to(&self, destination: &Destination) {
        for exchange in self.exchanges() {
            if exchange.unbind_destination(destination) > 0 {
                self.delete_if_auto_delete_exchange(&exchange);
            }
        }
    }

    fn delete_if_auto_delete_exchange(&self, exchange: &Arc<Exchange>) {
        if exchange.definition().auto_delete && exchange.binding_count() == 0 {
            let mut exchanges = self.exchanges.write();
            if exchanges.get(exchange.name()).is_some_and(|e| Arc::ptr_eq(e, exchange)) {
                exchanges.remove(exchange.name());
            }
        }
    }

    fn check_bindable(&self, source: &str, destination: &Destination) -> BrokerResult<Arc<Exchange>> {
        let refuse_default = |name: &str| {
            if name.is_empty() {
                Err(BrokerError::access_refused("operation not permitted on the default exchange"))
            } else {
                Ok(())
            }
        };
        refuse_default(source)?;
        match destination {
            Destination::Exchange(name) => {
                refuse_default(name)?;
                self.exchange(name)?;
            }
            Destination::Queue(name) => {
                self.queue(name)?;
            }
        }
        self.exchange(source)
    }

    /// `queue.bind` / `exchange.bind`.
    pub fn bind(&self, source: &str, binding: Binding) -> BrokerResult<()> {
        let exchange = self.check_bindable(source, &binding.destination)?;
        if exchange.bind(binding)? && exchange.definition().durable {
            self.save_definitions()?;
        }
        Ok(())
    }

    /// `queue.unbind` / `exchange.unbind`. Unbinding what is not bound succeeds, as in RabbitMQ.
    pub fn unbind(&self, source: &str, binding: &Binding) -> BrokerResult<()> {
        let exchange = self.check_bindable(source, &binding.destination)?;
        if exchange.unbind(binding) {
            self.delete_if_auto_delete_exchange(&exchange);
            if exchange.definition().durable {
                self.save_definitions()?;
            }
        }
        Ok(())
    }

    /// `queue.declare` (not passive) from `connection`. An empty name gets a server-generated
    /// one. Exclusivity is checked first: any mismatch with an existing queue is 405.
    pub fn declare_queue(
        &self,
        mut definition: QueueDefinition,
        connection: ConnectionId,
    ) -> BrokerResult<DeclaredQueue> {
        if definition.name.is_empty() {
            let random = Alphanumeric.sample_string(&mut rand::thread_rng(), GENERATED_NAME_CHARS);
            definition.name = format!("amq.gen-{random}");
        } else if definition.name.starts_with(RESERVED_PREFIX) {
            return Err(BrokerError::access_refused(format!(
                "queue name '{}' contains reserved prefix 'amq.'",
                definition.name
            )));
        }
        if let Ok(existing) = self.queue(&definition.name) {
            existing.check_owner(connection)?;
            if existing.definition().exclusive_owner != definition.exclusive_owner {
                return Err(existing_locked(&existing));
            }
            equivalence::check_queue(existing.definition(), &definition, &self.name)?;
            existing.touch();
            return Ok(Self::declared(existing));
        }
        QueueArguments::parse(&definition.arguments)?;
        let stored = is_stored(&definition);
        let store = match (&self.storage, stored) {
            (Some(storage), true) => {
                let store =
                    storage.create_queue(&definition.name).map_err(|e| internal_error("cannot create queue", e))?;
                Some(Box::new(store) as Box<dyn MessageStore>)
            }
            _ => None,
        };
        let queue = {
            let mut queues = self.queues.write();
            if let Some(existing) = queues.get(&definition.name) {
                // Declared by another connection meanwhile: answer as for an existing queue.
                let existing = Arc::clone(existing);
                drop(queues);
                if let Some(store) = store {
                    store.destroy();
                }
                return Ok(Self::declared(existing));
            }
            let queue = Queue::new(definition, store, self.queue_context())?;
            queues.insert(queue.name().to_string(), Arc::clone(&queue));
            queue
        };
        if stored {
            self.save_definitions()?;
        }
        Ok(Self::declared(queue))
    }

    /// `queue.declare` with passive set: the queue must exist and be accessible.
    pub fn declare_queue_passive(&self, name: &str, connection: ConnectionId) -> BrokerResult<DeclaredQueue> {
        let queue = self.queue(name)?;
        queue.check_owner(connection)?;
        Ok(Self::declared(queue))
    }

    fn declared(queue: Arc<Queue>) -> DeclaredQueue {
        DeclaredQueue { message_count: queue.message_count(), consumer_count: queue.consumer_count(), queue }
    }

    /// `queue.delete`; returns the number of messages it held. Deleting a queue that does not
    /// exist succeeds with 0, as in RabbitMQ.
    pub fn delete_queue(
        &self,
        name: &str,
        if_unused: bool,
        if_empty: bool,
        connection: ConnectionId,
    ) -> BrokerResult<u32> {
        let Ok(queue) = self.queue(name) else { return Ok(0) };
        queue.check_owner(connection)?;
        if if_unused && queue.consumer_count() > 0 {
            return Err(BrokerError::precondition_failed(format!("queue '{name}' in vhost '{}' in use", self.name)));
        }
        if if_empty && queue.message_count() > 0 {
            return Err(BrokerError::precondition_failed(format!("queue '{name}' in vhost '{}' not empty", self.name)));
        }
        let count = self.remove_queue(&queue);
        if is_stored(queue.definition()) {
            self.save_definitions()?;
        }
        Ok(count)
    }

    fn remove_queue(&self, queue: &Arc<Queue>) -> u32 {
        {
            let mut queues = self.queues.write();
            if !queues.get(queue.name()).is_some_and(|q| Arc::ptr_eq(q, queue)) {
                return 0;
            }
            queues.remove(queue.name());
        }
        self.remove_bindings_to(&Destination::Queue(queue.name().into()));
        let (count, consumers) = queue.mark_deleted();
        for consumer in consumers {
            consumer.session().cancelled_by_broker(&consumer);
        }
        count
    }

    /// Deletes an auto-delete queue whose last consumer went.
    pub(crate) fn delete_auto_delete_queue(&self, queue: &Arc<Queue>) {
        if queue.consumer_count() == 0 {
            self.remove_queue(queue);
            if is_stored(queue.definition()) {
                if let Err(error) = self.save_definitions() {
                    tracing::error!(%error, "auto-deleted queue stays in the stored definitions");
                }
            }
        }
    }

    /// The broker is stopping: every queue makes what it stores durable.
    pub fn close(&self) {
        for queue in self.queues() {
            queue.close();
        }
    }

    /// Deletes a queue whose `x-expires` ran out.
    pub(crate) fn delete_expired_queue(&self, queue: &Arc<Queue>) {
        self.remove_queue(queue);
        if is_stored(queue.definition()) {
            if let Err(error) = self.save_definitions() {
                tracing::error!(%error, "expired queue stays in the stored definitions");
            }
        }
    }

    /// Routes a dead-lettered message (its exchange is the dead-letter exchange) to its queues,
    /// skipping any queue it would reach in a cycle with no rejection. A missing dead-letter
    /// exchange drops it, as in RabbitMQ.
    pub(crate) fn publish_dead_letter(&self, from: &str, message: crate::message::Message) {
        let queues = match self.route(message.exchange.as_str(), &message) {
            Ok(queues) => queues,
            Err(error) => {
                tracing::warn!(queue = from, %error, "dead-letter exchange unusable; message dropped");
                return;
            }
        };
        let message = Arc::new(message);
        for queue in queues {
            if dead_letter::is_cycle(&message, queue.name()) {
                tracing::debug!(queue = from, target = queue.name(), "dead-letter cycle; message dropped");
                continue;
            }
            match queue.publish(Arc::clone(&message)) {
                Ok(Published::Stored(_)) | Ok(Published::Rejected) => {}
                Err(error) => tracing::error!(queue = queue.name(), %error, "cannot store a dead letter"),
            }
        }
    }

    /// A connection closed: its exclusive queues go with it.
    pub fn connection_closed(&self, connection: ConnectionId) {
        let owned: Vec<Arc<Queue>> = self
            .queues
            .read()
            .values()
            .filter(|q| q.definition().exclusive_owner == Some(connection))
            .cloned()
            .collect();
        for queue in owned {
            self.remove_queue(&queue);
        }
    }

    /// The queues a message published to `exchange` goes to, each once. A missing exchange is
    /// 404; an internal one is 403.
    pub fn route(&self, exchange: &str, message: &Message) -> BrokerResult<Vec<Arc<Queue>>> {
        if exchange.is_empty() {
            return Ok(self.queues.read().get(message.routing_key.as_str()).cloned().into_iter().collect());
        }
        let source = self.exchange(exchange)?;
        if source.definition().internal {
            return Err(BrokerError::access_refused(format!(
                "cannot publish to internal exchange '{exchange}' in vhost '{}'",
                self.name
            )));
        }
        let mut visited = vec![source.name().to_string()];
        let mut queues = Vec::new();
        self.route_from(&source, message, &mut visited, &mut queues);
        Ok(queues)
    }

    fn route_from(
        &self,
        exchange: &Exchange,
        message: &Message,
        visited: &mut Vec<String>,
        queues: &mut Vec<Arc<Queue>>,
    ) {
        let mut destinations = Vec::new();
        exchange.route(message, &mut destinations);
        if destinations.is_empty() {
            // The alternate exchange takes what this exchange's own bindings do not match.
            if let Some(alternate) = exchange.definition().alternate_exchange() {
                self.route_via(&alternate, message, visited, queues);
            }
            return;
        }
        for destination in destinations {
            match destination {
                Destination::Queue(name) => {
                    if let Some(queue) = self.queues.read().get(&*name) {
                        if !queues.iter().any(|q| Arc::ptr_eq(q, queue)) {
                            queues.push(Arc::clone(queue));
                        }
                    }
                }
                Destination::Exchange(name) => self.route_via(&name, message, visited, queues),
            }
        }
    }

    fn route_via(&self, name: &str, message: &Message, visited: &mut Vec<String>, queues: &mut Vec<Arc<Queue>>) {
        if visited.iter().any(|v| v == name) {
            return;
        }
        visited.push(name.to_string());
        if let Ok(next) = self.exchange(name) {
            self.route_from(&next, message, visited, queues);
        }
    }
}

/// Whether a queue's definition and persistent messages are kept on disk.
fn is_stored(definition: &QueueDefinition) -> bool {
    definition.durable && definition.exclusive_owner.is_none()
}

fn is_standard_exchange(name: &str) -> bool {
    name.is_empty() || name.starts_with(RESERVED_PREFIX)
}

fn existing_locked(queue: &Queue) -> BrokerError {
    BrokerError::resource_locked(format!(
        "cannot obtain exclusive access to locked queue '{}' in vhost '/'",
        queue.name()
    ))
}
