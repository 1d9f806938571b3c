//! A virtual host: its exchanges and queues, declared, bound and deleted, and the channels
//! waiting for direct replies.
//!
//! Declaring and deleting exchanges lives in `exchanges`, binding, unbinding and auto-delete
//! exchanges in `bindings`, routing and publishing in `routing`, durable definitions in
//! `persistence`, direct reply-to in [`crate::direct_reply_to`].
//!
//! The name maps are read on every publish and written only by declare and delete, so they sit
//! behind read-write locks that are never held while a queue's own lock is taken.
//!
//! A durable queue's (or delayed exchange's) files live in a directory named after it, so two
//! incarnations of one name would share a directory. Creating and destroying that storage is
//! therefore serialised by the `lifecycle` lock, together with the name map change that goes
//! with it: a queue is either in the map with its files, or in neither, and a declare never
//! sees a name half-deleted.

use crate::catalog::DefinitionsFence;
use crate::connection_id::ConnectionId;
use crate::definitions::VhostStorage;
use crate::direct_reply_to::ReplyConsumers;
use crate::equivalence;
use crate::error::{internal_error, BrokerError, BrokerResult};
use crate::exchange::{Destination, Exchange};
use crate::message::Message;
use crate::policy::{ResolvedQueue, VhostPolicies};
use crate::publish_outcome::PublishOutcome;
use crate::queue::context::QueueContext;
use crate::queue::{self, Queue, QueueDefinition, QueueHost};
use crate::quorum::{Replication, SingleNode};
use crate::remote::{Forwarder, NoForwarding};
use crate::scheduler::SchedulerHandle;
use crate::session::SessionHost;
use crate::vhost_limits::{check_queue_limit, VhostLimits};
use parking_lot::{Mutex, RwLock};
use rand::distributions::{Alphanumeric, DistString};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};

mod bindings;
mod exchanges;
mod persistence;
mod routing;

use crate::definitions::{DefinitionsChange, PendingChange};
use persistence::durable;

/// A queue just deleted: how many messages it held, and its consumers, which are cancelled
/// (`basic.cancel` to their clients) when this is dropped. The deleting channel answers
/// `delete-ok` before dropping it, so that, as in RabbitMQ, its client sees the answer to its
/// own method before the cancel of a consumer it had on the queue (amqplib, for one, settles
/// the delete only if `delete-ok` comes first).
#[derive(Default)]
#[must_use = "dropping it cancels the queue's consumers"]
pub struct DeletedQueue {
    /// Messages the queue held.
    pub message_count: u32,
    consumers: Vec<Arc<crate::queue::consumer::Consumer>>,
}

impl Drop for DeletedQueue {
    fn drop(&mut self) {
        for consumer in self.consumers.drain(..) {
            consumer.session().cancelled_by_broker(&consumer);
        }
    }
}

/// The prefix of names only the broker may create.
const RESERVED_PREFIX: &str = "amq.";
/// How server-generated queue names start, as RabbitMQ's.
const GENERATED_QUEUE_PREFIX: &str = "amq.gen-";
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
    /// The cluster its quorum queues are replicated in.
    replication: Arc<dyn Replication>,
    /// Where what its clients do to queues of other nodes goes.
    forwarder: Arc<Forwarder>,
    /// The catalog, once the server has started it: definitions change
    /// through it. Replaced when the node joins another cluster (`join_cluster`).
    pub(crate) catalog: RwLock<Option<Arc<crate::catalog::Catalog>>>,
    /// Direct reply-to consumers, by the address their replies are published to.
    reply_consumers: ReplyConsumers,
    me: Weak<VirtualHost>,
    /// Held while a queue's or delayed exchange's storage is created or destroyed together
    /// with its name map entry (see the module documentation). Never taken under the name
    /// maps' locks or a queue's lock.
    lifecycle: Mutex<()>,
    /// Its limits (`max-queues` is checked here, `max-connections` at `connection.open`).
    limits: RwLock<VhostLimits>,
    /// Its policies and operator policies (kept by access control, handed in whole on each
    /// change): what its queues run with besides their own arguments.
    policies: RwLock<Arc<VhostPolicies>>,
    /// Set (under `lifecycle`) when the vhost is deleted: a client still connected may not
    /// declare into it, nor make it write files again.
    deleted: std::sync::atomic::AtomicBool,
    /// Set while the catalog replays its log after a start: a durable queue or delayed
    /// exchange declared again then reopens the files it left, which hold its messages.
    replaying: std::sync::atomic::AtomicBool,
    /// Tests pause here, at a named point, to force an interleaving.
    #[cfg(test)]
    interleave: interleave::Hook,
}

