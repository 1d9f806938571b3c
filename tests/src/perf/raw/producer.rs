//! The raw engine's producer: optional confirm.select, then one loop over one socket that
//! encodes batches of publishes (method, content header and body frames, by hand) into a
//! reusable buffer, writes them, and reads the broker's confirms, concurrently.
//!
//! A batch holds as many messages as fit in [`BATCH_BYTES`], the confirm window, the count and
//! the `--rate` pacing ([`Pacer`], shared with the lapin producer) allow; every message of a
//! batch is stamped with the time the batch was made. Without confirms a message counts as
//! published (outcome Sent) once its batch is written, as a lapin publish does once written;
//! with confirms, when its basic.ack or basic.nack arrives. The counting of outcomes is the
//! lapin producer's ([`PublishTally`]). connection.blocked pauses publishing until unblocked.

use super::super::body;
use super::super::producer::{queue_for, Pacer, PublishPlan, DELIVERY_MODE_PERSISTENT};
use super::super::stats::{Counters, Outcome, PublishTally};
use super::super::topology::Topology;
use super::connection::{self, Connection, Rare, CHANNEL, READ_CHUNK};
use super::frame::{self, RawFrame};
use amq_protocol::protocol::{confirm, AMQPClass};
use anyhow::{bail, Context};
use bytes::Buf;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A batch is closed once it holds this many bytes.
const BATCH_BYTES: usize = 64 * 1024;
/// AMQP delivery_mode of a transient message.
const DELIVERY_MODE_TRANSIENT: u8 = 1;

/// A connected raw producer, ready to run.
pub struct Producer {
    id: usize,
    connection: Connection,
    topology: Topology,
    plan: PublishPlan,
}

impl Producer {
    pub async fn connect(id: usize, uri: &str, topology: Topology, plan: PublishPlan) -> anyhow::Result<Self> {
        let mut connection = Connection::open(uri, format!("producer {id}")).await?;
        if plan.confirm_window > 0 {
            let select = confirm::Select { nowait: false };
            match connection.call(AMQPClass::Confirm(confirm::AMQPMethod::Select(select))).await? {
                AMQPClass::Confirm(confirm::AMQPMethod::SelectOk(_)) => {}
                other => bail!("producer {id}: expected confirm.select-ok, got {other:?}"),
            }
        }
        Ok(Producer { id, connection, topology, plan })
    }

    /// Publishes until the plan's count is reached or `stop` is set, then waits for the
    /// outstanding confirms and closes the connection.
    pub async fn run(self, counters: Arc<Counters>, stop: Arc<AtomicBool>) -> anyhow::Result<()> {
        let Producer { id, mut connection, topology, plan } = self;
        let mut state = State {
            encoder: Encoder::new(id, &topology, &plan, connection.frame_max),
            tally: PublishTally::new(topology.queues.len()),
            unconfirmed: (plan.confirm_window > 0).then(Unconfirmed::new),
            window: plan.confirm_window,
            count: plan.count,
            pacer: Pacer::new(plan.rate),
            out: Vec::with_capacity(BATCH_BYTES + connection.frame_max),
            written: 0,
            batch_first: 0,
            next: 0,
            blocked: false,
        };
        let who = connection.who.clone();
        let result = state.publish(&mut connection, &counters, &stop).await;
        state.tally.flush(&counters);
        result.with_context(|| who)?;
        connection.close().await;
        Ok(())
    }
}

/// What a running producer keeps between its events.
struct State {
    encoder: Encoder,
    tally: PublishTally,
    /// With confirms: the publishes awaiting theirs.
    unconfirmed: Option<Unconfirmed>,
    window: usize,
    count: Option<u64>,
    pacer: Pacer,
    /// The batch being written, and how much of it is.
    out: Vec<u8>,
    written: usize,
    /// Indices (0, 1, ...) of the batch's first message and of the next message to encode.
    batch_first: u64,
    next: u64,
    /// The broker sent connection.blocked.
    blocked: bool,
}

