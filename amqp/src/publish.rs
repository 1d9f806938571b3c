//! Publisher confirms and transactions: what a channel owes a publisher after routing.

use crate::frame;
use crate::outbox::{Outbound, Outbox};
use amq_protocol::protocol::basic::{self, Publish};
use amq_protocol::protocol::AMQPClass;
use bytes::BytesMut;
use std::sync::Arc;
use warren_delivery::Message;

/// Confirm mode: numbers publishes and acks (or nacks) them.
///
/// Acks are coalesced: consecutive acks collected while a batch of frames is processed go out
/// as one `basic.ack` with multiple=true when the batch ends. A nack first sends the acks
/// before it, so the client always sees outcomes in publish order.
#[derive(Debug, Default)]
pub struct Confirms {
    /// The sequence number of the last publish.
    last_sequence: u64,
    /// Highest sequence acknowledged to the client.
    sent_upto: u64,
    /// Highest sequence ready to be acknowledged, if above `sent_upto`.
    pending_upto: u64,
}

impl Confirms {
    /// Numbers the next publish.
    pub fn next_sequence(&mut self) -> u64 {
        self.last_sequence += 1;
        self.last_sequence
    }

    /// Records the outcome of publish `sequence`; a nack goes out at once.
    pub fn settle(&mut self, sequence: u64, stored: bool, channel: u16, outbox: &Outbox) {
        if stored {
            self.pending_upto = sequence;
            return;
        }
        self.flush(channel, outbox);
        let nack = basic::Nack { delivery_tag: sequence, multiple: false, requeue: false };
        outbox.method(channel, AMQPClass::Basic(basic::AMQPMethod::Nack(nack)));
        self.sent_upto = sequence;
    }

    /// Sends the pending acks, as one frame.
    pub fn flush(&mut self, channel: u16, outbox: &Outbox) {
        if self.pending_upto <= self.sent_upto {
            return;
        }
        let multiple = self.pending_upto - self.sent_upto > 1;
        let mut out = BytesMut::with_capacity(frame::FRAME_OVERHEAD_BYTES + 13);
        frame::put_ack(&mut out, channel, self.pending_upto, multiple);
        outbox.send(Outbound::Frames(out.freeze()));
        self.sent_upto = self.pending_upto;
    }
}

/// An operation held back by a transaction until commit.
#[derive(Debug)]
pub enum TxOp {
    /// A complete publish.
    Publish(Publish, Arc<Message>),
    /// `basic.ack`.
    Ack {
        /// Delivery tag.
        tag: u64,
        /// Up to and including the tag.
        multiple: bool,
    },
    /// `basic.nack` or `basic.reject`.
    Reject {
        /// Delivery tag.
        tag: u64,
        /// Up to and including the tag.
        multiple: bool,
        /// Back to the queue, or dropped.
        requeue: bool,
    },
}

/// Transactional mode: operations wait for `tx.commit`.
#[derive(Debug, Default)]
pub struct Transaction {
    ops: Vec<TxOp>,
}

impl Transaction {
    /// Holds an operation until commit or rollback.
    pub fn push(&mut self, op: TxOp) {
        self.ops.push(op);
    }

    /// Takes the held operations, in order.
    pub fn take(&mut self) -> Vec<TxOp> {
        std::mem::take(&mut self.ops)
    }
}
