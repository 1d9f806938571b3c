//! A quorum queue (`x-queue-type: quorum`): the [`QueueKind`] over a Raft group
//! ([`QuorumGroup`]) whose replicated state machine (`crate::quorum`) decides everything:
//! which message goes to which consumer, what is redelivered, expired, dead-lettered.
//!
//! This side turns AMQP into commands and the state machine's effects back into AMQP:
//! - publishes, acks, nacks, checkouts and cancels are proposed in order and never wait; a
//!   publisher confirm waits for the commit through the publish's [`DurableMark`];
//! - `basic.get` and `queue.purge` wait for their command's response ([`Reply::Later`]);
//! - every member applies the same entries and computes the same effects; each acts on its
//!   share: a delivery is made by the node its consumer's channel is on, reading the body
//!   from its own copy of the Raft log (the log *is* the message store); dead letters and
//!   expiry are the leader's (at-least-once dead letters are confirmed back to the group once
//!   their targets have them);
//! - when this node's member starts, channels of this node that the state remembers but that
//!   are no longer open (a restart closed them) are declared down, so what they held is
//!   delivered again; whenever this node becomes leader it resends the dead letters still
//!   waiting for a confirm and arms the expiry timer;
//! - the state machine starts from the queue's own arguments on every replica; what the
//!   policies make of them reaches it through the log: the leader proposes
//!   [`Op::ApplyPolicy`] whenever the policies that apply change and whenever it is elected
//!   (after moving the group to the machine version that has the op, once the feature flag
//!   is enabled). The node's own parts (the dead-letter exchange's name, `expires`) follow the
//!   policies at once, as a classic queue's do.

use super::consumer::Consumer;
use super::context::QueueContext;
use super::kind::{Holder, QueueKind};
use super::{DeliveryChannel, GetResult, Published, Queue, QueueArguments, QueueDefinition, Reply, SessionId};
use crate::clock::now_ms;
use crate::dead_letter::{self, DeathReason};
use crate::definitions::VhostStorage;
use crate::error::{internal_error, BrokerError, BrokerResult};
use crate::feature_flags::GroupMachineKind;
use crate::message::Message;
use crate::message_ref::MessageRef;
use crate::message_store::{DurableMark, StoreError};
use crate::node_counters::DeadLetterStrategy;
use crate::quorum::{
    entry_of, AppliedEffects, ConsumerId, ConsumerSpec, Effect, Enqueue, InitialMembers, MessageId, Op, PolicySettings,
    QuorumGroup, QuorumStateMachine, Response, Settings, DEFAULT_CHECKPOINT_INTERVAL_ENTRIES, DEFAULT_DELIVERY_LIMIT,
    QUEUE_POLICIES_GROUP_VERSION,
};
use crate::scheduler::{QueueTimer, SchedulerHandle, TimerEvent};
use openraft::ServerState;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::mpsc;
use warren_storage::LogConfig;

/// How long at-least-once dead-lettering waits before trying again a message its targets
/// did not take (no route, refused, or a failed store).
const DEAD_LETTER_RETRY_MS: u64 = 1_000;
/// Effects handled in one go by the effects task.
const EFFECTS_BATCH: usize = 256;
/// How often a member checks its consumers and, leading, the other nodes (see
/// [`Inner::housekeeping`]).
const HOUSEKEEPING_INTERVAL_MS: u64 = 1_000;
/// How long a node with channels in the state may be unreachable before the leader declares
/// its channels down (what they held is delivered to others; their consumers, if the node
/// was only cut off, are cancelled there when it sees they are gone).
const NODE_DOWN_GRACE_MS: u64 = 5_000;

/// A quorum queue's kind.
pub(crate) struct QuorumQueue {
    inner: Arc<Inner>,
}

struct Inner {
    group: QuorumGroup,
    local: Mutex<Local>,
    scheduler: SchedulerHandle,
    /// Woken when housekeeping may have something to watch again (a consumer attached here,
    /// an entry applied); an idle queue's housekeeping sleeps until then, so that a thousand
    /// idle queues do not wake a thousand times a second.
    housekeeping_wanted: Arc<tokio::sync::Notify>,
    /// Passed once per term before this node dead-letters at least once as the leader.
    fence: crate::catalog::DefinitionsFence,
}

