//! The home node's side of forwarding: each channel of another node's client that uses a
//! queue here is mirrored by a session of its own, whose deliveries go back over the link.
//! The session does what it does for a local channel (prefetch, unacked deliveries, requeue
//! on close), so every queue kind serves forwarded clients unchanged.
//!
//! It stands above the virtual hosts, which it finds through [`VhostDirectory`] (the broker),
//! and serves the requests [`Forwarder`] receives, as its [`Home`].

use crate::error::{BrokerError, BrokerResult};
use crate::message::WireMessage;
use crate::queue::consumer::{Consumer, ConsumerOptions};
use crate::queue::{Published, Queue, Reply};
use crate::remote::wire::{ChannelId, ConsumeSpec, Forwarded, RemoteAnswer, RemoteGet, RequestId, Settlement, Stored};
use crate::remote::{Forwarder, Home};
use crate::session::{Delivery, DeliverySink, ReplyDelivery, Session};
use crate::vhost::VirtualHost;
use amq_protocol::types::ShortString;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, Weak};

/// Where a home node finds the virtual hosts whose queues it serves.
pub trait VhostDirectory: Send + Sync + std::fmt::Debug {
    /// The virtual host `name`, if there is one.
    fn vhost(&self, name: &str) -> Option<Arc<VirtualHost>>;
}

/// This node as the home of queues other nodes' clients use.
#[derive(Debug)]
pub struct HomeNode {
    vhosts: Weak<dyn VhostDirectory>,
    channels: HomeChannels,
}

impl HomeNode {
    /// Serves the queues of the virtual hosts in `vhosts` (held weakly: it is the broker,
    /// which holds the forwarder that holds this).
    pub fn new(vhosts: Weak<dyn VhostDirectory>) -> Self {
        HomeNode { vhosts, channels: HomeChannels::default() }
    }
}

impl Home for HomeNode {
    fn handle(&self, forwarder: &Arc<Forwarder>, from: u64, request: Forwarded) {
        let Some(vhosts) = self.vhosts.upgrade() else { return };
        self.channels.handle(forwarder, vhosts.as_ref(), from, request);
    }

    fn node_down(&self, node: u64) {
        self.channels.node_down(node);
    }

    fn resume(&self, node: u64) {
        self.channels.resume(node);
    }
}

/// The mirrored channels, by the client's node and channel.
#[derive(Debug, Default)]
struct HomeChannels {
    sessions: Mutex<HashMap<(u64, ChannelId), Arc<Session>>>,
}

/// Where a mirrored channel's deliveries go: back to the client's node.
struct ForwardedSink {
    node: u64,
    channel: ChannelId,
    forwarder: Weak<Forwarder>,
}

impl DeliverySink for ForwardedSink {
    fn deliver(&self, delivery: Delivery) {
        let Some(forwarder) = self.forwarder.upgrade() else { return };
        let message = Forwarded::Deliver {
            channel: self.channel,
            tag: delivery.consumer.tag().to_string(),
            delivery_tag: delivery.delivery_tag,
            redelivered: delivery.redelivered,
            message: WireMessage::of(&delivery.message),
        };
        forwarder.send(self.node, message);
    }

    /// Direct reply-to is served on the requester's own node: nothing comes here.
    fn deliver_reply(&self, _reply: ReplyDelivery) {}

    fn consumer_cancelled(&self, consumer_tag: &ShortString) {
        let Some(forwarder) = self.forwarder.upgrade() else { return };
        let message = Forwarded::Cancelled { channel: self.channel, tag: consumer_tag.to_string() };
        forwarder.send(self.node, message);
    }

    fn writable(&self) -> bool {
        self.forwarder.upgrade().is_some_and(|forwarder| forwarder.has_room(self.node))
    }
}

fn queue_of(vhosts: &dyn VhostDirectory, vhost: &str, queue: &str) -> BrokerResult<(Arc<VirtualHost>, Arc<Queue>)> {
    let host = vhosts.vhost(vhost).ok_or_else(|| BrokerError::not_found(format!("no vhost '{vhost}'")))?;
    let queue = host.queue(queue)?;
    Ok((host, queue))
}

