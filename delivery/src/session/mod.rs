//! A session: the broker-side half of one AMQP channel.
//!
//! It owns the channel's consumers, its unacknowledged deliveries (by delivery tag) and its
//! QoS. Queues call `Session::push` under their own lock to hand over a delivery; the session
//! numbers it and passes it to the [`DeliverySink`] the protocol layer gave it. Acks travel
//! the other way: the session finds the deliveries, releases its lock, then settles them in
//! their queues. Lock order is always queue, then session.
//!
//! A session may also have one reply consumer (direct reply-to, see
//! [`crate::direct_reply_to`]): replies published to its address are numbered and handed to
//! the sink like deliveries, but come from no queue and need no ack.
//!
//! A consumer of a super stream is one consumer per partition under one tag (`partitions`).

use crate::connection_id::ConnectionId;
use crate::direct_reply_to::{ReplyAddress, ReplyConsumers, Requester};
use crate::error::{BrokerError, BrokerResult, ReplyCode};
use crate::message::Message;
use crate::message_ref::MessageRef;
use crate::queue::consumer::{Consumer, ConsumerOptions};
pub use crate::queue::SessionId;
use crate::queue::{DeliveryChannel, Holder, Queue, Reply};
use amq_protocol::types::ShortString;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Weak};

mod channel_stats;
mod partitions;
pub use channel_stats::ChannelStats;
use partitions::with_partition_header;

/// One message on its way to a consumer.
#[derive(Debug)]
pub struct Delivery {
    /// The consumer it is for.
    pub consumer: Arc<Consumer>,
    /// Its tag on the channel.
    pub delivery_tag: u64,
    /// Whether it was delivered before.
    pub redelivered: bool,
    /// The message.
    pub message: Arc<Message>,
}

/// A direct reply on its way to a reply consumer: like a [`Delivery`], but from no queue,
/// never redelivered, and not to be acked.
#[derive(Debug)]
pub struct ReplyDelivery {
    /// The reply consumer's tag.
    pub consumer_tag: ShortString,
    /// Its tag on the channel.
    pub delivery_tag: u64,
    /// The reply.
    pub message: Arc<Message>,
}

/// Where a session sends what it has for the client: implemented by the protocol layer.
///
/// Called with queue and session locks held: implementations must not block or call back.
pub trait DeliverySink: Send + Sync {
    /// Sends a delivery to the client.
    fn deliver(&self, delivery: Delivery);
    /// Sends a direct reply to the client's reply consumer.
    fn deliver_reply(&self, reply: ReplyDelivery);
    /// Tells the client the broker cancelled its consumer (its queue was deleted).
    fn consumer_cancelled(&self, consumer_tag: &ShortString);
    /// Whether the client can take more deliveries now. While it cannot (it is not reading
    /// what was sent), queues keep their messages, and a durable backlog stays on disk, until
    /// the protocol layer calls [`Session::resume`].
    fn writable(&self) -> bool {
        true
    }
}

/// A delivery not yet settled.
#[derive(Debug)]
struct Unacked {
    tag: u64,
    /// When it was sent (ms since the epoch), for the consumer timeout.
    delivered_at_ms: u64,
    queue: Arc<Queue>,
    message: MessageRef,
    consumer: Option<Arc<Consumer>>,
}

#[derive(Debug, Default)]
struct SessionState {
    next_tag: u64,
    /// Sorted by tag.
    unacked: VecDeque<Unacked>,
    consumers: Vec<Arc<Consumer>>,
    /// `basic.qos` with global=false: the limit for consumers started from now on.
    consumer_prefetch: u32,
    /// The direct reply-to consumer, if the channel started one.
    reply_consumer: Option<ReplyConsumer>,
    /// Queues that track this channel themselves: told when it closes.
    tracking: Vec<Weak<Queue>>,
    closed: bool,
}

/// A channel's direct reply-to consumer.
#[derive(Debug)]
struct ReplyConsumer {
    tag: ShortString,
    address: ReplyAddress,
}

