//! The raw engine's consumer: basic.qos and basic.consume as the lapin consumer sends them,
//! then one loop that reads as much as the socket has (up to [`READ_CHUNK`]), cuts the frames
//! out of the read buffer by hand, records each completed delivery ([`Deliveries`], shared
//! with the lapin consumer), queues the acks its [`AckSchedule`] asks for, and writes them all
//! with one write per read.
//!
//! A delivery is basic.deliver, a content header (body size; the properties are skipped, except
//! that stream consumers look for the x-stream-offset header) and body frames until the body
//! size is reached. Only the body's first 8 bytes (the send time) are kept: bodies are never
//! copied. Every delivery of one read gets the arrival time of that read.

use super::super::consumer::{AckPlan, AckSchedule, Arrival, ConsumerReport, Deliveries, STREAM_OFFSET};
use super::super::stats::Counters;
use super::connection::{self, Connection, CHANNEL};
use super::frame::{self, Deliver, RawFrame};
use amq_protocol::protocol::{basic, AMQPClass};
use amq_protocol::types::{FieldTable, ShortString};
use anyhow::{bail, Context};
use bytes::Buf;
use std::sync::Arc;
use tokio::sync::watch;

/// The body bytes kept from each delivery: the send time.
const STAMP_LEN: usize = 8;

/// A connected raw consumer, subscribed and ready to run.
pub struct Consumer {
    id: usize,
    connection: Connection,
    plan: AckPlan,
    /// Whether this consumes from a stream (its deliveries should carry x-stream-offset).
    stream: bool,
}

impl Consumer {
    /// Connects, sets the prefetch (basic.qos, global = false) and subscribes with `arguments`.
    pub async fn connect(
        id: usize,
        uri: &str,
        queue: ShortString,
        plan: AckPlan,
        arguments: FieldTable,
    ) -> anyhow::Result<Self> {
        let mut connection = Connection::open(uri, format!("consumer {id}")).await?;
        if plan.prefetch > 0 {
            let qos = basic::Qos { prefetch_count: plan.prefetch, global: false };
            match connection.call(AMQPClass::Basic(basic::AMQPMethod::Qos(qos))).await? {
                AMQPClass::Basic(basic::AMQPMethod::QosOk(_)) => {}
                other => bail!("consumer {id}: expected basic.qos-ok, got {other:?}"),
            }
        }
        let stream = arguments.contains_key(STREAM_OFFSET);
        let consume = basic::Consume {
            queue: queue.clone(),
            consumer_tag: ShortString::try_new(format!("warren-perf-{id}")).context("consumer tag")?,
            no_local: false,
            no_ack: plan.auto_ack,
            exclusive: false,
            nowait: false,
            arguments,
        };
        match connection.call(AMQPClass::Basic(basic::AMQPMethod::Consume(consume))).await {
            Ok(AMQPClass::Basic(basic::AMQPMethod::ConsumeOk(_))) => {}
            Ok(other) => bail!("consumer {id}: expected basic.consume-ok, got {other:?}"),
            Err(error) => return Err(error.context(format!("consumer {id}: consuming from {queue}"))),
        }
        Ok(Consumer { id, connection, plan, stream })
    }

    /// Consumes until `stop` turns true, then acks what is still unacked and closes.
    pub async fn run(self, counters: Arc<Counters>, mut stop: watch::Receiver<bool>) -> anyhow::Result<ConsumerReport> {
        let Consumer { id, mut connection, plan, stream } = self;
        let mut session = Session {
            record: Deliveries::new(id),
            schedule: AckSchedule::new(plan),
            content: Content::None,
            stream,
            acks: Vec::new(),
        };
        loop {
            // Frames may already be buffered (they can follow consume-ok), so use them first.
            session.take_frames(&mut connection, Arrival::now())?;
            session.record.flush(&counters);
            if !session.acks.is_empty() {
                connection.write(&session.acks).await?;
                session.acks.clear();
            }
            if *stop.borrow() {
                break;
            }
            tokio::select! {
                biased;
                read = connection.read_more() => read?,
                _ = stop.changed() => break,
            }
        }
        if let Some(ack) = session.schedule.finish() {
            frame::put_ack(&mut session.acks, CHANNEL, ack.delivery_tag, ack.multiple);
            connection.write(&session.acks).await?;
        }
        connection.close().await;
        Ok(session.record.finish(&counters))
    }
}

