//! A queue that is a stream (`x-queue-type: stream`): the [`QueueKind`] over a [`Stream`],
//! with its retention timer. What a stream does is in `crate::stream`.
//!
//! A stream lives on one node, or is replicated on several (`x-initial-cluster-size`, in a
//! cluster): then its publishes go through its Raft group (a confirm waits for a majority to
//! have it, fsynced), each replica's state machine appends them to its own log, and this
//! node's consumers read this node's log as it grows. Everything else is the same.
//!
//! A policy changes a live stream's retention (`max-age`, `max-length-bytes`): a stream on one
//! node sets its log's at once; a replicated stream's leader proposes
//! [`Op::ApplyRetention`] (when the policies change and when it is elected), so that every
//! replica deletes by the same limits from the same entry on. Its segment size and placement
//! are fixed when its log and group are made.

use super::consumer::Consumer;
use super::context::QueueContext;
use super::kind::{Holder, QueueKind};
use super::{DeliveryChannel, GetResult, Published, Queue, QueueArguments, QueueDefinition, Reply};
use crate::clock::now_ms;
use crate::definitions::VhostStorage;
use crate::error::{internal_error, BrokerError, BrokerResult, ReplyCode};
use crate::feature_flags::GroupMachineKind;
use crate::message::{Message, WireMessage};
use crate::message_ref::MessageRef;
use crate::message_store::log_browser::LogBrowser;
use crate::message_store::{LogStoreConfig, StoreError};
use crate::quorum::{InitialMembers, Op, QuorumGroup, Response};
use crate::scheduler::{QueueTimer, SchedulerHandle, TimerEvent};
use crate::stream::{
    GroupCoordination, GroupOp, ReplicatedOffsets, Stream, StreamArguments, StreamStateMachine,
    RETENTION_CHECK_INTERVAL_MS, STREAM_POLICIES_GROUP_VERSION,
};
use openraft::ServerState;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;
use warren_storage::FlushPolicy;

/// A stream's queue kind.
pub(crate) struct StreamQueue {
    stream: Arc<Stream>,
    appender: Box<dyn Appender>,
    scheduler: SchedulerHandle,
    deleted: AtomicBool,
    /// Whether its age check is scheduled (it runs while the stream has a `max-age`).
    checks_age: AtomicBool,
}

/// How a stream takes publishes.
trait Appender: Send + Sync {
    /// Appends `message`, or proposes it; the confirm waits for the mark.
    fn publish(&self, stream: &Stream, queue: &Arc<Queue>, message: &Arc<Message>) -> Result<Published, StoreError>;

    /// The stream is closing or deleted: its group (if any) stops.
    fn stop(&self) {}

    /// What a new consumer waits for before its start is resolved: a replica to have applied
    /// what the leader had committed (so that `x-stream-offset` and group offsets are
    /// resolved against the whole stream, not a lagging copy); `None` to start at once.
    fn caught_up(&self) -> Option<Pin<Box<dyn Future<Output = ()> + Send>>> {
        None
    }

    /// This node's member of the stream's group, if it is replicated.
    fn replicas(&self) -> Option<&dyn crate::quorum::Membership> {
        None
    }

    /// The policies that apply to the stream changed what it retains (the queue's arguments
    /// say what it should).
    fn retention_changed(&self, stream: &Stream, queue: &Queue);
}

/// A stream on this node alone appends to its log itself.
struct LocalAppends;

impl Appender for LocalAppends {
    fn publish(&self, stream: &Stream, queue: &Arc<Queue>, message: &Arc<Message>) -> Result<Published, StoreError> {
        stream.publish(queue, message)
    }

    fn retention_changed(&self, stream: &Stream, queue: &Queue) {
        stream.set_retention(queue.arguments().stream.retention);
    }
}

/// A replicated stream proposes to its group.
struct ReplicatedAppends {
    group: Arc<QuorumGroup<StreamStateMachine>>,
}

impl Appender for ReplicatedAppends {
    fn publish(&self, _: &Stream, _: &Arc<Queue>, message: &Arc<Message>) -> Result<Published, StoreError> {
        Ok(Published::Stored(Some(self.group.enqueue(WireMessage::of(message)))))
    }

    fn stop(&self) {
        self.group.close();
    }

    fn replicas(&self) -> Option<&dyn crate::quorum::Membership> {
        Some(&*self.group)
    }

