//! Crash test: SIGKILL the real broker under confirmed publishing and acking consumption,
//! restart it on the same data directory, and check what the durable queue holds.
//!
//! Each round: a fresh data directory, a durable queue, three confirm-mode publishers of
//! persistent messages and one consumer acking every delivery; after a random delay the
//! broker is killed with SIGKILL and started again, and the queue is drained. The checks:
//!
//! - nothing confirmed is lost: every id whose publish was confirmed (`basic.ack`) was either
//!   acked by the consumer or is in the queue after the restart;
//! - nothing is invented: every id in the queue after the restart (and every id delivered
//!   before the kill) was published by some publisher;
//! - nothing is doubled: no id is in the recovered queue twice.
//!
//! Acked messages coming back (their settlement was not yet durable) are allowed and counted.
//! The base seed is printed; `KILL9_SEED=<seed>` replays the same delays and body sizes
//! (the interleaving itself cannot be replayed). `KILL9_ROUNDS=<n>` changes the round count.

use futures_util::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::PublisherConfirm;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::time::timeout;
use warren_tests::process::WarrenProcess;

const QUEUE: &str = "kill9";
const PUBLISHERS: usize = 3;
/// Publishes awaiting their confirm, per publisher.
const WINDOW: usize = 64;
const PREFETCH: u16 = 100;
const DEFAULT_ROUNDS: u64 = 20;
const MIN_DELAY_MS: u64 = 100;
const MAX_DELAY_MS: u64 = 800;
/// How long a confirm may take while the broker is alive.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a publish or an ack may take to be written by lapin.
const CLIENT_OP_TIMEOUT: Duration = Duration::from_secs(1);
/// How long the client tasks may take to notice the broker died.
const TASK_END_TIMEOUT: Duration = Duration::from_secs(5);
const PERSISTENT: u8 = 2;

/// SplitMix64: small, seedable, good enough to pick delays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low + 1)
    }
}

/// What the clients saw before the kill.
#[derive(Default)]
struct Seen {
    /// Ids handed to `basic_publish` (whether or not it got through).
    attempted: HashSet<String>,
    /// Ids whose confirm was a `basic.ack`.
    confirmed: HashSet<String>,
    /// Ids whose confirm was a `basic.nack`.
    nacked: usize,
    /// Confirms that did not arrive within [`CONFIRM_TIMEOUT`] while the broker was alive.
    confirm_timeouts: usize,
    /// Publishes and acks that lapin did not complete within [`CLIENT_OP_TIMEOUT`].
    client_timeouts: usize,
    /// Ids delivered to the consumer.
    delivered: HashSet<String>,
    /// Ids delivered more than once before the kill (every delivery is acked, so none should be).
    delivered_twice: Vec<String>,
    /// Ids the consumer acked (recorded just before the ack is sent).
    acked: HashSet<String>,
    /// When the clients started, and when the first publish and the first confirm happened.
    started: Option<Instant>,
    first_publish: Option<Duration>,
    first_confirm: Option<Duration>,
    /// What each client task is doing (consumer first), to name one that hangs.
    phase: HashMap<String, &'static str>,
}

type Shared = Arc<Mutex<Seen>>;
/// A client task says it is set up (connected, channel open, consuming or in confirm mode).
type Ready = tokio::sync::mpsc::Sender<()>;

fn phase(shared: &Shared, task: &str, phase: &'static str) {
    seen(shared).phase.insert(task.to_string(), phase);
}

fn seen(shared: &Shared) -> std::sync::MutexGuard<'_, Seen> {
    shared.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The id at the start of a body: `p{publisher}-{n}`, then `|` and padding.
fn id_of(body: &[u8]) -> String {
    let end = body.iter().position(|&b| b == b'|').unwrap_or(body.len());
    String::from_utf8_lossy(&body[..end]).into_owned()
}

fn body_of(id: &str, padding: usize) -> Vec<u8> {
    let mut body = Vec::with_capacity(id.len() + 1 + padding);
    body.extend_from_slice(id.as_bytes());
    body.push(b'|');
    body.resize(id.len() + 1 + padding, b'.');
    body
}

async fn start(dir: PathBuf) -> WarrenProcess {
    tokio::task::spawn_blocking(move || WarrenProcess::start(&dir, &[])).await.expect("start warren")
}

