//! `warren-perf`: a load generator for AMQP 0-9-1 brokers (Warren or RabbitMQ), in the spirit
//! of RabbitMQ's PerfTest and LavinMQ's lavinmqperf.
//!
//! A run declares an exchange and queues ([`topology`]), connects the consumers, starts the
//! producers ([`producer`]) and prints a progress line every second. When publishing ends (by
//! duration or count) it waits until the consumers ([`consumer`]) have received every message
//! they should, or until they go `--grace-secs` without a delivery, then prints a summary
//! ([`summary`]) and exits with status 1 if the counts do not add up. Idle mode ([`idle`])
//! holds many connections to measure their cost; report mode ([`report`]) turns JSON summaries
//! into markdown tables. What the consumers must receive ([`expect`]) depends on the queue
//! type: a classic or quorum queue shares its messages between its consumers, a stream gives
//! every consumer all of them.
//!
//! Producers and consumers run on one of two engines ([`engine`], `--engine`): the raw engine
//! ([`raw`], the default), warren-perf's own lean data path, or the lapin client library. The
//! declarations, idle mode and everything counted and reported are the same for both.

mod body;
mod consumer;
mod engine;
mod expect;
mod idle;
mod options;
mod producer;
mod raw;
mod report;
mod stats;
mod summary;
mod topology;

use anyhow::Context;
use clap::Parser;
use consumer::{AckPlan, ConsumerReport};
use engine::{Consumer, Producer};
use expect::Expectation;
use futures_util::future::try_join_all;
use lapin::{Connection, ConnectionProperties};
use options::Options;
use producer::PublishPlan;
use stats::{Counters, Latencies};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use summary::{RunSummary, Timings};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use topology::Topology;

/// How often the end-of-run wait looks at the counters.
const DRAIN_POLL: Duration = Duration::from_millis(20);

/// Exit status when the counts do not add up.
const EXIT_LOST: u8 = 1;
/// Exit status for bad options and broker or connection errors.
const EXIT_ERROR: u8 = 2;

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let options = Options::parse();
    if let Some(path) = &options.report {
        return exit_on_error(report::print(path).map(|()| ExitCode::SUCCESS));
    }
    if let Err(problem) = options.validate() {
        eprintln!("warren-perf: {problem}");
        return ExitCode::from(EXIT_ERROR);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => return exit_on_error(Err(error.into())),
    };
    exit_on_error(runtime.block_on(run_mode(&options)))
}

fn exit_on_error(result: anyhow::Result<ExitCode>) -> ExitCode {
    result.unwrap_or_else(|error| {
        eprintln!("warren-perf: error: {error:#}");
        ExitCode::from(EXIT_ERROR)
    })
}

async fn run_mode(options: &Options) -> anyhow::Result<ExitCode> {
    if let Some(count) = options.connections {
        let summary = idle::run(options, count).await?;
        print_output(options, &summary, &summary.table())?;
        return Ok(ExitCode::SUCCESS);
    }
    let summary = run_load(options).await?;
    print_output(options, &summary, &summary.table())?;
    Ok(match summary.count_problem() {
        Some(problem) => {
            eprintln!("warren-perf: FAILED: {problem}");
            ExitCode::from(EXIT_LOST)
        }
        None => ExitCode::SUCCESS,
    })
}

fn print_output(options: &Options, value: &impl serde::Serialize, table: &str) -> anyhow::Result<()> {
    if options.json {
        println!("{}", serde_json::to_string(value).context("serializing the summary")?);
    } else {
        print!("{table}");
    }
    Ok(())
}

/// A load run: publish, consume, check the counts.
async fn run_load(options: &Options) -> anyhow::Result<RunSummary> {
    let topology = Topology::new(options)?;
    let admin = Connection::connect(&options.uri, ConnectionProperties::default())
        .await
        .with_context(|| format!("connecting to {}", options.uri))?;
    let admin_channel = admin.create_channel().await.context("opening the set-up channel")?;
    topology.declare(&admin_channel).await?;
    if options.producers > 0 {
        let dropped = topology.purge(&admin_channel).await?;
        if dropped > 0 {
            eprintln!("warren-perf: purged {dropped} messages left in the queues by an earlier run");
        }
    }

    let counters = Arc::new(Counters::new(options.queues, options.consumers));
    let (stop_consumers, stop_receiver) = watch::channel(false);
    let progress = (options.interval > 0.0).then(|| spawn_progress(counters.clone(), options));
    let run_started = Instant::now();

    let mut consumers = Vec::new();
    let mut consume_started = run_started;
    if !options.backlog {
        consumers = start_consumers(options, &topology, &counters, &stop_receiver).await?;
        consume_started = Instant::now();
    }

    let publish_started = Instant::now();
    publish(options, &topology, &counters).await?;
    let publish_secs = publish_started.elapsed().as_secs_f64();

    if options.backlog && options.consumers > 0 {
        consume_started = Instant::now();
        consumers = start_consumers(options, &topology, &counters, &stop_receiver).await?;
    }
    let expectation = Expectation::of(options, &counters);
    if !consumers.is_empty() {
        wait_for_deliveries(options, &counters, &expectation, consume_started).await;
    }
    let _ = stop_consumers.send(true);
    let mut latencies = Latencies::new();
    let mut last_delivery = None;
    let mut without_stream_offset = 0;
    for handle in consumers {
        let report: ConsumerReport = handle.await.context("a consumer task panicked")??;
        latencies.merge(&report.latencies);
        last_delivery = last_delivery.max(report.last_delivery);
        without_stream_offset += report.without_stream_offset;
    }
    if without_stream_offset > 0 {
        eprintln!(
            "warren-perf: warning: {without_stream_offset} deliveries from stream queues had no x-stream-offset \
             header: are the queues really streams?"
        );
    }
    if let Some(progress) = progress {
        progress.abort();
    }
    if !options.keep_queues {
        topology.delete(&admin_channel).await?;
    }
    let _ = admin.close(200, "warren-perf done".into()).await;

    let consume_secs = last_delivery.map(|last| last.duration_since(consume_started).as_secs_f64()).unwrap_or(0.0);
    let read: Vec<&str> = (0..options.consumers).map(|i| topology.queues[i % topology.queues.len()].as_str()).collect();
    let check = expectation.check(&counters, &read);
    for detail in &check.details {
        eprintln!("warren-perf: {detail}");
    }
    Ok(RunSummary::new(options, counters.totals(), &check, Timings { publish_secs, consume_secs }, latencies.summary()))
}

