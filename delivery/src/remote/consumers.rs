//! The consumers this node's clients started on queues that live on other nodes: by channel
//! and tag, the deliveries the home node sends are handed to them.

use super::wire::ChannelId;
use crate::message::WireMessage;
use crate::message_ref::MessageRef;
use crate::queue::consumer::Consumer;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

/// A consumer attached on another node.
#[derive(Debug, Clone)]
pub(crate) struct RemoteConsumer {
    /// The consumer, on this node.
    pub consumer: Arc<Consumer>,
    /// The node its queue's home is.
    pub home: u64,
    /// Which of the queue's homes that is (kept in its deliveries' references, so that their
    /// settlements find the node even after the consumer went).
    pub home_index: u8,
}

/// What [`RemoteConsumers::detach`] found of a consumer.
#[derive(Debug)]
pub(crate) struct Detached {
    /// Where it was attached.
    pub remote: RemoteConsumer,
    /// The home node's tags of deliveries held back (they go back to the queue).
    pub held: Vec<u64>,
    /// The home node's tags of deliveries a no-ack consumer's client has (to be acked).
    pub owed: Vec<u64>,
}

/// Consumers attached on other nodes, by channel and consumer tag.
#[derive(Debug, Default)]
pub(crate) struct RemoteConsumers {
    by_tag: Mutex<HashMap<(ChannelId, String), RemoteConsumer>>,
    /// Deliveries to consumers whose `consume-ok` the client has not been sent yet: they wait
    /// here (in order) until it has, since the home node's answer and its first deliveries
    /// can come before the client's channel sends it.
    held: Mutex<HashMap<(ChannelId, String), Vec<Held>>>,
    /// Acks owed to home nodes for no-ack consumers (see [`NO_ACK_WINDOW`]), by consumer.
    owed: Mutex<HashMap<(ChannelId, String), Owed>>,
}

/// How many deliveries a no-ack forwarded consumer may have on their way at once. On its home
/// node it consumes with acks and this prefetch, and this node acks what it handed to the
/// client while the client keeps reading: a client that stops reading stops its home node's
/// deliveries too, as a local no-ack consumer's socket would. (If the link goes, what was
/// not acked yet goes back to the queue: at least once, where a local no-ack consumer gets at
/// most once.)
pub(crate) const NO_ACK_WINDOW: u16 = 256;
/// Acks owed that are sent together.
const ACK_BATCH: usize = 32;

/// What this node owes a no-ack consumer's home node.
#[derive(Debug)]
struct Owed {
    remote: RemoteConsumer,
    tags: Vec<u64>,
}

/// Acks to send: to `home`, for `channel`, these delivery tags.
pub(crate) type DueAcks = Vec<(u64, ChannelId, Vec<u64>)>;

/// A delivery held back until its consumer's `consume-ok` is out.
#[derive(Debug)]
struct Held {
    delivery_tag: u64,
    redelivered: bool,
    message: WireMessage,
}

/// The reference of a delivery from a home node: its delivery tag there, and which of the
/// queue's homes it came from.
pub(crate) fn delivery_ref(home_tag: u64, home_index: u8) -> MessageRef {
    MessageRef::new(home_tag, u64::from(home_index), false, 0)
}

impl RemoteConsumers {
    fn key(consumer: &Consumer) -> (ChannelId, String) {
        (consumer.session().id().0, consumer.tag().to_string())
    }

    /// `remote` is being started on its home node: its deliveries are held until
    /// [`RemoteConsumers::start`].
    pub(crate) fn attach(&self, remote: RemoteConsumer) {
        let key = Self::key(&remote.consumer);
        self.held.lock().insert(key.clone(), Vec::new());
        self.by_tag.lock().insert(key, remote);
    }

    /// The client was sent `consumer`'s `consume-ok`: what was held for it is delivered, in
    /// order, and what comes next goes straight on.
    pub(crate) fn start(&self, consumer: &Consumer) {
        let key = Self::key(consumer);
        let mut held = self.held.lock();
        let Some(waiting) = held.remove(&key) else { return };
        let Some(remote) = self.by_tag.lock().get(&key).cloned() else { return };
        for delivery in waiting {
            if !self.push(&remote, delivery.delivery_tag, delivery.redelivered, delivery.message) {
                tracing::warn!(consumer = %key.1, "a held forwarded delivery's properties do not decode: dropped");
            }
        }
    }

    /// `consumer` ended here: where it was attached, if it still was, the home node's tags
    /// of the deliveries held for it (they go back), and those it owes acks for (the client
    /// has them).
    pub(crate) fn detach(&self, consumer: &Consumer) -> Option<Detached> {
        let key = Self::key(consumer);
        let held = self.held.lock().remove(&key).unwrap_or_default();
        let remote = self.by_tag.lock().remove(&key)?;
        let owed = self.owed.lock().remove(&key).map(|owed| owed.tags).unwrap_or_default();
        Some(Detached { remote, held: held.into_iter().map(|h| h.delivery_tag).collect(), owed })
    }