/// What a channel's session asks of the virtual host it works in. The virtual host stands
/// above sessions: it implements this.
pub trait SessionHost: Send + Sync + std::fmt::Debug {
    /// The virtual host's name.
    fn name(&self) -> &str;
    /// Its direct reply-to registry.
    fn reply_consumers(&self) -> &ReplyConsumers;
    /// `queue` (auto-delete) lost its last consumer: deletes it if none came meanwhile.
    fn delete_auto_delete_queue(&self, queue: &Arc<Queue>);
}

/// The broker-side state of one channel.
pub struct Session {
    id: SessionId,
    vhost: Arc<dyn SessionHost>,
    sink: Arc<dyn DeliverySink>,
    state: Mutex<SessionState>,
    flow_active: AtomicBool,
    /// `basic.qos` with global=true: a limit shared by all the channel's consumers (0 = none).
    channel_prefetch: AtomicU32,
    unacked_total: AtomicU32,
    stats: Arc<ChannelStats>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").finish_non_exhaustive()
    }
}

impl Session {
    /// A session in `vhost` whose deliveries go to `sink`.
    pub fn new<H: SessionHost + 'static>(vhost: Arc<H>, sink: Arc<dyn DeliverySink>) -> Arc<Self> {
        Arc::new(Session {
            id: SessionId::next(),
            vhost,
            sink,
            state: Mutex::new(SessionState { next_tag: 1, ..Default::default() }),
            flow_active: AtomicBool::new(true),
            channel_prefetch: AtomicU32::new(0),
            unacked_total: AtomicU32::new(0),
            stats: Arc::default(),
        })
    }

    /// Its id.
    pub fn id(&self) -> SessionId {
        self.id
    }

    /// Its channel's message counters.
    pub fn stats(&self) -> &Arc<ChannelStats> {
        &self.stats
    }

    /// Whether the channel closed.
    pub fn is_closed(&self) -> bool {
        self.state.lock().closed
    }

    /// The virtual host the channel works in.
    pub fn vhost(&self) -> &Arc<dyn SessionHost> {
        &self.vhost
    }

    /// The client caught up with what was sent: deliveries held back resume.
    pub fn resume(&self) {
        self.kick_consumers();
    }

    /// The prefetch limit of consumers started from now on (`basic.qos` with global=false).
    pub fn consumer_prefetch(&self) -> u32 {
        self.state.lock().consumer_prefetch
    }

    /// Deliveries and gets not yet settled.
    pub fn unacked_count(&self) -> u32 {
        self.unacked_total.load(Ordering::Acquire)
    }

    /// The channel's consumers.
    pub fn consumers(&self) -> Vec<Arc<Consumer>> {
        self.state.lock().consumers.clone()
    }

    /// The channel's shared prefetch limit (`basic.qos` with global=true; 0 = none).
    pub fn channel_prefetch(&self) -> u32 {
        self.channel_prefetch.load(Ordering::Acquire)
    }

    /// `basic.qos`: global=false sets the limit of consumers started later, global=true the
    /// channel's shared limit, as RabbitMQ interprets them.
    pub fn set_prefetch(&self, prefetch_count: u16, global: bool) {
        if global {
            self.channel_prefetch.store(u32::from(prefetch_count), Ordering::Release);
            self.kick_consumers();
        } else {
            self.state.lock().consumer_prefetch = u32::from(prefetch_count);
        }
    }

    /// `channel.flow`: pauses or resumes deliveries.
    pub fn set_flow(&self, active: bool) {
        self.flow_active.store(active, Ordering::Release);
        if active {
            self.kick_consumers();
        }
    }

    /// Starts a consumer on `queue`. A tag already used on this channel is 530 NOT_ALLOWED.
    pub fn consume(
        self: &Arc<Self>,
        queue: Arc<Queue>,
        tag: ShortString,
        options: ConsumerOptions,
    ) -> Reply<BrokerResult<Arc<Consumer>>> {
        let consumer = match self.new_consumer(&queue, tag, options) {
            Ok(consumer) => consumer,
            Err(error) => return Reply::Now(Err(error)),
        };
        match queue.add_consumer(Arc::clone(&consumer)) {
            Reply::Now(Ok(())) => Reply::Now(Ok(consumer)),
            Reply::Now(Err(error)) => {
                self.forget_consumer(&consumer);
                Reply::Now(Err(error))
            }
            Reply::Later(started) => {
                let session = Arc::clone(self);
                Reply::Later(Box::pin(async move {
                    let started = started.await;
                    if started.is_err() {
                        session.forget_consumer(&consumer);
                    }
                    started.map(|()| consumer)
                }))
            }
        }
    }

    /// A consumer of this channel, with a tag not used on it yet (530 NOT_ALLOWED otherwise).
    fn new_consumer(
        self: &Arc<Self>,
        queue: &Arc<Queue>,
        tag: ShortString,
        options: ConsumerOptions,
    ) -> BrokerResult<Arc<Consumer>> {
        let mut state = self.state.lock();
        if state.has_tag(tag.as_str()) {
            return Err(reused_tag(tag.as_str()));
        }
        let prefetch = state.consumer_prefetch;
        let consumer = Arc::new(Consumer::new(
            tag,
            Arc::clone(queue),
            Arc::clone(self) as Arc<dyn DeliveryChannel>,
            options,
            prefetch,
        )?);
        state.consumers.push(Arc::clone(&consumer));
        Ok(consumer)
    }

    /// A consumer its queue refused leaves the channel.
    fn forget_consumer(&self, consumer: &Arc<Consumer>) {
        self.state.lock().consumers.retain(|c| !Arc::ptr_eq(c, consumer));
    }

    /// Whether a consumer with this tag exists on the channel.
    pub fn has_consumer(&self, tag: &str) -> bool {
        self.state.lock().has_tag(tag)
    }

    /// `basic.consume` from the direct reply-to pseudo-queue by `channel` of `connection`:
    /// starts the channel's reply consumer, as RabbitMQ does. It must be no-ack (406), one per
    /// channel (406), and its tag new on the channel (530).
    pub fn consume_replies(
        self: &Arc<Self>,
        tag: ShortString,
        no_ack: bool,
        connection: ConnectionId,
        channel: u16,
    ) -> BrokerResult<()> {
        let mut state = self.state.lock();
        if state.has_tag(tag.as_str()) {
            return Err(reused_tag(tag.as_str()));
        }
        if !no_ack {
            return Err(BrokerError::precondition_failed("reply consumer cannot acknowledge"));
        }
        if state.reply_consumer.is_some() {
            return Err(BrokerError::precondition_failed("reply consumer already set"));
        }
        let address = self.vhost.reply_consumers().register(connection, channel, Arc::<Session>::downgrade(self));
        state.reply_consumer = Some(ReplyConsumer { tag, address });
        Ok(())
    }

    /// The address replies to this channel's requests go to (the `reply_to` its publishes of
    /// `amq.rabbitmq.reply-to` carry), if it has a reply consumer.
    pub fn reply_address(&self) -> Option<String> {
        self.state.lock().reply_consumer.as_ref().map(|reply| reply.address.to_string())
    }

    /// Hands a direct reply sent to `address` to the reply consumer; false if the address is
    /// not (any more) this channel's. A reply is never buffered: one for a client that is not
    /// reading what it was sent is dropped (and counts as delivered), as RabbitMQ's direct
    /// reply-to drops what its consumer has no credit for.
    pub(crate) fn deliver_reply(&self, address: &ReplyAddress, message: Arc<Message>) -> bool {
        let mut state = self.state.lock();
        let current = state.reply_consumer.as_ref().filter(|reply| &reply.address == address);
        let Some(consumer_tag) = current.map(|reply| reply.tag.clone()) else { return false };
        if state.closed {
            return false;
        }
        if !self.sink.writable() {
            tracing::debug!(consumer = consumer_tag.as_str(), "reply dropped: the requester is not reading");
            return true;
        }
        let delivery_tag = state.next_tag;
        state.next_tag += 1;
        // Sent under the session lock so that tags reach the client in order.
        self.sink.deliver_reply(ReplyDelivery { consumer_tag, delivery_tag, message });
        true
    }

    /// Ends the reply consumer: its address leads nowhere from now on. Called under the
    /// session lock (the registry's lock is only ever taken after it).
    fn stop_replies(&self, state: &mut SessionState) {
        if let Some(reply) = state.reply_consumer.take() {
            self.vhost.reply_consumers().unregister(&reply.address);
        }
    }

    /// `basic.cancel` from the client; returns whether the tag was known.
    pub fn cancel(&self, tag: &str) -> bool {
        let cancelled: Vec<Arc<Consumer>> = {
            let mut state = self.state.lock();
            if state.reply_consumer.as_ref().is_some_and(|reply| reply.tag.as_str() == tag) {
                self.stop_replies(&mut state);
                return true;
            }
            // A super stream consumer is one consumer per partition under one tag.
            let (cancelled, kept) =
                std::mem::take(&mut state.consumers).into_iter().partition(|c| c.tag().as_str() == tag);
            state.consumers = kept;
            cancelled
        };
        for consumer in &cancelled {
            self.detach(consumer);
        }
        !cancelled.is_empty()
    }

    fn detach(&self, consumer: &Arc<Consumer>) {
        let queue = consumer.queue();
        if queue.remove_consumer(consumer) && queue.definition().auto_delete {
            self.vhost.delete_auto_delete_queue(queue);
        } else {
            // The consumers left may take what the gone one could not (single active consumer,
            // filters, priorities).
            queue.dispatch();
        }
    }

    /// Takes the unacked deliveries `tag`/`multiple` name; an unknown tag is 406.
    fn take(&self, tag: u64, multiple: bool) -> BrokerResult<Vec<Unacked>> {
        let mut state = self.state.lock();
        let taken: Vec<Unacked> = if multiple {
            let end = if tag == 0 { state.unacked.len() } else { state.unacked.partition_point(|u| u.tag <= tag) };
            if end == 0 && tag != 0 {
                return Err(unknown_tag(tag));
            }
            state.unacked.drain(..end).collect()
        } else {
            // Clients mostly ack in delivery order: the oldest delivery is the usual match.
            if state.unacked.front().is_some_and(|u| u.tag == tag) {
                state.unacked.pop_front().into_iter().collect()
            } else {
                let index = state.unacked.binary_search_by_key(&tag, |u| u.tag).map_err(|_| unknown_tag(tag))?;
                state.unacked.remove(index).into_iter().collect()
            }
        };
        drop(state);
        self.unacked_total.fetch_sub(taken.len() as u32, Ordering::AcqRel);
        for entry in &taken {
            if let Some(consumer) = &entry.consumer {
                consumer.settled();
            }
        }
        Ok(taken)
    }

    /// `basic.ack`.
    pub fn ack(&self, tag: u64, multiple: bool) -> BrokerResult<()> {
        let taken = self.take(tag, multiple)?;
        self.stats.acked.add_many(taken.len() as u64);
        self.settle(taken, Settlement::Ack);
        Ok(())
    }

    /// `basic.nack` / `basic.reject`: requeue, or drop (dead-letter).
    pub fn reject(&self, tag: u64, multiple: bool, requeue: bool) -> BrokerResult<()> {
        let taken = self.take(tag, multiple)?;
        self.settle(taken, if requeue { Settlement::Requeue } else { Settlement::Reject });
        Ok(())
    }

    /// The consumer timeout its oldest unacknowledged delivery has run past, if it has: the
    /// consumer's `x-consumer-timeout`, else its queue's, else `default_ms` (the broker's
    /// `--consumer-timeout`). As RabbitMQ, only the oldest delivery is looked at. Stream
    /// deliveries never time out: their acks only return credit.
    pub fn timed_out(&self, now_ms: u64, default_ms: Option<u64>) -> Option<u64> {
        let state = self.state.lock();
        let oldest = state.unacked.front()?;
        if oldest.queue.arguments().queue_type == crate::queue::QueueType::Stream {
            return None;
        }
        let timeout_ms = (oldest.consumer.as_ref().and_then(|c| c.timeout_ms()))
            .or(oldest.queue.arguments().consumer_timeout_ms)
            .or(default_ms)?;
        (now_ms.saturating_sub(oldest.delivered_at_ms) > timeout_ms).then_some(timeout_ms)
    }

    /// `basic.recover`: every unacked delivery goes back to its queue.
    pub fn recover(&self) {
        if let Ok(taken) = self.take(0, true) {
            self.settle(taken, Settlement::Requeue);
        }
    }

    fn settle(&self, taken: Vec<Unacked>, outcome: Settlement) {
        for (queue, consumer, messages) in group_by_queue(taken) {
            let holder = Holder { session: self.id, consumer: consumer.as_ref() };
            match outcome {
                Settlement::Ack => queue.settle(&messages, holder),
                Settlement::Reject => queue.reject(&messages, holder),
                Settlement::Requeue => queue.requeue(&messages, holder),
            }
        }
        if self.channel_prefetch.load(Ordering::Acquire) != 0 {
            self.kick_consumers();
        }
    }

    fn kick_consumers(&self) {
        let consumers = self.state.lock().consumers.clone();
        for consumer in consumers {
            consumer.queue().dispatch();
        }
    }

    /// The channel closed: cancel its consumers and requeue what it had not acked.
    pub fn close(&self) {
        let (consumers, tracking) = {
            let mut state = self.state.lock();
            state.closed = true;
            self.stop_replies(&mut state);
            (std::mem::take(&mut state.consumers), std::mem::take(&mut state.tracking))
        };
        for consumer in &consumers {
            self.detach(consumer);
        }
        self.recover();
        for queue in tracking.iter().filter_map(Weak::upgrade) {
            queue.channel_closed(self.id);
        }
    }
}