/// What this node knows that the replicated state does not: where deliveries go.
#[derive(Default)]
struct Local {
    /// The consumers attached through this node, by their id in the state.
    consumers: HashMap<ConsumerId, Arc<Consumer>>,
    /// Channels open on this node that consumed or got from the queue.
    channels: HashSet<u64>,
    deleted: bool,
    last_used_ms: u64,
    /// When the message-expiry timer is armed for, if it is.
    expiry_timer_ms: Option<u64>,
    /// Consumers of this node seen attached in the state (one that then disappears from it
    /// was declared down by the leader, and is cancelled).
    seen_attached: HashSet<ConsumerId>,
    /// Nodes with channels in the state that the leader found unreachable, and since when.
    down_since: HashMap<u64, std::time::Instant>,
}

/// A new quorum queue: durable, not exclusive, not auto-delete (406 otherwise, as in
/// RabbitMQ), on a broker with a data directory (540 otherwise).
pub(super) fn declare(
    definition: QueueDefinition,
    arguments: QueueArguments,
    storage: Option<&VhostStorage>,
    context: QueueContext,
) -> BrokerResult<Arc<Queue>> {
    let storage = super::require_log_of_its_own(&definition, storage, "quorum queue", "quorum queues")?;
    let (dir, log_config) =
        storage.create_quorum_queue(&definition.name).map_err(|e| internal_error("cannot create quorum queue", e))?;
    let size = arguments.initial_group_size;
    let locator = arguments.leader_locator;
    let members = context.replication.initial_members(&context.vhost_name, &definition.name, size, locator);
    build(definition, arguments, &dir, log_config, context, Some(members))
}

/// A quorum queue reopened from its Raft log and snapshot at startup.
pub(super) fn recover(
    definition: QueueDefinition,
    arguments: QueueArguments,
    storage: &VhostStorage,
    context: QueueContext,
) -> BrokerResult<Arc<Queue>> {
    let (dir, log_config) = storage.quorum_queue(&definition.name);
    build(definition, arguments, &dir, log_config, context, None)
}

/// What the state machine needs of the queue's arguments (the quorum layer knows nothing of
/// their parsing).
impl From<&QueueArguments> for Settings {
    fn from(arguments: &QueueArguments) -> Self {
        let policy = PolicySettings {
            message_ttl_ms: arguments.message_ttl_ms,
            max_length: arguments.max_length,
            max_length_bytes: arguments.max_length_bytes,
            overflow: arguments.overflow,
            dead_letter: arguments.dead_letter_exchange.is_some(),
            dead_letter_strategy: arguments.dead_letter_strategy,
            delivery_limit: arguments
                .delivery_limit
                .map_or(DEFAULT_DELIVERY_LIMIT, |limit| u32::try_from(limit).unwrap_or(u32::MAX)),
        };
        Settings {
            max_priority: arguments.max_priority,
            policy,
            single_active_consumer: arguments.single_active_consumer,
            deduplication: arguments.deduplication(),
            ttl_from_delay: false,
        }
    }
}

/// The name of a quorum queue's Raft group, unique in the cluster.
fn group_name(vhost: &str, queue: &str) -> String {
    format!("quorum:{vhost}:{queue}")
}

