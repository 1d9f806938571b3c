//! A queue whose messages live on other nodes (see `crate::remote`): this node's stand-in
//! forwards what its clients do to the first of the queue's homes it can reach (the node a
//! classic queue or a stream was declared on; a quorum queue's members), and hands what comes
//! back to their channels.
//!
//! Publishes are sent in batches, one batch in flight at a time, so that they reach the home
//! node in order; a confirm waits for the home node's word that the message is as safe as
//! the queue promises (fsynced, or committed by a majority), through the same
//! [`CommitTracker`] quorum queues use. A consumer is started on the home node before its
//! `consume-ok`: a refusal there is the client's channel error, as it would be here.

use super::consumer::Consumer;
use super::context::QueueContext;
use super::kind::{Holder, QueueKind};
use super::{DeliveryChannel, GetResult, Published, Queue, QueueArguments, QueueDefinition, Reply, SessionId};
use crate::error::{BrokerError, BrokerResult, ReplyCode};
use crate::message::{Message, WireMessage};
use crate::message_ref::MessageRef;
use crate::message_store::{CommitTracker, DurableMark, StoreError};
use crate::quorum::Replication;
use crate::remote::{
    ConsumeSpec, Forwarded, Forwarder, RemoteAnswer, RemoteConsumer, RequestId, Settlement, Stored, NO_ACK_WINDOW,
};
use crate::scheduler::QueueTimer;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Weak};

/// Messages one forwarded batch carries at most.
const MAX_BATCH_MESSAGES: usize = 4096;
/// Body bytes one forwarded batch carries at most (one message may exceed it alone).
const MAX_BATCH_BYTES: usize = 1 << 20;

/// A new stand-in for a queue that lives on `homes`.
pub(crate) fn declare(
    definition: QueueDefinition,
    arguments: QueueArguments,
    homes: Vec<u64>,
    context: QueueContext,
) -> Arc<Queue> {
    Queue::with_kind(definition, arguments, Weak::clone(&context.vhost), context.vhost_name.clone(), |me, _| {
        let inner = Inner {
            me: Weak::clone(me),
            vhost: context.vhost_name.clone(),
            homes,
            forwarder: Arc::clone(&context.forwarder),
            replication: Arc::clone(&context.replication),
            tracker: CommitTracker::new(),
            publishing: Mutex::new(Publishing::default()),
            last_ready: AtomicU32::new(0),
        };
        Box::new(RemoteQueue { inner: Arc::new(inner) })
    })
}

/// The stand-in.
struct RemoteQueue {
    inner: Arc<Inner>,
}

struct Inner {
    me: Weak<Queue>,
    vhost: String,
    /// Where the queue lives, in order of preference.
    homes: Vec<u64>,
    forwarder: Arc<Forwarder>,
    replication: Arc<dyn Replication>,
    /// Outcomes of the forwarded publishes, numbered in order.
    tracker: Arc<CommitTracker>,
    publishing: Mutex<Publishing>,
    /// The ready count the home node last reported.
    last_ready: AtomicU32,
}

#[derive(Default)]
struct Publishing {
    /// Messages not sent yet, with their numbers.
    waiting: Vec<(u64, WireMessage)>,
    in_flight: bool,
    deleted: bool,
}

impl Inner {
    fn name(&self) -> String {
        self.me.upgrade().map(|q| q.name().to_string()).unwrap_or_default()
    }

    /// The first home reachable now, and which of the homes it is.
    fn home(&self) -> Option<(u64, u8)> {
        let reachable = |(_, node): &(usize, &u64)| self.replication.is_node_up(**node);
        let (index, node) = self.homes.iter().enumerate().find(reachable)?;
        Some((*node, u8::try_from(index).ok()?))
    }

    /// RabbitMQ's answer when a queue's node cannot be reached.
    fn home_down(&self) -> BrokerError {
        BrokerError::not_found(format!(
            "home node of queue '{}' in vhost '{}' is down or inaccessible",
            self.name(),
            self.vhost
        ))
    }