/// What happens to deliveries being settled.
#[derive(Debug, Clone, Copy)]
enum Settlement {
    Ack,
    Reject,
    Requeue,
}

/// The session is the channel its consumers' queues deliver to.
impl DeliveryChannel for Session {
    fn id(&self) -> SessionId {
        Session::id(self)
    }

    fn channel_prefetch(&self) -> u32 {
        Session::channel_prefetch(self)
    }

    /// `queue` tracks this channel itself: it is told when the channel closes (at once if
    /// it is closed already).
    fn tracked_by(&self, queue: &Arc<Queue>) {
        let closed = {
            let mut state = self.state.lock();
            if !state.tracking.iter().any(|q| std::ptr::eq(q.as_ptr(), Arc::as_ptr(queue))) {
                state.tracking.push(Arc::downgrade(queue));
            }
            state.closed
        };
        if closed {
            queue.channel_closed(self.id);
        }
    }

    /// Whether deliveries may flow: not paused by `channel.flow`, and the client keeping up.
    fn flow_active(&self) -> bool {
        self.flow_active.load(Ordering::Acquire) && self.sink.writable()
    }

    fn has_credit(&self) -> bool {
        let limit = self.channel_prefetch.load(Ordering::Acquire);
        self.flow_active() && (limit == 0 || self.unacked_total.load(Ordering::Acquire) < limit)
    }

