//! The management API's largest answers, asked for by clients that never read them: the real
//! binary's resident memory must not grow with what it would send (issue #28, item 5). The
//! clients' sockets take almost nothing into their kernel buffers (a 4 KiB receive buffer),
//! so a broker that built each answer whole would hold every one of them. Small scale here;
//! `bench/management-siege.sh` runs the same at the scale.

use std::time::Duration;
use warren_tests::process::WarrenProcess;
use warren_tests::siege::{self, MIB};

/// Clients that ask and never read, per route.
const SILENT_CLIENTS: usize = 40;
/// What the broker may grow by while they wait: one chunk or one bounded answer each, socket
/// buffers, allocator slack. Building the answers whole takes several times more.
const ALLOWED_GROWTH_BYTES: u64 = 120 * MIB;
/// Time for the broker to do whatever the requests make it do.
const SETTLE: Duration = Duration::from_secs(3);
/// Queues, so that `/metrics/per-object` is megabytes long.
const QUEUES: usize = 10_000;
/// Messages of a mebibyte of control bytes each.
const BIG_MESSAGES: usize = 24;

/// How much `broker` grew while `attack` held its sockets open.
async fn growth_under<T>(broker: &WarrenProcess, attack: impl std::future::Future<Output = T>) -> (u64, T) {
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = broker.rss_bytes();
    let held = attack.await;
    tokio::time::sleep(SETTLE).await;
    (broker.rss_bytes().saturating_sub(before), held)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_never_read_the_largest_answers_do_not_grow_the_broker() {
    let data = tempfile::tempdir().expect("data directory");
    let broker = WarrenProcess::start(data.path(), &[]);
    let http = broker.http_addr.expect("the management API runs");
    let connection = lapin::Connection::connect(&broker.uri(), Default::default()).await.expect("connect");
    siege::declare_queues(&connection, QUEUES).await.expect("queues");
    siege::fill_big_stream(&connection, BIG_MESSAGES).await.expect("stream");

    let metrics = siege::per_object_metrics_request();
    let (metrics_growth, _held) =
        growth_under(&broker, siege::ask_and_never_read(http, &metrics, SILENT_CLIENTS)).await;
    let replay = siege::greedy_replay_request();
    let (replay_growth, _held) = growth_under(&broker, siege::ask_and_never_read(http, &replay, SILENT_CLIENTS)).await;
    let (feed_growth, _held) = growth_under(&broker, siege::browse_and_never_read(http, SILENT_CLIENTS)).await;
    eprintln!(
        "growth with {SILENT_CLIENTS} clients that never read: /metrics/per-object ({QUEUES} queues) {} MiB, \
         replay of {BIG_MESSAGES} MiB of control bytes {} MiB, WebSocket browse {} MiB",
        metrics_growth / MIB,
        replay_growth / MIB,
        feed_growth / MIB
    );
    assert!(metrics_growth < ALLOWED_GROWTH_BYTES, "/metrics/per-object: {} MiB", metrics_growth / MIB);
    assert!(replay_growth < ALLOWED_GROWTH_BYTES, "replay: {} MiB", replay_growth / MIB);
    assert!(feed_growth < ALLOWED_GROWTH_BYTES, "browse over the feed: {} MiB", feed_growth / MIB);
}
