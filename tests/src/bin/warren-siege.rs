//! warren-siege: the management plane under the attacks of issue #28, at the scale,
//! against a running broker; prints the figures the issue judges by. `bench/management-siege.sh`
//! runs it against this checkout's release build (and a baseline's, with --baseline).
//!
//! - `idle`: holds thousands of idle sockets on the HTTP port (from several loopback
//!   addresses, in child processes so that no one process runs out of descriptors) and
//!   measures how long AMQP clients take to connect meanwhile.
//! - `silent`: declares queues and a stream of big messages, then for each large answer
//!   (`/metrics/per-object`, a greedy replay, a greedy browse over the live feed) opens clients
//!   that ask and never read, and reports how much the broker's resident memory grew.

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use std::io::BufRead;
use std::net::{IpAddr, SocketAddr};
use std::process::{Command, Stdio};
use std::time::Duration;
use warren_tests::siege::{self, MIB};

#[derive(Debug, Parser)]
#[command(name = "warren-siege", about = "The management plane under issue #28's attacks, at scale.")]
struct Siege {
    #[command(subcommand)]
    attack: Attack,
}

#[derive(Debug, Subcommand)]
enum Attack {
    /// Idle sockets on the HTTP port while AMQP clients connect.
    Idle {
        #[arg(long)]
        amqp: SocketAddr,
        #[arg(long)]
        http: SocketAddr,
        /// Idle sockets attempted in all.
        #[arg(long, default_value_t = 20_000)]
        sockets: usize,
        /// Loopback addresses they come from (127.0.0.2 and on).
        #[arg(long, default_value_t = 4)]
        sources: usize,
        /// AMQP connections timed meanwhile, one after another.
        #[arg(long, default_value_t = 200)]
        connects: usize,
    },
    /// Clients that ask for the largest answers and never read them.
    Silent {
        #[arg(long)]
        amqp: SocketAddr,
        #[arg(long)]
        http: SocketAddr,
        /// The broker's process id, whose memory is read.
        #[arg(long)]
        pid: u32,
        #[arg(long, default_value_t = 100_000)]
        queues: usize,
        /// Messages of a MiB of control bytes in the stream the replays read.
        #[arg(long, default_value_t = 100)]
        big_messages: usize,
        /// Silent clients per route.
        #[arg(long, default_value_t = 40)]
        clients: usize,
    },
    /// (Used by `idle`.) Holds `count` sockets to `http` from `from` until stdin closes;
    /// prints how many connected.
    Hold {
        #[arg(long)]
        http: SocketAddr,
        #[arg(long)]
        from: IpAddr,
        #[arg(long)]
        count: usize,
    },
}

fn main() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        match Siege::parse().attack {
            Attack::Idle { amqp, http, sockets, sources, connects } => {
                idle(amqp, http, sockets, sources, connects).await
            }
            Attack::Silent { amqp, http, pid, queues, big_messages, clients } => {
                silent(amqp, http, pid, queues, big_messages, clients).await
            }
            Attack::Hold { http, from, count } => hold(http, from, count).await,
        }
    })
}

fn uri(amqp: SocketAddr) -> String {
    format!("amqp://guest:guest@{amqp}/%2f")
}

/// How long one attempt waits to connect: a broker out of descriptors stops accepting, and
/// its backlog then leaves connects hanging.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Connects attempted at once by one holder (more overflow the listener's SYN backlog).
const CONCURRENT_CONNECTS: usize = 256;

async fn hold(http: SocketAddr, from: IpAddr, count: usize) -> anyhow::Result<()> {
    let mut held = Vec::new();
    let mut left = count;
    while left > 0 {
        let batch = left.min(CONCURRENT_CONNECTS);
        left -= batch;
        let mut connecting = tokio::task::JoinSet::new();
        for _ in 0..batch {
            connecting.spawn(tokio::time::timeout(CONNECT_TIMEOUT, siege::silent_socket(http, Some(from))));
        }
        while let Some(connected) = connecting.join_next().await {
            if let Ok(Ok(Ok(socket))) = connected {
                held.push(socket);
            }
        }
    }
    // The parent reads this line, then times AMQP connects while the sockets are held.
    println!("{}", held.len());
    // Held until the parent closes stdin.
    let _ = tokio::task::spawn_blocking(|| std::io::stdin().lock().lines().count()).await;
    drop(held);
    Ok(())
}

