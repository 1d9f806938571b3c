//! The consumers this node's clients started on queues that live on other nodes: by channel
//! and tag, the deliveries the home node sends are handed to them.

use super::wire::ChannelId;
use crate::consumer::Consumer;
use crate::error::BrokerError;
use crate::message::WireMessage;
use crate::queue::MessageRef;
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

/// Consumers attached on other nodes, by channel and consumer tag.
#[derive(Debug, Default)]
pub(crate) struct RemoteConsumers {
    by_tag: Mutex<HashMap<(ChannelId, String), RemoteConsumer>>,
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

    /// `remote` was started on its home node.
    pub(crate) fn attach(&self, remote: RemoteConsumer) {
        self.by_tag.lock().insert(Self::key(&remote.consumer), remote);
    }

    /// `consumer` ended here; where it was attached, if it still was.
    pub(crate) fn detach(&self, consumer: &Consumer) -> Option<RemoteConsumer> {
        self.by_tag.lock().remove(&Self::key(consumer))
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

    /// Hands a delivery from node `from` to its consumer; false if there is none (any more).
    pub(super) fn deliver(
        &self,
        from: u64,
        channel: ChannelId,
        tag: &str,
        delivery_tag: u64,
        redelivered: bool,
        message: WireMessage,
    ) -> bool {
        let remote = self.by_tag.lock().get(&(channel, tag.to_string())).filter(|r| r.home == from).cloned();
        let Some(remote) = remote else { return false };
        let Some(message) = message.into_message() else {
            tracing::warn!(node = from, "a forwarded delivery's properties do not decode: it goes back");
            return false;
        };
        let consumer = &remote.consumer;
        let reference = delivery_ref(delivery_tag, remote.home_index);
        consumer.session().push(consumer, consumer.queue(), reference, redelivered, Arc::new(message));
        true
    }

    /// The home node ended or refused a consumer: the client is told (`basic.cancel`).
    pub(super) fn cancelled(&self, channel: ChannelId, tag: &str, refused: Option<BrokerError>) {
        let Some(remote) = self.by_tag.lock().remove(&(channel, tag.to_string())) else { return };
        if let Some(error) = refused {
            tracing::info!(consumer = tag, %error, "the queue's home node refused a consumer: it is cancelled");
        }
        remote.consumer.session().cancelled_by_broker(&remote.consumer);
    }

    /// The link to `node` went: its consumers are cancelled (clients resubscribe).
    pub(super) fn node_down(&self, node: u64) {
        let gone: Vec<RemoteConsumer> = {
            let mut by_tag = self.by_tag.lock();
            let keys: Vec<_> = by_tag.iter().filter(|(_, r)| r.home == node).map(|(k, _)| k.clone()).collect();
            keys.into_iter().filter_map(|key| by_tag.remove(&key)).collect()
        };
        for remote in gone {
            remote.consumer.session().cancelled_by_broker(&remote.consumer);
        }
    }
}
