//! Queues: what every kind shares (name, definition, arguments, ownership) and the one
//! interface through which the virtual host, sessions and channels use any kind.
//!
//! A [`Queue`] hands each operation to its kind ([`kind::QueueKind`]), chosen from
//! `x-queue-type` when it is declared or recovered:
//! - classic (`classic.rs`): ready messages go to consumers with credit and leave once settled;
//!   persistent messages of a durable queue are in its [`LogStore`], the rest in a
//!   [`TransientStore`](crate::message_store::TransientStore) (both in `crate::message_store`;
//!   paged past a memory budget). A message whose record turns out damaged on disk when read
//!   ([`StoreError::Damaged`]) is dropped and settled, and dispatch goes on.
//! - stream (`stream_queue.rs`, over `crate::stream`): an append-only log that keeps its
//!   messages; consumers read it by offset.
//! - quorum (`quorum_queue.rs`, over `crate::quorum`): a Raft group replicates the queue's
//!   messages and its state; the leader acts on what the state machine decides.
//!
//! On a node where a queue does not live (in a cluster), a stand-in (`remote_queue.rs`, over
//! `crate::remote`) forwards everything to a node where it does.

mod arguments;
mod channel;
mod classic;
pub mod consumer;
pub(crate) mod context;
mod deadlines;
mod expiry;
pub(crate) mod factory;
mod kind;
mod quorum_queue;
mod remote_queue;
mod state;
mod stats;
mod stream_queue;

use crate::connection_id::ConnectionId;
use crate::message_ref::MessageRef;
use crate::message_store::{DurableMark, StoreError};
pub use arguments::{
    validate_argument, LeaderLocator, QueueArgument, QueueArguments, QueueType, ARGUMENTS, MAX_PRIORITY, MAX_TIMER_MS,
};
pub use channel::{DeliveryChannel, SessionId};
pub use kind::Holder;
pub use stats::{MessageCounts, QueueStats};

use crate::catalog::DefinitionsFence;
use crate::error::{BrokerError, BrokerResult};
use crate::message::Message;
use crate::policy::{AppliedPolicy, ResolvedQueue};
use crate::publish_outcome::PublishOutcome;
use crate::scheduler::{QueueTimer, TimerTarget};
use amq_protocol::types::FieldTable;
use consumer::Consumer;
use kind::QueueKind;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};

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

/// An answer a queue gives at once, or once something completes (a quorum queue's Raft
/// commit): the channel then replies when it is ready, keeping the order of its replies.
pub enum Reply<T> {
    /// Ready now.
    Now(T),
    /// Ready when the future completes.
    Later(Pin<Box<dyn Future<Output = T> + Send>>),
}

impl<T> std::fmt::Debug for Reply<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Now(_) => f.write_str("Reply::Now"),
            Reply::Later(_) => f.write_str("Reply::Later"),
        }
    }
}

impl<T: Send + 'static> Reply<T> {
    /// The answer, waiting for it if it is not ready.
    pub async fn wait(self) -> T {
        match self {
            Reply::Now(value) => value,
            Reply::Later(future) => future.await,
        }
    }

    /// The answer turned by `f`, now or when it comes.
    pub fn map<U: Send + 'static>(self, f: impl FnOnce(T) -> U + Send + 'static) -> Reply<U> {
        match self {
            Reply::Now(value) => Reply::Now(f(value)),
            Reply::Later(future) => Reply::Later(Box::pin(async move { f(future.await) })),
        }
    }
}

/// The rules of a queue kind that keeps its messages in a log of its own (streams, quorum
/// queues): durable, not exclusive, not auto-delete (406 otherwise, as in RabbitMQ), on a
/// broker with a data directory (540 otherwise). `kind` names one of them, `kinds` several.
fn require_log_of_its_own<'a>(
    definition: &QueueDefinition,
    storage: Option<&'a crate::definitions::VhostStorage>,
    kind: &str,
    kinds: &str,
) -> BrokerResult<&'a crate::definitions::VhostStorage> {
    let refused = [
        (!definition.durable, "non-durable"),
        (definition.exclusive_owner.is_some(), "exclusive"),
        (definition.auto_delete, "auto-delete"),
    ];
    if let Some((_, property)) = refused.iter().find(|(refused, _)| *refused) {
        return Err(BrokerError::precondition_failed(format!(
            "invalid property '{property}' for {kind} '{}': {kinds} must be durable, not exclusive and not auto-delete",
            definition.name
        )));
    }
    storage.ok_or_else(|| {
        BrokerError::new(
            crate::error::ReplyCode::NotImplemented,
            format!("{kinds} need a broker with a data directory"),
        )
    })
}

