//! Publisher confirms and transactions: what a channel owes a publisher after routing.

use crate::frame;
use crate::outbox::{LateReplies, Outbound};
use bytes::{Bytes, BytesMut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;
use warren_delivery::message_store::{DurableMark, StoreError};
use warren_delivery::session::ChannelStats;
use warren_delivery::Message;

/// What a batch of publishes owes the client, in publish order.
#[derive(Debug, Clone, Copy)]
enum Outcome {
    /// Every sequence up to and including this one is acknowledged.
    AckUpTo(u64),
    /// This sequence is refused.
    Nack(u64),
}

/// Outcomes of a batch of frames, and the disk writes they wait on.
#[derive(Debug, Default)]
struct Batch {
    outcomes: Vec<Outcome>,
    /// The highest offset written per log: the batch is safe once each is durable.
    marks: Vec<DurableMark>,
    /// When its first publish was settled, for the confirm latency.
    started: Option<std::time::Instant>,
    /// Publishes its acks cover (counted as confirmed once they are sent as acks).
    acked: u64,
}

impl Batch {
    fn encode(&self, channel: u16, durable: bool, stats: &ChannelStats) -> Bytes {
        if let Some(started) = self.started {
            warren_delivery::message_store::CONFIRM_LATENCY.record(started.elapsed());
        }
        if durable {
            warren_delivery::node_counters::MESSAGES_CONFIRMED.add_many(self.acked);
            stats.confirmed.add_many(self.acked);
        }
        let mut out = BytesMut::new();
        for outcome in &self.outcomes {
            match *outcome {
                Outcome::AckUpTo(sequence) if durable => frame::put_ack(&mut out, channel, sequence, true),
                Outcome::AckUpTo(sequence) => frame::put_nack(&mut out, channel, sequence, true),
                Outcome::Nack(sequence) => frame::put_nack(&mut out, channel, sequence, false),
            }
        }
        out.freeze()
    }
}

/// Confirm mode: numbers publishes and confirms them once they are as safe as promised.
///
/// Outcomes are collected while a batch of frames is processed and sent when it ends, with
/// consecutive acks coalesced into one `basic.ack` (multiple). A batch that wrote to disk is
/// handed to a waiter task that sends its confirms after the fsync covering it; later batches
/// queue behind it, so confirms always reach the client in publish order.
#[derive(Debug)]
pub struct Confirms {
    channel: u16,
    replies: LateReplies,
    /// The channel's counters, where its confirms are counted.
    stats: Arc<ChannelStats>,
    last_sequence: u64,
    batch: Batch,
    waiter: Option<mpsc::UnboundedSender<Batch>>,
    /// Batches handed to the waiter and not yet sent.
    in_flight: Arc<AtomicUsize>,
}

impl Confirms {
    /// Confirm mode on `channel`, whose counters are `stats`.
    pub fn new(channel: u16, replies: LateReplies, stats: Arc<ChannelStats>) -> Self {
        Confirms {
            channel,
            replies,
            stats,
            last_sequence: 0,
            batch: Batch::default(),
            waiter: None,
            in_flight: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Numbers the next publish.
    pub fn next_sequence(&mut self) -> u64 {
        self.last_sequence += 1;
        self.last_sequence
    }

    /// Notes a disk write that publish `sequence` must wait for.
    pub fn wait_for(&mut self, mark: DurableMark) {
        add_mark(&mut self.batch.marks, mark);
    }

    /// Records the outcome of publish `sequence`.
    pub fn settle(&mut self, sequence: u64, stored: bool) {
        self.batch.started.get_or_insert_with(std::time::Instant::now);
        let outcomes = &mut self.batch.outcomes;
        self.batch.acked += u64::from(stored);
        match (outcomes.last_mut(), stored) {
            (Some(Outcome::AckUpTo(upto)), true) => *upto = sequence,
            (_, true) => outcomes.push(Outcome::AckUpTo(sequence)),
            (_, false) => outcomes.push(Outcome::Nack(sequence)),
        }
    }

    /// Sends (or hands to the waiter) what the batch owes.
    pub fn flush(&mut self) {
        if self.batch.outcomes.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.batch);
        if batch.marks.is_empty() && self.in_flight.load(Ordering::Acquire) == 0 {
            self.replies.send(Outbound::Frames(batch.encode(self.channel, true, &self.stats)));
            return;
        }
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        let waiter = self.waiter.get_or_insert_with(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            let stats = Arc::clone(&self.stats);
            tokio::spawn(send_when_durable(self.channel, self.replies.clone(), rx, Arc::clone(&self.in_flight), stats));
            tx
        });
        if waiter.send(batch).is_err() {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Keeps one mark per log, the latest: waiting for it covers the others.
pub fn add_mark(marks: &mut Vec<DurableMark>, mark: DurableMark) {
    if !marks.iter_mut().any(|existing| existing.absorb(&mark)) {
        marks.push(mark);
    }
}

/// Waits until every mark is durable; false if a log failed first or a queue refused one
/// of the publishes.
pub async fn wait_durable(marks: &[DurableMark]) -> bool {
    let mut durable = true;
    for mark in marks {
        match mark.wait().await {
            Ok(()) => {}
            // A quorum queue's x-overflow refused it: a nack, not a failure.
            Err(StoreError::Refused) => durable = false,
            Err(error) => {
                tracing::error!(%error, "a log failed before the fsync covering a publish");
                durable = false;
            }
        }
    }
    durable
}

async fn send_when_durable(
    channel: u16,
    replies: LateReplies,
    mut batches: mpsc::UnboundedReceiver<Batch>,
    in_flight: Arc<AtomicUsize>,
    stats: Arc<ChannelStats>,
) {
    while let Some(batch) = batches.recv().await {
        let durable = wait_durable(&batch.marks).await;
        replies.send(Outbound::Frames(batch.encode(channel, durable, &stats)));
        in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// An operation held back by a transaction until commit.
#[derive(Debug)]
pub enum TxOp {
    /// A complete publish.
    Publish {
        /// Whether an unroutable message comes back (`basic.return`).
        mandatory: bool,
        /// The message.
        message: Arc<Message>,
    },
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
    /// Disk writes made by the commit in progress.
    marks: Vec<DurableMark>,
}

impl Transaction {
    /// Notes a disk write the commit must wait for.
    pub fn wait_for(&mut self, mark: DurableMark) {
        add_mark(&mut self.marks, mark);
    }

    /// Takes the disk writes of the commit.
    pub fn take_marks(&mut self) -> Vec<DurableMark> {
        std::mem::take(&mut self.marks)
    }

    /// Holds an operation until commit or rollback.
    pub fn push(&mut self, op: TxOp) {
        self.ops.push(op);
    }

    /// Takes the held operations, in order.
    pub fn take(&mut self) -> Vec<TxOp> {
        std::mem::take(&mut self.ops)
    }
}