    fn retention_changed(&self, _: &Stream, queue: &Queue) {
        propose_retention(&self.group, queue);
    }

    fn caught_up(&self) -> Option<Pin<Box<dyn Future<Output = ()> + Send>>> {
        let group = Arc::clone(&self.group);
        Some(Box::pin(async move {
            // Without a leader in time, the consumer starts on what this replica has.
            if let Ok(Response::NextOffset(end)) = group.ask(Op::Sync).await {
                if !group.machine().appended_up_to(end, Duration::from_millis(CATCH_UP_WAIT_MS)).await {
                    tracing::warn!(end, "a stream replica is behind its leader; a consumer starts on what it has");
                }
            }
        }))
    }
}

/// How long a new consumer of a replicated stream waits for its node's replica to catch up.
const CATCH_UP_WAIT_MS: u64 = 5_000;

/// On the leader: proposes the retention the policies give the stream, if its log keeps
/// something else (a policy changed, or the last leader died before proposing it). First
/// moves the group to the machine version that applies it, if the feature flag that brings it
/// is enabled; below that version the stream keeps its own arguments.
fn propose_retention(group: &QuorumGroup<StreamStateMachine>, queue: &Queue) {
    if !group.is_leader() {
        return;
    }
    let Some(vhost) = queue.vhost.upgrade() else { return };
    let (version, _) = group.machine().applied_retention();
    if version < STREAM_POLICIES_GROUP_VERSION {
        let enabled = vhost.enabled_group_version(GroupMachineKind::Stream);
        if enabled < STREAM_POLICIES_GROUP_VERSION {
            return;
        }
        group.propose(Op::SetMachineVersion { version: enabled });
    }
    let wanted = queue.arguments().stream.retention;
    if wanted != group.machine().log().retention() {
        group.propose(Op::ApplyRetention { retention: wanted });
    }
}

