//! What every kind of queue does: the one interface that the virtual host, sessions and
//! channels use, whatever `x-queue-type` chose.
//!
//! [`super::Queue`] holds what all kinds share (name, definition, parsed arguments) and hands
//! each operation to its kind: `ClassicQueue` (messages leave once settled), `StreamQueue`
//! (an append-only log read by offset), and the quorum and remote kinds. A kind's
//! methods get the queue itself, to hand deliveries to sessions and to arm timers.

use super::consumer::Consumer;
use super::{DeliveryChannel, GetResult, Published, Queue, Reply, SessionId};
use crate::error::BrokerResult;
use crate::message::Message;
use crate::message_ref::MessageRef;
use crate::message_store::log_browser::LogBrowser;
use crate::message_store::StoreError;
use crate::scheduler::QueueTimer;
use std::sync::Arc;

/// Who holds deliveries being settled: a consumer, or `basic.get` on a channel.
#[derive(Debug, Clone, Copy)]
pub struct Holder<'a> {
    /// The channel's session.
    pub session: SessionId,
    /// The consumer they were delivered to; `None` for `basic.get`.
    pub consumer: Option<&'a Arc<Consumer>>,
}

/// One kind of queue.
pub(crate) trait QueueKind: Send + Sync {
    /// Stores a message (or refuses it, by overflow rules) and dispatches it if it can.
    fn publish(&self, queue: &Arc<Queue>, message: Arc<Message>) -> Result<Published, StoreError>;
    /// Delivers what consumers' credit allows.
    fn dispatch(&self, queue: &Arc<Queue>);
    /// Attaches a consumer (dispatch starts at the next [`QueueKind::dispatch`]): at once,
    /// or, on a stand-in, once the queue's home node has taken it (a refusal there is the
    /// client's error too, before its `consume-ok`).
    fn add_consumer(&self, queue: &Arc<Queue>, consumer: Arc<Consumer>) -> Reply<BrokerResult<()>>;
    /// The client was told of `consumer` (`consume-ok` is queued ahead): deliveries may start.
    fn start_deliveries(&self, queue: &Arc<Queue>, _consumer: &Arc<Consumer>) {
        self.dispatch(queue);
    }
    /// Detaches a consumer; true if none is left.
    fn remove_consumer(&self, queue: &Arc<Queue>, consumer: &Arc<Consumer>) -> bool;
    /// `basic.get`: the next message, recorded on `session`.
    fn get(
        &self,
        queue: &Arc<Queue>,
        session: &Arc<dyn DeliveryChannel>,
        no_ack: bool,
    ) -> Reply<BrokerResult<Option<GetResult>>>;
    /// Acknowledged deliveries, held by `consumer` (or taken by `basic.get` on `session`).
    fn settle(&self, queue: &Arc<Queue>, messages: &[MessageRef], holder: Holder<'_>);
    /// Rejected deliveries (no requeue): dead-lettered or dropped.
    fn reject(&self, queue: &Arc<Queue>, messages: &[MessageRef], holder: Holder<'_>);
    /// Deliveries returned to the queue.
    fn requeue(&self, queue: &Arc<Queue>, messages: &[MessageRef], holder: Holder<'_>);
    /// `queue.purge`: how many messages were removed.
    fn purge(&self, queue: &Arc<Queue>) -> Reply<BrokerResult<u32>>;
    /// The channel `session` closed: what its consumers and gets hold goes back to the queue.
    /// (Only a kind that tracks channels itself needs this; the session returns its
    /// deliveries one by one anyway.)
    fn channel_closed(&self, _queue: &Arc<Queue>, _session: SessionId) {}
    /// The queue's arguments changed from `before` (a policy): limits, TTLs and expiry apply
    /// from now on. Only kinds whose queues take policies are ever told.
    fn arguments_changed(&self, _queue: &Arc<Queue>, _before: &super::QueueArguments) {}
    /// Messages ready for delivery.
    fn message_count(&self) -> u32;
    /// Messages delivered and not yet settled.
    fn unacked_count(&self) -> u32;
    /// Consumers attached.
    fn consumer_count(&self) -> u32;
    /// Ready messages and consumers, as a passive `queue.declare` reports them (where the
    /// queue lives: a stand-in asks its home).
    fn counts(&self, _queue: &Arc<Queue>) -> Reply<BrokerResult<(u32, u32)>> {
        Reply::Now(Ok((self.message_count(), self.consumer_count())))
    }
    /// The queue was used now (declare, get, consume: for `x-expires`).
    fn touch(&self);
    /// One of the queue's timers fired.
    fn timer_fired(&self, queue: &Arc<Queue>, timer: QueueTimer);
    /// The broker is stopping: make what is stored durable.
    fn close(&self, queue: &Arc<Queue>);
    /// The queue was deleted: release its storage; returns its message count and its
    /// consumers, for cancelling.
    fn mark_deleted(&self, queue: &Arc<Queue>) -> (u32, Vec<Arc<Consumer>>);
    /// Bytes the queue keeps on this node's disk.
    fn disk_bytes(&self) -> u64 {
        0
    }
    /// The kind as `Any`, for the one accessor that needs its concrete type (a stream
    /// queue's [`crate::stream::Stream`], found in `stream_queue.rs`), so that this trait
    /// and [`Queue`] name no stream type.
    fn as_any(&self) -> &dyn std::any::Any;
    /// Reads by offset of the log the queue keeps on this node, if it keeps one: a stream's,
    /// or a durable classic queue's.
    fn browser(&self) -> Option<LogBrowser> {
        None
    }
    /// This node's member of the queue's Raft group, if it is replicated here (a quorum
    /// queue, or a stream in a cluster).
    fn replicas(&self) -> Option<&dyn crate::quorum::Membership> {
        None
    }
    /// The nodes the queue lives on, if this is a stand-in for a queue of other nodes.
    fn homes(&self) -> Option<&[u64]> {
        None
    }
}