/// Where the consumer is within a delivery's frames.
enum Content {
    /// Between deliveries.
    None,
    /// After basic.deliver, before its content header.
    Header(Deliver),
    /// Receiving the body.
    Body(Body),
}

/// A delivery whose body is still arriving.
struct Body {
    deliver: Deliver,
    remaining: u64,
    stamp: [u8; STAMP_LEN],
    stamped: usize,
    has_stream_offset: bool,
}

/// A running consumer's state between reads.
struct Session {
    record: Deliveries,
    schedule: AckSchedule,
    content: Content,
    stream: bool,
    /// Acks to write after this read.
    acks: Vec<u8>,
}

impl Session {
    /// Handles every complete frame in the read buffer, then drops them from it.
    fn take_frames(&mut self, connection: &mut Connection, arrival: Arrival) -> anyhow::Result<()> {
        let mut used = 0;
        let result = loop {
            match frame::split(&connection.input[used..], connection.frame_max) {
                Ok(Some((raw, len))) => {
                    used += len;
                    if let Err(error) = self.on_frame(raw, arrival) {
                        break Err(error);
                    }
                }
                Ok(None) => break Ok(()),
                Err(error) => break Err(error),
            }
        };
        connection.input.advance(used);
        result.with_context(|| connection.who.clone())
    }

    fn on_frame(&mut self, raw: RawFrame<'_>, arrival: Arrival) -> anyhow::Result<()> {
        match raw.kind {
            frame::FRAME_METHOD => self.on_method(raw),
            frame::FRAME_HEADER => self.on_content_header(raw, arrival),
            frame::FRAME_BODY => self.on_body(raw, arrival),
            frame::FRAME_HEARTBEAT => Ok(()),
            kind => bail!("a frame of unknown type {kind}"),
        }
    }

    fn on_method(&mut self, raw: RawFrame<'_>) -> anyhow::Result<()> {
        let method = frame::method(raw.payload)?;
        if raw.channel == CHANNEL && method.is(frame::CLASS_BASIC, frame::BASIC_DELIVER) {
            if !matches!(self.content, Content::None) {
                bail!("basic.deliver before the content of the previous delivery was complete");
            }
            self.content = Content::Header(frame::deliver(method.arguments)?);
            return Ok(());
        }
        // Closes and cancels are errors; blocking concerns publishers only.
        connection::rare_method(raw.payload)?;
        Ok(())
    }

    fn on_content_header(&mut self, raw: RawFrame<'_>, arrival: Arrival) -> anyhow::Result<()> {
        let Content::Header(deliver) = self.content else { bail!("a content header without basic.deliver") };
        let header = frame::content_header(raw.payload)?;
        let has_stream_offset = !self.stream || frame::has_header(header.properties, STREAM_OFFSET);
        let body = Body { deliver, remaining: header.body_size, stamp: [0; STAMP_LEN], stamped: 0, has_stream_offset };
        if header.body_size == 0 {
            self.content = Content::None;
            self.complete(&body, arrival);
        } else {
            self.content = Content::Body(body);
        }
        Ok(())
    }

    fn on_body(&mut self, raw: RawFrame<'_>, arrival: Arrival) -> anyhow::Result<()> {
        let Content::Body(body) = &mut self.content else { bail!("a body frame without a content header") };
        let len = raw.payload.len() as u64;
        if len > body.remaining {
            bail!("body frames longer than the {} bytes the content header announced", body.remaining);
        }
        body.remaining -= len;
        let wanted = (STAMP_LEN - body.stamped).min(raw.payload.len());
        body.stamp[body.stamped..body.stamped + wanted].copy_from_slice(&raw.payload[..wanted]);
        body.stamped += wanted;
        if body.remaining == 0 {
            if let Content::Body(body) = std::mem::replace(&mut self.content, Content::None) {
                self.complete(&body, arrival);
            }
        }
        Ok(())
    }

    /// Records a complete delivery and queues the ack it calls for, if any.
    fn complete(&mut self, body: &Body, arrival: Arrival) {
        self.record.record(&body.stamp[..body.stamped], body.deliver.redelivered, arrival);
        if !body.has_stream_offset {
            self.record.without_stream_offset();
        }
        if let Some(ack) = self.schedule.delivered(body.deliver.delivery_tag) {
            frame::put_ack(&mut self.acks, CHANNEL, ack.delivery_tag, ack.multiple);
        }
    }
}
