//! A consumer: one connection, one channel, one basic.consume; counts deliveries, records
//! their latency and acks them (each one, or every N with multiple = true).
//!
//! This module holds what both engines' consumers share: when to ack ([`AckSchedule`]), how a
//! delivery is recorded ([`Deliveries`]), the consume arguments and the report; and the lapin
//! consumer ([`Consumer`]). The raw engine's consumer is in `raw/consumer.rs`.
//!
//! The lapin consumer pipelines its acks like publishes: the ack futures are collected and
//! completed while the next deliveries arrive, so the consumer never waits for a write to the
//! socket. They go through `Channel::basic_ack`, which queues the frame when first polled,
//! rather than through the delivery's `Acker`, which hands each ack to a task of its own: those
//! tasks can reorder multiple-acks, and the broker then rightly refuses an already-acked tag.
//!
//! A stream consumer is the same with the consume argument x-stream-offset (where it starts);
//! the broker needs manual acks and a prefetch for it, which the options enforce. The value of
//! the x-stream-offset header that stream deliveries carry is ignored; deliveries without it
//! are counted, as a sign that the broker made an ordinary queue instead of a stream.

use super::body;
use super::options::StreamOffset;
use super::stats::{Counters, Latencies};
use anyhow::Context;
use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{Channel, Connection, ConnectionProperties};
use std::time::Instant;
use tokio::sync::watch;

/// The consume argument, and the delivery header, of stream offsets.
pub const STREAM_OFFSET: &str = "x-stream-offset";

/// Acks in flight at most before the consumer waits for them.
const MAX_ACKS_IN_FLIGHT: usize = 256;

/// How a consumer acknowledges.
#[derive(Debug, Clone, Copy)]
pub struct AckPlan {
    pub auto_ack: bool,
    /// With manual acks, ack every N deliveries with multiple = true (1: each one alone).
    pub every: u64,
    /// basic.qos prefetch count (0: unlimited).
    pub prefetch: u16,
}

/// An ack to send: the delivery tag, and whether it covers every earlier unacked delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    pub delivery_tag: u64,
    pub multiple: bool,
}

/// When a consumer acks, following its [`AckPlan`]: nothing with auto-ack; else every
/// `every` deliveries (with multiple = true when `every` is above 1), and what is left at the end.
#[derive(Debug)]
pub struct AckSchedule {
    plan: AckPlan,
    unacked: u64,
    last_tag: u64,
}

impl AckSchedule {
    pub fn new(plan: AckPlan) -> Self {
        AckSchedule { plan, unacked: 0, last_tag: 0 }
    }

    /// Notes the delivery `delivery_tag`; returns the ack due now, if any.
    pub fn delivered(&mut self, delivery_tag: u64) -> Option<Ack> {
        if self.plan.auto_ack {
            return None;
        }
        self.unacked += 1;
        self.last_tag = delivery_tag;
        if self.unacked < self.plan.every {
            return None;
        }
        self.unacked = 0;
        Some(Ack { delivery_tag, multiple: self.plan.every > 1 })
    }

    /// The ack of whatever is still unacked when the consumer stops.
    pub fn finish(&mut self) -> Option<Ack> {
        if self.unacked == 0 {
            return None;
        }
        self.unacked = 0;
        Some(Ack { delivery_tag: self.last_tag, multiple: true })
    }
}

/// When a delivery arrived: the wall clock (for the latency against the body's stamp) and the
/// monotonic one (for the consume rate).
#[derive(Debug, Clone, Copy)]
pub struct Arrival {
    pub wall_nanos: u64,
    pub instant: Instant,
}

impl Arrival {
    pub fn now() -> Self {
        Arrival { wall_nanos: body::now_nanos(), instant: Instant::now() }
    }
}

/// A consumer's record of its deliveries, the same for both engines: latencies and times go
/// into its [`ConsumerReport`]; counts wait here until [`flush`](Deliveries::flush) adds them
/// to the shared counters (after each delivery with lapin, after each read with raw).
pub struct Deliveries {
    id: usize,
    report: ConsumerReport,
    unflushed: u64,
    unflushed_redelivered: u64,
}

