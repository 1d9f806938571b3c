//! The connection's outgoing side: what other parts queue for the writer, and the writer task.
//!
//! Everything bound for the socket, replies from the connection task and deliveries pushed by
//! queues on other tasks, goes through one channel, so it reaches the client in the order it
//! was queued. The writer drains the channel in batches and encodes many frames into one batch
//! per (vectored) `write` call.
//!
//! The channel itself never refuses an item (a reply must not be lost), but the outbox counts
//! the bytes queued and not yet written. Past [`OUTBOX_HIGH_WATER_BYTES`] it is full: the
//! connection stops reading the client's frames and its channels take no more deliveries
//! (queues keep them, a durable backlog stays on disk), so a client that does not read its
//! socket cannot make the broker buffer without limit. Once the writer has brought the count
//! under [`OUTBOX_LOW_WATER_BYTES`] it signals [`Outbox::drained`] and work resumes.

use crate::frame;
use crate::write_batch::WriteBatch;
use amq_protocol::protocol::AMQPClass;
use bytes::Bytes;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::sync::Notify;
use warren_delivery::connections::ConnectionInfo;
use warren_delivery::{Delivery, DeliverySink, Message, ReplyDelivery};

/// Bytes gathered before a write is issued, even if more items are waiting.
const WRITE_BATCH_BYTES: usize = 256 * 1024;
/// A write buffer grown past this is released when idle, so idle connections stay small.
const IDLE_BUFFER_KEEP_BYTES: usize = 64 * 1024;
/// Bytes queued for a client and not yet written at which its connection stops taking work.
pub const OUTBOX_HIGH_WATER_BYTES: usize = 4 * 1024 * 1024;
/// Bytes queued under which a full outbox lets work resume.
pub const OUTBOX_LOW_WATER_BYTES: usize = 1024 * 1024;
/// What a method frame is counted as, whatever its size (a close, a consume-ok).
const METHOD_WEIGHT_BYTES: usize = 64;
/// What a delivery is counted as beyond its properties and body (the deliver method, the
/// content header, frame overhead).
const DELIVERY_OVERHEAD_BYTES: usize = 128;

/// One item for the writer.
#[derive(Debug)]
pub enum Outbound {
    /// Frames already encoded.
    Frames(Bytes),
    /// A method frame to encode.
    Method(u16, AMQPClass),
    /// A delivery to a consumer on a channel.
    Deliver(u16, Delivery),
    /// A direct reply to the reply consumer of a channel.
    Reply(u16, ReplyDelivery),
    /// Flush, close the socket and stop.
    Shutdown,
}

impl Outbound {
    /// The bytes this item counts for against the outbox's limit: about what it puts on the
    /// wire.
    fn weight(&self) -> usize {
        match self {
            Outbound::Frames(bytes) => bytes.len(),
            Outbound::Method(..) => METHOD_WEIGHT_BYTES,
            Outbound::Deliver(_, Delivery { message, .. }) | Outbound::Reply(_, ReplyDelivery { message, .. }) => {
                delivery_weight(message)
            }
            Outbound::Shutdown => 0,
        }
    }
}

fn delivery_weight(message: &Message) -> usize {
    DELIVERY_OVERHEAD_BYTES + message.properties.raw().len() + message.body.len()
}

/// How much an outbox holds, shared by its senders and its writer.
#[derive(Debug, Default)]
struct Load {
    queued_bytes: AtomicUsize,
    /// Someone found the outbox full: the writer signals `drained` once it is low again.
    full_seen: AtomicBool,
    drained: Notify,
}

/// The sending end, cloned into every channel's delivery sink.
#[derive(Debug, Clone)]
pub struct Outbox {
    tx: mpsc::UnboundedSender<Outbound>,
    load: Arc<Load>,
}

/// The writer's end of an outbox.
#[derive(Debug)]
pub struct OutboxReceiver {
    rx: mpsc::UnboundedReceiver<Outbound>,
    load: Arc<Load>,
}