    /// Sends the waiting messages, one batch at a time.
    fn flush(self: &Arc<Self>) {
        loop {
            let batch = {
                let mut publishing = self.publishing.lock();
                if publishing.in_flight || publishing.waiting.is_empty() {
                    return;
                }
                let mut bytes = 0;
                let take = publishing
                    .waiting
                    .iter()
                    .take(MAX_BATCH_MESSAGES)
                    .take_while(|(_, m)| {
                        let fits = bytes == 0 || bytes + m.body.len() <= MAX_BATCH_BYTES;
                        bytes += m.body.len();
                        fits
                    })
                    .count();
                publishing.in_flight = true;
                publishing.waiting.drain(..take).collect::<Vec<_>>()
            };
            let (numbers, messages): (Vec<u64>, Vec<WireMessage>) = batch.into_iter().unzip();
            let Some((home, _)) = self.home() else {
                let why = self.home_down().text;
                numbers.iter().for_each(|n| self.tracker.fail(*n, why.clone()));
                self.publishing.lock().in_flight = false;
                continue;
            };
            let (vhost, queue) = (self.vhost.clone(), self.name());
            let answer = self.forwarder.request(home, |id| Forwarded::Publish { id, vhost, queue, messages });
            let inner = Arc::clone(self);
            tokio::spawn(async move {
                inner.settle_batch(&numbers, answer.await);
                inner.publishing.lock().in_flight = false;
                inner.flush();
            });
            return;
        }
    }

    fn settle_batch(&self, numbers: &[u64], answer: Result<RemoteAnswer, String>) {
        match answer {
            Ok(RemoteAnswer::Published(stored)) if stored.len() == numbers.len() => {
                for (number, stored) in numbers.iter().zip(stored) {
                    match stored {
                        Stored::Safely => self.tracker.settled(*number, false),
                        Stored::Refused => self.tracker.settled(*number, true),
                        Stored::Failed(why) => self.tracker.fail(*number, why),
                    }
                }
            }
            other => {
                let why = match other {
                    Err(why) => why,
                    Ok(answer) => format!("unexpected answer to forwarded publishes: {answer:?}"),
                };
                numbers.iter().for_each(|n| self.tracker.fail(*n, why.clone()));
            }
        }
    }

    /// Sends the request `make` builds (from an id, the vhost and the queue's name) to the
    /// first reachable home; its outcome once answered, as `pick` reads the answer (`None`:
    /// an answer of another kind).
    fn ask<T: Send + 'static>(
        &self,
        queue: &Queue,
        what: &'static str,
        make: impl FnOnce(RequestId, String, String) -> Forwarded,
        pick: fn(RemoteAnswer) -> Option<BrokerResult<T>>,
    ) -> Reply<BrokerResult<T>> {
        let Some((home, _)) = self.home() else { return Reply::Now(Err(self.home_down())) };
        let (vhost, name) = (self.vhost.clone(), queue.name().to_string());
        let answer = self.forwarder.request(home, |id| make(id, vhost, name));
        Reply::Later(Box::pin(async move {
            match answer.await {
                Ok(answer) => pick(answer).unwrap_or_else(|| {
                    Err(BrokerError::new(ReplyCode::InternalError, format!("unexpected answer to a forwarded {what}")))
                }),
                Err(why) => Err(BrokerError::new(ReplyCode::InternalError, why)),
            }
        }))
    }

    /// Sends the settlement of `messages` to the homes they came from.
    fn settle(&self, messages: &[MessageRef], holder: Holder<'_>, how: Settlement) {
        for (index, node) in self.homes.iter().enumerate() {
            let tags: Vec<u64> = messages.iter().filter(|m| m.offset() == index as u64).map(|m| m.position()).collect();
            if !tags.is_empty() {
                self.forwarder.send(*node, Forwarded::Settle { channel: holder.session.0, tags, how });
            }
        }
    }
}