async fn idle(
    amqp: SocketAddr,
    http: SocketAddr,
    sockets: usize,
    sources: usize,
    connects: usize,
) -> anyhow::Result<()> {
    let this = std::env::current_exe()?;
    let mut holders = Vec::new();
    for source in 0..sources.max(1) {
        let from = format!("127.0.0.{}", source + 2);
        let count = (sockets / sources.max(1)).to_string();
        let child = Command::new(&this)
            .args(["hold", "--http", &http.to_string(), "--from", &from, "--count", &count])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("start a holder")?;
        holders.push(child);
    }
    // Once every holder holds its sockets, AMQP connects are timed (a broker that ran out of
    // descriptors answers none: each waits out its timeout).
    let mut opened = 0;
    for holder in &mut holders {
        let Some(out) = holder.stdout.take() else { continue };
        let line = tokio::task::spawn_blocking(move || std::io::BufReader::new(out).lines().next()).await?;
        opened += line.and_then(Result::ok).and_then(|l| l.trim().parse::<usize>().ok()).unwrap_or(0);
    }
    let mut times = Vec::new();
    let mut failures = 0;
    for _ in 0..connects {
        match siege::amqp_connect_time(&uri(amqp), Duration::from_secs(10)).await {
            Some(took) => times.push(took),
            None => failures += 1,
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for mut holder in holders {
        drop(holder.stdin.take());
        holder.wait()?;
    }
    times.sort();
    let at = |q: f64| times.get(((times.len() as f64 * q) as usize).min(times.len().saturating_sub(1))).copied();
    println!(
        "| idle HTTP sockets attempted | sockets connected | AMQP connects | failed | p50 | p99 | max |\n|---|---|---|---|---|---|---|\n| {sockets} | {opened} | {} | {failures} | {:?} | {:?} | {:?} |",
        times.len(),
        at(0.5).unwrap_or_default(),
        at(0.99).unwrap_or_default(),
        times.last().copied().unwrap_or_default()
    );
    Ok(())
}

async fn silent(
    amqp: SocketAddr,
    http: SocketAddr,
    pid: u32,
    queues: usize,
    big_messages: usize,
    clients: usize,
) -> anyhow::Result<()> {
    let connection = lapin::Connection::connect(&uri(amqp), Default::default()).await?;
    siege::declare_queues(&connection, queues).await?;
    siege::fill_big_stream(&connection, big_messages).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let idle = siege::rss_bytes(pid);
    if idle == 0 {
        bail!("cannot read process {pid}'s memory");
    }
    println!(
        "| route ({clients} clients that never read) | resident memory above idle ({} MiB) |\n|---|---|",
        idle / MIB
    );
    let settle = Duration::from_secs(10);
    let metrics = siege::ask_and_never_read(http, &siege::per_object_metrics_request(), clients).await;
    tokio::time::sleep(settle).await;
    println!("| `/metrics/per-object` ({queues} queues) | {} MiB |", siege::rss_bytes(pid).saturating_sub(idle) / MIB);
    drop(metrics);
    tokio::time::sleep(settle).await;
    let base = siege::rss_bytes(pid);
    let replays = siege::ask_and_never_read(http, &siege::greedy_replay_request(), clients).await;
    tokio::time::sleep(settle).await;
    println!(
        "| replay, truncate 10^8 ({big_messages} MiB of control bytes) | {} MiB |",
        siege::rss_bytes(pid).saturating_sub(base) / MIB
    );
    drop(replays);
    tokio::time::sleep(settle).await;
    let base = siege::rss_bytes(pid);
    let feeds = siege::browse_and_never_read(http, clients).await;
    tokio::time::sleep(settle).await;
    println!("| live-feed browse, truncate 10^8 | {} MiB |", siege::rss_bytes(pid).saturating_sub(base) / MIB);
    drop(feeds);
    Ok(())
}
