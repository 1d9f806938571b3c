//! A subscription: one `Subscribe` of a connection to a stream, read through the broker's
//! stream consumers.
//!
//! Each subscription is a consumer of the stream on a session of its own, whose
//! [`DeliverySink`] hands deliveries to the connection's writer. The writer groups them into
//! chunks of consecutive offsets; a chunk takes one credit, and once it is written its
//! messages are acked, which only returns the consumer's prefetch (stream acks settle
//! nothing). While a subscription has no credit the sink says it is not writable, and the
//! stream holds back until a `Credit` resumes it: memory stays bounded by the prefetch.

use crate::amqp10;
use crate::chunk::ChunkWriter;
use crate::outbound::Outbound;
use amq_protocol::types::AMQPValue;
use bytes::BytesMut;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedSender;
use warren_delivery::session::ReplyDelivery;
use warren_delivery::stream::OFFSET_HEADER;
use warren_delivery::{Delivery, DeliverySink, Session};

/// Messages in one chunk at most: a chunk is what one credit buys.
pub const MAX_CHUNK_MESSAGES: usize = 256;
/// Bytes of one chunk, about, at most (a larger message goes alone).
pub const MAX_CHUNK_BYTES: usize = 1 << 20;
/// Deliveries a subscription may hold unsent (its consumer's prefetch): some chunks ahead.
pub const PREFETCH_MESSAGES: u16 = 4 * MAX_CHUNK_MESSAGES as u16;

/// What the connection and its writer share of one subscription.
#[derive(Debug)]
pub struct Subscription {
    /// The client's id for it.
    pub id: u8,
    /// The stream it reads.
    pub stream: String,
    /// Chunks the client may still be sent (its sink reads it too).
    pub credit: Arc<AtomicU32>,
    /// Its session, which holds its consumer.
    pub session: Arc<Session>,
}

impl Subscription {
    /// Adds `credit` chunks; the stream resumes if it was held back.
    pub fn add_credit(&self, credit: u16) {
        self.credit.fetch_add(u32::from(credit), Ordering::AcqRel);
        self.session.resume();
    }

    fn take_credit(&self) -> bool {
        self.credit.fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| c.checked_sub(1)).is_ok()
    }
}

/// Where a subscription's session sends its deliveries: the connection's writer.
#[derive(Debug)]
pub struct SubscriptionSink {
    /// The subscription's id.
    pub id: u8,
    /// The writer.
    pub out: UnboundedSender<Outbound>,
    /// The subscription's credit, shared.
    pub credit: Arc<AtomicU32>,
}

impl DeliverySink for SubscriptionSink {
    fn deliver(&self, delivery: Delivery) {
        // A closed writer means the connection is going: the session closes with it.
        let _ = self.out.send(Outbound::Delivery(self.id, delivery));
    }

    fn deliver_reply(&self, _reply: ReplyDelivery) {}

    fn consumer_cancelled(&self, _consumer_tag: &amq_protocol::types::ShortString) {
        let _ = self.out.send(Outbound::StreamGone(self.id));
    }

    fn writable(&self) -> bool {
        self.credit.load(Ordering::Acquire) > 0
    }
}

/// The offset the stream gave a delivery (its `x-stream-offset` header).
fn offset_of(delivery: &Delivery) -> Option<u64> {
    match delivery.message.properties.headers()?.inner().get(OFFSET_HEADER)? {
        AMQPValue::LongLongInt(offset) => u64::try_from(*offset).ok(),
        _ => None,
    }
}

/// A subscription's deliveries waiting in the writer for credit.
#[derive(Debug)]
pub struct Pending {
    /// The subscription.
    pub subscription: Arc<Subscription>,
    /// Deliver's version this connection speaks (2 carries the committed offset).
    pub deliver_version: u16,
    /// Deliveries not sent yet, in offset order.
    pub deliveries: VecDeque<Delivery>,
    /// Whether the Subscribe was answered: no chunk may go before the answer.
    pub started: bool,
    /// Where each message is encoded before it is copied into its chunk.
    pub scratch: Vec<u8>,
}

impl Pending {
    /// Writes chunks while there are deliveries and credit; acks what it wrote.
    pub fn write_chunks(&mut self, out: &mut BytesMut) {
        while self.started && !self.deliveries.is_empty() && self.subscription.take_credit() {
            let last_tag = self.write_chunk(out);
            if let Some(tag) = last_tag {
                // Stream acks only return prefetch: the next messages come at once.
                let _ = self.subscription.session.ack(tag, true);
            }
        }
    }

    /// One chunk of consecutive offsets from the front; the delivery tag of its last message.
    fn write_chunk(&mut self, out: &mut BytesMut) -> Option<u64> {
        let first = self.deliveries.front()?;
        let first_offset = offset_of(first).unwrap_or(0);
        let timestamp_ms = warren_delivery::clock::now_ms() as i64;
        let id = self.subscription.id;
        let mut chunk = ChunkWriter::new(out, self.deliver_version, id, first_offset, first_offset, timestamp_ms);
        let mut last_tag = None;
        let mut next_offset = first_offset;
        while let Some(delivery) = self.deliveries.front() {
            let full = usize::from(chunk.entries()) >= MAX_CHUNK_MESSAGES || chunk.frame_bytes() >= MAX_CHUNK_BYTES;
            if full || (chunk.entries() > 0 && offset_of(delivery) != Some(next_offset)) {
                break;
            }
            let Some(delivery) = self.deliveries.pop_front() else { break };
            self.scratch.clear();
            amqp10::amqp10_from_message(&delivery.message, &mut self.scratch);
            chunk.push(|out| out.extend_from_slice(&self.scratch));
            last_tag = Some(delivery.delivery_tag);
            next_offset += 1;
        }
        chunk.finish();
        last_tag
    }
}
