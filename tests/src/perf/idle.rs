//! Idle mode: many connections, each with a channel and a consumer, held open while nothing
//! is published. Measures how long connecting took and, given the broker's process id, how
//! much resident memory the broker gained per connection.

use super::options::Options;
use super::summary::IdleSummary;
use anyhow::Context;
use futures_util::stream::{self, StreamExt, TryStreamExt};
use lapin::options::{BasicConsumeOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::{FieldTable, ShortString};
use lapin::{Channel, Connection, ConnectionProperties};
use std::time::{Duration, Instant};

/// Connections being opened at the same time.
const CONNECT_CONCURRENCY: usize = 50;
/// Longest wait for one connection, channel and consumer: a broker out of file descriptors
/// may stop accepting connections without refusing them.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Time given to the broker before its memory is read: before connecting (a broker just started
/// is still settling), and after the last connection.
const SETTLE_BEFORE_MEASURING: Duration = Duration::from_secs(2);

/// Opens `count` connections, holds them for `--idle-secs`, and closes them.
pub async fn run(options: &Options, count: usize) -> anyhow::Result<IdleSummary> {
    let queue = ShortString::try_new(format!("{}-idle", options.queue_prefix)).context("queue name")?;
    let admin = Connection::connect(&options.uri, ConnectionProperties::default())
        .await
        .with_context(|| format!("connecting to {}", options.uri))?;
    let admin_channel = admin.create_channel().await.context("opening a channel")?;
    admin_channel
        .queue_declare(queue.clone(), QueueDeclareOptions::default(), FieldTable::default())
        .await
        .context("declaring the idle queue")?;
    tokio::time::sleep(SETTLE_BEFORE_MEASURING).await;
    let rss_before_kib = options.rss_pid.map(resident_kib).transpose()?;

    let started = Instant::now();
    let held: Vec<(Connection, Channel, lapin::Consumer)> = stream::iter(0..count)
        .map(|i| open_one(&options.uri, queue.clone(), i))
        .buffer_unordered(CONNECT_CONCURRENCY)
        .try_collect()
        .await?;
    let connect_secs = started.elapsed().as_secs_f64();
    eprintln!("warren-perf: {count} connections open in {connect_secs:.1} s; holding them {} s", options.idle_secs);

    tokio::time::sleep(SETTLE_BEFORE_MEASURING).await;
    let rss_after_kib = options.rss_pid.map(resident_kib).transpose()?;
    let remaining = Duration::from_secs_f64(options.idle_secs).saturating_sub(SETTLE_BEFORE_MEASURING);
    tokio::time::sleep(remaining).await;

    let closing = held.iter().map(|(connection, _, _)| connection.close(200, "warren-perf done".into()));
    let closed = futures_util::future::join_all(closing).await;
    let close_errors = closed.iter().filter(|result| result.is_err()).count();
    drop(held);
    admin_channel.queue_delete(queue, QueueDeleteOptions::default()).await.context("deleting the idle queue")?;
    let _ = admin.close(200, "warren-perf done".into()).await;

    let rss_per_connection_kib = match (rss_before_kib, rss_after_kib) {
        (Some(before), Some(after)) if count > 0 => Some((after as f64 - before as f64) / count as f64),
        _ => None,
    };
    Ok(IdleSummary {
        scenario: options.scenario.clone(),
        broker: options.broker.clone(),
        connections: count as u64,
        connect_secs,
        close_errors: close_errors as u64,
        rss_before_kib,
        rss_after_kib,
        rss_per_connection_kib,
    })
}

async fn open_one(uri: &str, queue: ShortString, i: usize) -> anyhow::Result<(Connection, Channel, lapin::Consumer)> {
    tokio::time::timeout(CONNECT_TIMEOUT, open_one_untimed(uri, queue, i))
        .await
        .with_context(|| format!("idle connection {i}: not open after {CONNECT_TIMEOUT:?}"))?
}

async fn open_one_untimed(
    uri: &str,
    queue: ShortString,
    i: usize,
) -> anyhow::Result<(Connection, Channel, lapin::Consumer)> {
    let connection = Connection::connect(uri, ConnectionProperties::default())
        .await
        .with_context(|| format!("idle connection {i}: connecting"))?;
    let channel = connection.create_channel().await.with_context(|| format!("idle connection {i}: channel"))?;
    let tag = ShortString::try_new(format!("warren-perf-idle-{i}")).context("consumer tag")?;
    let consumer = channel
        .basic_consume(queue, tag, BasicConsumeOptions::default(), FieldTable::default())
        .await
        .with_context(|| format!("idle connection {i}: basic.consume"))?;
    Ok((connection, channel, consumer))
}

/// Resident set size of a process in KiB, from /proc/PID/status (VmRSS).
fn resident_kib(pid: u32) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .with_context(|| format!("no VmRSS line in {path}"))
}
