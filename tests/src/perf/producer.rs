//! A producer: one connection, one channel, publishing stamped bodies as fast as allowed.
//!
//! This module holds what both engines' producers share: the plan, which queue a message
//! addresses ([`queue_for`]) and the pacing of `--rate` ([`Pacer`]) (with the counting of
//! outcomes in [`PublishTally`](super::stats::PublishTally)); and the lapin producer
//! ([`Producer`]). The raw engine's producer is in `raw/producer.rs`.
//!
//! The lapin producer pipelines its publishes: up to a window of them are in flight at once,
//! each a future that writes the message and, with confirms on, waits for the broker's
//! basic.ack. Without confirms the window only keeps the socket busy
//! ([`PIPELINE_WITHOUT_CONFIRMS`]); with confirms it is the publisher-confirm window of the
//! command line.

use super::body;
use super::stats::{Counters, Outcome, PublishTally};
use super::topology::Topology;
use anyhow::Context;
use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::ShortString;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Publishes in flight per producer when confirms are off: enough to batch socket writes.
const PIPELINE_WITHOUT_CONFIRMS: usize = 64;
/// AMQP delivery_mode of a persistent message.
pub const DELIVERY_MODE_PERSISTENT: u8 = 2;

/// What a producer publishes and how fast.
#[derive(Debug, Clone)]
pub struct PublishPlan {
    pub size: usize,
    pub persistent: bool,
    /// Publisher-confirm window; 0 turns confirms off.
    pub confirm_window: usize,
    /// Messages per second; 0 is as fast as possible.
    pub rate: u64,
    /// Messages to publish; `None` until told to stop.
    pub count: Option<u64>,
}

/// A connected producer, ready to run.
pub struct Producer {
    id: usize,
    connection: Connection,
    channel: Channel,
    topology: Topology,
    plan: PublishPlan,
}

impl Producer {
    pub async fn connect(id: usize, uri: &str, topology: Topology, plan: PublishPlan) -> anyhow::Result<Self> {
        let connection = Connection::connect(uri, ConnectionProperties::default())
            .await
            .with_context(|| format!("producer {id}: connecting to {uri}"))?;
        let channel = connection.create_channel().await.with_context(|| format!("producer {id}: opening a channel"))?;
        if plan.confirm_window > 0 {
            channel
                .confirm_select(ConfirmSelectOptions::default())
                .await
                .with_context(|| format!("producer {id}: confirm.select"))?;
        }
        Ok(Producer { id, connection, channel, topology, plan })
    }

    /// Publishes until the plan's count is reached or `stop` is set, then waits for the
    /// outstanding confirms and closes the connection.
    pub async fn run(self, counters: Arc<Counters>, stop: Arc<AtomicBool>) -> anyhow::Result<()> {
        let Producer { id, connection, channel, topology, plan } = self;
        let properties = if plan.persistent {
            BasicProperties::default().with_delivery_mode(DELIVERY_MODE_PERSISTENT)
        } else {
            BasicProperties::default()
        };
        let confirms = plan.confirm_window > 0;
        let window = if confirms { plan.confirm_window } else { PIPELINE_WITHOUT_CONFIRMS };
        let pacer = Pacer::new(plan.rate);
        let mut in_flight = FuturesUnordered::new();
        let mut tally = PublishTally::new(topology.queues.len());
        let mut settle = |outcome: lapin::Result<Outcome>, queue: usize| -> anyhow::Result<()> {
            tally.settle(outcome.with_context(|| format!("producer {id}: publishing"))?, queue);
            tally.flush(&counters);
            Ok(())
        };
        let mut sequence: u64 = 0;
        while !stop.load(Ordering::Relaxed) && plan.count.is_none_or(|count| sequence < count) {
            if in_flight.len() >= window {
                if let Some((queue, outcome)) = in_flight.next().await {
                    settle(outcome, queue)?;
                }
                continue;
            }
            if let Some(wait) = pacer.wait_before(sequence) {
                let sleep = tokio::time::sleep(wait);
                tokio::pin!(sleep);
                loop {
                    tokio::select! {
                        _ = &mut sleep => break,
                        Some((queue, outcome)) = in_flight.next() => settle(outcome, queue)?,
                    }
                }
                continue;
            }
            let queue = queue_for(id, sequence, topology.queues.len());
            let message = Message {
                exchange: topology.exchange.clone(),
                routing_key: topology.routing_keys[queue].clone(),
                body: body::stamped(plan.size, id, sequence),
                properties: properties.clone(),
            };
            in_flight.push(publish(&channel, message, confirms).map(move |outcome| (queue, outcome)));
            sequence += 1;
            // Let the new publish reach the socket now, and collect whatever has completed.
            while let Some(Some((queue, outcome))) = in_flight.next().now_or_never() {
                settle(outcome, queue)?;
            }
        }
        while let Some((queue, outcome)) = in_flight.next().await {
            settle(outcome, queue)?;
        }
        drop(in_flight);
        let _ = connection.close(200, "warren-perf done".into()).await;
        Ok(())
    }
}

/// One message about to be published.
struct Message {
    exchange: ShortString,
    routing_key: ShortString,
    body: Vec<u8>,
    properties: BasicProperties,
}

async fn publish(channel: &Channel, message: Message, confirms: bool) -> lapin::Result<Outcome> {
    let Message { exchange, routing_key, body, properties } = message;
    let confirm =
        channel.basic_publish(exchange, routing_key, BasicPublishOptions::default(), &body, properties).await?;
    if !confirms {
        return Ok(Outcome::Sent);
    }
    let confirmation = confirm.await?;
    Ok(if confirmation.is_nack() { Outcome::Nacked } else { Outcome::Acked })
}

/// The index of the queue that message `sequence` (0, 1, ...) of producer `producer` addresses:
/// producers and messages take the queues in turn.
pub fn queue_for(producer: usize, sequence: u64, queues: usize) -> usize {
    ((producer as u64).wrapping_add(sequence) % queues.max(1) as u64) as usize
}

/// Spaces messages evenly at a fixed rate: message n is due at start + n / rate.
pub struct Pacer {
    start: Instant,
    nanos_per_message: Option<u64>,
}

impl Pacer {
    pub fn new(rate: u64) -> Self {
        const NANOS_PER_SEC: u64 = 1_000_000_000;
        Pacer { start: Instant::now(), nanos_per_message: (rate > 0).then(|| NANOS_PER_SEC / rate) }
    }

    /// How long to wait before sending message `sequence`, if it is not due yet.
    pub fn wait_before(&self, sequence: u64) -> Option<Duration> {
        let nanos = self.nanos_per_message?;
        let due = self.start + Duration::from_nanos(nanos.saturating_mul(sequence));
        due.checked_duration_since(Instant::now()).filter(|wait| !wait.is_zero())
    }
}