/// Whenever this node's member becomes the leader: proposes the retention (see
/// [`propose_retention`]), for as long as the stream lives.
async fn propose_retention_when_leading(queue: Weak<Queue>, group: Weak<QuorumGroup<StreamStateMachine>>) {
    let Some(running) = group.upgrade() else { return };
    let Ok(raft) = running.running().await else { return };
    drop(running);
    let mut metrics = raft.server_metrics();
    let mut leading = false;
    loop {
        let now_leading = metrics.borrow_and_update().state == ServerState::Leader;
        if now_leading && !leading {
            let (Some(queue), Some(group)) = (queue.upgrade(), group.upgrade()) else { return };
            propose_retention(&group, &queue);
        }
        leading = now_leading;
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

/// A new stream: durable, not exclusive, not auto-delete (406 otherwise, as in RabbitMQ), on a
/// broker with a data directory (540 otherwise).
pub(super) fn declare(
    definition: QueueDefinition,
    arguments: QueueArguments,
    storage: Option<&VhostStorage>,
    context: QueueContext,
) -> BrokerResult<Arc<Queue>> {
    let storage = super::require_log_of_its_own(&definition, storage, "stream", "streams")?;
    let size = arguments.initial_group_size;
    let members =
        context.replication.initial_members(&context.vhost_name, &definition.name, size, arguments.leader_locator);
    // One member is a stream on this node alone; a node joining a replicated stream's group
    // (`add_replica`) starts a replica.
    if members.members.len() > 1 || members.is_joining() {
        let dir = storage.create_stream_dir(&definition.name).map_err(|e| internal_error("cannot create stream", e))?;
        return replicated(definition, arguments, storage, &dir, context, Some(members));
    }
    let stream = create_stream(storage, &definition.name, stream_arguments(&arguments))
        .map_err(|e| internal_error("cannot create stream", e))?;
    Ok(build(definition, arguments, stream, Box::new(LocalAppends), context))
}

/// Creates a new stream's log, discarding anything stale in its place.
fn create_stream(storage: &VhostStorage, name: &str, arguments: StreamArguments) -> Result<Stream, StoreError> {
    Stream::open(&storage.create_stream_dir(name)?, storage.store_config(), arguments)
}

/// Opens a stream's log and consumer-group offsets (a stream is a queue: same directory).
fn open_stream(storage: &VhostStorage, name: &str, arguments: StreamArguments) -> Result<Stream, StoreError> {
    Stream::open(&storage.stream_dir(name), storage.store_config(), arguments)
}

/// A stream reopened from its log at startup.
pub(super) fn recover(
    definition: QueueDefinition,
    arguments: QueueArguments,
    storage: &VhostStorage,
    context: QueueContext,
) -> BrokerResult<Arc<Queue>> {
    let dir = storage.stream_dir(&definition.name);
    if crate::quorum::holds_group(&dir) {
        return replicated(definition, arguments, storage, &dir, context, None);
    }
    let stream = open_stream(storage, &definition.name, stream_arguments(&arguments))
        .map_err(|e| internal_error("cannot recover a stream", e))?;
    Ok(build(definition, arguments, stream, Box::new(LocalAppends), context))
}

/// The name of a replicated stream's Raft group, unique in the cluster.
fn group_name(vhost: &str, stream: &str) -> String {
    format!("stream:{vhost}:{stream}")
}

/// This node's replica of a replicated stream kept in `dir`: its log, the state machine
/// appending to it, the group (new if `members` are given), and the stream reading it.
fn replicated(
    definition: QueueDefinition,
    arguments: QueueArguments,
    storage: &VhostStorage,
    dir: &std::path::Path,
    context: QueueContext,
    members: Option<InitialMembers>,
) -> BrokerResult<Arc<Queue>> {
    let failed = |e: &dyn std::fmt::Display| internal_error("cannot start the stream's replica", e);
    let stream_arguments = stream_arguments(&arguments);
    // The group's Raft log keeps each publish durably until a snapshot, which flushes the
    // stream's log first: fsyncing the stream's log as it grows too would write it twice.
    let store = storage.store_config();
    let flush_policy = if store.flush_policy.fsyncs_structure() { FlushPolicy::OnFlush } else { FlushPolicy::Never };
    let config = LogStoreConfig { flush_policy, ..store.clone() };
    let log = Stream::open_log(dir, &config, &stream_arguments).map_err(|e| failed(&e))?;
    let name = group_name(&context.vhost_name, &definition.name);
    let replication = Arc::clone(&context.replication);
    let snapshot = crate::quorum::snapshot_path(dir);
    let dedup = stream_arguments.deduplication.clone();
    let machine = StreamStateMachine::open(&name, snapshot, Arc::clone(&log), dedup, Arc::clone(&replication))
        .map_err(|e| failed(&e))?;
    let recovering = members.is_none();
    let log_config = storage.replicated_log_config();
    let group =
        QuorumGroup::open(&name, dir, log_config, machine.clone(), replication, members).map_err(|e| failed(&e))?;
    let group = Arc::new(group);
    let proposer = Arc::clone(&group);
    let offsets = ReplicatedOffsets::new(machine.clone(), move |op| proposer.propose(op));
    let coordinator = Arc::clone(&group);
    let coordination =
        GroupCoordination::replicated(group.node_id(), machine.partition_groups(), move |op| coordinator.propose(op));
    // A restart closed this node's channels: its members of the super stream's groups left
    // (also those only in the log after the snapshot). Proposed before anything a client of
    // this node can propose, so no new member is dropped.
    if recovering {
        coordination.change(GroupOp::Down { node: group.node_id() });
    }
    tokio::spawn(drop_members_of_down_nodes(Arc::downgrade(&group), coordination.subscribe()));
    let stream = Stream::from_parts(dir, log, stream_arguments, Box::new(offsets), coordination);
    let leading = Arc::downgrade(&group);
    let queue = build(definition, arguments, stream, Box::new(ReplicatedAppends { group }), context);
    tokio::spawn(dispatch_as_applied(Arc::downgrade(&queue), machine.subscribe_appended()));
    tokio::spawn(propose_retention_when_leading(Arc::downgrade(&queue), leading));
    Ok(queue)
}

/// How long a node with members in the super stream's consumer groups may be unreachable
/// before the leader declares them gone (their partitions go to the others). Short: a member
/// dropped while alive joins again when its node is back.
const MEMBER_NODE_GRACE_MS: u64 = 1_000;
/// How often the leader looks at those nodes while any has members.
const MEMBER_NODE_CHECK_MS: u64 = 250;

/// On the leader of the group of a super stream's first partition: the members of a node
/// unreachable for [`MEMBER_NODE_GRACE_MS`] leave the consumer groups.
async fn drop_members_of_down_nodes(
    group: std::sync::Weak<QuorumGroup<StreamStateMachine>>,
    mut groups: tokio::sync::watch::Receiver<Arc<crate::stream::PartitionGroups>>,
) {
    let mut down_since: std::collections::HashMap<u64, tokio::time::Instant> = Default::default();
    loop {
        let nodes = groups.borrow_and_update().nodes();
        if nodes.is_empty() {
            down_since.clear();
            if groups.changed().await.is_err() {
                return;
            }
            continue;
        }
        let Some(current) = group.upgrade() else { return };
        let now = tokio::time::Instant::now();
        down_since.retain(|node, _| nodes.contains(node));
        for node in nodes {
            if !current.is_leader() || current.is_node_up(node) {
                down_since.remove(&node);
                continue;
            }
            let since = *down_since.entry(node).or_insert(now);
            if now.duration_since(since) >= Duration::from_millis(MEMBER_NODE_GRACE_MS) {
                tracing::warn!(node, "a node with consumer group members is unreachable: its members leave");
                current.propose(Op::Group(GroupOp::Down { node }));
                down_since.remove(&node);
            }
        }
        drop(current);
        tokio::select! {
            changed = groups.changed() => if changed.is_err() { return },
            () = tokio::time::sleep(Duration::from_millis(MEMBER_NODE_CHECK_MS)) => {}
        }
    }
}

/// Feeds the stream's consumers on this node whenever applied entries extend its log.
async fn dispatch_as_applied(queue: std::sync::Weak<Queue>, mut appended: tokio::sync::watch::Receiver<u64>) {
    while appended.changed().await.is_ok() {
        let Some(queue) = queue.upgrade() else { return };
        queue.dispatch();
    }
}

/// What the stream itself obeys: retention and segments, and deduplication.
fn stream_arguments(arguments: &QueueArguments) -> StreamArguments {
    StreamArguments { deduplication: arguments.deduplication(), ..arguments.stream.clone() }
}

fn build(
    definition: QueueDefinition,
    arguments: QueueArguments,
    stream: Stream,
    appender: Box<dyn Appender>,
    context: QueueContext,
) -> Arc<Queue> {
    let checks_age = stream.retention().age.is_some() || arguments.stream.retention.age.is_some();
    let scheduler = Arc::clone(&context.scheduler);
    let kind = StreamQueue {
        stream: Arc::new(stream),
        appender,
        scheduler: Arc::clone(&scheduler),
        deleted: AtomicBool::new(false),
        checks_age: AtomicBool::new(checks_age),
    };
    let queue =
        Queue::with_kind(definition, arguments, Weak::clone(&context.vhost), context.vhost_name.clone(), |_, _| {
            Box::new(kind)
        });
    if checks_age {
        schedule_age_check(&scheduler, &queue);
    }
    queue
}

fn schedule_age_check(scheduler: &SchedulerHandle, queue: &Arc<Queue>) {
    let event = TimerEvent::StreamRetention { queue: Arc::<Queue>::downgrade(queue) };
    scheduler.schedule(now_ms() + RETENTION_CHECK_INTERVAL_MS, event);
}

impl StreamQueue {
    /// Whether it has an age to check: its log's, or the one its arguments give it (a
    /// replicated stream's log takes it when its group applies the change).
    fn has_max_age(&self, queue: &Queue) -> bool {
        self.stream.retention().age.is_some() || queue.arguments().stream.retention.age.is_some()
    }

    /// Schedules the age check unless it is scheduled, while the stream has an age to check.
    fn check_age_if_needed(&self, queue: &Arc<Queue>) {
        if self.has_max_age(queue) && !self.checks_age.swap(true, Ordering::AcqRel) {
            schedule_age_check(&self.scheduler, queue);
        }
    }

    /// Deliveries were settled: nothing is removed or requeued (see [`Stream::settle`] for
    /// what it means to a consumer group).
    fn settle_offsets(
        &self,
        queue: &Arc<Queue>,
        consumer: Option<&Arc<Consumer>>,
        messages: &[MessageRef],
        requeued: bool,
    ) {
        let offsets: Vec<u64> = messages.iter().map(|m| m.offset()).collect();
        self.stream.settle(queue, consumer, &offsets, requeued);
    }
}

impl QueueKind for StreamQueue {
    fn publish(&self, queue: &Arc<Queue>, message: Arc<Message>) -> Result<Published, StoreError> {
        self.appender.publish(&self.stream, queue, &message)
    }

    fn dispatch(&self, queue: &Arc<Queue>) {
        self.stream.dispatch(queue);
    }

    fn add_consumer(&self, _queue: &Arc<Queue>, consumer: Arc<Consumer>) -> Reply<BrokerResult<()>> {
        match self.appender.caught_up() {
            None => Reply::Now(self.stream.add_consumer(consumer)),
            Some(caught_up) => {
                let stream = Arc::clone(&self.stream);
                Reply::Later(Box::pin(async move {
                    caught_up.await;
                    stream.add_consumer(consumer)
                }))
            }
        }
    }

    fn remove_consumer(&self, _queue: &Arc<Queue>, consumer: &Arc<Consumer>) -> bool {
        self.stream.remove_consumer(consumer)
    }

    /// Streams refuse `basic.get` with 540 NOT_IMPLEMENTED, a connection error, as RabbitMQ
    /// does: they are read by consumers from an offset.
    fn get(
        &self,
        queue: &Arc<Queue>,
        _session: &Arc<dyn DeliveryChannel>,
        _no_ack: bool,
    ) -> Reply<BrokerResult<Option<GetResult>>> {
        Reply::Now(Err(BrokerError::new(
            ReplyCode::NotImplemented,
            format!(
                "basic.get is not supported on stream '{}': consume with basic.consume (after basic.qos) and an \
                 x-stream-offset argument",
                queue.name()
            ),
        )))
    }

    fn settle(&self, queue: &Arc<Queue>, messages: &[MessageRef], holder: Holder<'_>) {
        self.settle_offsets(queue, holder.consumer, messages, false);
    }

    fn reject(&self, queue: &Arc<Queue>, messages: &[MessageRef], holder: Holder<'_>) {
        self.settle_offsets(queue, holder.consumer, messages, false);
    }

    fn requeue(&self, queue: &Arc<Queue>, messages: &[MessageRef], holder: Holder<'_>) {
        self.settle_offsets(queue, holder.consumer, messages, true);
    }

    /// A stream keeps its messages (0, as RabbitMQ answers): only retention removes them.
    fn purge(&self, _queue: &Arc<Queue>) -> Reply<BrokerResult<u32>> {
        Reply::Now(Ok(0))
    }

    fn message_count(&self) -> u32 {
        u32::try_from(self.stream.message_count()).unwrap_or(u32::MAX)
    }

    fn unacked_count(&self) -> u32 {
        self.stream.unacked_count()
    }

    fn consumer_count(&self) -> u32 {
        self.stream.consumer_count() as u32
    }

    fn touch(&self) {}

    fn arguments_changed(&self, queue: &Arc<Queue>, before: &QueueArguments) {
        if queue.arguments().stream.retention != before.stream.retention {
            self.appender.retention_changed(&self.stream, queue);
            self.check_age_if_needed(queue);
        }
    }

    fn timer_fired(&self, queue: &Arc<Queue>, timer: QueueTimer) {
        if timer != QueueTimer::Retention || self.deleted.load(Ordering::Acquire) {
            return;
        }
        self.stream.enforce_retention();
        match self.has_max_age(queue) {
            true => schedule_age_check(&self.scheduler, queue),
            false => self.checks_age.store(false, Ordering::Release),
        }
    }

    fn close(&self, _queue: &Arc<Queue>) {
        self.appender.stop();
        self.stream.close();
    }

    fn mark_deleted(&self, _queue: &Arc<Queue>) -> (u32, Vec<Arc<Consumer>>) {
        self.deleted.store(true, Ordering::Release);
        self.appender.stop();
        (self.message_count(), self.stream.destroy())
    }

    fn replicas(&self) -> Option<&dyn crate::quorum::Membership> {
        self.appender.replicas()
    }

    fn disk_bytes(&self) -> u64 {
        self.stream.disk_bytes()
    }

    fn browser(&self) -> Option<LogBrowser> {
        Some(self.stream.browser().clone())
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

// Defined here, with the kind that holds the stream, so that `queue/mod.rs` names no
// stream type (the stream's dispatch names `Queue`).
impl Queue {
    /// The stream, if this queue is one: for reads by offset.
    pub fn stream(&self) -> Option<&Stream> {
        self.kind.as_any().downcast_ref::<StreamQueue>().map(|kind| &*kind.stream)
    }
}
