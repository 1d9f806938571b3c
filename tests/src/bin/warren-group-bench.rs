//! warren-group-bench: a super stream read by a consumer group, and how long the group takes
//! to give a dead member's partitions to the others.
//!
//! Declares a super stream of `--partitions` streams with plain AMQP 0-9-1 methods (RabbitMQ's
//! layout: a direct exchange with `x-super-stream: true`, streams bound with
//! `x-stream-partition-order`; `x-queue-leader-locator: balanced` by default), starts `--members` members
//! of one consumer group, each on its own connection (round robin over `--uri`s), and a
//! publisher on the first URI publishing `--count` keyed messages (`x-partition-key`, 100 B)
//! with a confirm window. Once half is published, one member's connection closes with its
//! deliveries unacked (it dies). Reports the publish rate, the rate at which the group
//! consumed everything, the messages processed twice, and the rebalance time: from the
//! member's death to the first delivery of one of its partitions to another member, for the
//! partition that waited longest. Exits 1 if a message is never consumed.

use anyhow::{bail, Context};
use clap::Parser;
use futures_util::StreamExt;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Connection, ConnectionProperties, ExchangeKind};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Command-line options.
#[derive(Debug, Parser)]
#[command(name = "warren-group-bench", about = "A consumer group on a super stream, and its rebalance")]
struct Options {
    /// AMQP URIs of the nodes (comma-separated); members are spread over them.
    #[arg(long, default_value = "amqp://guest:guest@127.0.0.1:5672/%2f", value_delimiter = ',')]
    uri: Vec<String>,
    /// The super stream's name.
    #[arg(long, default_value = "group-bench")]
    super_stream: String,
    /// Its partitions.
    #[arg(long, default_value_t = 6)]
    partitions: u32,
    /// Members of the group.
    #[arg(long, default_value_t = 3)]
    members: usize,
    /// Messages to publish.
    #[arg(long, default_value_t = 300_000)]
    count: u64,
    /// Distinct partition keys.
    #[arg(long, default_value_t = 1_000)]
    keys: u64,
    /// Publisher-confirm window (per publisher).
    #[arg(long, default_value_t = 1_000)]
    confirm_window: usize,
    /// Publishers, each on its own connection to the first URI (each key has one).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=64))]
    publishers: u64,
    /// Members' prefetch (per partition).
    #[arg(long, default_value_t = 500)]
    prefetch: u16,
    /// Do not kill a member.
    #[arg(long)]
    no_kill: bool,
    /// Where the partitions' leaders go (`x-queue-leader-locator`): balanced spreads them,
    /// client-local puts them all on the first URI's node.
    #[arg(long, default_value = "balanced")]
    leader_locator: String,
}

const GROUP: &str = "bench";
const BODY_BYTES: usize = 100;

fn text(value: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(value))
}

fn table(entries: &[(&str, AMQPValue)]) -> FieldTable {
    let mut table = FieldTable::default();
    for (key, value) in entries {
        table.insert(ShortString::from(*key), value.clone());
    }
    table
}

async fn connect(uri: &str) -> anyhow::Result<Connection> {
    Connection::connect(uri, ConnectionProperties::default()).await.with_context(|| format!("connect to {uri}"))
}

/// RabbitMQ's super stream layout, declared afresh.
async fn declare(ch: &lapin::Channel, options: &Options) -> anyhow::Result<()> {
    let name = options.super_stream.as_str();
    for p in 0..options.partitions {
        let _ = ch.queue_delete(format!("{name}-{p}").as_str().into(), QueueDeleteOptions::default()).await;
    }
    let _ = ch.exchange_delete(name.into(), ExchangeDeleteOptions::default()).await;
    let durable = ExchangeDeclareOptions { durable: true, ..Default::default() };
    let arguments = table(&[("x-super-stream", AMQPValue::Boolean(true))]);
    ch.exchange_declare(name.into(), ExchangeKind::Direct, durable, arguments).await?;
    for p in 0..options.partitions {
        let stream = format!("{name}-{p}");
        let locator = text(&options.leader_locator);
        let arguments = table(&[("x-queue-type", text("stream")), ("x-queue-leader-locator", locator)]);
        let durable = QueueDeclareOptions { durable: true, ..Default::default() };
        ch.queue_declare(stream.as_str().into(), durable, arguments).await?;
        let order = table(&[("x-stream-partition-order", AMQPValue::LongLongInt(i64::from(p)))]);
        ch.queue_bind(stream.as_str().into(), name.into(), p.to_string().as_str().into(), Default::default(), order)
            .await?;
    }
    Ok(())
}

/// What the members saw: distinct messages consumed, deliveries in all, and per partition the
/// member that read it last and when.
#[derive(Default)]
struct Seen {
    distinct: std::collections::HashSet<u64>,
    deliveries: u64,
    last_reader: HashMap<i64, (usize, Instant)>,
    /// After the kill: the first delivery of each partition to a member other than the dead one.
    taken_over: HashMap<i64, Instant>,
}

fn header(delivery: &lapin::message::Delivery, name: &str) -> Option<i64> {
    match delivery.properties.headers().as_ref()?.inner().get(name)? {
        AMQPValue::LongLongInt(value) => Some(*value),
        _ => None,
    }
}