impl State {
    async fn publish(
        &mut self,
        connection: &mut Connection,
        counters: &Counters,
        stop: &AtomicBool,
    ) -> anyhow::Result<()> {
        let frame_max = connection.frame_max;
        let (mut reader, mut writer) = connection.stream.split();
        let input = &mut connection.input;
        input.reserve(READ_CHUNK);
        loop {
            let finished = stop.load(Ordering::Relaxed) || self.count.is_some_and(|count| self.next >= count);
            let mut pause = None;
            if self.out.is_empty() && !finished && !self.blocked {
                pause = self.fill_batch();
            }
            if self.out.is_empty() && finished && self.unconfirmed.as_ref().is_none_or(|u| u.pending == 0) {
                return Ok(());
            }
            tokio::select! {
                read = reader.read_buf(input) => {
                    if read.context("reading")? == 0 {
                        bail!("the broker closed the connection");
                    }
                    self.take_frames(input, frame_max)?;
                    self.tally.flush(counters);
                    input.reserve(READ_CHUNK);
                }
                wrote = writer.write(&self.out[self.written..]), if self.written < self.out.len() => {
                    self.wrote(wrote.context("writing")?)?;
                    self.tally.flush(counters);
                }
                () = tokio::time::sleep(pause.unwrap_or_default()), if pause.is_some() => {}
            }
        }
    }

    /// Encodes the next batch into `out`. Returns how long to wait when the next message is
    /// not due yet (`--rate`) and nothing was encoded.
    fn fill_batch(&mut self) -> Option<Duration> {
        self.batch_first = self.next;
        let sent_nanos = body::now_nanos();
        while self.out.len() < BATCH_BYTES
            && self.count.is_none_or(|count| self.next < count)
            && self.unconfirmed.as_ref().is_none_or(|unconfirmed| unconfirmed.pending < self.window)
        {
            if let Some(wait) = self.pacer.wait_before(self.next) {
                return self.out.is_empty().then_some(wait);
            }
            self.encoder.encode(&mut self.out, self.next, sent_nanos);
            if let Some(unconfirmed) = &mut self.unconfirmed {
                unconfirmed.push();
            }
            self.next += 1;
        }
        None
    }

    /// `n` more bytes of the batch were written; once all are, it makes room for the next.
    fn wrote(&mut self, n: usize) -> anyhow::Result<()> {
        if n == 0 {
            bail!("the socket accepts no more bytes");
        }
        self.written += n;
        if self.written < self.out.len() {
            return Ok(());
        }
        if self.unconfirmed.is_none() {
            for index in self.batch_first..self.next {
                self.tally.settle(Outcome::Sent, self.encoder.queue(index));
            }
        }
        self.out.clear();
        self.written = 0;
        Ok(())
    }

    /// Handles every complete frame in the read buffer, then drops them from it.
    fn take_frames(&mut self, input: &mut bytes::BytesMut, frame_max: usize) -> anyhow::Result<()> {
        let mut used = 0;
        let result = loop {
            match frame::split(&input[used..], frame_max) {
                Ok(Some((raw, len))) => {
                    used += len;
                    if let Err(error) = self.on_frame(raw) {
                        break Err(error);
                    }
                }
                Ok(None) => break Ok(()),
                Err(error) => break Err(error),
            }
        };
        input.advance(used);
        result
    }

    fn on_frame(&mut self, raw: RawFrame<'_>) -> anyhow::Result<()> {
        // Content frames can only follow a basic.return, which never comes without mandatory.
        if raw.kind != frame::FRAME_METHOD {
            return Ok(());
        }
        let method = frame::method(raw.payload)?;
        let outcome = match (method.class, method.method) {
            (frame::CLASS_BASIC, frame::BASIC_ACK) => Outcome::Acked,
            (frame::CLASS_BASIC, frame::BASIC_NACK) => Outcome::Nacked,
            _ => {
                match connection::rare_method(raw.payload)? {
                    Rare::Blocked => self.blocked = true,
                    Rare::Unblocked => self.blocked = false,
                    Rare::Other => {}
                }
                return Ok(());
            }
        };
        let what = if outcome == Outcome::Acked { "basic.ack" } else { "basic.nack" };
        let confirm = frame::confirm(method.arguments, what)?;
        let Some(unconfirmed) = &mut self.unconfirmed else { bail!("{what} without confirm.select") };
        let (encoder, tally) = (&self.encoder, &mut self.tally);
        unconfirmed
            .settle(confirm.delivery_tag, confirm.multiple, |index| tally.settle(outcome, encoder.queue(index)))
            .with_context(|| what)
    }
}

