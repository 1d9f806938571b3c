//! The connection's outgoing side: what other parts queue for the writer, and the writer task.
//!
//! Everything bound for the socket, replies from the connection task and deliveries pushed by
//! queues on other tasks, goes through one unbounded channel, so it reaches the client in the
//! order it was queued. The writer drains the channel in batches and encodes many frames into
//! one batch per (vectored) `write` call.

use crate::frame;
use crate::write_batch::WriteBatch;
use amq_protocol::protocol::AMQPClass;
use bytes::Bytes;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use warren_delivery::{Delivery, DeliverySink};

/// Bytes gathered before a write is issued, even if more items are waiting.
const WRITE_BATCH_BYTES: usize = 256 * 1024;
/// A write buffer grown past this is released when idle, so idle connections stay small.
const IDLE_BUFFER_KEEP_BYTES: usize = 64 * 1024;

/// One item for the writer.
#[derive(Debug)]
pub enum Outbound {
    /// Frames already encoded.
    Frames(Bytes),
    /// A method frame to encode.
    Method(u16, AMQPClass),
    /// A delivery to a consumer on a channel.
    Deliver(u16, Delivery),
    /// Flush, close the socket and stop.
    Shutdown,
}

/// The sending end, cloned into every channel's delivery sink.
#[derive(Debug, Clone)]
pub struct Outbox {
    tx: mpsc::UnboundedSender<Outbound>,
}

impl Outbox {
    /// A new outbox and the receiver the writer task drains.
    pub fn new() -> (Self, mpsc::UnboundedReceiver<Outbound>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Outbox { tx }, rx)
    }

    /// Queues an item; silently dropped if the writer is gone (the socket closed).
    pub fn send(&self, item: Outbound) {
        let _ = self.tx.send(item);
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

    fn consumer_cancelled(&self, consumer_tag: &amq_protocol::types::ShortString) {
        let cancel = amq_protocol::protocol::basic::Cancel { consumer_tag: consumer_tag.clone(), nowait: false };
        self.outbox.method(self.channel, AMQPClass::Basic(amq_protocol::protocol::basic::AMQPMethod::Cancel(cancel)));
    }
}

fn encode(batch: &mut WriteBatch, item: Outbound, frame_max: u32) -> bool {
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
        Outbound::Shutdown => return false,
    }
    true
}

/// Runs the writer until [`Outbound::Shutdown`], the channel closing, or a write error.
/// `frame_max` is read per batch: it is set once tuning completes.
pub async fn run_writer<W: AsyncWrite + Unpin>(
    mut socket: W,
    mut rx: mpsc::UnboundedReceiver<Outbound>,
    frame_max: Arc<AtomicU32>,
) {
    let mut batch = WriteBatch::default();
    let mut running = true;
    while running {
        let Some(first) = rx.recv().await else { break };
        let limit = frame_max.load(Ordering::Acquire);
        running = encode(&mut batch, first, limit);
        while running && batch.len() < WRITE_BATCH_BYTES {
            match rx.try_recv() {
                Ok(item) => running = encode(&mut batch, item, limit),
                Err(_) => break,
            }
        }
        // A busy writer keeps its buffer (freeing and regrowing it each batch faulted in
        // fresh pages at every batch); one whose batches have become small gives it back.
        let busy = batch.len() >= IDLE_BUFFER_KEEP_BYTES;
        if let Err(error) = batch.write_to(&mut socket).await {
            tracing::debug!(%error, "write failed; closing connection");
            break;
        }
        if !busy && batch.capacity() > IDLE_BUFFER_KEEP_BYTES && rx.is_empty() {
            batch.shrink();
        }
    }
    let _ = socket.shutdown().await;
}