impl QueueHost for VirtualHost {
    fn publish_dead_letter(&self, from: &str, message: Message) -> PublishOutcome {
        VirtualHost::publish_dead_letter(self, from, message)
    }

    fn delete_expired_queue(&self, queue: &Arc<Queue>) {
        VirtualHost::delete_expired_queue(self, queue);
    }

    fn pass_fence<'a>(
        &'a self,
        fence: &'a DefinitionsFence,
        term: Option<u64>,
    ) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>> {
        Box::pin(fence.pass(term, self))
    }

    fn enabled_group_version(&self, kind: crate::feature_flags::GroupMachineKind) -> u16 {
        kind.enabled_version(self.catalog_version())
    }
}

impl SessionHost for VirtualHost {
    fn name(&self) -> &str {
        VirtualHost::name(self)
    }

    fn reply_consumers(&self) -> &ReplyConsumers {
        VirtualHost::reply_consumers(self)
    }

    fn delete_auto_delete_queue(&self, queue: &Arc<Queue>) {
        VirtualHost::delete_auto_delete_queue(self, queue);
    }
}

#[cfg(test)]
mod interleave;
#[cfg(test)]
mod lifecycle_tests;
#[cfg(test)]
mod persistence_tests;

impl VirtualHost {
    /// A virtual host kept in memory, with the standard exchanges.
    pub fn new(name: &str, scheduler: SchedulerHandle) -> Arc<Self> {
        let forwarder = Forwarder::new(Arc::new(NoForwarding));
        let policies = Arc::default();
        Self::with_standard_exchanges(name, None, scheduler, SingleNode::shared(), forwarder, policies)
    }

    /// A virtual host on disk: its durable definitions and queues are recovered from `storage`,
    /// the queues running with `policies`. Its quorum queues are replicated through
    /// `replication`; what its clients do to queues of other nodes goes through `forwarder`.
    pub fn open(
        name: &str,
        storage: VhostStorage,
        scheduler: SchedulerHandle,
        replication: Arc<dyn Replication>,
        forwarder: Arc<Forwarder>,
        policies: Arc<VhostPolicies>,
    ) -> Result<Arc<Self>, BrokerError> {
        // What cannot be read is left out entity by entity (and its data kept aside) by
        // `restore`; only a file that is not a definitions document at all stops the start,
        // before anything on disk is touched.
        let loaded = storage.load().map_err(|e| internal_error("cannot read definitions", e))?;
        let vhost = Self::with_standard_exchanges(name, Some(storage), scheduler, replication, forwarder, policies);
        vhost.restore(loaded)?;
        Ok(vhost)
    }

    fn with_standard_exchanges(
        name: &str,
        storage: Option<VhostStorage>,
        scheduler: SchedulerHandle,
        replication: Arc<dyn Replication>,
        forwarder: Arc<Forwarder>,
        policies: Arc<VhostPolicies>,
    ) -> Arc<Self> {
        let vhost = Arc::new_cyclic(|me| VirtualHost {
            name: name.to_string(),
            exchanges: RwLock::new(HashMap::new()),
            queues: RwLock::new(HashMap::new()),
            storage,
            scheduler,
            replication,
            forwarder,
            catalog: RwLock::new(None),
            reply_consumers: ReplyConsumers::new(crate::node::local_id()),
            me: Weak::clone(me),
            lifecycle: Mutex::new(()),
            limits: RwLock::new(VhostLimits::default()),
            policies: RwLock::new(policies),
            deleted: std::sync::atomic::AtomicBool::new(false),
            replaying: std::sync::atomic::AtomicBool::new(false),
            #[cfg(test)]
            interleave: interleave::Hook::default(),
        });
        for definition in exchanges::standard_exchanges() {
            vhost.exchanges.write().insert(definition.name.clone(), Arc::new(Exchange::new(definition)));
        }
        vhost
    }

    fn queue_context(&self) -> QueueContext {
        QueueContext {
            vhost: Weak::<VirtualHost>::clone(&self.me),
            vhost_name: self.name.clone(),
            scheduler: Arc::clone(&self.scheduler),
            replication: Arc::clone(&self.replication),
            forwarder: Arc::clone(&self.forwarder),
        }
    }