async fn connect(uri: &str) -> lapin::Result<Connection> {
    Connection::connect(uri, ConnectionProperties::default()).await
}

/// Waits for one confirm; false if the connection failed (or the confirm never came).
async fn settle(shared: &Shared, id: String, confirm: PublisherConfirm, wait: Duration) -> bool {
    match timeout(wait, confirm).await {
        Ok(Ok(confirmation)) => {
            let mut seen = seen(shared);
            if confirmation.is_ack() {
                seen.confirmed.insert(id);
                if seen.first_confirm.is_none() {
                    seen.first_confirm = seen.started.map(|s| s.elapsed());
                }
            } else {
                seen.nacked += 1;
            }
            true
        }
        Ok(Err(_)) => false,
        Err(_) => {
            seen(shared).confirm_timeouts += 1;
            false
        }
    }
}

/// Publishes persistent messages with up to [`WINDOW`] unconfirmed, until the broker dies.
async fn publisher(uri: String, publisher: usize, padding: usize, shared: Shared, ready: Ready) {
    let task = format!("publisher {publisher}");
    publish_until_dead(&uri, &task, publisher, padding, &shared, ready).await;
    phase(&shared, &task, "done");
}

async fn publish_until_dead(uri: &str, task: &str, publisher: usize, padding: usize, shared: &Shared, ready: Ready) {
    phase(shared, task, "connect");
    let Ok(connection) = connect(uri).await else { return };
    phase(shared, task, "channel.open");
    let Ok(channel) = connection.create_channel().await else { return };
    phase(shared, task, "confirm.select");
    if channel.confirm_select(ConfirmSelectOptions::default()).await.is_err() {
        return;
    }
    let _ = ready.send(()).await;
    drop(ready);
    let properties = BasicProperties::default().with_delivery_mode(PERSISTENT);
    let mut window: VecDeque<(String, PublisherConfirm)> = VecDeque::with_capacity(WINDOW);
    for n in 0u64.. {
        if window.len() >= WINDOW {
            let Some((id, confirm)) = window.pop_front() else { break };
            phase(shared, task, "confirm");
            if !settle(shared, id, confirm, CONFIRM_TIMEOUT).await {
                break;
            }
        }
        let id = format!("p{publisher}-{n}");
        let body = body_of(&id, padding);
        {
            let mut seen = seen(shared);
            seen.attempted.insert(id.clone());
            if seen.first_publish.is_none() {
                seen.first_publish = seen.started.map(|s| s.elapsed());
            }
        }
        phase(shared, task, "publish");
        let publish =
            channel.basic_publish("".into(), QUEUE.into(), BasicPublishOptions::default(), &body, properties.clone());
        match timeout(CLIENT_OP_TIMEOUT, publish).await {
            Ok(Ok(confirm)) => window.push_back((id, confirm)),
            Ok(Err(_)) => break,
            Err(_) => {
                seen(shared).client_timeouts += 1;
                break;
            }
        }
    }
    // The broker is gone; confirms it sent before dying may still be waiting here.
    phase(shared, task, "last confirms");
    for (id, confirm) in window {
        settle(shared, id, confirm, Duration::from_millis(500)).await;
    }
}

/// Consumes and acks every delivery, until the broker dies.
async fn consumer(uri: String, shared: Shared, ready: Ready) {
    consume_until_dead(&uri, &shared, ready).await;
    phase(&shared, "consumer", "done");
}