fn build(
    definition: QueueDefinition,
    arguments: QueueArguments,
    dir: &Path,
    log_config: LogConfig,
    context: QueueContext,
    members: Option<InitialMembers>,
) -> BrokerResult<Arc<Queue>> {
    let (effects_tx, effects_rx) = mpsc::unbounded_channel();
    let name = group_name(&context.vhost_name, &definition.name);
    // Every replica starts from the same settings: the queue's own arguments (`arguments`
    // has the policies of this node's catalog, which the log brings in as `ApplyPolicy`).
    let settings = Settings::from(&QueueArguments::parse(&definition.arguments)?);
    let replication = Arc::clone(&context.replication);
    let group = QuorumStateMachine::open(
        &name,
        crate::quorum::snapshot_path(dir),
        settings,
        DEFAULT_CHECKPOINT_INTERVAL_ENTRIES,
        effects_tx,
    )
    .map_err(crate::quorum::GroupError::from)
    .and_then(|machine| QuorumGroup::open(&name, dir, log_config, machine, replication, members))
    .map_err(|e| internal_error("cannot start the quorum queue's group", e))?;
    let expires = arguments.expires_ms;
    let local = Local { last_used_ms: now_ms(), ..Local::default() };
    let inner = Arc::new(Inner {
        group,
        local: Mutex::new(local),
        scheduler: Arc::clone(&context.scheduler),
        housekeeping_wanted: Arc::new(tokio::sync::Notify::new()),
        fence: crate::catalog::DefinitionsFence::default(),
    });
    let kind = QuorumQueue { inner: Arc::clone(&inner) };
    let queue =
        Queue::with_kind(definition, arguments, Weak::clone(&context.vhost), context.vhost_name.clone(), |_, _| {
            Box::new(kind)
        });
    tokio::spawn(act_on_effects(Arc::downgrade(&queue), Arc::downgrade(&inner), effects_rx));
    tokio::spawn(take_over(Arc::downgrade(&queue), Arc::downgrade(&inner)));
    if let Some(expires) = expires {
        let event = TimerEvent::QueueExpiry { queue: Arc::<Queue>::downgrade(&queue) };
        context.scheduler.schedule(now_ms().saturating_add(expires), event);
    }
    Ok(queue)
}

impl Inner {
    /// The id a consumer of this node has in the replicated state.
    fn consumer_id(&self, consumer: &Consumer) -> ConsumerId {
        ConsumerId::new(self.group.node_id(), consumer.session().id().0, consumer.tag().as_str())
    }

    /// Who holds deliveries being settled, in the replicated state.
    fn holder_id(&self, holder: Holder<'_>) -> ConsumerId {
        match holder.consumer {
            Some(consumer) => self.consumer_id(consumer),
            None => ConsumerId::getter(self.group.node_id(), holder.session.0),
        }
    }
}

fn ids(messages: &[MessageRef]) -> Vec<MessageId> {
    messages.iter().map(|m| m.position()).collect()
}

/// The ready-list reference a session keeps for a delivered message: its id.
fn message_ref(id: MessageId) -> MessageRef {
    MessageRef::new(id, id, false, 0)
}

/// Runs the effects of applied entries, in order, for as long as the queue lives.
async fn act_on_effects(queue: Weak<Queue>, inner: Weak<Inner>, mut effects: mpsc::UnboundedReceiver<AppliedEffects>) {
    let mut batch = Vec::new();
    while effects.recv_many(&mut batch, EFFECTS_BATCH).await > 0 {
        let (Some(queue), Some(inner)) = (queue.upgrade(), inner.upgrade()) else { return };
        inner.act(&queue, std::mem::take(&mut batch));
        inner.housekeeping_wanted.notify_one();
    }
}

/// Once this node's member runs: channels of this node the state remembers that are not
/// open here are down (a restart closed them); then, whenever this node becomes leader, the
/// leader's duties start (see [`Inner::lead`]).
async fn take_over(queue: Weak<Queue>, inner: Weak<Inner>) {
    let Some(running) = inner.upgrade() else { return };
    let raft = match running.group.running().await {
        Ok(raft) => raft,
        Err(error) => {
            tracing::debug!(%error, "a quorum queue stopped before it ran");
            return;
        }
    };
    let me = running.group.node_id();
    let remembered = running.group.machine().read(|state| state.channels_of(me));
    let open = running.local.lock().channels.clone();
    for channel in remembered.into_iter().filter(|channel| !open.contains(channel)) {
        running.group.propose(Op::Down { node: me, channel });
    }
    drop(running);
    // Server metrics change with the role and the leader only, not with every commit.
    let mut metrics = raft.server_metrics();
    let mut leading = false;
    let mut housekeeping = tokio::time::interval(Duration::from_millis(HOUSEKEEPING_INTERVAL_MS));
    housekeeping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let wanted = match inner.upgrade() {
        Some(inner) => Arc::clone(&inner.housekeeping_wanted),
        None => return,
    };
    loop {
        let now_leading = metrics.borrow_and_update().state == ServerState::Leader;
        let Some(current) = inner.upgrade() else { return };
        if now_leading && !leading {
            let Some(queue) = queue.upgrade() else { return };
            current.lead(&queue);
        }
        leading = now_leading;
        let watching = current.has_something_to_watch();
        drop(current);
        tokio::select! {
            changed = metrics.changed() => if changed.is_err() { return },
            _ = housekeeping.tick(), if watching => {
                let Some(inner) = inner.upgrade() else { return };
                inner.housekeeping();
            }
            () = wanted.notified(), if !watching => {}
        }
    }
}