    /// The broker cancels a consumer whose queue went away, and tells the client.
    fn cancelled_by_broker(&self, consumer: &Arc<Consumer>) {
        let removed = {
            let mut state = self.state.lock();
            let before = state.consumers.len();
            state.consumers.retain(|c| !Arc::ptr_eq(c, consumer));
            // A super stream consumer goes on while one of its partitions remains.
            let tag_gone = !state.consumers.iter().any(|c| c.tag() == consumer.tag());
            before != state.consumers.len() && !state.closed && tag_gone
        };
        if removed {
            self.sink.consumer_cancelled(consumer.tag());
        }
    }

    /// Called by a queue, under its lock: numbers a delivery and hands it to the sink.
    fn push(
        &self,
        consumer: &Arc<Consumer>,
        queue: &Arc<Queue>,
        message_ref: MessageRef,
        redelivered: bool,
        message: Arc<Message>,
    ) {
        let mut state = self.state.lock();
        let delivery_tag = state.next_tag;
        state.next_tag += 1;
        if !consumer.no_ack() {
            consumer.delivered();
            self.unacked_total.fetch_add(1, Ordering::AcqRel);
            let entry = Unacked {
                tag: delivery_tag,
                delivered_at_ms: crate::clock::now_ms(),
                queue: Arc::clone(queue),
                message: message_ref,
                consumer: Some(Arc::clone(consumer)),
            };
            state.unacked.push_back(entry);
        }
        queue.stats().delivered(consumer.no_ack(), redelivered);
        if consumer.no_ack() { &self.stats.delivered_no_ack } else { &self.stats.delivered_ack }.add();
        if redelivered {
            self.stats.redelivered.add();
        }
        let message = match consumer.partition() {
            Some(partition) => with_partition_header(message, partition),
            None => message,
        };
        // Sent under the session lock so that tags reach the client in order.
        self.sink.deliver(Delivery { consumer: Arc::clone(consumer), delivery_tag, redelivered, message });
    }