impl QueueKind for RemoteQueue {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn publish(&self, _queue: &Arc<Queue>, message: Arc<Message>) -> Result<Published, StoreError> {
        let number = {
            let mut publishing = self.inner.publishing.lock();
            if publishing.deleted {
                return Ok(Published::Stored(None));
            }
            let number = self.inner.tracker.next();
            publishing.waiting.push((number, WireMessage::of(&message)));
            number
        };
        self.inner.flush();
        Ok(Published::Stored(Some(DurableMark::commit(&self.inner.tracker, number))))
    }

    /// The home node dispatches; a client that caught up (or a settled delivery) lets the
    /// acks owed for no-ack consumers go, which lets their home node send more.
    fn dispatch(&self, queue: &Arc<Queue>) {
        self.inner.forwarder.send_due_acks(queue, false);
    }

    /// Started on the home node first: the answer (or the link's loss) decides.
    fn add_consumer(&self, queue: &Arc<Queue>, consumer: Arc<Consumer>) -> Reply<BrokerResult<()>> {
        let Some((home, home_index)) = self.inner.home() else { return Reply::Now(Err(self.inner.home_down())) };
        let session = consumer.session();
        // A no-ack consumer consumes with acks and a window on its home node: this node acks
        // what its client takes (see `remote::NO_ACK_WINDOW`).
        let prefetch = match consumer.no_ack() {
            true => NO_ACK_WINDOW,
            false => u16::try_from(consumer.prefetch()).unwrap_or(u16::MAX),
        };
        let spec = ConsumeSpec {
            no_ack: false,
            exclusive: consumer.is_exclusive(),
            arguments: consumer.arguments().clone(),
            prefetch,
            channel_prefetch: u16::try_from(session.channel_prefetch()).unwrap_or(u16::MAX),
        };
        let (channel, tag) = (session.id().0, consumer.tag().to_string());
        session.tracked_by(queue);
        let remote = RemoteConsumer { consumer: Arc::clone(&consumer), home, home_index };
        self.inner.forwarder.consumers().attach(remote);
        let (vhost, queue) = (self.inner.vhost.clone(), queue.name().to_string());
        let answer =
            self.inner.forwarder.request(home, |id| Forwarded::Consume { id, vhost, queue, channel, tag, spec });
        let inner = Arc::clone(&self.inner);
        Reply::Later(Box::pin(async move {
            let started = match answer.await {
                Ok(RemoteAnswer::Consumed(started)) => started,
                Ok(other) => Err(unexpected("basic.consume", &other)),
                Err(_) => Err(inner.home_down()),
            };
            if started.is_err() {
                inner.forwarder.consumers().detach(&consumer);
            }
            started
        }))
    }

    /// Deliveries the home node sent before the client heard `consume-ok` were held.
    fn start_deliveries(&self, _queue: &Arc<Queue>, consumer: &Arc<Consumer>) {
        self.inner.forwarder.consumers().start(consumer);
    }

    /// Never "none left": the stand-in is not the queue, and auto-delete is the home's call.
    fn remove_consumer(&self, _queue: &Arc<Queue>, consumer: &Arc<Consumer>) -> bool {
        if let Some(detached) = self.inner.forwarder.consumers().detach(consumer) {
            let (home, channel, tag) = (detached.remote.home, consumer.session().id().0, consumer.tag().to_string());
            for (tags, how) in [(detached.owed, Settlement::Ack), (detached.held, Settlement::Requeue)] {
                if !tags.is_empty() {
                    self.inner.forwarder.send(home, Forwarded::Settle { channel, tags, how });
                }
            }
            self.inner.forwarder.send(home, Forwarded::Cancel { channel, tag });
        }
        false
    }