/// Encodes one producer's messages: for each queue, the method and content header frames
/// (the same for every message) are made once; the body gets its stamp and is framed.
struct Encoder {
    id: usize,
    /// basic.publish and the content header, by queue index.
    heads: Vec<Vec<u8>>,
    /// A body of the message size, restamped for each message.
    body: Vec<u8>,
    frame_max: usize,
}

impl Encoder {
    fn new(id: usize, topology: &Topology, plan: &PublishPlan, frame_max: usize) -> Self {
        let delivery_mode = if plan.persistent { DELIVERY_MODE_PERSISTENT } else { DELIVERY_MODE_TRANSIENT };
        let heads = topology
            .routing_keys
            .iter()
            .map(|routing_key| {
                let mut head = Vec::new();
                frame::put_publish(&mut head, CHANNEL, &topology.exchange, routing_key);
                frame::put_content_header(&mut head, CHANNEL, plan.size as u64, delivery_mode);
                head
            })
            .collect();
        Encoder { id, heads, body: vec![0; plan.size], frame_max }
    }

    /// The queue message `index` is addressed to.
    fn queue(&self, index: u64) -> usize {
        queue_for(self.id, index, self.heads.len())
    }

    /// Appends message `index`, stamped with `sent_nanos`.
    fn encode(&mut self, out: &mut Vec<u8>, index: u64, sent_nanos: u64) {
        if let Some(head) = self.heads.get(self.queue(index)) {
            out.extend_from_slice(head);
        }
        body::stamp(&mut self.body, self.id, index, sent_nanos);
        frame::put_body(out, CHANNEL, &self.body, self.frame_max);
    }
}

/// Publishes awaiting their confirm. After confirm.select the broker numbers publishes 1, 2,
/// ...: message index i has delivery tag i + 1.
struct Unconfirmed {
    /// Delivery tag of `settled[0]`.
    first_tag: u64,
    /// From `first_tag` on, whether each publish has had its confirm (settled ones at the
    /// front are dropped).
    settled: VecDeque<bool>,
    /// Publishes still awaiting their confirm.
    pending: usize,
}

impl Unconfirmed {
    fn new() -> Self {
        Unconfirmed { first_tag: 1, settled: VecDeque::new(), pending: 0 }
    }

    /// Notes one more publish.
    fn push(&mut self) {
        self.settled.push_back(false);
        self.pending += 1;
    }

