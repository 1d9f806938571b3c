//! The real `warren` binary stops gracefully on SIGTERM and SIGINT: a connected client gets
//! `connection.close` with 320 CONNECTION_FORCED, and the process exits with status 0.

use amq_protocol::protocol::{connection, AMQPClass};
use std::time::Duration;
use warren_tests::process::WarrenProcess;
use warren_tests::raw_client::RawClient;

async fn stops_gracefully_on(signal: &str) {
    let data_dir = tempfile::tempdir().expect("tempdir");
    let mut warren = WarrenProcess::start(data_dir.path(), &[]);
    let mut client = RawClient::handshake(warren.amqp_addr).await;
    warren.signal(signal);
    let (code, _, _) = client.expect_connection_close().await;
    assert_eq!(code, 320);
    client.send_method(0, AMQPClass::Connection(connection::AMQPMethod::CloseOk(connection::CloseOk {}))).await;
    assert_eq!(warren.wait(Duration::from_secs(10)).code(), Some(0), "exit status after SIG{signal}");
}

#[tokio::test]
async fn sigterm_closes_clients_with_320_and_exits_0() {
    stops_gracefully_on("TERM").await;
}

#[tokio::test]
async fn sigint_closes_clients_with_320_and_exits_0() {
    stops_gracefully_on("INT").await;
}