/// Refuses a consumer that conflicts with exclusivity (403 ACCESS_REFUSED, as in RabbitMQ):
/// any consumer while one is exclusive, an exclusive one while any is attached.
fn check_exclusive_consume(
    queue: &Queue,
    exclusive_attached: bool,
    any_attached: bool,
    consumer: &Consumer,
) -> BrokerResult<()> {
    if exclusive_attached {
        return Err(BrokerError::access_refused(format!(
            "queue '{}' in vhost '{}' has an exclusive consumer",
            queue.name(),
            queue.vhost_name()
        )));
    }
    if consumer.is_exclusive() && any_attached {
        return Err(BrokerError::access_refused(format!(
            "queue '{}' in vhost '{}' already has consumers; cannot consume exclusively",
            queue.name(),
            queue.vhost_name()
        )));
    }
    Ok(())
}

/// What a queue asks of the virtual host it lives in. The virtual host stands above the
/// queues: it implements this, and queues hold it weakly through their [`context::QueueContext`].
pub trait QueueHost: Send + Sync + std::fmt::Debug {
    /// Routes the dead-lettered copy `message` of a message of queue `from`.
    fn publish_dead_letter(&self, from: &str, message: Message) -> PublishOutcome;
    /// Deletes `queue`, unused for its `x-expires`.
    fn delete_expired_queue(&self, queue: &Arc<Queue>);
    /// Whether a leader in `term` may route by this host's definitions: `fence` (the metadata
    /// layer's) is passed against the host itself.
    fn pass_fence<'a>(
        &'a self,
        fence: &'a DefinitionsFence,
        term: Option<u64>,
    ) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>>;
    /// The version group machines of `kind` may run at: the newest an enabled feature flag
    /// brings (a group's leader moves its group there).
    fn enabled_group_version(&self, kind: crate::feature_flags::GroupMachineKind) -> u16;
}

/// A queue of any kind.
pub struct Queue {
    definition: QueueDefinition,
    /// What it runs with: the declared arguments with the policies applied (swapped whole
    /// when a policy changes).
    arguments: parking_lot::RwLock<Arc<QueueArguments>>,
    /// The policies that gave them.
    applied: parking_lot::RwLock<AppliedPolicy>,
    vhost: Weak<dyn QueueHost>,
    vhost_name: String,
    kind: Box<dyn QueueKind>,
    stats: QueueStats,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").field("name", &self.definition.name).finish_non_exhaustive()
    }
}

impl Queue {
    /// A queue of the kind `make` builds; the kind may keep a weak reference to its queue.
    fn with_kind(
        definition: QueueDefinition,
        arguments: QueueArguments,
        vhost: Weak<dyn QueueHost>,
        vhost_name: String,
        make: impl FnOnce(&Weak<Queue>, &QueueArguments) -> Box<dyn QueueKind>,
    ) -> Arc<Self> {
        Arc::new_cyclic(|me| {
            let kind = make(me, &arguments);
            let stats = QueueStats::new(arguments.queue_type);
            let (arguments, applied) = (parking_lot::RwLock::new(Arc::new(arguments)), Default::default());
            Queue { definition, arguments, applied, vhost, vhost_name, kind, stats }
        })
    }

    /// The name of its virtual host, for the texts of errors.
    pub fn vhost_name(&self) -> &str {
        &self.vhost_name
    }

    /// Its definition.
    pub fn definition(&self) -> &QueueDefinition {
        &self.definition
    }

    /// The arguments it runs with: as declared, with the policies that apply to it.
    pub fn arguments(&self) -> Arc<QueueArguments> {
        Arc::clone(&self.arguments.read())
    }

    /// The policies that apply to it.
    pub fn applied_policy(&self) -> AppliedPolicy {
        self.applied.read().clone()
    }

    /// Records which policies gave the arguments it was built with.
    pub(crate) fn set_applied(&self, applied: AppliedPolicy) {
        *self.applied.write() = applied;
    }