    /// Settles the publish `tag` (with `multiple`, every earlier unsettled one too), calling
    /// `on_settled` with the message index of each. A tag never published, or a single confirm
    /// of a publish already settled, is an error.
    fn settle(&mut self, tag: u64, multiple: bool, mut on_settled: impl FnMut(u64)) -> anyhow::Result<()> {
        let end_tag = self.first_tag + self.settled.len() as u64;
        if tag == 0 || tag >= end_tag {
            bail!("a confirm of delivery tag {tag}, but only {} messages were published", end_tag - 1);
        }
        if tag < self.first_tag {
            return if multiple { Ok(()) } else { bail!("a second confirm of delivery tag {tag}") };
        }
        let last = (tag - self.first_tag) as usize;
        let first = if multiple { 0 } else { last };
        for offset in first..=last {
            let Some(settled) = self.settled.get_mut(offset) else { break };
            if !*settled {
                *settled = true;
                self.pending -= 1;
                on_settled(self.first_tag + offset as u64 - 1);
            } else if !multiple {
                bail!("a second confirm of delivery tag {tag}");
            }
        }
        while self.settled.front() == Some(&true) {
            self.settled.pop_front();
            self.first_tag += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Settles and returns the message indices settled.
    fn settle(unconfirmed: &mut Unconfirmed, tag: u64, multiple: bool) -> anyhow::Result<Vec<u64>> {
        let mut settled = Vec::new();
        unconfirmed.settle(tag, multiple, |index| settled.push(index))?;
        Ok(settled)
    }

    #[test]
    fn confirms_settle_single_and_multiple_in_any_order() {
        let mut unconfirmed = Unconfirmed::new();
        (0..6).for_each(|_| unconfirmed.push());
        assert_eq!(settle(&mut unconfirmed, 2, false).unwrap(), vec![1]);
        assert_eq!(unconfirmed.first_tag, 1, "tag 1 is still pending");
        assert_eq!(settle(&mut unconfirmed, 4, true).unwrap(), vec![0, 2, 3]);
        assert_eq!((unconfirmed.first_tag, unconfirmed.pending), (5, 2));
        assert_eq!(settle(&mut unconfirmed, 3, true).unwrap(), Vec::<u64>::new());
        assert!(settle(&mut unconfirmed, 3, false).is_err(), "a second confirm");
        assert!(settle(&mut unconfirmed, 7, false).is_err(), "never published");
        assert!(settle(&mut unconfirmed, 0, true).is_err());
        assert_eq!(settle(&mut unconfirmed, 6, false).unwrap(), vec![5]);
        assert!(settle(&mut unconfirmed, 6, false).is_err(), "a second confirm of a pending neighbour's successor");
        assert_eq!(settle(&mut unconfirmed, 6, true).unwrap(), vec![4]);
        assert_eq!((unconfirmed.first_tag, unconfirmed.pending, unconfirmed.settled.len()), (7, 0, 0));
    }

    #[test]
    fn batches_hold_whole_messages_addressed_in_turn() {
        use amq_protocol::frame::{parse_frame, AMQPFrame};
        use amq_protocol::protocol::{basic, AMQPClass};
        let topology = Topology {
            exchange: "perf.direct".into(),
            exchange_type: super::super::super::options::ExchangeType::Direct,
            queues: vec!["perf-0".into(), "perf-1".into()],
            routing_keys: vec!["perf-0".into(), "perf-1".into()],
            durable: false,
            queue_type: super::super::super::options::QueueType::Classic,
            stream_max_segment_size_bytes: None,
        };
        let plan = PublishPlan { size: 5000, persistent: true, confirm_window: 0, rate: 0, count: None };
        let mut encoder = Encoder::new(1, &topology, &plan, 4096);
        let mut out = Vec::new();
        for index in 0..3 {
            encoder.encode(&mut out, index, 77);
        }
        let mut rest = &out[..];
        let mut keys = Vec::new();
        let mut bodies = Vec::new();
        while !rest.is_empty() {
            let (tail, frame) = parse_frame(rest).expect("amq-protocol parses the batch");
            rest = tail;
            match frame {
                AMQPFrame::Method(1, AMQPClass::Basic(basic::AMQPMethod::Publish(publish))) => {
                    keys.push(publish.routing_key.to_string());
                    bodies.push(Vec::new());
                }
                AMQPFrame::Header(1, header) => assert_eq!(header.properties.delivery_mode(), &Some(2)),
                AMQPFrame::Body(1, chunk) => bodies.last_mut().expect("a publish first").extend(chunk),
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(keys, ["perf-1", "perf-0", "perf-1"], "producer 1 starts at queue 1");
        for (index, body) in bodies.iter().enumerate() {
            assert_eq!(body.len(), 5000);
            assert_eq!(body::sent_at_nanos(body), Some(77));
            assert_eq!(u64::from_le_bytes(body[8..16].try_into().unwrap()), (1 << 48) | index as u64);
        }
    }
}
