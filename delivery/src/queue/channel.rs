//! The channel a queue delivers to: what every queue kind, stream and forwarded consumer
//! needs of a session, so that the queue layer names no session type.
//!
//! A [`Consumer`] holds its channel as an `Arc<dyn DeliveryChannel>`; the session, which
//! stands above queues (it holds them in its unacked deliveries), implements the trait.

use super::consumer::Consumer;
use super::Queue;
use crate::message::Message;
use crate::message_ref::MessageRef;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// A channel's identity for queues that track channels themselves (quorum queues, whose
/// replicated state names the channel holding each message): unique in this process, and
/// never reused by a later run of the broker (ids start from the start time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(pub u64);

impl SessionId {
    /// A new id. The first ones of a run are its start time in ms shifted left by
    /// [`SESSION_ID_COUNTER_BITS`]: a restart starts past every id of the run before, unless
    /// that run opened more than 2^20 channels per millisecond it lived.
    pub(crate) fn next() -> Self {
        static NEXT: OnceLock<AtomicU64> = OnceLock::new();
        let next = NEXT.get_or_init(|| AtomicU64::new(crate::clock::now_ms() << SESSION_ID_COUNTER_BITS));
        SessionId(next.fetch_add(1, Ordering::Relaxed))
    }
}

/// Bits of a [`SessionId`] below its run's start time.
const SESSION_ID_COUNTER_BITS: u32 = 20;

/// The channel (session) that consumers and `basic.get` deliver to.
pub trait DeliveryChannel: Send + Sync + std::fmt::Debug {
    /// Its id.
    fn id(&self) -> SessionId;
    /// Called by a queue, under its lock: numbers a delivery to `consumer` and hands it on.
    fn push(
        &self,
        consumer: &Arc<Consumer>,
        queue: &Arc<Queue>,
        message_ref: MessageRef,
        redelivered: bool,
        message: Arc<Message>,
    );
    /// Called by a queue, under its lock: numbers a `basic.get` result.
    fn record_get(&self, queue: &Arc<Queue>, message: MessageRef, no_ack: bool) -> u64;
    /// `queue` tracks this channel itself: it is told when the channel closes (at once if
    /// it is closed already).
    fn tracked_by(&self, queue: &Arc<Queue>);
    /// The broker cancels a consumer whose queue went away, and tells the client.
    fn cancelled_by_broker(&self, consumer: &Arc<Consumer>);
    /// The channel's shared prefetch limit (`basic.qos` with global=true; 0 = none).
    fn channel_prefetch(&self) -> u32;
    /// Whether deliveries may flow: not paused by `channel.flow`, and the client keeping up.
    fn flow_active(&self) -> bool;
    /// Whether the channel's shared limit allows one more delivery now (and flow is on).
    fn has_credit(&self) -> bool;
}