async fn consume_until_dead(uri: &str, shared: &Shared, ready: Ready) {
    let task = "consumer";
    phase(shared, task, "connect");
    let Ok(connection) = connect(uri).await else { return };
    phase(shared, task, "channel.open");
    let Ok(channel) = connection.create_channel().await else { return };
    phase(shared, task, "basic.qos");
    if channel.basic_qos(PREFETCH, BasicQosOptions::default()).await.is_err() {
        return;
    }
    phase(shared, task, "basic.consume");
    let Ok(mut deliveries) = channel
        .basic_consume(QUEUE.into(), "kill9".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
    else {
        return;
    };
    let _ = ready.send(()).await;
    drop(ready);
    phase(shared, task, "next delivery");
    while let Some(Ok(delivery)) = deliveries.next().await {
        let id = id_of(&delivery.data);
        {
            let mut seen = seen(shared);
            if !seen.delivered.insert(id.clone()) {
                seen.delivered_twice.push(id.clone());
            }
            seen.acked.insert(id);
        }
        phase(shared, task, "ack");
        // lapin may never resolve an ack written as the connection dies: bound the wait.
        match timeout(CLIENT_OP_TIMEOUT, delivery.ack(BasicAckOptions::default())).await {
            Ok(Ok(_)) => {}
            Ok(Err(_)) => break,
            Err(_) => {
                seen(shared).client_timeouts += 1;
                break;
            }
        }
        phase(shared, task, "next delivery");
    }
}

/// The recovered queue's contents: (id, redelivered) in delivery order.
async fn drain(uri: &str) -> Vec<(String, bool)> {
    let connection = connect(uri).await.expect("connect after restart");
    let channel = connection.create_channel().await.expect("channel after restart");
    let passive = QueueDeclareOptions { passive: true, durable: true, ..Default::default() };
    let declared = channel.queue_declare(QUEUE.into(), passive, FieldTable::default()).await.expect("queue survives");
    let count = declared.message_count() as usize;
    let no_ack = BasicConsumeOptions { no_ack: true, ..Default::default() };
    let mut deliveries =
        channel.basic_consume(QUEUE.into(), "drain".into(), no_ack, FieldTable::default()).await.expect("consume");
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        match timeout(Duration::from_secs(5), deliveries.next()).await {
            Ok(Some(Ok(delivery))) => out.push((id_of(&delivery.data), delivery.redelivered)),
            other => panic!("drain: {} of {count} messages, then {other:?}", out.len()),
        }
    }
    // Anything beyond the count the queue reported would be an invention too.
    if let Ok(Some(extra)) = timeout(Duration::from_millis(100), deliveries.next()).await {
        let extra = extra.map(|d| id_of(&d.data));
        panic!("drain: a delivery beyond the {count} messages the queue reported: {extra:?}");
    }
    channel.basic_cancel("drain".into(), BasicCancelOptions::default()).await.expect("cancel");
    let left = channel.queue_declare(QUEUE.into(), passive, FieldTable::default()).await.expect("queue");
    assert_eq!(left.message_count(), 0, "the queue is empty after draining");
    let _ = connection.close(200, "bye".into()).await;
    out
}

/// Totals over all rounds.
#[derive(Default, Debug)]
struct Totals {
    published: usize,
    confirmed: usize,
    acked: usize,
    recovered: usize,
    acked_and_recovered: usize,
}