/// At-least-once dead-lettering: publishes the message to the dead-letter exchange until
/// its targets have it (confirmed), then tells the group it may go. A new leader first
/// catches up with the definitions ([`crate::catalog::DefinitionsFence`]).
async fn dead_letter_at_least_once(queue: Weak<Queue>, inner: Weak<Inner>, id: MessageId, reason: DeathReason) {
    loop {
        let marks = {
            let (Some(queue), Some(inner)) = (queue.upgrade(), inner.upgrade()) else { return };
            if inner.local.lock().deleted || !inner.group.is_leader() {
                return;
            }
            let Some(vhost) = queue.vhost.upgrade() else { return };
            match vhost.pass_fence(&inner.fence, inner.group.leader_term()).await {
                true => inner.publish_dead_letter(&queue, id, reason),
                false => None,
            }
        };
        if let Some(marks) = marks {
            let mut confirmed = true;
            for mark in &marks {
                confirmed &= mark.wait().await.is_ok();
            }
            if confirmed {
                crate::node_counters::of_queue_type(super::QueueType::Quorum).dead_lettered_confirmed.add();
                if let Some(inner) = inner.upgrade() {
                    inner.group.propose(Op::DeadLettered { ids: vec![id] });
                }
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(DEAD_LETTER_RETRY_MS)).await;
    }
}

impl Inner {
    /// This node became the leader: dead letters still waiting for a confirm are sent
    /// again, and the expiry timer is armed.
    fn lead(self: &Arc<Self>, queue: &Arc<Queue>) {
        for (id, reason) in self.group.machine().read(|state| state.dead_lettering()) {
            tokio::spawn(dead_letter_at_least_once(Arc::downgrade(queue), Arc::downgrade(self), id, reason));
        }
        self.arm_expiry(queue);
        self.propose_policy(queue);
    }

    /// On the leader: proposes what the policies make of the queue's settings, if the state
    /// obeys something else (a policy changed, or the last leader died before proposing it).
    /// First moves the group to the machine version that applies policies, if the feature
    /// flag that brings it is enabled; below that version the queue keeps its own arguments.
    fn propose_policy(&self, queue: &Queue) {
        if !self.group.is_leader() {
            return;
        }
        let Some(vhost) = queue.vhost.upgrade() else { return };
        let (version, obeyed) = self.group.machine().read(|state| (state.machine_version(), state.settings().policy));
        if version < QUEUE_POLICIES_GROUP_VERSION {
            let enabled = vhost.enabled_group_version(GroupMachineKind::QuorumQueue);
            if enabled < QUEUE_POLICIES_GROUP_VERSION {
                return;
            }
            self.group.propose(Op::SetMachineVersion { version: enabled });
        }
        let wanted = Settings::from(queue.arguments().as_ref()).policy;
        if wanted != obeyed {
            self.group.propose(Op::ApplyPolicy { settings: wanted });
        }
    }

    /// Every member: its consumers the state no longer has are cancelled (with
    /// `basic.cancel`, so clients resubscribe). The leader: channels of nodes unreachable for
    /// longer than [`NODE_DOWN_GRACE_MS`] are declared down.
    /// Whether [`Inner::housekeeping`] has anything to check: consumers attached here, or, on
    /// the leader, channels in the state or nodes it saw down.
    fn has_something_to_watch(&self) -> bool {
        let local = self.local.lock();
        if !local.consumers.is_empty() || !local.down_since.is_empty() {
            return true;
        }
        drop(local);
        self.group.is_leader() && self.group.machine().read(|state| !state.nodes_with_channels().is_empty())
    }

    fn housekeeping(&self) {
        let machine = self.group.machine();
        let vanished: Vec<Arc<Consumer>> = {
            let mut local = self.local.lock();
            let ids: Vec<ConsumerId> = local.consumers.keys().cloned().collect();
            let mut vanished = Vec::new();
            for id in ids {
                if machine.read(|state| state.is_attached(&id)) {
                    local.seen_attached.insert(id);
                } else if local.seen_attached.remove(&id) {
                    vanished.extend(local.consumers.remove(&id));
                }
            }
            vanished
        };
        for consumer in vanished {
            tracing::warn!(consumer = consumer.tag().as_str(), "a quorum queue's consumer was dropped by its leader");
            consumer.session().cancelled_by_broker(&consumer);
        }
        if !self.group.is_leader() {
            self.local.lock().down_since.clear();
            return;
        }
        let me = self.group.node_id();
        let now = std::time::Instant::now();
        for node in machine.read(|state| state.nodes_with_channels()).into_iter().filter(|n| *n != me) {
            if self.group.is_node_up(node) {
                self.local.lock().down_since.remove(&node);
                continue;
            }
            let since = *self.local.lock().down_since.entry(node).or_insert(now);
            if now.duration_since(since) >= Duration::from_millis(NODE_DOWN_GRACE_MS) {
                for channel in machine.read(|state| state.channels_of(node)) {
                    self.group.propose(Op::Down { node, channel });
                }
                self.local.lock().down_since.insert(node, now);
            }
        }
    }

    /// Acts on this node's share of effects: deliveries to its consumers; dead letters if
    /// it leads.
    fn act(self: &Arc<Self>, queue: &Arc<Queue>, applied: Vec<AppliedEffects>) {
        if self.local.lock().deleted {
            return;
        }
        let (me, leading) = (self.group.node_id(), self.group.is_leader());
        // Settles of no-ack deliveries, and returns of deliveries nobody here takes.
        let mut settles: BTreeMap<ConsumerId, Vec<MessageId>> = BTreeMap::new();
        let mut returns: BTreeMap<ConsumerId, Vec<MessageId>> = BTreeMap::new();
        for effect in applied.into_iter().flat_map(|applied| applied.effects) {
            match effect {
                Effect::Deliver { consumer, .. } if consumer.node != me => {}
                Effect::Deliver { consumer, id, delivery_count, redelivered } => {
                    let target = self.local.lock().consumers.get(&consumer).cloned();
                    let Some(target) = target else {
                        returns.entry(consumer).or_default().push(id);
                        continue;
                    };
                    if self.deliver(queue, &target, id, delivery_count, redelivered) && target.no_ack() {
                        settles.entry(consumer).or_default().push(id);
                    }
                }
                Effect::DeadLetter { .. } if !leading => {}
                Effect::DeadLetter { id, reason, confirm: false } => {
                    queue.stats().of_type().dead_lettered(DeadLetterStrategy::AtMostOnce, reason);
                    self.publish_dead_letter(queue, id, reason);
                }
                Effect::DeadLetter { id, reason, confirm: true } => {
                    queue.stats().of_type().dead_lettered(DeadLetterStrategy::AtLeastOnce, reason);
                    let (queue, inner) = (Arc::downgrade(queue), Arc::downgrade(self));
                    tokio::spawn(dead_letter_at_least_once(queue, inner, id, reason));
                }
                Effect::ConsumerActive { .. } => {}
            }
        }
        for (consumer, ids) in settles {
            self.group.propose(Op::Settle { consumer, ids });
        }
        for (consumer, ids) in returns {
            self.group.propose(Op::Return { consumer, ids });
        }
        if leading {
            self.arm_expiry(queue);
        }
    }

    /// Hands message `id` to `consumer`; false if its body cannot be read (it is then
    /// dropped: settled, and logged).
    fn deliver(
        &self,
        queue: &Arc<Queue>,
        consumer: &Arc<Consumer>,
        id: MessageId,
        delivery_count: u32,
        redelivered: bool,
    ) -> bool {
        let message = match self.group.message(id) {
            Ok(message) => message,
            Err(error) => {
                tracing::error!(queue = queue.name(), id, %error, "cannot read a message to deliver; dropped");
                self.group.propose(Op::Settle { consumer: self.consumer_id(consumer), ids: vec![id] });
                return false;
            }
        };
        let message =
            if delivery_count > 0 { dead_letter::with_delivery_count(message, delivery_count) } else { message };
        consumer.session().push(consumer, queue, message_ref(id), redelivered, message);
        true
    }

    /// Publishes the dead-letter copy of message `id`; the marks its confirm waits for, or
    /// `None` if no target took it.
    fn publish_dead_letter(&self, queue: &Arc<Queue>, id: MessageId, reason: DeathReason) -> Option<Vec<DurableMark>> {
        let vhost = queue.vhost.upgrade()?;
        let arguments = queue.arguments();
        let exchange = arguments.dead_letter_exchange.as_deref()?;
        let message = match self.group.message(id) {
            Ok(message) => message,
            Err(error) => {
                tracing::error!(queue = queue.name(), id, %error, "cannot read a message to dead-letter; dropped");
                return Some(Vec::new());
            }
        };
        let routing_key = arguments.dead_letter_routing_key.as_deref().unwrap_or(message.routing_key.as_str());
        let copy = dead_letter::dead_letter(
            &message,
            queue.name(),
            reason,
            &routing_key.into(),
            &exchange.into(),
            now_ms() / 1000,
        );
        let copy = match copy {
            Ok(copy) => copy,
            Err(error) => {
                tracing::error!(queue = queue.name(), %error, "cannot dead-letter a message; dropped");
                return Some(Vec::new());
            }
        };
        let outcome = vhost.publish_dead_letter(queue.name(), copy);
        (outcome.routed && !outcome.rejected && outcome.failure.is_none()).then_some(outcome.marks)
    }

    /// Arms the timer for the next message to expire, unless one is armed earlier.
    fn arm_expiry(&self, queue: &Arc<Queue>) {
        if let Some(at) = self.group.machine().read(|state| state.next_expiry_ms()) {
            self.arm_expiry_at(queue, at);
        }
    }

    fn arm_expiry_at(&self, queue: &Arc<Queue>, at_ms: u64) {
        let mut local = self.local.lock();
        if local.deleted || local.expiry_timer_ms.is_some_and(|armed| armed <= at_ms) {
            return;
        }
        local.expiry_timer_ms = Some(at_ms);
        self.scheduler.schedule(at_ms, TimerEvent::MessageExpiry { queue: Arc::<Queue>::downgrade(queue), at_ms });
    }
}

impl QueueKind for QuorumQueue {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn disk_bytes(&self) -> u64 {
        self.inner.group.size_bytes()
    }

    /// Proposes the message; a confirm waits for its commit (a nack if `x-overflow` refuses
    /// it when applied).
    fn publish(&self, queue: &Arc<Queue>, message: Arc<Message>) -> Result<Published, StoreError> {
        if self.inner.local.lock().deleted {
            return Ok(Published::Stored(None));
        }
        let mark = self.inner.group.enqueue(Enqueue::of(&message));
        let ttl = [queue.arguments().message_ttl_ms, message.properties.expiration_ms()].into_iter().flatten().min();
        if let Some(ttl) = ttl {
            self.inner.arm_expiry_at(queue, now_ms().saturating_add(ttl));
        }
        Ok(Published::Stored(Some(mark)))
    }

    /// The state machine dispatches as it applies commands: nothing to do here.
    fn dispatch(&self, _queue: &Arc<Queue>) {}

    /// Attaches a consumer; exclusivity conflicts are 403 ACCESS_REFUSED, as in RabbitMQ.
    fn add_consumer(&self, queue: &Arc<Queue>, consumer: Arc<Consumer>) -> Reply<BrokerResult<()>> {
        Reply::Now(self.attach(queue, consumer))
    }

    /// Detaches a consumer; what it holds stays held until settled or its channel closes.
    fn remove_consumer(&self, _queue: &Arc<Queue>, consumer: &Arc<Consumer>) -> bool {
        let id = self.inner.consumer_id(consumer);
        let none_left = {
            let mut local = self.inner.local.lock();
            local.consumers.remove(&id);
            local.seen_attached.remove(&id);
            local.last_used_ms = now_ms();
            local.consumers.is_empty()
        };
        self.inner.group.propose(Op::Cancel { consumer: id });
        none_left
    }

    /// `basic.get`: answered once the group has applied the dequeue.
    fn get(
        &self,
        queue: &Arc<Queue>,
        session: &Arc<dyn DeliveryChannel>,
        no_ack: bool,
    ) -> Reply<BrokerResult<Option<GetResult>>> {
        {
            let mut local = self.inner.local.lock();
            local.channels.insert(session.id().0);
            local.last_used_ms = now_ms();
        }
        session.tracked_by(queue);
        let consumer = ConsumerId::getter(self.inner.group.node_id(), session.id().0);
        let taken = self.inner.group.ask(Op::Dequeue { consumer, settle: no_ack });
        let (inner, queue, session) = (Arc::clone(&self.inner), Arc::clone(queue), Arc::clone(session));
        Reply::Later(Box::pin(async move {
            let response = taken.await.map_err(|e| internal_error("basic.get on a quorum queue failed", e))?;
            let Response::Dequeued(Some(taken)) = response else { return Ok(None) };
            // The answer may come from the leader on another node before this one has the entry.
            inner.group.applied(entry_of(taken.id).0).await.map_err(|e| internal_error("basic.get failed", e))?;
            let mut message = inner.group.message(taken.id).map_err(|e| internal_error("cannot read a message", e))?;
            if taken.delivery_count > 0 {
                message = dead_letter::with_delivery_count(message, taken.delivery_count);
            }
            let delivery_tag = session.record_get(&queue, message_ref(taken.id), no_ack);
            let message_count = u32::try_from(taken.ready_after).unwrap_or(u32::MAX);
            Ok(Some(GetResult { delivery_tag, redelivered: taken.redelivered, message, message_count }))
        }))
    }

    fn settle(&self, _queue: &Arc<Queue>, messages: &[MessageRef], holder: Holder<'_>) {
        self.inner.group.propose(Op::Settle { consumer: self.inner.holder_id(holder), ids: ids(messages) });
    }

    /// Dead-lettered (reason `rejected`) or dropped, by the state machine.
    fn reject(&self, _queue: &Arc<Queue>, messages: &[MessageRef], holder: Holder<'_>) {
        self.inner.group.propose(Op::Discard { consumer: self.inner.holder_id(holder), ids: ids(messages) });
    }

    /// Back in place, with one more failed delivery each (past `x-delivery-limit`,
    /// dead-lettered with reason `delivery_limit`).
    fn requeue(&self, _queue: &Arc<Queue>, messages: &[MessageRef], holder: Holder<'_>) {
        self.inner.group.propose(Op::Return { consumer: self.inner.holder_id(holder), ids: ids(messages) });
    }

    fn purge(&self, _queue: &Arc<Queue>) -> Reply<BrokerResult<u32>> {
        let purged = self.inner.group.ask(Op::Purge);
        Reply::Later(Box::pin(async move {
            match purged.await {
                Ok(Response::Purged(count)) => Ok(u32::try_from(count).unwrap_or(u32::MAX)),
                Ok(_) => Ok(0),
                Err(error) => Err(internal_error("queue.purge on a quorum queue failed", error)),
            }
        }))
    }

    fn channel_closed(&self, _queue: &Arc<Queue>, session: SessionId) {
        {
            let mut local = self.inner.local.lock();
            local.channels.remove(&session.0);
            local.consumers.retain(|id, _| id.channel != session.0);
        }
        self.inner.group.propose(Op::Down { node: self.inner.group.node_id(), channel: session.0 });
    }

    fn message_count(&self) -> u32 {
        let ready = self.inner.group.machine().read(|state| state.ready_count());
        u32::try_from(ready).unwrap_or(u32::MAX)
    }

    fn unacked_count(&self) -> u32 {
        let unacked = self.inner.group.machine().read(|state| state.unacked_count());
        u32::try_from(unacked).unwrap_or(u32::MAX)
    }

    fn consumer_count(&self) -> u32 {
        let consumers = self.inner.group.machine().read(|state| state.consumer_count());
        u32::try_from(consumers).unwrap_or(u32::MAX)
    }

    fn touch(&self) {
        self.inner.local.lock().last_used_ms = now_ms();
    }

    fn arguments_changed(&self, queue: &Arc<Queue>, before: &QueueArguments) {
        let expires = queue.arguments().expires_ms;
        if let Some(expires) = expires.filter(|_| expires != before.expires_ms) {
            let event = TimerEvent::QueueExpiry { queue: Arc::<Queue>::downgrade(queue) };
            self.inner.scheduler.schedule(now_ms().saturating_add(expires), event);
        }
        self.inner.propose_policy(queue);
    }

    fn timer_fired(&self, queue: &Arc<Queue>, timer: QueueTimer) {
        match timer {
            QueueTimer::MessageExpiry(at_ms) => self.expire(queue, at_ms),
            QueueTimer::Unused => self.check_unused(queue),
            QueueTimer::Retention => {}
        }
    }

    fn close(&self, _queue: &Arc<Queue>) {
        self.inner.group.close();
    }

    fn mark_deleted(&self, _queue: &Arc<Queue>) -> (u32, Vec<Arc<Consumer>>) {
        let count = self.message_count();
        let consumers = {
            let mut local = self.inner.local.lock();
            local.deleted = true;
            local.consumers.drain().map(|(_, consumer)| consumer).collect()
        };
        self.inner.group.destroy();
        (count, consumers)
    }
    fn replicas(&self) -> Option<&dyn crate::quorum::Membership> {
        Some(&self.inner.group)
    }
}

impl QuorumQueue {
    /// Attaches `consumer` (see [`QueueKind::add_consumer`]).
    fn attach(&self, queue: &Arc<Queue>, consumer: Arc<Consumer>) -> BrokerResult<()> {
        let id = self.inner.consumer_id(&consumer);
        {
            let mut local = self.inner.local.lock();
            if local.deleted {
                return Err(BrokerError::not_found(format!(
                    "no queue '{}' in vhost '{}'",
                    queue.name(),
                    queue.vhost_name()
                )));
            }
            let exclusive_attached = local.consumers.values().any(|c| c.is_exclusive());
            let attached = !local.consumers.is_empty() || self.consumer_count() > 0;
            super::check_exclusive_consume(queue, exclusive_attached, attached, &consumer)?;
            local.consumers.insert(id.clone(), Arc::clone(&consumer));
            local.channels.insert(id.channel);
            local.last_used_ms = now_ms();
        }
        self.inner.housekeeping_wanted.notify_one();
        consumer.session().tracked_by(queue);
        // No-ack deliveries are settled as sent: credit does not apply to them.
        let prefetch = if consumer.no_ack() { 0 } else { consumer.prefetch() };
        let priority =
            i32::try_from(consumer.priority()).unwrap_or(if consumer.priority() < 0 { i32::MIN } else { i32::MAX });
        let spec = ConsumerSpec { prefetch, priority };
        // A tag filter is part of the replicated state: every replica picks the same messages.
        self.inner.group.propose(match consumer.filter() {
            Some(filter) => Op::CheckoutFiltered { consumer: id, spec, filter: filter.clone() },
            None => Op::Checkout { consumer: id, spec },
        });
        Ok(())
    }

    /// The expiry timer for `at_ms` fired: the group expires what is due by its clock, then
    /// the timer is armed for the next message.
    fn expire(&self, queue: &Arc<Queue>, at_ms: u64) {
        {
            let mut local = self.inner.local.lock();
            if local.expiry_timer_ms == Some(at_ms) {
                local.expiry_timer_ms = None;
            }
        }
        if !self.inner.group.is_leader() {
            return; // The leader expires messages; a new one arms its own timer.
        }
        let expired = self.inner.group.ask(Op::Expire);
        let (inner, queue) = (Arc::downgrade(&self.inner), Arc::downgrade(queue));
        tokio::spawn(async move {
            let _ = expired.await;
            if let (Some(inner), Some(queue)) = (inner.upgrade(), queue.upgrade()) {
                inner.arm_expiry(&queue);
            }
        });
    }

    /// `x-expires`: deletes the queue if it has been unused for that long, or re-arms.
    /// `x-expires`: the leader decides, from uses through any node (the replicated state
    /// counts the consumers and records gets and new consumers); other members look again
    /// later, in case they lead by then.
    fn check_unused(&self, queue: &Arc<Queue>) {
        let leading = self.inner.group.is_leader();
        let in_use = self.consumer_count() > 0 || !leading;
        let last_used_ms = {
            let local = self.inner.local.lock();
            if local.deleted {
                return;
            }
            local.last_used_ms.max(self.inner.group.machine().last_used_ms())
        };
        super::expiry::delete_if_unused(queue, &self.inner.scheduler, in_use, last_used_ms);
    }
}