impl HomeChannels {
    /// The session mirroring `channel` of node `node` in `vhost`, opened if new.
    fn session(
        &self,
        forwarder: &Arc<Forwarder>,
        node: u64,
        channel: ChannelId,
        vhost: &Arc<VirtualHost>,
    ) -> Arc<Session> {
        let mut sessions = self.sessions.lock();
        let session = sessions.entry((node, channel)).or_insert_with(|| {
            let sink = ForwardedSink { node, channel, forwarder: Arc::downgrade(forwarder) };
            Session::new(Arc::clone(vhost), Arc::new(sink))
        });
        Arc::clone(session)
    }

    fn existing(&self, node: u64, channel: ChannelId) -> Option<Arc<Session>> {
        self.sessions.lock().get(&(node, channel)).cloned()
    }

    /// Handles a request from node `from` for a queue here.
    fn handle(&self, forwarder: &Arc<Forwarder>, vhosts: &dyn VhostDirectory, from: u64, request: Forwarded) {
        match request {
            Forwarded::Publish { id, vhost, queue, messages } => {
                let published = match queue_of(vhosts, &vhost, &queue) {
                    Ok((_, queue)) => publish(&queue, messages),
                    Err(error) => messages.iter().map(|_| Err(error.text.clone())).collect(),
                };
                answer_later(forwarder, from, id, stored(published), RemoteAnswer::Published);
            }
            Forwarded::Consume { id, vhost, queue, channel, tag, spec } => {
                let started = self.consume(forwarder, vhosts, from, (&vhost, &queue), channel, &tag, spec);
                answer_consume(forwarder, from, id, started);
            }
            Forwarded::Cancel { channel, tag } => {
                if let Some(session) = self.existing(from, channel) {
                    session.cancel(&tag);
                }
            }
            Forwarded::Settle { channel, tags, how } => {
                if let Some(session) = self.existing(from, channel) {
                    settle(&session, &tags, how);
                }
            }
            Forwarded::Get { id, vhost, queue, channel, no_ack } => {
                let got = queue_of(vhosts, &vhost, &queue).map(|(host, queue)| {
                    let session = self.session(forwarder, from, channel, &host);
                    queue.get(&session, no_ack)
                });
                let answer = async move {
                    let taken = got?.wait().await?;
                    Ok(taken.map(|got| RemoteGet {
                        delivery_tag: got.delivery_tag,
                        redelivered: got.redelivered,
                        message: WireMessage::of(&got.message),
                        message_count: got.message_count,
                    }))
                };
                answer_later(forwarder, from, id, answer, RemoteAnswer::Got);
            }
            Forwarded::Purge { id, vhost, queue } => {
                let purge = queue_of(vhosts, &vhost, &queue).map(|(_, queue)| queue.purge());
                answer_later(forwarder, from, id, async move { got_or(purge).await }, RemoteAnswer::Purged);
            }
            Forwarded::Counts { id, vhost, queue } => {
                let counts = queue_of(vhosts, &vhost, &queue).map(|(_, queue)| queue.counts());
                answer_later(forwarder, from, id, async move { got_or(counts).await }, RemoteAnswer::Counts);
            }
            Forwarded::ChannelClosed { channel } => {
                if let Some(session) = self.sessions.lock().remove(&(from, channel)) {
                    session.close();
                }
            }
            other => {
                tracing::debug!(node = from, message = ?std::mem::discriminant(&other), "forwarded message out of place")
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn consume(
        &self,
        forwarder: &Arc<Forwarder>,
        vhosts: &dyn VhostDirectory,
        from: u64,
        (vhost, queue): (&str, &str),
        channel: ChannelId,
        tag: &str,
        spec: ConsumeSpec,
    ) -> Reply<BrokerResult<Arc<Consumer>>> {
        let (host, queue) = match queue_of(vhosts, vhost, queue) {
            Ok(found) => found,
            Err(error) => return Reply::Now(Err(error)),
        };
        let session = self.session(forwarder, from, channel, &host);
        session.set_prefetch(spec.prefetch, false);
        session.set_prefetch(spec.channel_prefetch, true);
        let options = ConsumerOptions { no_ack: spec.no_ack, exclusive: spec.exclusive, arguments: spec.arguments };
        session.consume(queue, tag.into(), options)
    }

    /// The link to `node` went: its mirrored channels close, their unacked messages requeued.
    fn node_down(&self, node: u64) {
        let closed: Vec<Arc<Session>> = {
            let mut sessions = self.sessions.lock();
            let keys: Vec<_> = sessions.keys().filter(|(n, _)| *n == node).copied().collect();
            keys.into_iter().filter_map(|key| sessions.remove(&key)).collect()
        };
        for session in closed {
            session.close();
        }
    }

    /// Deliveries to `node` may flow again.
    fn resume(&self, node: u64) {
        let sessions: Vec<Arc<Session>> =
            self.sessions.lock().iter().filter(|((n, _), _)| *n == node).map(|(_, s)| Arc::clone(s)).collect();
        for session in sessions {
            session.resume();
        }
    }
}

/// Answers a forwarded consume once it is started (or refused), then lets its deliveries
/// start: they follow the answer on the link.
fn answer_consume(forwarder: &Arc<Forwarder>, node: u64, id: RequestId, started: Reply<BrokerResult<Arc<Consumer>>>) {
    let forwarder = Arc::downgrade(forwarder);
    let answer = move |started: BrokerResult<Arc<Consumer>>| {
        let Some(forwarder) = forwarder.upgrade() else { return };
        let (consumer, answer) = match started {
            Ok(consumer) => (Some(consumer), Ok(())),
            Err(error) => (None, Err(error)),
        };
        forwarder.send(node, Forwarded::Answer { id, answer: RemoteAnswer::Consumed(answer) });
        if let Some(consumer) = consumer {
            consumer.queue().start_deliveries(&consumer);
        }
    };
    match started {
        Reply::Now(started) => answer(started),
        Reply::Later(started) => drop(tokio::spawn(async move { answer(started.await) })),
    }
}

async fn got_or<T: Send + 'static>(reply: BrokerResult<crate::queue::Reply<BrokerResult<T>>>) -> BrokerResult<T> {
    reply?.wait().await
}

/// Stores forwarded messages in `queue` now, in order.
fn publish(queue: &Arc<Queue>, messages: Vec<WireMessage>) -> Vec<Result<Published, String>> {
    messages
        .into_iter()
        .map(|wire| match wire.into_message() {
            Some(message) => queue.publish(Arc::new(message)).map_err(|e| e.to_string()),
            None => Err("the message's properties do not decode".to_string()),
        })
        .collect()
}

/// What became of each published message, once its queue made it as safe as it promises.
async fn stored(published: Vec<Result<Published, String>>) -> Vec<Stored> {
    let mut stored = Vec::with_capacity(published.len());
    for outcome in published {
        stored.push(match outcome {
            Ok(Published::Stored(None)) => Stored::Safely,
            Ok(Published::Stored(Some(mark))) => match mark.wait().await {
                Ok(()) => Stored::Safely,
                Err(crate::message_store::StoreError::Refused) => Stored::Refused,
                Err(error) => Stored::Failed(error.to_string()),
            },
            Ok(Published::Rejected) => Stored::Refused,
            Err(why) => Stored::Failed(why),
        });
    }
    stored
}

fn settle(session: &Session, tags: &[u64], how: Settlement) {
    for &tag in tags {
        // A tag unknown here was settled already (its channel closed when a link went).
        let _ = match how {
            Settlement::Ack => session.ack(tag, false),
            Settlement::Reject => session.reject(tag, false, false),
            Settlement::Requeue => session.reject(tag, false, true),
        };
    }
}

/// Sends the answer to request `id` once `outcome` is known, after what is sent meanwhile.
fn answer_later<T: Send + 'static>(
    forwarder: &Arc<Forwarder>,
    node: u64,
    id: RequestId,
    outcome: impl std::future::Future<Output = T> + Send + 'static,
    answer: fn(T) -> RemoteAnswer,
) {
    let forwarder = Arc::downgrade(forwarder);
    tokio::spawn(async move {
        let outcome = outcome.await;
        if let Some(forwarder) = forwarder.upgrade() {
            forwarder.send(node, Forwarded::Answer { id, answer: answer(outcome) });
        }
    });
}