impl Deliveries {
    pub fn new(id: usize) -> Self {
        Deliveries {
            id,
            report: ConsumerReport {
                latencies: Latencies::new(),
                first_delivery: None,
                last_delivery: None,
                without_stream_offset: 0,
            },
            unflushed: 0,
            unflushed_redelivered: 0,
        }
    }

    /// Records a delivery whose body starts with `body_start` (the stamp is its first 8 bytes).
    pub fn record(&mut self, body_start: &[u8], redelivered: bool, arrival: Arrival) {
        self.report.first_delivery.get_or_insert(arrival.instant);
        self.report.last_delivery = Some(arrival.instant);
        if let Some(sent) = body::sent_at_nanos(body_start) {
            self.report.latencies.record(sent, arrival.wall_nanos);
        }
        self.unflushed += 1;
        self.unflushed_redelivered += u64::from(redelivered);
    }

    /// Counts a stream delivery that came without an x-stream-offset header.
    pub fn without_stream_offset(&mut self) {
        self.report.without_stream_offset += 1;
    }

    /// Adds the deliveries recorded since the last flush to `counters`.
    pub fn flush(&mut self, counters: &Counters) {
        if self.unflushed > 0 {
            counters.delivered_n(self.id, std::mem::take(&mut self.unflushed));
        }
        if self.unflushed_redelivered > 0 {
            counters.redelivered.add(std::mem::take(&mut self.unflushed_redelivered));
        }
    }

    /// Flushes and hands back the report.
    pub fn finish(mut self, counters: &Counters) -> ConsumerReport {
        self.flush(counters);
        self.report
    }
}

/// The basic.consume arguments: x-stream-offset and x-consumer-group for a stream consumer,
/// none otherwise.
pub fn consume_arguments(stream_offset: Option<&StreamOffset>, group: Option<&str>) -> FieldTable {
    let mut arguments = FieldTable::default();
    if let Some(group) = group {
        arguments.insert(CONSUMER_GROUP.into(), AMQPValue::LongString(LongString::from(group)));
    }
    if let Some(offset) = stream_offset {
        let value = match offset {
            StreamOffset::Offset(offset) => AMQPValue::LongLongInt(i64::try_from(*offset).unwrap_or(i64::MAX)),
            StreamOffset::First | StreamOffset::Last | StreamOffset::Next | StreamOffset::Interval(_) => {
                AMQPValue::LongString(LongString::from(offset.spec()))
            }
        };
        arguments.insert(STREAM_OFFSET.into(), value);
    }
    arguments
}

/// The consume argument naming a stream consumer's group.
const CONSUMER_GROUP: &str = "x-consumer-group";

/// A connected consumer, subscribed and ready to run.
pub struct Consumer {
    id: usize,
    connection: Connection,
    channel: Channel,
    deliveries: lapin::Consumer,
    plan: AckPlan,
    /// Whether this consumes from a stream (its deliveries should carry x-stream-offset).
    stream: bool,
}

/// What a consumer saw, returned when it stops.
pub struct ConsumerReport {
    pub latencies: Latencies,
    pub first_delivery: Option<Instant>,
    pub last_delivery: Option<Instant>,
    /// Stream consumers: deliveries without an x-stream-offset header.
    pub without_stream_offset: u64,
}

