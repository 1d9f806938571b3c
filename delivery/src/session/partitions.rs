//! A consumer of a super stream: one consumer per partition under one tag, started
//! together (and cancelled together, by [`Session::cancel`]); each part's deliveries carry
//! the partition they came from. In a consumer group (`x-consumer-group`), the parts read
//! only the partitions the group gives the consumer (`crate::stream::PartitionGroups`, kept by
//! the first partition), and a partition taken away is handed over once what is in flight on
//! it is settled, or after the rebalance timeout ([`REBALANCE_TIMEOUT_ARGUMENT`]).

use super::{reused_tag, Session};
use crate::error::{BrokerError, BrokerResult, ReplyCode};
use crate::message::Message;
use crate::queue::consumer::{Consumer, ConsumerOptions, PARTITION_HEADER};
use crate::queue::{DeliveryChannel, Queue, Reply};
use crate::quorum::ConsumerId;
use crate::stream::{GroupOp, PartitionGroups, MAX_GROUP_MEMBERS};
use amq_protocol::types::ShortString;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

impl Session {
    /// Starts a consumer of a super stream: one consumer of each partition (in partition
    /// order), all under `tag`. A tag already used on this channel is 530 NOT_ALLOWED; if a
    /// partition refuses, the parts started are cancelled.
    pub fn consume_partitions(
        self: &Arc<Self>,
        partitions: Vec<Arc<Queue>>,
        tag: ShortString,
        options: ConsumerOptions,
    ) -> Reply<BrokerResult<Vec<Arc<Consumer>>>> {
        let consumers = match self.new_partition_consumers(&partitions, tag.clone(), options) {
            Ok(consumers) => consumers,
            Err(error) => return Reply::Now(Err(error)),
        };
        let group = match consumers.first().map(|c| crate::stream::group_of(c)).transpose() {
            Ok(group) => group.flatten(),
            Err(error) => {
                self.cancel(tag.as_str());
                return Reply::Now(Err(error));
            }
        };
        let rebalance_timeout_ms = match consumers.first().map(|c| rebalance_timeout_ms(c)).transpose() {
            Ok(timeout) => timeout.flatten().unwrap_or(DEFAULT_REBALANCE_TIMEOUT_MS),
            Err(error) => {
                self.cancel(tag.as_str());
                return Reply::Now(Err(error));
            }
        };
        if group.is_some() && partitions.iter().any(|p| p.stream().is_none()) {
            // The group's assignment is followed on the member's node, by each partition's
            // replica there (a forwarded consumer would read outside it).
            self.cancel(tag.as_str());
            return Reply::Now(Err(BrokerError::new(
                ReplyCode::NotImplemented,
                "a member of a super stream's consumer group reads every partition's replica on its node: consume \
                 through a node that holds a replica of each partition",
            )));
        }
        if let Err(error) = group.as_deref().map(|g| room_in_group(&partitions, g)).transpose() {
            self.cancel(tag.as_str());
            return Reply::Now(Err(error));
        }
        let mut later = Vec::new();
        for consumer in &consumers {
            match consumer.queue().add_consumer(Arc::clone(consumer)) {
                Reply::Now(Ok(())) => {}
                Reply::Now(Err(error)) => {
                    self.cancel(tag.as_str());
                    return Reply::Now(Err(error));
                }
                Reply::Later(started) => later.push(started),
            }
        }
        if later.is_empty() {
            if let Some(group) = group {
                join_group(group, &consumers, rebalance_timeout_ms);
            }
            return Reply::Now(Ok(consumers));
        }
        let session = Arc::clone(self);
        Reply::Later(Box::pin(async move {
            for started in later {
                if let Err(error) = started.await {
                    session.cancel(tag.as_str());
                    return Err(error);
                }
            }
            if let Some(group) = group {
                join_group(group, &consumers, rebalance_timeout_ms);
            }
            Ok(consumers)
        }))
    }

    fn new_partition_consumers(
        self: &Arc<Self>,
        partitions: &[Arc<Queue>],
        tag: ShortString,
        options: ConsumerOptions,
    ) -> BrokerResult<Vec<Arc<Consumer>>> {
        let mut state = self.state.lock();
        if state.has_tag(tag.as_str()) {
            return Err(reused_tag(tag.as_str()));
        }
        let prefetch = state.consumer_prefetch;
        let mut consumers = Vec::with_capacity(partitions.len());
        for (index, queue) in partitions.iter().enumerate() {
            let consumer = Consumer::new(
                tag.clone(),
                Arc::clone(queue),
                Arc::clone(self) as Arc<dyn DeliveryChannel>,
                options.clone(),
                prefetch,
            )?;
            consumers.push(Arc::new(consumer.in_partition(index as u32)));
        }
        state.consumers.extend(consumers.iter().cloned());
        Ok(consumers)
    }
}

/// 406 if consumer group `group` of the super stream of `partitions` has as many members as a
/// group may (its `Join` would be ignored, and the consumer would read nothing).
fn room_in_group(partitions: &[Arc<Queue>], group: &str) -> BrokerResult<()> {
    let Some(first) = partitions.first().and_then(|p| p.stream()) else { return Ok(()) };
    let members = first.coordination().subscribe().borrow().members(group).len();
    if members < MAX_GROUP_MEMBERS {
        return Ok(());
    }
    Err(BrokerError::precondition_failed(format!(
        "consumer group '{group}' has {members} members, the most a group may have ({MAX_GROUP_MEMBERS})"
    )))
}

/// `message` with the super stream partition it came from in its headers.
pub(super) fn with_partition_header(message: Arc<Message>, partition: u32) -> Arc<Message> {
    match message.properties.with_long_long_header(PARTITION_HEADER, i64::from(partition)) {
        Ok(properties) => Arc::new(Message { properties, ..Message::clone(&message) }),
        Err(error) => {
            tracing::warn!(partition, %error, "cannot add the partition header; delivering without it");
            message
        }
    }
}