    /// The acks owed for consumers of `queue` whose clients keep up (all of them), and, with
    /// `only_batches`, only where a batch is owed.
    pub(crate) fn due_acks(&self, queue: &crate::queue::Queue, only_batches: bool) -> DueAcks {
        let mut owed = self.owed.lock();
        let due = owed.values_mut().filter(|o| std::ptr::eq(Arc::as_ptr(o.remote.consumer.queue()), queue));
        due.filter(|o| o.remote.consumer.session().flow_active() && (!only_batches || o.tags.len() >= ACK_BATCH))
            .filter(|o| !o.tags.is_empty())
            .map(|o| (o.remote.home, o.remote.consumer.session().id().0, std::mem::take(&mut o.tags)))
            .collect()
    }

    /// `queue` was deleted: its consumers attached elsewhere end (the caller cancels them).
    pub(crate) fn detach_queue(&self, queue: &crate::queue::Queue) -> Vec<RemoteConsumer> {
        let mut by_tag = self.by_tag.lock();
        let of_queue = |r: &RemoteConsumer| std::ptr::eq(Arc::as_ptr(r.consumer.queue()), queue);
        let keys: Vec<_> = by_tag.iter().filter(|(_, r)| of_queue(r)).map(|(k, _)| k.clone()).collect();
        keys.into_iter().filter_map(|key| by_tag.remove(&key)).collect()
    }

    /// How many consumers of `queue` are attached elsewhere from this node.
    pub(crate) fn count_of(&self, queue: &crate::queue::Queue) -> u32 {
        let by_tag = self.by_tag.lock();
        by_tag.values().filter(|r| std::ptr::eq(Arc::as_ptr(r.consumer.queue()), queue)).count() as u32
    }

    /// Hands a delivery from node `from` to its consumer (held back if its `consume-ok` is
    /// not out yet); the consumer, or `None` if there is none (any more).
    pub(super) fn deliver(
        &self,
        from: u64,
        channel: ChannelId,
        tag: &str,
        delivery_tag: u64,
        redelivered: bool,
        message: WireMessage,
    ) -> Option<RemoteConsumer> {
        let key = (channel, tag.to_string());
        let mut held = self.held.lock();
        let remote = self.by_tag.lock().get(&key).filter(|r| r.home == from).cloned()?;
        if let Some(waiting) = held.get_mut(&key) {
            waiting.push(Held { delivery_tag, redelivered, message });
            return Some(remote);
        }
        drop(held);
        if !self.push(&remote, delivery_tag, redelivered, message) {
            tracing::warn!(node = from, "a forwarded delivery's properties do not decode: it goes back");
            return None;
        }
        Some(remote)
    }

    /// Hands a delivery from its home node to `remote`'s session (noting the ack owed if it is
    /// a no-ack consumer); false if its properties do not decode.
    fn push(&self, remote: &RemoteConsumer, delivery_tag: u64, redelivered: bool, message: WireMessage) -> bool {
        let Some(message) = message.into_message() else { return false };
        let consumer = &remote.consumer;
        let reference = delivery_ref(delivery_tag, remote.home_index);
        consumer.session().push(consumer, consumer.queue(), reference, redelivered, Arc::new(message));
        if consumer.no_ack() {
            let mut owed = self.owed.lock();
            let entry =
                owed.entry(Self::key(consumer)).or_insert_with(|| Owed { remote: remote.clone(), tags: Vec::new() });
            entry.tags.push(delivery_tag);
        }
        true
    }

    /// The home node ended a consumer: the client is told (`basic.cancel`).
    pub(super) fn cancelled(&self, channel: ChannelId, tag: &str) {
        let key = (channel, tag.to_string());
        self.held.lock().remove(&key);
        self.owed.lock().remove(&key);
        let Some(remote) = self.by_tag.lock().remove(&key) else { return };
        remote.consumer.session().cancelled_by_broker(&remote.consumer);
    }

    /// The link to `node` went: its consumers are cancelled (clients resubscribe).
    pub(super) fn node_down(&self, node: u64) {
        let gone: Vec<RemoteConsumer> = {
            // The held map first, as everywhere: deliveries take it before the consumers.
            let mut held = self.held.lock();
            let mut by_tag = self.by_tag.lock();
            let keys: Vec<_> = by_tag.iter().filter(|(_, r)| r.home == node).map(|(k, _)| k.clone()).collect();
            let mut owed = self.owed.lock();
            let forget = |key: &(ChannelId, String)| {
                held.remove(key);
                owed.remove(key);
            };
            keys.into_iter().inspect(forget).filter_map(|key| by_tag.remove(&key)).collect()
        };
        for remote in gone {
            remote.consumer.session().cancelled_by_broker(&remote.consumer);
        }
    }
}