    /// The catalog, once the server has started it: definition changes go
    /// through it ([`crate::catalog::Catalog::change`]) instead of straight to this host.
    pub fn catalog(&self) -> Option<Arc<crate::catalog::Catalog>> {
        self.catalog.read().clone()
    }

    /// A name for a server-named queue (`amq.gen-...`, as RabbitMQ's).
    pub fn generated_queue_name() -> String {
        format!("{GENERATED_QUEUE_PREFIX}{}", Alphanumeric.sample_string(&mut rand::thread_rng(), GENERATED_NAME_CHARS))
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

    /// The channels waiting for direct replies.
    pub fn reply_consumers(&self) -> &ReplyConsumers {
        &self.reply_consumers
    }

    /// `queue.declare` of the direct reply-to pseudo-queue or of a reply address: nothing is
    /// created; it succeeds while the requester is there (see [`ReplyConsumers::declare`]).
    pub fn declare_reply_to(&self, name: &str) -> BrokerResult<()> {
        self.reply_consumers.declare(name, &self.name)
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

    /// `queue.declare` (not passive) from `connection`. An empty name gets a server-generated
    /// one. Exclusivity is checked first: any mismatch with an existing queue is 405.
    pub fn declare_queue(
        &self,
        mut definition: QueueDefinition,
        connection: ConnectionId,
    ) -> BrokerResult<DeclaredQueue> {
        if definition.name.is_empty() {
            definition.name = Self::generated_queue_name();
        } else {
            refuse_reserved_name("queue", &definition.name)?;
        }
        self.declare_generated_queue(definition, connection)
    }

    /// `queue.declare` as the catalog carries it: a server-named queue was
    /// named by the channel that declared it, and its name is taken as it is.
    pub fn declare_proposed_queue(
        &self,
        definition: QueueDefinition,
        connection: ConnectionId,
    ) -> BrokerResult<DeclaredQueue> {
        if definition.name.starts_with(GENERATED_QUEUE_PREFIX) {
            self.declare_generated_queue(definition, connection)
        } else {
            self.declare_queue(definition, connection)
        }
    }

    /// 403 for a queue name a client may not choose (the reserved `amq.` prefix).
    pub fn check_queue_name(name: &str) -> BrokerResult<()> {
        refuse_reserved_name("queue", name)
    }

    /// `queue.declare` of a queue whose name the broker generated (a server-named queue,
    /// named before its permissions are checked): as [`VirtualHost::declare_queue`], with the
    /// name taken as it is.
    pub fn declare_generated_queue(
        &self,
        definition: QueueDefinition,
        connection: ConnectionId,
    ) -> BrokerResult<DeclaredQueue> {
        if let Ok(existing) = self.queue(&definition.name) {
            existing.check_owner(connection)?;
            if existing.definition().exclusive_owner != definition.exclusive_owner {
                return Err(existing_locked(&existing));
            }
            equivalence::check_queue(existing.definition(), &definition, &self.name)?;
            existing.touch();
            return Ok(Self::declared(existing));
        }
        let (queue, pending) = {
            let _lifecycle = self.lifecycle.lock();
            if let Ok(existing) = self.queue(&definition.name) {
                // Declared by another connection meanwhile: answer as for an existing queue.
                return Ok(Self::declared(existing));
            }
            self.refuse_if_deleted()?;
            let max_queues = self.limits.read().max_queues;
            check_queue_limit(&self.name, &definition.name, self.queues.read().len(), max_queues)?;
            let queue = self.new_queue(definition)?;
            self.pause_at("queue storage created");
            self.queues.write().insert(queue.name().to_string(), Arc::clone(&queue));
            crate::node_counters::QUEUES_CREATED.add();
            let pending = self.record_queue(&queue)?;
            (queue, pending)
        };
        durable(pending)?;
        Ok(Self::declared(queue))
    }

    /// A new queue for `definition`; while the catalog replays its log, a durable one whose
    /// files are here reopens them (declared just before a crash, it may have taken messages
    /// that its journal record, not synced yet, did not outlive).
    fn new_queue(&self, definition: QueueDefinition) -> BrokerResult<Arc<Queue>> {
        let ResolvedQueue { arguments, applied } = self.resolve(&definition)?;
        let queue = match &self.storage {
            Some(storage) if self.replaying() && is_stored(&definition) && storage.holds_queue(&definition.name) => {
                tracing::info!(queue = %definition.name, "the catalog's replay reopens a queue's files");
                queue::factory::recover(definition, arguments, Vec::new(), storage, self.queue_context())?
            }
            storage => queue::factory::declare(definition, arguments, storage.as_ref(), self.queue_context())?,
        };
        queue.set_applied(applied);
        Ok(queue)
    }

    /// What a queue of `definition` runs with here: its own arguments, with this vhost's
    /// policies if its kind takes them; 406 if its own arguments are not valid.
    pub(crate) fn resolve(&self, definition: &QueueDefinition) -> BrokerResult<ResolvedQueue> {
        self.resolve_arguments(&definition.name, &definition.arguments)
    }

    /// What a queue named `name` declared with `arguments` runs with here (see
    /// [`VirtualHost::resolve`]): also where a replicated one is placed, chosen before its
    /// declare is proposed.
    pub(crate) fn resolve_arguments(
        &self,
        name: &str,
        arguments: &amq_protocol::types::FieldTable,
    ) -> BrokerResult<ResolvedQueue> {
        let parsed = queue::QueueArguments::parse(arguments)?;
        if !parsed.queue_type.takes_policies(self.catalog_version()) {
            return Ok(ResolvedQueue { arguments: parsed, applied: Default::default() });
        }
        let policies = Arc::clone(&self.policies.read());
        policies.resolve_queue(name, arguments)
    }

    /// The catalog's machine version here (the newest this node knows before the server
    /// started the catalog: a broker without one runs every flag it knows).
    fn catalog_version(&self) -> u16 {
        self.catalog().map_or_else(
            || crate::feature_flags::newest_version(crate::feature_flags::Machine::Catalog),
            |catalog| catalog.machine_version(),
        )
    }

    /// The alternate exchange a policy gives exchange `exchange`, if one does (looked up only
    /// for a message its bindings did not route).
    fn policy_alternate_exchange(&self, exchange: &str) -> Option<String> {
        let policies = self.policies();
        let applied = policies.applied(exchange, crate::policy::Target::Exchange);
        applied.definition.get("alternate-exchange")?.as_str().map(str::to_string)
    }

    /// Its policies now.
    pub fn policies(&self) -> Arc<VhostPolicies> {
        Arc::clone(&self.policies.read())
    }

    /// Runs its queues with `policies` from now on: each queue they apply to (or applied to)
    /// takes its new arguments at once, keeping its messages.
    pub(crate) fn set_policies(&self, policies: Arc<VhostPolicies>) {
        // Under the lifecycle lock, which every declare holds: a queue declared meanwhile is
        // either built with these policies or among those they are applied to below.
        let queues: Vec<Arc<Queue>> = {
            let _lifecycle = self.lifecycle.lock();
            *self.policies.write() = policies;
            self.queues.read().values().cloned().collect()
        };
        for queue in queues.iter().filter(|queue| queue.homes().is_none()) {
            match self.resolve(queue.definition()) {
                Ok(resolved) => queue.apply_policy(resolved),
                Err(error) => tracing::warn!(queue = queue.name(), %error, "a queue's arguments no longer parse"),
            }
        }
    }

    /// Whether the catalog is replaying its log after a start.
    fn replaying(&self) -> bool {
        self.replaying.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Says whether the catalog is replaying its log after a start (see [`Broker::set_replaying`]).
    ///
    /// [`Broker::set_replaying`]: crate::broker::Broker::set_replaying
    pub(crate) fn set_replaying(&self, replaying: bool) {
        self.replaying.store(replaying, std::sync::atomic::Ordering::Release);
    }

    /// Makes the definition changes recorded so far durable.
    pub(crate) fn sync_definitions(&self) -> BrokerResult<()> {
        match &self.storage {
            Some(storage) if !self.is_deleted() => {
                storage.sync().map_err(|e| internal_error("cannot save definitions", e))
            }
            _ => Ok(()),
        }
    }

    /// Removes the data directories that none of its queues and delayed exchanges owns.
    pub(crate) fn remove_orphaned_stores(&self) {
        let Some(storage) = &self.storage else { return };
        let _lifecycle = self.lifecycle.lock();
        if self.is_deleted() {
            return;
        }
        let queues: Vec<String> = self.queues.read().keys().cloned().collect();
        let delayed: Vec<String> = self
            .exchanges
            .read()
            .values()
            .filter(|e| e.definition().kind.is_delayed())
            .map(|e| e.name().to_string())
            .collect();
        storage.remove_orphans(queues.iter().map(String::as_str), delayed.iter().map(String::as_str));
    }

    /// Records a durable queue's new record (nothing for one that is not stored).
    fn record_queue(&self, queue: &Queue) -> BrokerResult<PendingChange> {
        if !is_stored(queue.definition()) {
            return Ok(PendingChange::default());
        }
        self.record(DefinitionsChange::PutQueue(persistence::queue_record(queue)))
    }

    /// A stand-in for a queue that lives on `homes` (declared through the cluster's catalog
    /// group on another node): this node's clients reach it through [`crate::remote`]. A queue
    /// of that name held here already stays (this node is one of its homes).
    pub fn declare_remote_queue(&self, definition: QueueDefinition, homes: Vec<u64>) -> BrokerResult<()> {
        let arguments = queue::QueueArguments::parse(&definition.arguments)?;
        let pending = {
            let _lifecycle = self.lifecycle.lock();
            if self.queue(&definition.name).is_ok() {
                return Ok(());
            }
            let queue = queue::factory::remote(definition, arguments, homes, self.queue_context());
            self.queues.write().insert(queue.name().to_string(), Arc::clone(&queue));
            self.record_queue(&queue)?
        };
        durable(pending)
    }

    /// `queue.declare` with passive set: the queue must exist and be accessible.
    pub fn declare_queue_passive(&self, name: &str, connection: ConnectionId) -> BrokerResult<DeclaredQueue> {
        let queue = self.queue(name)?;
        queue.check_owner(connection)?;
        queue.touch();
        Ok(Self::declared(queue))
    }

    fn declared(queue: Arc<Queue>) -> DeclaredQueue {
        crate::node_counters::QUEUES_DECLARED.add();
        DeclaredQueue { message_count: queue.message_count(), consumer_count: queue.consumer_count(), queue }
    }

    /// `queue.delete`: the queue is gone when this returns; its consumers are told when the
    /// answer is dropped (see [`DeletedQueue`]). Deleting a queue that does not exist succeeds
    /// with 0 messages, as in RabbitMQ.
    pub fn delete_queue(
        &self,
        name: &str,
        if_unused: bool,
        if_empty: bool,
        connection: ConnectionId,
    ) -> BrokerResult<DeletedQueue> {
        let Ok(queue) = self.queue(name) else { return Ok(DeletedQueue::default()) };
        queue.check_owner(connection)?;
        let condition = DeleteCondition { if_unused, if_empty };
        condition.check(&self.name, name, queue.consumer_count(), queue.message_count())?;
        let (deleted, pending) = self.take_queue(&queue);
        durable(pending?)?;
        Ok(deleted)
    }

    /// Removes `queue` and cancels its consumers; the number of messages it held.
    fn remove_queue(&self, queue: &Arc<Queue>) -> u32 {
        let (deleted, pending) = self.take_queue(queue);
        if let Err(error) = pending.and_then(durable) {
            tracing::error!(queue = queue.name(), %error, "a deleted queue may come back after a restart");
        }
        deleted.message_count
    }

    /// Removes `queue` (its name, bindings and the auto-delete exchanges they held) and
    /// records that a durable one went; its consumers are cancelled when the answer is
    /// dropped.
    fn take_queue(&self, queue: &Arc<Queue>) -> (DeletedQueue, BrokerResult<PendingChange>) {
        let (message_count, consumers, pending) = {
            let _lifecycle = self.lifecycle.lock();
            {
                let mut queues = self.queues.write();
                if !queues.get(queue.name()).is_some_and(|q| Arc::ptr_eq(q, queue)) {
                    return (DeletedQueue::default(), Ok(PendingChange::default()));
                }
                queues.remove(queue.name());
            }
            self.pause_at("queue removed from the name map");
            let (message_count, consumers) = queue.mark_deleted();
            let pending = if is_stored(queue.definition()) {
                self.record(DefinitionsChange::RemoveQueue { name: queue.name().to_string() })
            } else {
                Ok(PendingChange::default())
            };
            (message_count, consumers, pending)
        };
        for exchange in self.unbind_everywhere(&Destination::Queue(queue.name().into())) {
            if let Err(error) = self.remove_exchange(&exchange) {
                tracing::error!(exchange = exchange.name(), %error, "auto-deleted exchange stays in the stored definitions");
            }
        }
        crate::node_counters::QUEUES_DELETED.add();
        (DeletedQueue { message_count, consumers }, pending)
    }

    /// This node stops being a home of `queue` (its member of the queue's group was
    /// removed): a stand-in forwarding to `homes` takes its place, its files are deleted, its
    /// bindings stay; the queue itself lives on in its group.
    pub fn replace_with_stand_in(&self, queue: &Arc<Queue>, homes: Vec<u64>) {
        let context = self.queue_context();
        self.swap_queue(queue.name(), |old| {
            let (definition, arguments) = (old.definition().clone(), queue::QueueArguments::clone(&old.arguments()));
            Ok(queue::factory::remote(definition, arguments, homes, context))
        });
    }

    /// This node becomes a home of a queue it forwarded to (a new member of a quorum
    /// queue's or a stream's group): the queue itself takes the stand-in's place; its
    /// bindings stay.
    pub fn replace_stand_in(&self, definition: QueueDefinition) -> BrokerResult<()> {
        let name = definition.name.clone();
        let (storage, context) = (self.storage.as_ref(), self.queue_context());
        let ResolvedQueue { arguments, applied } = self.resolve(&definition)?;
        let mut created = Ok(());
        self.swap_queue(&name, |_| {
            let made = queue::factory::declare(definition, arguments, storage, context);
            created = made.as_ref().map(|queue| queue.set_applied(applied)).map_err(Clone::clone);
            made
        });
        created
    }

    /// Puts what `make` builds from the queue called `name` in its place: the old one is
    /// marked deleted (its consumers cancelled), bindings (by name) are untouched.
    fn swap_queue(&self, name: &str, make: impl FnOnce(&Arc<Queue>) -> BrokerResult<Arc<Queue>>) {
        let (consumers, pending) = {
            let _lifecycle = self.lifecycle.lock();
            let Ok(old) = self.queue(name) else { return };
            let new = match make(&old) {
                Ok(new) => new,
                Err(error) => {
                    tracing::error!(queue = name, %error, "cannot replace the queue here");
                    return;
                }
            };
            let (_, consumers) = old.mark_deleted();
            self.queues.write().insert(name.to_string(), Arc::clone(&new));
            (consumers, self.record_queue(&new))
        };
        for consumer in consumers {
            consumer.session().cancelled_by_broker(&consumer);
        }
        if let Err(error) = pending.and_then(durable) {
            tracing::error!(%error, queue = name, "a replaced queue stays as it was in the stored definitions");
        }
    }

    /// Deletes an auto-delete queue whose last consumer went.
    pub(crate) fn delete_auto_delete_queue(&self, queue: &Arc<Queue>) {
        if queue.consumer_count() == 0 {
            self.delete_unused_queue(queue, "auto-deleted");
        }
    }

    /// Deletes a queue nobody uses any more (`auto-delete`, `x-expires`). In a cluster the
    /// catalog group deletes it, so that the other nodes drop their stand-ins too; it checks
    /// again there that the queue has no consumer (one may have come meanwhile).
    fn delete_unused_queue(&self, queue: &Arc<Queue>, what: &'static str) {
        let replicated = queue.definition().exclusive_owner.is_none();
        if let Some(catalog) = self.catalog().filter(|_| replicated) {
            let (vhost, name) = (self.name.clone(), queue.name().to_string());
            let op = crate::catalog::DefinitionOp::DeleteQueue { name: name.clone(), if_unused: true, if_empty: false };
            tokio::spawn(async move {
                if let Err(error) = catalog.change(&vhost, op).await {
                    tracing::warn!(queue = %name, %error, "{what} queue not deleted");
                }
            });
            return;
        }
        self.remove_queue(queue);
    }

    /// Whether it was deleted (its connections are closing).
    pub(crate) fn is_deleted(&self) -> bool {
        self.deleted.load(std::sync::atomic::Ordering::Acquire)
    }

    fn refuse_if_deleted(&self) -> BrokerResult<()> {
        if self.is_deleted() {
            return Err(BrokerError::not_found(format!("vhost '{}' is deleted", self.name)));
        }
        Ok(())
    }

    /// Its limits.
    pub fn limits(&self) -> VhostLimits {
        *self.limits.read()
    }

    /// Replaces its limits (queues past a new `max-queues` stay; no more are declared).
    pub fn set_limits(&self, limits: VhostLimits) {
        *self.limits.write() = limits;
    }

    /// The vhost is being deleted: every queue goes (its consumers are cancelled), delayed
    /// exchanges stop. Its directory is the broker's to remove afterwards.
    pub fn delete_everything(&self) {
        {
            let _lifecycle = self.lifecycle.lock();
            self.deleted.store(true, std::sync::atomic::Ordering::Release);
        }
        for queue in self.queues() {
            self.remove_queue(&queue);
        }
        self.close();
    }

    /// Where its data lives, if it is stored.
    pub fn data_dir(&self) -> Option<&std::path::Path> {
        self.storage.as_ref().map(VhostStorage::dir)
    }

    /// The broker is stopping: every queue makes what it stores durable, and the definitions
    /// file takes in its journal.
    pub fn close(&self) {
        self.compact_definitions();
        for queue in self.queues() {
            queue.close();
        }
        for exchange in self.exchanges() {
            if let Some(delayed) = exchange.delayed() {
                delayed.close();
            }
        }
    }

    /// Deletes a queue whose `x-expires` ran out.
    pub(crate) fn delete_expired_queue(&self, queue: &Arc<Queue>) {
        self.delete_unused_queue(queue, "expired");
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
}

impl VirtualHost {
    /// A point where a concurrent declare or delete could interleave; tests pause here.
    fn pause_at(&self, point: &'static str) {
        #[cfg(test)]
        self.interleave.reached(point);
        #[cfg(not(test))]
        let _ = point;
    }
}

/// Whether a queue's definition and persistent messages are kept on disk.
fn is_stored(definition: &QueueDefinition) -> bool {
    definition.durable && definition.exclusive_owner.is_none()
}

/// AMQP's short strings name exchanges and queues and carry routing keys: what is longer
/// could never be used over AMQP (the management API is where it could come from).
pub const MAX_SHORT_STRING_BYTES: usize = 255;

/// 406 for a name or key longer than AMQP carries.
pub(crate) fn refuse_too_long(what: &str, text: &str) -> BrokerResult<()> {
    if text.len() > MAX_SHORT_STRING_BYTES {
        return Err(BrokerError::precondition_failed(format!(
            "{what} is {} bytes long, longer than {MAX_SHORT_STRING_BYTES}",
            text.len()
        )));
    }
    Ok(())
}

/// A name a client may give a new exchange or queue: at most 255 bytes (406), and without the
/// `amq.` prefix, which is the broker's (403).
fn refuse_reserved_name(kind: &str, name: &str) -> BrokerResult<()> {
    refuse_too_long(&format!("{kind} name"), name)?;
    if name.starts_with(RESERVED_PREFIX) {
        return Err(BrokerError::access_refused(format!("{kind} name '{name}' contains reserved prefix 'amq.*'")));
    }
    Ok(())
}

fn existing_locked(queue: &Queue) -> BrokerError {
    BrokerError::resource_locked(format!(
        "cannot obtain exclusive access to locked queue '{}' in vhost '{}'",
        queue.name(),
        queue.vhost_name()
    ))
}

/// `queue.delete`'s `if-unused` and `if-empty`.
#[derive(Debug, Clone, Copy)]
pub struct DeleteCondition {
    /// Only if the queue has no consumers.
    pub if_unused: bool,
    /// Only if it has no ready messages.
    pub if_empty: bool,
}

impl DeleteCondition {
    /// Whether queue `name` of vhost `vhost`, with `consumers` and `messages` ready, may be
    /// deleted (406 PRECONDITION_FAILED, with RabbitMQ's text, if not).
    pub fn check(&self, vhost: &str, name: &str, consumers: u32, messages: u32) -> BrokerResult<()> {
        if self.if_unused && consumers > 0 {
            return Err(BrokerError::precondition_failed(format!("queue '{name}' in vhost '{vhost}' in use")));
        }
        if self.if_empty && messages > 0 {
            return Err(BrokerError::precondition_failed(format!("queue '{name}' in vhost '{vhost}' not empty")));
        }
        Ok(())
    }
}