async fn round(round: u64, base_seed: u64, seed: u64, totals: &mut Totals) {
    let mut rng = Rng(seed);
    let delay = Duration::from_millis(rng.range(MIN_DELAY_MS, MAX_DELAY_MS));
    let padding = rng.range(0, 2048) as usize;
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = start(dir.path().to_path_buf()).await;
    let uri = broker.uri();
    let setup = connect(&uri).await.expect("connect");
    let channel = setup.create_channel().await.expect("channel");
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    channel.queue_declare(QUEUE.into(), durable, FieldTable::default()).await.expect("declare");

    let shared: Shared = Arc::default();
    seen(&shared).started = Some(Instant::now());
    // The kill delay counts from when every client is set up, so that short delays still
    // kill the broker under load rather than during the clients' handshakes.
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel(PUBLISHERS + 1);
    let mut tasks = vec![tokio::spawn(consumer(uri.clone(), Arc::clone(&shared), ready_tx.clone()))];
    ready_rx.recv().await.expect("consumer set up");
    for p in 0..PUBLISHERS {
        tasks.push(tokio::spawn(publisher(uri.clone(), p, padding, Arc::clone(&shared), ready_tx.clone())));
    }
    drop(ready_tx);
    for p in 0..PUBLISHERS {
        timeout(Duration::from_secs(10), ready_rx.recv())
            .await
            .unwrap_or_else(|_| panic!("publisher {p} of {PUBLISHERS} not set up in 10 s"))
            .expect("publisher set up");
    }
    tokio::time::sleep(delay).await;
    tokio::task::spawn_blocking(move || broker.kill9()).await.expect("kill -9");
    let killed_at = started.elapsed();
    let mut hung = Vec::new();
    let deadline = tokio::time::Instant::now() + TASK_END_TIMEOUT;
    for task in tasks {
        let abort = task.abort_handle();
        if tokio::time::timeout_at(deadline, task).await.is_err() {
            abort.abort();
        }
    }
    for (task, phase) in &seen(&shared).phase {
        if *phase != "done" {
            hung.push(format!("{task} in {phase}"));
        }
    }
    hung.sort();
    drop(setup);

    let broker = start(dir.path().to_path_buf()).await;
    let recovered = drain(&broker.uri()).await;
    drop(broker);

    let seen = seen(&shared);
    let mut times: HashMap<&str, usize> = HashMap::new();
    for (id, _) in &recovered {
        *times.entry(id.as_str()).or_default() += 1;
    }
    let recovered_ids: HashSet<&str> = times.keys().copied().collect();
    let acked_and_recovered = seen.acked.iter().filter(|id| recovered_ids.contains(id.as_str())).count();
    let delivered_not_flagged =
        recovered.iter().filter(|(id, redelivered)| !redelivered && seen.delivered.contains(id)).count();
    println!(
        "round {round:2} seed {seed:#018x} kill after {delay:?} (at {killed_at:?}), padding {}: published {}, \
         confirmed {}, nacked {}, delivered {}, acked {}, recovered {} ({} of them acked, {} delivered before but \
         not flagged redelivered); first publish {:?}, first confirm {:?}{}{}; {:?}",
        padding,
        seen.attempted.len(),
        seen.confirmed.len(),
        seen.nacked,
        seen.delivered.len(),
        seen.acked.len(),
        recovered.len(),
        acked_and_recovered,
        delivered_not_flagged,
        seen.first_publish,
        seen.first_confirm,
        if seen.confirm_timeouts + seen.client_timeouts > 0 {
            format!(", timeouts: {} confirms, {} publishes/acks", seen.confirm_timeouts, seen.client_timeouts)
        } else {
            String::new()
        },
        if hung.is_empty() { String::new() } else { format!(", client tasks hung after the kill: {hung:?}") },
        started.elapsed(),
    );

    let replay = format!("(round {round}, seed {seed:#018x}; replay with KILL9_SEED={base_seed:#x})");
    let mut lost: Vec<&String> =
        seen.confirmed.iter().filter(|id| !seen.acked.contains(*id) && !recovered_ids.contains(id.as_str())).collect();
    lost.sort();
    assert!(lost.is_empty(), "{} confirmed messages lost {replay}: {:?}", lost.len(), &lost[..lost.len().min(20)]);
    let mut invented: Vec<&str> = recovered_ids.iter().copied().filter(|id| !seen.attempted.contains(*id)).collect();
    invented.sort();
    assert!(invented.is_empty(), "recovered messages never published {replay}: {invented:?}");
    let mut invented: Vec<&String> = seen.delivered.iter().filter(|id| !seen.attempted.contains(*id)).collect();
    invented.sort();
    assert!(invented.is_empty(), "delivered messages never published {replay}: {invented:?}");
    let mut doubled: Vec<(&str, usize)> = times.iter().filter(|(_, &n)| n > 1).map(|(id, n)| (*id, *n)).collect();
    doubled.sort();
    assert!(doubled.is_empty(), "ids recovered more than once {replay}: {doubled:?}");
    assert!(seen.delivered_twice.is_empty(), "delivered twice before the kill {replay}: {:?}", seen.delivered_twice);

    totals.published += seen.attempted.len();
    totals.confirmed += seen.confirmed.len();
    totals.acked += seen.acked.len();
    totals.recovered += recovered.len();
    totals.acked_and_recovered += acked_and_recovered;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_loses_nothing_confirmed() {
    let base_seed = match std::env::var("KILL9_SEED") {
        Ok(seed) => {
            let seed = seed.trim();
            let parsed = match seed.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => seed.parse(),
            };
            parsed.expect("KILL9_SEED is a u64")
        }
        Err(_) => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64),
    };
    let rounds = std::env::var("KILL9_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(DEFAULT_ROUNDS);
    println!("kill9: {rounds} rounds, base seed {base_seed:#018x} (replay with KILL9_SEED={base_seed:#x})");
    let started = Instant::now();
    let mut totals = Totals::default();
    let mut seeds = Rng(base_seed);
    for r in 0..rounds {
        round(r, base_seed, seeds.next(), &mut totals).await;
    }
    println!("kill9: {rounds} rounds in {:?}: {totals:?}", started.elapsed());
}
