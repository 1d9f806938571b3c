//! A consumer: one connection, one channel, one basic.consume; counts deliveries, records
//! their latency and acks them (each one, or every N with multiple = true).
//!
//! Acks are pipelined like publishes: the ack futures are collected and completed while the
//! next deliveries arrive, so the consumer never waits for a write to the socket. They go
//! through `Channel::basic_ack`, which queues the frame when first polled, rather than through
//! the delivery's `Acker`, which hands each ack to a task of its own: those tasks can reorder
//! multiple-acks, and the broker then rightly refuses an already-acked tag.
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
const STREAM_OFFSET: &str = "x-stream-offset";

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

/// The basic.consume arguments: x-stream-offset for a stream consumer, none otherwise.
pub fn consume_arguments(stream_offset: Option<&StreamOffset>) -> FieldTable {
    let mut arguments = FieldTable::default();
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
        let mut report = ConsumerReport {
            latencies: Latencies::new(),
            first_delivery: None,
            last_delivery: None,
            without_stream_offset: 0,
        };
        let mut acks = FuturesUnordered::new();
        let mut unacked: u64 = 0;
        let mut last_tag: u64 = 0;
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
            let received = body::now_nanos();
            let now = Instant::now();
            report.first_delivery.get_or_insert(now);
            report.last_delivery = Some(now);
            if let Some(sent) = body::sent_at_nanos(&delivery.data) {
                report.latencies.record(sent, received);
            }
            counters.delivered(id);
            if delivery.redelivered {
                counters.redelivered.add(1);
            }
            if stream && !has_stream_offset(&delivery) {
                report.without_stream_offset += 1;
            }
            if plan.auto_ack {
                continue;
            }
            unacked += 1;
            last_tag = delivery.delivery_tag;
            if unacked >= plan.every {
                acks.push(ack(&channel, last_tag, plan.every > 1));
                unacked = 0;
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
        if unacked > 0 {
            acks.push(ack(&channel, last_tag, true));
        }
        while let Some(result) = acks.next().await {
            result.with_context(|| format!("consumer {id}: acking"))?;
        }
        let _ = connection.close(200, "warren-perf done".into()).await;
        Ok(report)
    }
}

fn has_stream_offset(delivery: &lapin::message::Delivery) -> bool {
    delivery.properties.headers().as_ref().is_some_and(|headers| headers.contains_key(STREAM_OFFSET))
}

async fn ack(channel: &Channel, delivery_tag: u64, multiple: bool) -> lapin::Result<()> {
    channel.basic_ack(delivery_tag, BasicAckOptions { multiple }).await
}