    /// Called by a queue, under its lock: numbers a `basic.get` result.
    fn record_get(&self, queue: &Arc<Queue>, message: MessageRef, no_ack: bool) -> u64 {
        queue.stats().got(no_ack);
        if no_ack { &self.stats.get_no_ack } else { &self.stats.get_ack }.add();
        let mut state = self.state.lock();
        let delivery_tag = state.next_tag;
        state.next_tag += 1;
        if !no_ack {
            self.unacked_total.fetch_add(1, Ordering::AcqRel);
            state.unacked.push_back(Unacked {
                tag: delivery_tag,
                delivered_at_ms: crate::clock::now_ms(),
                queue: Arc::clone(queue),
                message,
                consumer: None,
            });
        }
        delivery_tag
    }
}

impl SessionState {
    /// Whether a consumer (the reply consumer included) has this tag.
    fn has_tag(&self, tag: &str) -> bool {
        self.consumers.iter().any(|c| c.tag().as_str() == tag)
            || self.reply_consumer.as_ref().is_some_and(|reply| reply.tag.as_str() == tag)
    }
}

fn reused_tag(tag: &str) -> BrokerError {
    BrokerError::new(ReplyCode::NotAllowed, format!("attempt to reuse consumer tag '{tag}'"))
}

fn unknown_tag(tag: u64) -> BrokerError {
    BrokerError::precondition_failed(format!("unknown delivery tag {tag}"))
}

/// Settled deliveries of one queue and one consumer (`None` for `basic.get`).
type SettledGroup = (Arc<Queue>, Option<Arc<Consumer>>, Vec<MessageRef>);

/// Groups settled deliveries by queue and consumer, in delivery order within each group.
fn group_by_queue(taken: Vec<Unacked>) -> Vec<SettledGroup> {
    let same_consumer = |a: &Option<Arc<Consumer>>, b: &Option<Arc<Consumer>>| match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        (None, None) => true,
        _ => false,
    };
    let mut groups: Vec<SettledGroup> = Vec::new();
    for entry in taken {
        let found =
            groups.iter_mut().find(|(q, c, _)| Arc::ptr_eq(q, &entry.queue) && same_consumer(c, &entry.consumer));
        match found {
            Some((_, _, messages)) => messages.push(entry.message),
            None => groups.push((entry.queue, entry.consumer, vec![entry.message])),
        }
    }
    groups
}

impl Requester for Session {
    fn deliver_reply(&self, address: &ReplyAddress, message: Arc<Message>) -> bool {
        Session::deliver_reply(self, address, message)
    }
}
