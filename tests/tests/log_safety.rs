//! What a client sends before login never reaches the broker's log raw: control characters
//! are escaped (no forged lines) and length is bounded (no log amplification); a broker at
//! work on quorum queues does not fill its log with openraft's routine. Runs the real binary
//! and reads its log.

use amq_protocol::protocol::{connection, AMQPClass};
use amq_protocol::types::{FieldTable, LongString};
use std::time::Duration;
use warren_tests::process::WarrenProcess;
use warren_tests::raw_client::{Next, RawClient, PROTOCOL_HEADER};

const FORGED: &str = "ERROR forged line";
const CONNECTIONS: usize = 20;
/// As large as a frame before tuning allows (frame_max 128 KiB).
const SECURE_OK_BYTES: usize = 120 * 1024;

async fn after_start(process: &WarrenProcess) -> RawClient {
    let mut client = RawClient::connect(process.amqp_addr).await;
    client.send(PROTOCOL_HEADER).await;
    client.expect_method().await;
    client
}

#[tokio::test]
async fn client_text_is_escaped_and_bounded_in_the_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let process = WarrenProcess::start(dir.path(), &[]);
    for _ in 0..CONNECTIONS {
        let mut client = after_start(&process).await;
        let start_ok = connection::StartOk {
            client_properties: FieldTable::default(),
            mechanism: format!("PLAIN\n{FORGED}").as_str().into(),
            response: LongString::from(&b"\0guest\0guest"[..]),
            locale: "en_US".into(),
        };
        client.send_method(0, AMQPClass::Connection(connection::AMQPMethod::StartOk(start_ok))).await;
        // A mechanism that was not offered: the socket is closed without a reply (the
        // specification's start-ok), and the refusal logged with the mechanism escaped.
        assert!(matches!(client.next().await, Next::Closed));

        let mut client = after_start(&process).await;
        let secure_ok = connection::SecureOk { response: LongString::from(vec![b'\n'; SECURE_OK_BYTES]) };
        client.send_method(0, AMQPClass::Connection(connection::AMQPMethod::SecureOk(secure_ok))).await;
        assert_eq!(client.expect_connection_close().await.0, 503);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let lines = process.log_lines();
    let refusals = lines.iter().filter(|l| l.contains("closing connection")).count();
    assert_eq!(refusals, 2 * CONNECTIONS, "every refusal is logged: {lines:#?}");
    assert!(lines.iter().all(|l| !l.starts_with(FORGED)), "a client forged a log line: {lines:#?}");
    let logged: usize = lines.iter().map(String::len).sum();
    assert!(logged < 2 * CONNECTIONS * 2048, "{logged} bytes of log for {} refused logins", 2 * CONNECTIONS);
}

/// openraft logs its routine (snapshots, votes, replication steps) at INFO: over a thousand lines
/// for this test's work before it was held to warnings. The tests run nodes with
/// `RUST_LOG=info`, as a user asking for the usual level would.
#[tokio::test]
async fn quorum_queues_at_work_do_not_fill_the_log_with_openrafts_routine() {
    use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
    let dir = tempfile::tempdir().expect("tempdir");
    let process = WarrenProcess::start(dir.path(), &[]);
    let conn = lapin::Connection::connect(&process.uri(), Default::default()).await.expect("connect");
    let ch = conn.create_channel().await.expect("channel");
    ch.confirm_select(ConfirmSelectOptions::default()).await.expect("confirms");
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    for i in 0..10 {
        let quorum = warren_tests::table(&[("x-queue-type", warren_tests::text("quorum"))]);
        ch.queue_declare(format!("qq{i}").as_str().into(), durable, quorum).await.expect("declare");
    }
    for _ in 0..1000 {
        let publish =
            ch.basic_publish("".into(), "qq0".into(), BasicPublishOptions::default(), b"x", Default::default());
        publish.await.expect("publish").await.expect("confirm");
    }
    let lines = process.log_lines();
    let raft: Vec<&String> = lines.iter().filter(|l| l.contains("openraft")).collect();
    assert!(
        raft.is_empty(),
        "{} openraft lines, the first: {:#?}",
        raft.len(),
        raft.iter().take(5).collect::<Vec<_>>()
    );
    assert!(lines.len() < 50, "{} lines logged: {lines:#?}", lines.len());
}
