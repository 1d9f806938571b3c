//! Queues that live on another node of the cluster, used from this one.
//!
//! A classic queue or a stream lives on the node it was declared on, and a quorum queue on
//! its members; every other node holds a stand-in (a queue kind of the queue layer) that
//! forwards what its clients do to a node that holds the queue (its *home*), where a channel
//! of the client's is mirrored by a session of its own (by the [`Home`] the broker plugs in,
//! above the virtual hosts). Deliveries come back the same way, and acks go to the home node.
//! Nothing is shared but messages ([`wire`]), sent one-way and in order on the link between
//! the two nodes, through the cluster layer ([`Forwarding`]).
//!
//! When the link to a node goes, both ends forget what they had of each other
//! ([`Forwarder::node_down`]): the home node closes the mirrored channels (their unacked
//! messages are requeued), the client's node cancels the forwarded consumers (`basic.cancel`,
//! so clients resubscribe) and nacks what it had not heard back about.

mod consumers;
mod pending;
pub mod wire;

use consumers::RemoteConsumers;
use pending::PendingRequests;
use std::sync::{Arc, OnceLock};
pub use wire::{ChannelId, ConsumeSpec, Forwarded, RemoteAnswer, RemoteGet, RequestId, Settlement, Stored};

pub(crate) use consumers::{delivery_ref, RemoteConsumer, NO_ACK_WINDOW};

/// How this node sends forwarded messages to another: implemented by the cluster layer.
pub trait Forwarding: Send + Sync + std::fmt::Debug + 'static {
    /// Sends `message` to node `node`, after everything sent to it before. Must not block
    /// (it is called under queue and session locks); a message that cannot be sent is
    /// dropped, and the link's loss is reported through [`Forwarder::node_down`].
    fn send(&self, node: u64, message: Forwarded);
    /// Whether what waits to be sent to `node` is under its bound: deliveries to its clients
    /// hold back while it is not, until [`Forwarder::resume`].
    fn has_room(&self, _node: u64) -> bool {
        true
    }
}

/// What a home node does with the requests other nodes forward to it. Serving them takes
/// virtual hosts and sessions, which stand above forwarding: the broker plugs this in.
pub trait Home: Send + Sync + std::fmt::Debug {
    /// Handles `request`, sent by node `from`, for a queue here.
    fn handle(&self, forwarder: &Arc<Forwarder>, from: u64, request: Forwarded);
    /// The link to `node` went: the channels mirrored for its clients close.
    fn node_down(&self, node: u64);
    /// What waits to be sent to `node` fell under its bound: deliveries held back resume.
    fn resume(&self, node: u64);
}

/// A broker on its own: no other node to forward to.
#[derive(Debug, Default)]
pub struct NoForwarding;

impl Forwarding for NoForwarding {
    fn send(&self, node: u64, _message: Forwarded) {
        tracing::warn!(node, "a forwarded message for another node on a broker with no peers was dropped");
    }
}

/// This node's end of forwarding: requests waiting for answers and consumers attached
/// elsewhere (as the client's node), mirrored channels (as a home node).
#[derive(Debug)]
pub struct Forwarder {
    forwarding: Arc<dyn Forwarding>,
    home: OnceLock<Arc<dyn Home>>,
    pending: Arc<PendingRequests>,
    consumers: RemoteConsumers,
}

impl Forwarder {
    /// Forwards through `forwarding`.
    pub fn new(forwarding: Arc<dyn Forwarding>) -> Arc<Self> {
        Arc::new(Forwarder {
            forwarding,
            home: OnceLock::new(),
            pending: Arc::new(PendingRequests::default()),
            consumers: RemoteConsumers::default(),
        })
    }

    /// What serves the requests of other nodes for queues here.
    pub(crate) fn serve(&self, home: Arc<dyn Home>) {
        let _ = self.home.set(home);
    }

    /// Sends `message` to `node`.
    pub(crate) fn send(&self, node: u64, message: Forwarded) {
        self.forwarding.send(node, message);
    }

    /// Sends the request `make` builds with a fresh id to `node`; the answer, or why there
    /// is none, once it comes.
    pub(crate) fn request(
        &self,
        node: u64,
        make: impl FnOnce(RequestId) -> Forwarded,
    ) -> impl std::future::Future<Output = Result<RemoteAnswer, String>> + Send + 'static {
        let (id, answer) = self.pending.open(node);
        self.send(node, make(id));
        answer
    }

    /// The consumers this node attached on other nodes.
    pub(crate) fn consumers(&self) -> &RemoteConsumers {
        &self.consumers
    }

    /// Sends the acks owed for no-ack consumers of `queue` whose clients keep up (only where
    /// a batch is owed, with `only_batches`).
    pub(crate) fn send_due_acks(&self, queue: &crate::queue::Queue, only_batches: bool) {
        for (home, channel, tags) in self.consumers.due_acks(queue, only_batches) {
            self.send(home, Forwarded::Settle { channel, tags, how: Settlement::Ack });
        }
    }

    /// Handles what node `from` sent.
    pub fn receive(self: &Arc<Self>, from: u64, message: Forwarded) {
        match message {
            Forwarded::Answer { id, answer } => self.pending.answer(id, answer),
            Forwarded::Deliver { channel, tag, delivery_tag, redelivered, message } => {
                match self.consumers.deliver(from, channel, &tag, delivery_tag, redelivered, message) {
                    Some(remote) => self.send_due_acks(remote.consumer.queue(), true),
                    None => {
                        // A delivery to a consumer that is gone (cancelled meanwhile): back it goes.
                        let how = Settlement::Requeue;
                        self.send(from, Forwarded::Settle { channel, tags: vec![delivery_tag], how });
                        self.send(from, Forwarded::Cancel { channel, tag });
                    }
                }
            }
            Forwarded::Cancelled { channel, tag } => self.consumers.cancelled(channel, &tag),
            request => {
                let Some(home) = self.home.get() else { return };
                home.handle(self, from, request);
            }
        }
    }

    /// The link to `node` went: everything in flight between the two nodes is forgotten on
    /// this side (the other side does the same).
    pub fn node_down(&self, node: u64) {
        if let Some(home) = self.home.get() {
            home.node_down(node);
        }
        self.consumers.node_down(node);
        self.pending.node_down(node);
    }

    /// What waits to be sent to `node` fell under its bound: deliveries held back resume.
    pub fn resume(&self, node: u64) {
        if let Some(home) = self.home.get() {
            home.resume(node);
        }
    }

    pub(crate) fn has_room(&self, node: u64) -> bool {
        self.forwarding.has_room(node)
    }
}