/// Connects every consumer, then lets them run.
async fn start_consumers(
    options: &Options,
    topology: &Topology,
    counters: &Arc<Counters>,
    stop: &watch::Receiver<bool>,
) -> anyhow::Result<Vec<JoinHandle<anyhow::Result<ConsumerReport>>>> {
    let plan = AckPlan { auto_ack: options.auto_ack, every: options.multi_ack_every, prefetch: options.prefetch };
    let stream_offset = options.stream_offset();
    let connecting = (0..options.consumers).map(|i| {
        let queue = topology.queues[i % topology.queues.len()].clone();
        let arguments = consumer::consume_arguments(stream_offset.as_ref(), options.consumer_group.as_deref());
        Consumer::connect(options.engine, i, &options.uri, queue, plan, arguments)
    });
    let consumers = try_join_all(connecting).await?;
    Ok(consumers.into_iter().map(|consumer| tokio::spawn(consumer.run(counters.clone(), stop.clone()))).collect())
}

/// Connects every producer, lets them publish, and returns once all have finished (with their
/// confirms): at the end of the duration or when the count is reached.
async fn publish(options: &Options, topology: &Topology, counters: &Arc<Counters>) -> anyhow::Result<()> {
    if options.producers == 0 {
        return Ok(());
    }
    let connecting = (0..options.producers).map(|i| {
        let plan = PublishPlan {
            size: options.size,
            persistent: options.persistent,
            confirm_window: options.confirm,
            rate: options.rate,
            count: options.count.map(|count| share(count, options.producers, i)),
        };
        Producer::connect(options.engine, i, &options.uri, topology.clone(), plan)
    });
    let producers = try_join_all(connecting).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> =
        producers.into_iter().map(|producer| tokio::spawn(producer.run(counters.clone(), stop.clone()))).collect();
    let timer = options.publish_duration().map(|duration| {
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(duration).await;
            stop.store(true, Ordering::Relaxed);
        })
    });
    for handle in handles {
        handle.await.context("a producer task panicked")??;
    }
    if let Some(timer) = timer {
        timer.abort();
    }
    Ok(())
}

/// Producer `index`'s part of `total` messages split between `producers`.
fn share(total: u64, producers: usize, index: usize) -> u64 {
    let producers = producers as u64;
    total / producers + u64::from((index as u64) < total % producers)
}

/// Waits until the consumers have what they should (each its own with streams), or have gone
/// `--grace-secs` without a delivery; with no producers and no count, until `--duration` (if
/// any) has passed.
async fn wait_for_deliveries(options: &Options, counters: &Counters, expectation: &Expectation, started: Instant) {
    let grace = Duration::from_secs_f64(options.grace_secs);
    let deadline = (options.producers == 0).then(|| options.duration.map(Duration::from_secs_f64)).flatten();
    let mut seen = counters.consumed.get();
    let mut last_progress = Instant::now();
    loop {
        let consumed = counters.consumed.get();
        if expectation.met(counters) {
            return;
        }
        if consumed != seen {
            seen = consumed;
            last_progress = Instant::now();
        }
        if last_progress.elapsed() >= grace || deadline.is_some_and(|deadline| started.elapsed() >= deadline) {
            return;
        }
        tokio::time::sleep(DRAIN_POLL).await;
    }
}

/// Prints publish, confirm and consume rates on stderr every `--interval` seconds, and how many
/// messages wait in the queues (with streams: how far the consumers are behind, in all).
fn spawn_progress(counters: Arc<Counters>, options: &Options) -> JoinHandle<()> {
    let interval = Duration::from_secs_f64(options.interval);
    let copies = options.copies_per_message();
    let options = options.clone();
    tokio::spawn(async move {
        let started = Instant::now();
        let mut previous = counters.totals();
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        loop {
            ticker.tick().await;
            let now = counters.totals();
            let per_sec = |current: u64, before: u64| (current - before) as f64 / interval.as_secs_f64();
            let waiting = if options.streams() && options.consumers > 0 {
                let behind = Expectation::of(&options, &counters).outstanding(&counters);
                format!("consumers behind ~{}", behind.map(summary::group).unwrap_or_else(|| "?".into()))
            } else {
                format!("in queues ~{}", summary::group((now.published * copies).saturating_sub(now.consumed)))
            };
            eprintln!(
                "[{:>6.1}s] published {:>9.0}/s  confirmed {:>9.0}/s  consumed {:>9.0}/s  {waiting}",
                started.elapsed().as_secs_f64(),
                per_sec(now.published, previous.published),
                per_sec(now.confirmed, previous.confirmed),
                per_sec(now.consumed, previous.consumed),
            );
            previous = now;
        }
    })
}
