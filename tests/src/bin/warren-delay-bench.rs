//! warren-delay-bench: how late delayed messages fire, with many pending at once.
//!
//! Declares a durable `x-delayed-message` exchange bound to a durable queue, publishes
//! `--count` persistent messages with delays spread evenly over `[--min-delay-ms,
//! --max-delay-ms]` (with confirms, so they are on disk), reads the broker's RSS while they are
//! all pending, then consumes them and measures each one's lateness: arrival time minus
//! (publish time + its delay). Lateness includes delivery to the consumer, so it is an upper
//! bound on how late the timer fired. Prints percentiles; exits 1 if a message is missing.

use anyhow::{bail, Context};
use clap::Parser;
use futures_util::StreamExt;
use hdrhistogram::Histogram;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Connection, ConnectionProperties, ExchangeKind};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Command-line options.
#[derive(Debug, Parser)]
#[command(name = "warren-delay-bench", about = "Lateness of delayed messages with many pending")]
struct Options {
    /// AMQP URI of the broker.
    #[arg(long, default_value = "amqp://guest:guest@127.0.0.1:5672/%2f")]
    uri: String,
    /// Messages to delay.
    #[arg(long, default_value_t = 1_000_000)]
    count: u64,
    /// Shortest delay.
    #[arg(long, default_value_t = 20_000)]
    min_delay_ms: u64,
    /// Longest delay.
    #[arg(long, default_value_t = 40_000)]
    max_delay_ms: u64,
    /// Publisher-confirm window.
    #[arg(long, default_value_t = 2000)]
    confirm_window: usize,
    /// PID of the broker, to read its RSS while everything is pending.
    #[arg(long)]
    rss_pid: Option<u32>,
}

const EXCHANGE: &str = "delay-bench";
const QUEUE: &str = "delay-bench";
/// Body: publish time (ms since the epoch) then delay (ms).
const BODY_BYTES: usize = 16;

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

async fn declare(channel: &lapin::Channel) -> anyhow::Result<()> {
    let mut arguments = FieldTable::default();
    arguments.insert("x-delayed-type".into(), AMQPValue::LongString(LongString::from("direct")));
    let durable = ExchangeDeclareOptions { durable: true, ..Default::default() };
    let kind = ExchangeKind::Custom("x-delayed-message".into());
    channel.exchange_declare(EXCHANGE.into(), kind, durable, arguments).await.context("declaring the exchange")?;
    let queue = QueueDeclareOptions { durable: true, ..Default::default() };
    channel.queue_declare(QUEUE.into(), queue, FieldTable::default()).await.context("declaring the queue")?;
    channel.queue_purge(QUEUE.into(), Default::default()).await?;
    channel.queue_bind(QUEUE.into(), EXCHANGE.into(), "k".into(), Default::default(), FieldTable::default()).await?;
    Ok(())
}

async fn publish_all(channel: &lapin::Channel, options: &Options) -> anyhow::Result<()> {
    channel.confirm_select(ConfirmSelectOptions::default()).await?;
    let spread = options.max_delay_ms.saturating_sub(options.min_delay_ms).max(1);
    let mut pending = std::collections::VecDeque::new();
    for i in 0..options.count {
        let delay = options.min_delay_ms + (i * 7919) % spread;
        let mut body = [0u8; BODY_BYTES];
        body[..8].copy_from_slice(&now_ms().to_be_bytes());
        body[8..].copy_from_slice(&delay.to_be_bytes());
        let mut headers = FieldTable::default();
        headers.insert("x-delay".into(), AMQPValue::LongLongInt(delay as i64));
        let props = BasicProperties::default().with_delivery_mode(2).with_headers(headers);
        pending.push_back(channel.basic_publish(EXCHANGE.into(), "k".into(), Default::default(), &body, props).await?);
        if pending.len() >= options.confirm_window {
            if let Some(confirm) = pending.pop_front() {
                if !confirm.await?.is_ack() {
                    bail!("the broker nacked a delayed publish");
                }
            }
        }
    }
    for confirm in pending {
        if !confirm.await?.is_ack() {
            bail!("the broker nacked a delayed publish");
        }
    }
    Ok(())
}

async fn consume_all(channel: &lapin::Channel, options: &Options) -> anyhow::Result<Histogram<u64>> {
    channel.basic_qos(5000, BasicQosOptions::default()).await?;
    let mut consumer =
        channel.basic_consume(QUEUE.into(), "".into(), Default::default(), FieldTable::default()).await?;
    let mut lateness = Histogram::<u64>::new(3)?;
    let mut early = 0u64;
    let deadline = Duration::from_millis(options.max_delay_ms + 60_000);
    for received in 0..options.count {
        let delivery = match tokio::time::timeout(deadline, consumer.next()).await {
            Ok(Some(delivery)) => delivery?,
            _ => bail!("only {received} of {} delayed messages arrived", options.count),
        };
        let arrived = now_ms();
        let field = |range: std::ops::Range<usize>| {
            delivery.data.get(range).and_then(|b| b.try_into().ok()).map(u64::from_be_bytes).unwrap_or(0)
        };
        let due = field(0..8) + field(8..16);
        match arrived.checked_sub(due) {
            Some(late) => lateness.record(late)?,
            None => early += 1,
        }
        if received % 1000 == 999 {
            delivery.acker.ack(BasicAckOptions { multiple: true }).await?;
        }
    }
    if early > 0 {
        bail!("{early} messages arrived before they were due");
    }
    Ok(lateness)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let options = Options::parse();
    let connection = Connection::connect(&options.uri, ConnectionProperties::default()).await?;
    let channel = connection.create_channel().await?;
    declare(&channel).await?;
    // The consumer runs from the start, on its own connection, so lateness is the broker's.
    let consumer_connection = Connection::connect(&options.uri, ConnectionProperties::default()).await?;
    let consumer_channel = consumer_connection.create_channel().await?;
    let count = options.count;
    let consuming = {
        let options = Options::parse();
        tokio::spawn(async move { consume_all(&consumer_channel, &options).await })
    };
    let started = std::time::Instant::now();
    publish_all(&channel, &options).await?;
    println!("published {count} delayed messages in {:.1} s", started.elapsed().as_secs_f64());
    if let Some(rss) = options.rss_pid.and_then(rss_kib) {
        println!("broker RSS with them pending: {} MiB", rss / 1024);
    }
    let lateness = consuming.await??;
    println!(
        "lateness ms (arrival - due): p50 {} p99 {} p99.9 {} max {} ({} messages)",
        lateness.value_at_quantile(0.5),
        lateness.value_at_quantile(0.99),
        lateness.value_at_quantile(0.999),
        lateness.max(),
        lateness.len()
    );
    Ok(())
}