impl Outbox {
    /// A new outbox and the receiver the writer task drains.
    pub fn new() -> (Self, OutboxReceiver) {
        let (tx, rx) = mpsc::unbounded_channel();
        let load = Arc::new(Load::default());
        (Outbox { tx, load: Arc::clone(&load) }, OutboxReceiver { rx, load })
    }

    /// Queues an item; silently dropped if the writer is gone (the socket closed).
    pub fn send(&self, item: Outbound) {
        // Counted before it can be written, so the writer never subtracts what was not added.
        let weight = item.weight();
        self.load.queued_bytes.fetch_add(weight, Ordering::AcqRel);
        if self.tx.send(item).is_err() {
            self.load.queued_bytes.fetch_sub(weight, Ordering::AcqRel);
        }
    }

    /// Whether the client is this far behind: [`OUTBOX_HIGH_WATER_BYTES`] queued and not yet
    /// written. Finding it full arms [`Outbox::drained`].
    pub fn is_full(&self) -> bool {
        if self.load.queued_bytes.load(Ordering::SeqCst) < OUTBOX_HIGH_WATER_BYTES {
            return false;
        }
        self.load.full_seen.store(true, Ordering::SeqCst);
        // The writer may have drained it between the load and the store, found `full_seen`
        // unset and woken nobody: then nothing would resume the deliveries held back. Read
        // after the store (all four accesses sequentially consistent), the load is either
        // still high, and the writer, which has yet to drain it, will see `full_seen`; or it
        // is not, and the outbox is not full.
        self.load.queued_bytes.load(Ordering::SeqCst) >= OUTBOX_HIGH_WATER_BYTES
    }

    /// Completes once a full outbox has drained under [`OUTBOX_LOW_WATER_BYTES`] (at once if
    /// that happened since the last wait).
    pub async fn drained(&self) {
        self.load.drained.notified().await;
    }

    /// Queues a method frame.
    pub fn method(&self, channel: u16, method: AMQPClass) {
        self.send(Outbound::Method(channel, method));
    }
}

/// Replies that wait for a disk write (publisher confirms, `tx.commit-ok`) and so are sent
/// from another task, after the frame that caused them: they go out only while their channel
/// is open, never after its close or close-ok (which the channel queues after [`close`]).
///
/// [`close`]: LateReplies::close
#[derive(Debug, Clone)]
pub struct LateReplies {
    outbox: Outbox,
    open: Arc<parking_lot::Mutex<bool>>,
}

impl LateReplies {
    /// Late replies of an open channel.
    pub fn new(outbox: Outbox) -> Self {
        LateReplies { outbox, open: Arc::new(parking_lot::Mutex::new(true)) }
    }

    /// Queues `item` if the channel is still open.
    pub fn send(&self, item: Outbound) {
        let open = self.open.lock();
        if *open {
            self.outbox.send(item);
        }
    }

    /// The channel is closing: nothing more goes out.
    pub fn close(&self) {
        *self.open.lock() = false;
    }
}

/// Delivers a session's messages to one channel of this connection.
#[derive(Debug)]
pub struct ChannelSink {
    channel: u16,
    outbox: Outbox,
}

impl ChannelSink {
    /// A sink for `channel`.
    pub fn new(channel: u16, outbox: Outbox) -> Self {
        ChannelSink { channel, outbox }
    }
}

impl DeliverySink for ChannelSink {
    fn deliver(&self, delivery: Delivery) {
        self.outbox.send(Outbound::Deliver(self.channel, delivery));
    }

    fn deliver_reply(&self, reply: ReplyDelivery) {
        self.outbox.send(Outbound::Reply(self.channel, reply));
    }

    fn writable(&self) -> bool {
        !self.outbox.is_full()
    }