impl Consumer {
    /// Connects, sets the prefetch (basic.qos, per consumer) and subscribes with `arguments`.
    pub async fn connect(
        id: usize,
        uri: &str,
        queue: ShortString,
        plan: AckPlan,
        arguments: FieldTable,
    ) -> anyhow::Result<Self> {
        let connection = Connection::connect(uri, ConnectionProperties::default())
            .await
            .with_context(|| format!("consumer {id}: connecting to {uri}"))?;
        let channel = connection.create_channel().await.with_context(|| format!("consumer {id}: opening a channel"))?;
        if plan.prefetch > 0 {
            channel
                .basic_qos(plan.prefetch, BasicQosOptions::default())
                .await
                .with_context(|| format!("consumer {id}: basic.qos"))?;
        }
        let options = BasicConsumeOptions { no_ack: plan.auto_ack, ..Default::default() };
        let tag = ShortString::try_new(format!("warren-perf-{id}")).context("consumer tag")?;
        let stream = arguments.contains_key(STREAM_OFFSET);
        let deliveries = channel
            .basic_consume(queue.clone(), tag, options, arguments)
            .await
            .with_context(|| format!("consumer {id}: consuming from {queue}"))?;
        Ok(Consumer { id, connection, channel, deliveries, plan, stream })
    }

    /// Consumes until `stop` turns true, then acks what is still unacked and closes.
    pub async fn run(
        self,
        counters: std::sync::Arc<Counters>,
        mut stop: watch::Receiver<bool>,
    ) -> anyhow::Result<ConsumerReport> {
        let Consumer { id, connection, channel, mut deliveries, plan, stream } = self;
        let mut record = Deliveries::new(id);
        let mut schedule = AckSchedule::new(plan);
        let mut acks = FuturesUnordered::new();
        while !*stop.borrow() {
            let delivery = tokio::select! {
                biased;
                delivery = deliveries.next() => delivery,
                _ = stop.changed() => break,
            };
            let delivery = match delivery {
                Some(delivery) => delivery.with_context(|| format!("consumer {id}: receiving"))?,
                None => anyhow::bail!("consumer {id}: the broker cancelled the consumer"),
            };
            record.record(&delivery.data, delivery.redelivered, Arrival::now());
            record.flush(&counters);
            if stream && !has_stream_offset(&delivery) {
                record.without_stream_offset();
            }
            if let Some(due) = schedule.delivered(delivery.delivery_tag) {
                acks.push(ack(&channel, due));
            }
            if acks.len() >= MAX_ACKS_IN_FLIGHT {
                if let Some(result) = acks.next().await {
                    result.with_context(|| format!("consumer {id}: acking"))?;
                }
            }
            while let Some(Some(result)) = acks.next().now_or_never() {
                result.with_context(|| format!("consumer {id}: acking"))?;
            }
        }
        if let Some(due) = schedule.finish() {
            acks.push(ack(&channel, due));
        }
        while let Some(result) = acks.next().await {
            result.with_context(|| format!("consumer {id}: acking"))?;
        }
        let _ = connection.close(200, "warren-perf done".into()).await;
        Ok(record.finish(&counters))
    }
}

fn has_stream_offset(delivery: &lapin::message::Delivery) -> bool {
    delivery.properties.headers().as_ref().is_some_and(|headers| headers.contains_key(STREAM_OFFSET))
}

async fn ack(channel: &Channel, ack: Ack) -> lapin::Result<()> {
    channel.basic_ack(ack.delivery_tag, BasicAckOptions { multiple: ack.multiple }).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acks(plan: AckPlan, deliveries: u64) -> Vec<Ack> {
        let mut schedule = AckSchedule::new(plan);
        let mut acks: Vec<Ack> = (1..=deliveries).filter_map(|tag| schedule.delivered(tag)).collect();
        acks.extend(schedule.finish());
        acks
    }

    #[test]
    fn the_schedule_acks_as_the_plan_says() {
        let each = AckPlan { auto_ack: false, every: 1, prefetch: 10 };
        let singles: Vec<Ack> = (1..=3).map(|tag| Ack { delivery_tag: tag, multiple: false }).collect();
        assert_eq!(acks(each, 3), singles);
        let every_two = AckPlan { every: 2, ..each };
        let multiples = [(2, true), (4, true), (5, true)].map(|(tag, multiple)| Ack { delivery_tag: tag, multiple });
        assert_eq!(acks(every_two, 5), multiples);
        assert_eq!(acks(AckPlan { auto_ack: true, ..every_two }, 5), Vec::new());
    }
}