    /// Runs with `resolved` from now on (a policy that applies to it was set, changed or
    /// cleared); its kind adapts what it holds to new limits at once.
    pub(crate) fn apply_policy(self: &Arc<Self>, resolved: ResolvedQueue) {
        *self.applied.write() = resolved.applied;
        let before = std::mem::replace(&mut *self.arguments.write(), Arc::new(resolved.arguments));
        if *before != *self.arguments.read().as_ref() {
            self.kind.arguments_changed(self, &before);
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.definition.name
    }

    /// Messages ready for delivery.
    pub fn message_count(&self) -> u32 {
        self.kind.message_count()
    }

    /// Messages delivered and not yet settled.
    pub fn unacked_count(&self) -> u32 {
        self.kind.unacked_count()
    }

    /// Consumers attached.
    pub fn consumer_count(&self) -> u32 {
        self.kind.consumer_count()
    }

    /// Ready messages and consumers where the queue lives (a stand-in asks its home node).
    pub fn counts(self: &Arc<Self>) -> Reply<BrokerResult<(u32, u32)>> {
        self.kind.counts(self)
    }

    /// Refuses access from another connection to an exclusive queue (405 RESOURCE_LOCKED).
    pub fn check_owner(&self, connection: ConnectionId) -> BrokerResult<()> {
        match self.definition.exclusive_owner {
            Some(owner) if owner != connection => Err(BrokerError::resource_locked(format!(
                "cannot obtain exclusive access to locked queue '{}' in vhost '{}'",
                self.name(),
                self.vhost_name
            ))),
            _ => Ok(()),
        }
    }

    /// Marks the queue used now (for `x-expires`).
    pub fn touch(&self) {
        self.kind.touch();
    }

    /// Stores a message and dispatches it if a consumer has credit.
    pub fn publish(self: &Arc<Self>, message: Arc<Message>) -> Result<Published, StoreError> {
        let published = self.kind.publish(self, message);
        if published.is_ok() {
            self.stats.published();
        }
        published
    }

    /// Bytes it keeps on this node's disk.
    pub fn disk_bytes(&self) -> u64 {
        self.kind.disk_bytes()
    }

    /// Its message counters.
    pub fn stats(&self) -> &QueueStats {
        &self.stats
    }

    /// Delivers ready messages to consumers with credit.
    pub fn dispatch(self: &Arc<Self>) {
        self.kind.dispatch(self);
    }

    /// Attaches a consumer; exclusivity conflicts are 403 ACCESS_REFUSED, as in RabbitMQ.
    /// Dispatch does not start here: the caller first tells the client (`consume-ok`), then
    /// calls [`Queue::dispatch`].
    pub fn add_consumer(self: &Arc<Self>, consumer: Arc<Consumer>) -> Reply<BrokerResult<()>> {
        self.kind.add_consumer(self, consumer)
    }

    /// The client was told of `consumer` (`consume-ok` is queued): its deliveries may start.
    pub fn start_deliveries(self: &Arc<Self>, consumer: &Arc<Consumer>) {
        self.kind.start_deliveries(self, consumer);
    }

    /// Detaches a consumer; returns true if the queue now has none.
    pub fn remove_consumer(self: &Arc<Self>, consumer: &Arc<Consumer>) -> bool {
        self.kind.remove_consumer(self, consumer)
    }

    /// Takes the next ready message for `basic.get`, recorded on `session`.
    pub fn get<C: DeliveryChannel + 'static>(
        self: &Arc<Self>,
        session: &Arc<C>,
        no_ack: bool,
    ) -> Reply<BrokerResult<Option<GetResult>>> {
        // Generic so that callers keep their typed `Arc<Session>`; the kinds see the trait.
        let channel: Arc<dyn DeliveryChannel> = Arc::clone(session) as Arc<dyn DeliveryChannel>;
        self.kind.get(self, &channel, no_ack)
    }

    /// Settles acknowledged messages (delivered to `consumer`, if by one) and dispatches
    /// what their credit allows.
    pub fn settle(self: &Arc<Self>, messages: &[MessageRef], holder: Holder<'_>) {
        self.stats.acked(messages.len());
        self.kind.settle(self, messages, holder);
    }

    /// Settles rejected messages (reject, or nack without requeue): dead-lettered if the queue
    /// has a dead-letter exchange, dropped otherwise.
    pub fn reject(self: &Arc<Self>, messages: &[MessageRef], holder: Holder<'_>) {
        self.kind.reject(self, messages, holder);
    }

    /// Puts delivered messages back at their places, marked redelivered, and dispatches.
    pub fn requeue(self: &Arc<Self>, messages: &[MessageRef], holder: Holder<'_>) {
        self.kind.requeue(self, messages, holder);
    }

    /// Drops every ready message; returns how many.
    pub fn purge(self: &Arc<Self>) -> Reply<BrokerResult<u32>> {
        self.kind.purge(self)
    }

    /// The channel `session` closed (see [`kind::QueueKind::channel_closed`]).
    pub(crate) fn channel_closed(self: &Arc<Self>, session: SessionId) {
        self.kind.channel_closed(self, session);
    }

    /// One of the queue's timers fired.
    pub fn timer_fired(self: &Arc<Self>, timer: QueueTimer) {
        self.kind.timer_fired(self, timer);
    }

    /// Makes what the queue stores durable (the broker is stopping).
    pub fn close(self: &Arc<Self>) {
        self.kind.close(self);
    }

    /// Marks the queue deleted, releases its storage, and detaches its consumers, which are
    /// returned for cancelling.
    pub(crate) fn mark_deleted(self: &Arc<Self>) -> (u32, Vec<Arc<Consumer>>) {
        self.kind.mark_deleted(self)
    }

    /// Reads by offset of the log the queue keeps on this node, if it keeps one: a stream's
    /// whole log, or what a durable classic queue's log still holds.
    pub fn browser(&self) -> Option<crate::message_store::log_browser::LogBrowser> {
        self.kind.browser()
    }

    /// This node's member of the queue's Raft group, if it is replicated here (a quorum
    /// queue, or a stream in a cluster).
    pub fn replicas(&self) -> Option<&dyn crate::quorum::Membership> {
        self.kind.replicas()
    }

    /// The nodes the queue lives on, if this node only forwards to it (`crate::remote`).
    pub fn homes(&self) -> Option<&[u64]> {
        self.kind.homes()
    }
}

impl TimerTarget for Queue {
    fn timer_fired(self: Arc<Self>, timer: QueueTimer) {
        Queue::timer_fired(&self, timer);
    }
}
