//! The live feed's work is shared and bounded (issue #28, item 8): feeds that subscribe to the
//! queue table back to back, as fast as they can send, over thousands of queues, do not hold
//! up AMQP clients. Runs the real binary (before, two such feeds over 10,000 queues made AMQP
//! handshakes take 14 s, then 77 s, then time out; run by this test, the earlier build let no
//! handshake through while the feeds subscribed: the first took 11.6 s of the 12).

use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use warren_tests::process::WarrenProcess;
use warren_tests::siege::{self, GUEST_BASIC};

/// Queues in the table the feeds sort.
const QUEUES: usize = 10_000;
/// Feeds subscribing back to back.
const FEEDS: usize = 2;
/// How long they do.
const SUBSCRIBING: Duration = Duration::from_secs(12);
/// AMQP clients connecting meanwhile, one after another.
const CONNECTS: usize = 10;
/// How long a connect is waited for: the broker's handshake timeout (10 s) and more.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// What a connect may take while the feeds subscribe: this build takes 55-105 ms (release),
/// up to 1.9 s (debug build, which CI runs).
const CONNECT_AT_MOST: Duration = Duration::from_secs(8);

/// A feed that subscribes to the queue table, sorted by depth, until `until`, and reads
/// whatever it is sent meanwhile (a feed that does not read is dropped by the broker's send
/// timeout, and stops costing it anything).
async fn subscribe_back_to_back(http: std::net::SocketAddr, until: Instant) {
    let Ok(mut request) = format!("ws://{http}/ws").into_client_request() else { return };
    if let Ok(value) = format!("Basic {GUEST_BASIC}").parse() {
        request.headers_mut().insert("authorization", value);
    }
    let Ok((feed, _)) = tokio_tungstenite::connect_async(request).await else { return };
    let (mut sink, mut stream) = feed.split();
    let deadline = tokio::time::Instant::from_std(until);
    let reader =
        tokio::spawn(
            async move { while let Ok(Some(Ok(_))) = tokio::time::timeout_at(deadline, stream.next()).await {} },
        );
    let subscribe =
        json!({"type": "subscribe", "queues": {"sort": "messages", "sort_reverse": true, "page_size": 500}});
    while Instant::now() < until {
        let sent = tokio::time::timeout_at(deadline, sink.send(Message::Text(subscribe.to_string().into()))).await;
        if !matches!(sent, Ok(Ok(()))) {
            break;
        }
    }
    let _ = reader.await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feeds_subscribing_back_to_back_do_not_hold_up_amqp_clients() {
    let data = tempfile::tempdir().expect("data directory");
    let broker = WarrenProcess::start(data.path(), &[]);
    let http = broker.http_addr.expect("the management API runs");
    let connection = lapin::Connection::connect(&broker.uri(), Default::default()).await.expect("connect");
    siege::declare_queues(&connection, QUEUES).await.expect("queues");
    let until = Instant::now() + SUBSCRIBING;
    let feeds: Vec<_> = (0..FEEDS).map(|_| tokio::spawn(subscribe_back_to_back(http, until))).collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut times = Vec::new();
    for _ in 0..CONNECTS {
        times.push(siege::amqp_connect_time(&broker.uri(), CONNECT_TIMEOUT).await);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    for feed in feeds {
        let _ = feed.await;
    }
    eprintln!("AMQP connects while {FEEDS} feeds subscribed back to back over {QUEUES} queues: {times:?}");
    assert!(times.iter().all(Option::is_some), "every AMQP client connected: {times:?}");
    assert!(times.iter().flatten().all(|t| *t < CONNECT_AT_MOST), "no connect waited for the feeds: {times:?}");
}
