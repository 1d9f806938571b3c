//! A virtual host: its exchanges, its queues, and routing between them.
//!
//! The name maps are read on every publish and written only by declare and delete, so they sit
//! behind read-write locks that are never held while a queue's own lock is taken.

use crate::error::{BrokerError, BrokerResult};
use crate::exchange::{Binding, Destination, Exchange, ExchangeDefinition, ExchangeKind};
use crate::message::Message;
use crate::queue::{ConnectionId, MemoryStore, Queue, QueueDefinition};
use amq_protocol::types::FieldTable;
use parking_lot::RwLock;
use rand::distributions::{Alphanumeric, DistString};
use std::collections::HashMap;
use std::sync::Arc;

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
}

impl VirtualHost {
    /// A virtual host with the standard exchanges (the default one, `amq.*`).
    pub fn new(name: &str) -> Arc<Self> {
        let vhost = VirtualHost {
            name: name.to_string(),
            exchanges: RwLock::new(HashMap::new()),
            queues: RwLock::new(HashMap::new()),
        };
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
        Arc::new(vhost)
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
        Self::check_not_reserved("exchange", &definition.name)?;
        let mut exchanges = self.exchanges.write();
        if let Some(existing) = exchanges.get(&definition.name) {
            return check_equivalent_exchange(existing.definition(), &definition, &self.name);
        }
        let name = definition.name.clone();
        exchanges.insert(name, Arc::new(Exchange::new(definition)));
        Ok(())
    }

    /// `exchange.delete`.
    pub fn delete_exchange(&self, name: &str, if_unused: bool) -> BrokerResult<()> {
        Self::check_not_reserved("exchange", name)?;
        let exchange = {
            let mut exchanges = self.exchanges.write();
            let exchange = exchanges.get(name).ok_or_else(|| self.exchange_not_found(name))?;
            if if_unused && exchange.binding_count() > 0 {
                return Err(BrokerError::precondition_failed(format!(
                    "exchange '{name}' in vhost '{}' in use",
                    self.name
                )));
            }
            exchanges.remove(name)
        };
        if exchange.is_some() {
            self.remove_bindings_to(&Destination::Exchange(name.into()));
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
        exchange.bind(binding)?;
        Ok(())
    }

    /// `queue.unbind` / `exchange.unbind`. Unbinding what is not bound succeeds, as in RabbitMQ.
    pub fn unbind(&self, source: &str, binding: &Binding) -> BrokerResult<()> {
        let exchange = self.check_bindable(source, &binding.destination)?;
        if exchange.unbind(binding) {
            self.delete_if_auto_delete_exchange(&exchange);
        }
        Ok(())
    }

    /// `queue.declare` (not passive). An empty name gets a server-generated one.
    pub fn declare_queue(&self, mut definition: QueueDefinition) -> BrokerResult<DeclaredQueue> {
        if definition.name.is_empty() {
            let random = Alphanumeric.sample_string(&mut rand::thread_rng(), GENERATED_NAME_CHARS);
            definition.name = format!("amq.gen-{random}");
        } else if definition.name.starts_with(RESERVED_PREFIX) {
            return Err(BrokerError::access_refused(format!(
                "queue name '{}' contains reserved prefix 'amq.'",
                definition.name
            )));
        }
        let mut queues = self.queues.write();
        if let Some(existing) = queues.get(&definition.name) {
            if let Some(owner) = definition.exclusive_owner.or(existing.definition().exclusive_owner) {
                existing.check_owner(owner)?;
            }
            check_equivalent_queue(existing.definition(), &definition, &self.name)?;
            return Ok(Self::declared(Arc::clone(existing)));
        }
        let queue = Arc::new(Queue::new(definition, Box::new(MemoryStore::default())));
        queues.insert(queue.name().to_string(), Arc::clone(&queue));
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

    /// `queue.delete`; returns the number of messages it held.
    pub fn delete_queue(
        &self,
        name: &str,
        if_unused: bool,
        if_empty: bool,
        connection: ConnectionId,
    ) -> BrokerResult<u32> {
        let queue = self.queue(name)?;
        queue.check_owner(connection)?;
        if if_unused && queue.consumer_count() > 0 {
            return Err(BrokerError::precondition_failed(format!("queue '{name}' in vhost '{}' in use", self.name)));
        }
        if if_empty && queue.message_count() > 0 {
            return Err(BrokerError::precondition_failed(format!("queue '{name}' in vhost '{}' not empty", self.name)));
        }
        Ok(self.remove_queue(&queue))
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
        let before = queues.len();
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
        if queues.len() == before {
            if let Some(alternate) = exchange.definition().alternate_exchange() {
                self.route_via(&alternate, message, visited, queues);
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

fn inequivalent(arg: &str, kind: &str, name: &str, vhost: &str, received: String, current: String) -> BrokerError {
    BrokerError::precondition_failed(format!(
        "inequivalent arg '{arg}' for {kind} '{name}' in vhost '{vhost}': received '{received}' but current is '{current}'"
    ))
}

fn check_equivalent_exchange(
    current: &ExchangeDefinition,
    asked: &ExchangeDefinition,
    vhost: &str,
) -> BrokerResult<()> {
    let name = &current.name;
    let fail = |arg: &str, received: String, current: String| {
        Err(inequivalent(arg, "exchange", name, vhost, received, current))
    };
    if current.kind != asked.kind {
        return fail("type", asked.kind.as_str().into(), current.kind.as_str().into());
    }
    if current.durable != asked.durable {
        return fail("durable", asked.durable.to_string(), current.durable.to_string());
    }
    if current.auto_delete != asked.auto_delete {
        return fail("auto_delete", asked.auto_delete.to_string(), current.auto_delete.to_string());
    }
    if current.internal != asked.internal {
        return fail("internal", asked.internal.to_string(), current.internal.to_string());
    }
    if current.arguments != asked.arguments {
        return fail("arguments", format!("{:?}", asked.arguments), format!("{:?}", current.arguments));
    }
    Ok(())
}

fn check_equivalent_queue(current: &QueueDefinition, asked: &QueueDefinition, vhost: &str) -> BrokerResult<()> {
    let name = &current.name;
    let fail =
        |arg: &str, received: String, current: String| Err(inequivalent(arg, "queue", name, vhost, received, current));
    if current.durable != asked.durable {
        return fail("durable", asked.durable.to_string(), current.durable.to_string());
    }
    let (asked_exclusive, current_exclusive) = (asked.exclusive_owner.is_some(), current.exclusive_owner.is_some());
    if asked_exclusive != current_exclusive {
        return fail("exclusive", asked_exclusive.to_string(), current_exclusive.to_string());
    }
    if current.auto_delete != asked.auto_delete {
        return fail("auto_delete", asked.auto_delete.to_string(), current.auto_delete.to_string());
    }
    let (asked_args, current_args) = (asked.arguments.inner(), current.arguments.inner());
    for key in asked_args.keys().chain(current_args.keys()) {
        let (received, had) = (asked_args.get(key), current_args.get(key));
        if received != had {
            let show = |v: Option<&amq_protocol::types::AMQPValue>| v.map_or("none".to_string(), |v| format!("{v:?}"));
            return fail(key.as_str(), show(received), show(had));
        }
    }
    Ok(())
}