/// The consumer argument saying how long (ms) a member giving a partition up may take to
/// settle its deliveries in flight on it; then they are returned (the next owner reads them
/// again). Kafka's name for the same bound.
pub const REBALANCE_TIMEOUT_ARGUMENT: &str = "x-rebalance-timeout";
/// The rebalance timeout when the consumer does not give one, ms.
pub const DEFAULT_REBALANCE_TIMEOUT_MS: u64 = 30_000;
/// The longest rebalance timeout a consumer may ask for, ms (an hour).
pub const MAX_REBALANCE_TIMEOUT_MS: u64 = 3_600_000;

/// `consumer`'s rebalance timeout, if it gives one; 406 for a value that is not one.
fn rebalance_timeout_ms(consumer: &Consumer) -> BrokerResult<Option<u64>> {
    let Some(value) = consumer.arguments().inner().get(REBALANCE_TIMEOUT_ARGUMENT) else { return Ok(None) };
    match crate::field_value::whole_number_within(value, 0, MAX_REBALANCE_TIMEOUT_MS) {
        Some(ms) => Ok(Some(ms)),
        None => Err(BrokerError::precondition_failed(format!(
            "invalid consumer arg '{REBALANCE_TIMEOUT_ARGUMENT}': expected milliseconds from 0 to \
             {MAX_REBALANCE_TIMEOUT_MS}, got {value:?}"
        ))),
    }
}
/// How often a member giving a partition up looks at its deliveries in flight.
const HANDOVER_POLL_MS: u64 = 10;

/// `parts` (one per partition, in order) join consumer group `group` of their super stream,
/// kept by the first partition; a task then follows the group's assignment for them.
fn join_group(group: String, parts: &[Arc<Consumer>], rebalance_timeout_ms: u64) {
    let Some(first) = parts.first() else { return };
    let Some(stream) = first.queue().stream() else { return };
    let coordination = stream.coordination();
    let member = coordination.member(first);
    let view = coordination.subscribe();
    coordination.change(join_op(&group, &member, parts));
    tokio::spawn(follow_assignment(group, member, parts.to_vec(), view, rebalance_timeout_ms));
}

fn join_op(group: &str, member: &ConsumerId, parts: &[Arc<Consumer>]) -> GroupOp {
    GroupOp::Join { group: group.to_string(), member: member.clone(), partitions: parts.len() as u32 }
}

/// Makes `parts` read the partitions the group gives `member` and give up those it takes
/// away, until the consumer is cancelled (or its channel closed). A member the group dropped
/// while it is still attached (its node was unreachable for a while) joins again.
async fn follow_assignment(
    group: String,
    member: ConsumerId,
    parts: Vec<Arc<Consumer>>,
    mut view: tokio::sync::watch::Receiver<Arc<PartitionGroups>>,
    rebalance_timeout_ms: u64,
) {
    let releasing = Arc::new(parking_lot::Mutex::new(HashSet::new()));
    let mut joined = false;
    loop {
        let Some(first) = parts[0].queue().stream() else { return };
        if !first.is_attached(&parts[0]) {
            return;
        }
        let groups = Arc::clone(&view.borrow_and_update());
        let in_group = groups.members(&group).contains(&member);
        if joined && !in_group {
            tracing::info!(group, "a consumer group dropped a member that is still attached: it joins again");
            first.coordination().change(join_op(&group, &member, &parts));
            joined = false;
        }
        joined |= in_group;
        for (place, part) in parts.iter().enumerate() {
            let partition = place as u32;
            let owns = groups.owner(&group, partition) == Some(&member);
            let keeps = groups.target(&group, partition) == Some(&member);
            let Some(stream) = part.queue().stream() else { continue };
            if owns && keeps {
                if stream.take_partition(part, groups.released_at(&group, partition)) {
                    part.queue().dispatch();
                }
            } else if owns && releasing.lock().insert(partition) {
                let handover = Handover {
                    group: group.clone(),
                    member: member.clone(),
                    partition,
                    timeout_ms: rebalance_timeout_ms,
                };
                tokio::spawn(handover.run(Arc::clone(&parts[0]), Arc::clone(part), Arc::clone(&releasing)));
            } else if !owns {
                stream.release_partition(part);
            }
        }
        if view.changed().await.is_err() {
            return;
        }
    }
}

/// A partition moving from a member to another.
struct Handover {
    group: String,
    member: ConsumerId,
    partition: u32,
    /// How long what is in flight may take to be settled.
    timeout_ms: u64,
}

impl Handover {
    /// Stops delivering `part`'s partition, waits for what is in flight to be settled (at most
    /// the rebalance timeout), commits, and tells the group (through `first`, the part of the
    /// first partition) where the next owner starts: always, also when the part never read
    /// the partition (it owned it before it could start), so that the next owner gets it.
    async fn run(self, first: Arc<Consumer>, part: Arc<Consumer>, releasing: Arc<parking_lot::Mutex<HashSet<u32>>>) {
        let queue = part.queue();
        let Some(stream) = queue.stream() else { return };
        let deadline = tokio::time::Instant::now() + Duration::from_millis(self.timeout_ms);
        while stream.pause_partition(&part) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(HANDOVER_POLL_MS)).await;
        }
        let Handover { group, member, partition, .. } = self;
        let offset = stream.release_partition(&part);
        if let Some(coordinator) = first.queue().stream() {
            coordinator.coordination().change(GroupOp::Released { group, partition, member, offset });
        }
        releasing.lock().remove(&partition);
    }
}