    fn get(
        &self,
        queue: &Arc<Queue>,
        session: &Arc<dyn DeliveryChannel>,
        no_ack: bool,
    ) -> Reply<BrokerResult<Option<GetResult>>> {
        let Some((home, home_index)) = self.inner.home() else { return Reply::Now(Err(self.inner.home_down())) };
        session.tracked_by(queue);
        let (vhost, name, channel) = (self.inner.vhost.clone(), queue.name().to_string(), session.id().0);
        let answer =
            self.inner.forwarder.request(home, |id| Forwarded::Get { id, vhost, queue: name, channel, no_ack });
        let (inner, queue, session) = (Arc::clone(&self.inner), Arc::clone(queue), Arc::clone(session));
        Reply::Later(Box::pin(async move {
            let got = match answer.await {
                Ok(RemoteAnswer::Got(got)) => got?,
                Ok(other) => return Err(unexpected("basic.get", &other)),
                Err(why) => return Err(BrokerError::new(ReplyCode::InternalError, why)),
            };
            let Some(got) = got else {
                inner.last_ready.store(0, Ordering::Relaxed);
                return Ok(None);
            };
            inner.last_ready.store(got.message_count, Ordering::Relaxed);
            let message = got.message.into_message().ok_or_else(|| {
                BrokerError::new(ReplyCode::InternalError, "a forwarded message's properties do not decode")
            })?;
            let reference = crate::remote::delivery_ref(got.delivery_tag, home_index);
            let delivery_tag = session.record_get(&queue, reference, no_ack);
            let (redelivered, message_count) = (got.redelivered, got.message_count);
            Ok(Some(GetResult { delivery_tag, redelivered, message: Arc::new(message), message_count }))
        }))
    }

    fn settle(&self, _queue: &Arc<Queue>, messages: &[MessageRef], holder: Holder<'_>) {
        self.inner.settle(messages, holder, Settlement::Ack);
    }

    fn reject(&self, _queue: &Arc<Queue>, messages: &[MessageRef], holder: Holder<'_>) {
        self.inner.settle(messages, holder, Settlement::Reject);
    }

    fn requeue(&self, _queue: &Arc<Queue>, messages: &[MessageRef], holder: Holder<'_>) {
        self.inner.settle(messages, holder, Settlement::Requeue);
    }

    fn purge(&self, queue: &Arc<Queue>) -> Reply<BrokerResult<u32>> {
        let purge = |id, vhost, queue| Forwarded::Purge { id, vhost, queue };
        self.inner.ask(queue, "queue.purge", purge, |answer| match answer {
            RemoteAnswer::Purged(purged) => Some(purged),
            _ => None,
        })
    }

    fn counts(&self, queue: &Arc<Queue>) -> Reply<BrokerResult<(u32, u32)>> {
        let counts = |id, vhost, queue| Forwarded::Counts { id, vhost, queue };
        self.inner.ask(queue, "passive queue.declare", counts, |answer| match answer {
            RemoteAnswer::Counts(counts) => Some(counts),
            _ => None,
        })
    }

    /// The mirrored channels on the homes close too.
    fn channel_closed(&self, _queue: &Arc<Queue>, session: SessionId) {
        for node in &self.inner.homes {
            self.inner.forwarder.send(*node, Forwarded::ChannelClosed { channel: session.0 });
        }
    }

    fn message_count(&self) -> u32 {
        self.inner.last_ready.load(Ordering::Relaxed)
    }

    /// Known on the home node only.
    fn unacked_count(&self) -> u32 {
        0
    }

    /// The consumers this node's clients have on it.
    fn consumer_count(&self) -> u32 {
        self.inner.me.upgrade().map_or(0, |queue| self.inner.forwarder.consumers().count_of(&queue))
    }

    /// `x-expires` is the home node's to watch.
    fn touch(&self) {}

    fn timer_fired(&self, _queue: &Arc<Queue>, _timer: QueueTimer) {}

    fn close(&self, _queue: &Arc<Queue>) {}

    fn mark_deleted(&self, queue: &Arc<Queue>) -> (u32, Vec<Arc<Consumer>>) {
        self.inner.publishing.lock().deleted = true;
        let consumers = self.inner.forwarder.consumers().detach_queue(queue);
        (0, consumers.into_iter().map(|remote| remote.consumer).collect())
    }

    fn homes(&self) -> Option<&[u64]> {
        Some(&self.inner.homes)
    }
}

fn unexpected(what: &str, answer: &RemoteAnswer) -> BrokerError {
    BrokerError::new(ReplyCode::InternalError, format!("unexpected answer to a forwarded {what}: {answer:?}"))
}
