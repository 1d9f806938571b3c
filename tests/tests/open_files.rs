//! Open files: the broker raises its soft limit to the hard one, so that 2,000 clients are
//! served with the soft limit at 1,024; and when descriptors do run out, a new client is
//! closed at once instead of being left hanging, and the failures are logged once a second.
//! Durable queues open their segment files on use through a cache of half the limit, so
//! more of them than the limit allows descriptors work, across a restart.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use lapin::options::{BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::FieldTable;
use lapin::BasicProperties;
use warren_tests::process::WarrenProcess;
use warren_tests::raw_client::PROTOCOL_HEADER;

/// Raises this test process's own limit: it holds as many sockets as the broker.
fn raise_own_limit() {
    if let Err(error) = warren_server::open_files::raise_to_hard_limit() {
        panic!("cannot raise the test's open-files limit: {error}");
    }
}

/// Connects, sends the protocol header and reads the first byte of `connection.start`:
/// the broker accepted the client and serves it. `None` if it closed the client instead.
fn greeted(broker: &WarrenProcess) -> Option<TcpStream> {
    let mut stream = TcpStream::connect(broker.amqp_addr).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(3))).expect("timeout");
    stream.write_all(PROTOCOL_HEADER).expect("header");
    let mut first = [0u8; 1];
    match stream.read(&mut first) {
        Ok(1) => Some(stream),
        Ok(_) => None,
        Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => None,
        Err(error) => panic!("a client was left hanging: {error}"),
    }
}

#[test]
fn two_thousand_clients_are_served_with_a_soft_limit_of_1024() {
    raise_own_limit();
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = WarrenProcess::start_with_open_files(dir.path(), &[], 1024, 8192);
    assert!(broker.log_lines().iter().any(|l| l.contains("open files limit") && l.contains("now=8192")));
    let served: Vec<TcpStream> = (0..2_000).filter_map(|_| greeted(&broker)).collect();
    assert_eq!(served.len(), 2_000, "every client is served");
}

#[test]
fn out_of_descriptors_a_new_client_is_closed_at_once_and_failures_are_logged_once_a_second() {
    raise_own_limit();
    let dir = tempfile::tempdir().expect("tempdir");
    // 64 descriptors: the broker's own files take some, the rest go to the first clients.
    let broker = WarrenProcess::start_with_open_files(dir.path(), &[], 64, 64);
    let started = Instant::now();
    let mut held = Vec::new();
    let mut closed = 0;
    for _ in 0..120 {
        match greeted(&broker) {
            Some(stream) => held.push(stream),
            None => closed += 1,
        }
    }
    assert!(!held.is_empty() && closed > 0, "{} served, {closed} closed", held.len());
    let elapsed = started.elapsed().as_secs() + 1;
    let failures = broker.log_lines().iter().filter(|l| l.contains("accept failed")).count() as u64;
    assert!(failures <= elapsed + 1, "{failures} accept failures logged in {elapsed} s");
}

/// Durable queues in the limit test: each has two logs, 4,000 data files against 1,024
/// descriptors. (`bench/many-queues.sh` runs 10,000.)
const DURABLE_QUEUES: usize = 2_000;

async fn connect_to(broker: &WarrenProcess) -> lapin::Channel {
    let conn = lapin::Connection::connect(&broker.uri(), Default::default()).await.expect("connect");
    conn.create_channel().await.expect("channel")
}

/// Descriptors the broker holds, from `/proc`.
fn descriptors(broker: &WarrenProcess) -> usize {
    std::fs::read_dir(format!("/proc/{}/fd", broker.pid())).map(|fds| fds.count()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_durable_queues_than_descriptors_work_across_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = WarrenProcess::start_with_open_files(dir.path(), &[], 1024, 1024);
    let ch = connect_to(&broker).await;
    ch.confirm_select(ConfirmSelectOptions::default()).await.expect("confirms");
    let mut confirms = Vec::new();
    for i in 0..DURABLE_QUEUES {
        let queue = format!("q{i}");
        ch.queue_declare(queue.as_str().into(), warren_tests::durable(), FieldTable::default()).await.expect("declare");
        let persistent = BasicProperties::default().with_delivery_mode(2);
        let body = queue.as_bytes();
        confirms.push(
            ch.basic_publish("".into(), queue.as_str().into(), BasicPublishOptions::default(), body, persistent)
                .await
                .expect("publish"),
        );
    }
    for confirm in confirms {
        assert!(confirm.await.expect("confirm").is_ack());
    }
    assert!(descriptors(&broker) < 1024, "{} descriptors", descriptors(&broker));
    drop(ch);
    let mut broker = broker;
    broker.signal("TERM");
    assert!(broker.wait(Duration::from_secs(30)).success());
    let broker = WarrenProcess::start_with_open_files(dir.path(), &[], 1024, 1024);
    let ch = connect_to(&broker).await;
    for i in 0..DURABLE_QUEUES {
        let queue = format!("q{i}");
        let got = ch.basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true }).await.expect("get");
        assert_eq!(got.map(|m| m.delivery.data), Some(queue.into_bytes()), "queue q{i} after the restart");
    }
    assert!(descriptors(&broker) < 1024, "{} descriptors", descriptors(&broker));
    assert!(!broker.log_lines().iter().any(|l| l.contains("ERROR")), "no store errors");
}