/// A member: consumes the super stream in the group until `stop`, when its connection closes
/// with what it has not acked (it dies).
async fn member(
    conn: Connection,
    id: usize,
    options: Arc<Options>,
    seen: Arc<Mutex<Seen>>,
    dead: Arc<Mutex<Option<(usize, Instant)>>>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let ch = conn.create_channel().await?;
    ch.basic_qos(options.prefetch, BasicQosOptions::default()).await?;
    let arguments = table(&[("x-stream-offset", text("first")), ("x-consumer-group", text(GROUP))]);
    let tag = format!("member-{id}");
    let mut consumer = ch
        .basic_consume(options.super_stream.as_str().into(), tag.as_str().into(), Default::default(), arguments)
        .await?;
    loop {
        let delivery = tokio::select! {
            _ = stop.changed() => break,
            next = consumer.next() => match next {
                Some(Ok(delivery)) => delivery,
                _ => break,
            },
        };
        let partition = header(&delivery, "x-stream-partition").unwrap_or(-1);
        let number = u64::from_be_bytes(delivery.data[..8].try_into().unwrap_or_default());
        let now = Instant::now();
        {
            let mut seen = seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            seen.distinct.insert(number);
            seen.deliveries += 1;
            if let Some((victim, at)) = *dead.lock().unwrap_or_else(std::sync::PoisonError::into_inner) {
                let was_victims = seen.last_reader.get(&partition).is_some_and(|(m, t)| *m == victim && *t < at);
                if id != victim && was_victims {
                    seen.taken_over.entry(partition).or_insert(now);
                }
            }
            if !seen.taken_over.contains_key(&partition) {
                seen.last_reader.insert(partition, (id, now));
            }
        }
        if delivery.ack(BasicAckOptions::default()).await.is_err() {
            break;
        }
    }
    let _ = conn.close(320, "member stops".into()).await;
    Ok(())
}

/// Publisher `publisher` of `options.publishers`: the messages whose number it is given
/// (every publishers-th), keyed so that each key has one publisher (per-key order holds), with
/// a confirm window. Returns how many were nacked.
async fn publish(
    conn: Connection,
    publisher: u64,
    options: Arc<Options>,
    published: Arc<std::sync::atomic::AtomicU64>,
) -> anyhow::Result<u64> {
    let channel = conn.create_channel().await?;
    channel.confirm_select(ConfirmSelectOptions::default()).await?;
    let mut pending = Vec::with_capacity(options.confirm_window);
    let mut nacked = 0u64;
    let exchange = options.super_stream.as_str();
    for n in (publisher..options.count).step_by(options.publishers as usize) {
        let key = format!("key-{}", n % options.keys);
        let mut body = n.to_be_bytes().to_vec();
        body.resize(BODY_BYTES, b'x');
        let properties = BasicProperties::default().with_headers(table(&[("x-partition-key", text(&key))]));
        pending.push(channel.basic_publish(exchange.into(), "".into(), Default::default(), &body, properties).await?);
        published.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if pending.len() >= options.confirm_window {
            for confirm in pending.drain(..) {
                nacked += u64::from(!confirm.await?.is_ack());
            }
        }
    }
    for confirm in pending.drain(..) {
        nacked += u64::from(!confirm.await?.is_ack());
    }
    Ok(nacked)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let options = Arc::new(Options::parse());
    if options.uri.is_empty() {
        bail!("give at least one --uri");
    }
    let admin = connect(&options.uri[0]).await?;
    declare(&admin.create_channel().await?, &options).await?;

    let seen = Arc::new(Mutex::new(Seen::default()));
    let dead = Arc::new(Mutex::new(None));
    let mut stops = Vec::new();
    for id in 0..options.members {
        let conn = connect(&options.uri[id % options.uri.len()]).await?;
        let (stop, stopping) = tokio::sync::watch::channel(false);
        stops.push(stop);
        tokio::spawn(member(conn, id, Arc::clone(&options), Arc::clone(&seen), Arc::clone(&dead), stopping));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    let started = Instant::now();
    let published = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut publishers = Vec::new();
    for publisher in 0..options.publishers {
        let conn = connect(&options.uri[0]).await?;
        let (options, published) = (Arc::clone(&options), Arc::clone(&published));
        publishers.push(tokio::spawn(publish(conn, publisher, options, published)));
    }
    let victim = options.members / 2;
    if !options.no_kill && options.members > 1 {
        while published.load(std::sync::atomic::Ordering::Relaxed) < options.count / 2 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        *dead.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some((victim, Instant::now()));
        // The member dies: its connection goes with its deliveries unacked.
        stops[victim].send_replace(true);
    }
    let mut nacked = 0;
    for publisher in publishers {
        nacked += publisher.await??;
    }
    let publish_secs = started.elapsed().as_secs_f64();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let distinct = seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner).distinct.len() as u64;
        if distinct >= options.count || options.members == 0 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let consume_secs = started.elapsed().as_secs_f64();
    let seen = seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let killed_at = dead.lock().unwrap_or_else(std::sync::PoisonError::into_inner).map(|(_, at)| at);
    let rebalance_ms = killed_at.and_then(|at| seen.taken_over.values().map(|t| t.duration_since(at)).max());
    println!(
        "{{\"partitions\":{},\"members\":{},\"published\":{},\"nacked\":{},\"publish_rate\":{:.0},\"consumed\":{},\
         \"consume_rate\":{:.0},\"processed_twice\":{},\"rebalance_ms\":{}}}",
        options.partitions,
        options.members,
        options.count,
        nacked,
        options.count as f64 / publish_secs,
        seen.distinct.len(),
        seen.distinct.len() as f64 / consume_secs,
        seen.deliveries - seen.distinct.len() as u64,
        rebalance_ms.map_or("null".to_string(), |d| d.as_millis().to_string()),
    );
    if options.members > 0 && (seen.distinct.len() as u64) < options.count {
        bail!("{} of {} messages were never consumed", options.count - seen.distinct.len() as u64, options.count);
    }
    Ok(())
}