    fn consumer_cancelled(&self, consumer_tag: &amq_protocol::types::ShortString) {
        let cancel = amq_protocol::protocol::basic::Cancel { consumer_tag: consumer_tag.clone(), nowait: false };
        self.outbox.method(self.channel, AMQPClass::Basic(amq_protocol::protocol::basic::AMQPMethod::Cancel(cancel)));
    }
}

fn encode(batch: &mut WriteBatch, item: Outbound, frame_max: u32, weight: &mut usize) -> bool {
    *weight += item.weight();
    match item {
        Outbound::Frames(bytes) => batch.push(bytes),
        Outbound::Method(channel, method) => frame::put_method(batch.buf(), channel, method),
        Outbound::Deliver(channel, delivery) => {
            let message = &delivery.message;
            frame::put_deliver(
                batch.buf(),
                channel,
                delivery.consumer.tag().as_str(),
                delivery.delivery_tag,
                delivery.redelivered,
                message.exchange.as_str(),
                message.routing_key.as_str(),
            );
            batch.put_content(channel, message.properties.raw(), &message.body, frame_max);
        }
        Outbound::Reply(channel, reply) => {
            let message = &reply.message;
            frame::put_deliver(
                batch.buf(),
                channel,
                reply.consumer_tag.as_str(),
                reply.delivery_tag,
                false,
                message.exchange.as_str(),
                message.routing_key.as_str(),
            );
            batch.put_content(channel, message.properties.raw(), &message.body, frame_max);
        }
        Outbound::Shutdown => return false,
    }
    true
}

/// Runs the writer until [`Outbound::Shutdown`], the channel closing, or a write error.
/// `frame_max` is read per batch: it is set once tuning completes.
pub async fn run_writer<W: AsyncWrite + Unpin>(
    mut socket: W,
    receiver: OutboxReceiver,
    frame_max: Arc<AtomicU32>,
    traffic: Arc<ConnectionInfo>,
) {
    let OutboxReceiver { mut rx, load } = receiver;
    let mut batch = WriteBatch::default();
    let mut running = true;
    while running {
        let Some(first) = rx.recv().await else { break };
        let limit = frame_max.load(Ordering::Acquire);
        let mut weight = 0;
        running = encode(&mut batch, first, limit, &mut weight);
        while running && batch.len() < WRITE_BATCH_BYTES {
            match rx.try_recv() {
                Ok(item) => running = encode(&mut batch, item, limit, &mut weight),
                Err(_) => break,
            }
        }
        // A busy writer keeps its buffer (freeing and regrowing it each batch faulted in
        // fresh pages at every batch); one whose batches have become small gives it back.
        let busy = batch.len() >= IDLE_BUFFER_KEEP_BYTES;
        traffic.sent(batch.len());
        // A TLS stream may hold records back until flushed (on TCP, flush is nothing).
        if let Err(error) = async {
            batch.write_to(&mut socket).await?;
            socket.flush().await
        }
        .await
        {
            tracing::debug!(%error, "write failed; closing connection");
            break;
        }
        let left = load.queued_bytes.fetch_sub(weight, Ordering::SeqCst) - weight;
        if left < OUTBOX_LOW_WATER_BYTES && load.full_seen.swap(false, Ordering::SeqCst) {
            load.drained.notify_one();
        }
        if !busy && batch.capacity() > IDLE_BUFFER_KEEP_BYTES && rx.is_empty() {
            batch.shrink();
        }
    }
    let _ = socket.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn late_replies_stop_at_close() {
        let (outbox, mut receiver) = Outbox::new();
        let replies = LateReplies::new(outbox);
        let late = replies.clone();
        replies.send(Outbound::Frames(Bytes::from_static(b"before")));
        replies.close();
        // A waiter that finishes after the channel closed (its fsync was slow) sends nothing.
        late.send(Outbound::Frames(Bytes::from_static(b"after")));
        assert!(matches!(receiver.rx.try_recv(), Ok(Outbound::Frames(bytes)) if &bytes[..] == b"before"));
        assert!(receiver.rx.try_recv().is_err());
    }
}
