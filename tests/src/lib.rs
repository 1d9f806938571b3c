//! warren-tests: end-to-end tests of Warren with real AMQP clients.
//!
//! The tests live in `tests/tests/`; this library holds what they share: starting a broker
//! in-process on a free loopback port.

pub mod cluster;
pub mod fault_proxy;
pub mod http;
pub mod partition_group;
pub mod process;
pub mod raw_client;
pub mod siege;

use std::net::SocketAddr;
use warren_server::{Config, RunningBroker};

/// A broker a test started, in-process. It derefs to the [`RunningBroker`]; the data
/// directory [`start_broker`] made for it is removed when it goes (one a test gave stays).
pub struct TestBroker {
    running: RunningBroker,
    /// Dropped after `running`: the broker's files go once it has stopped with them.
    _data_dir: Option<tempfile::TempDir>,
}

impl TestBroker {
    /// Closes every connection and stops the broker (see [`RunningBroker::shutdown`]).
    pub async fn shutdown(self) {
        self.running.shutdown().await;
    }
}

impl std::ops::Deref for TestBroker {
    type Target = RunningBroker;
    fn deref(&self) -> &RunningBroker {
        &self.running
    }
}

impl std::ops::DerefMut for TestBroker {
    fn deref_mut(&mut self) -> &mut RunningBroker {
        &mut self.running
    }
}

/// A broker on 127.0.0.1 with an ephemeral port and a fresh data directory.
pub async fn start_broker() -> TestBroker {
    start_broker_with(|_| {}).await
}

/// Like [`start_broker`], with settings adjusted by `adjust`.
pub async fn start_broker_with(adjust: impl FnOnce(&mut Config)) -> TestBroker {
    // A random name, never reused: a directory named after the process id alone can be an
    // earlier run's, left behind, once process ids wrap.
    let fresh = match tempfile::Builder::new().prefix("warren-test-").tempdir() {
        Ok(dir) => dir,
        Err(error) => panic!("no data directory for the test broker: {error}"),
    };
    let mut config = Config {
        amqp_listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        http_listen: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
        stream_listen: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
        data_dir: fresh.path().to_path_buf(),
        ..Config::default()
    };
    adjust(&mut config);
    let fresh_in_use = config.data_dir == fresh.path();
    match warren_server::start(config).await {
        Ok(running) => TestBroker { running, _data_dir: fresh_in_use.then_some(fresh) },
        Err(error) => panic!("test broker did not start: {error}"),
    }
}

/// A broker whose data directory is `dir`: start it again on the same directory to test
/// what survives a restart.
pub async fn start_broker_in(dir: &std::path::Path) -> TestBroker {
    let dir = dir.to_path_buf();
    start_broker_with(move |c| c.data_dir = dir).await
}

/// `queue.declare` options of a durable queue.
pub fn durable() -> lapin::options::QueueDeclareOptions {
    lapin::options::QueueDeclareOptions { durable: true, ..Default::default() }
}

/// The AMQP URI of a running test broker.
pub fn amqp_uri(running: &RunningBroker) -> String {
    format!("amqp://guest:guest@{}/%2f", running.amqp_addr)
}

/// Connects lapin to a running test broker.
pub async fn connect(running: &RunningBroker) -> lapin::Connection {
    match lapin::Connection::connect(&amqp_uri(running), lapin::ConnectionProperties::default()).await {
        Ok(connection) => connection,
        Err(error) => panic!("cannot connect to the test broker: {error}"),
    }
}

/// Opens a channel, failing the test if it cannot.
pub async fn channel(connection: &lapin::Connection) -> lapin::Channel {
    match connection.create_channel().await {
        Ok(channel) => channel,
        Err(error) => panic!("cannot open a channel: {error}"),
    }
}

/// The AMQP reply code a lapin error carries, if the broker sent one.
pub fn reply_code(error: &lapin::Error) -> Option<u16> {
    match error.kind() {
        lapin::ErrorKind::ProtocolError(amqp) => Some(amqp.get_id()),
        _ => None,
    }
}

/// Takes the next delivery from a consumer within a few seconds.
pub async fn next_delivery(consumer: &mut lapin::Consumer) -> lapin::message::Delivery {
    next_delivery_within(consumer, std::time::Duration::from_secs(5)).await
}

/// Takes the next delivery from a consumer within `within` (longer than
/// [`next_delivery`]'s where a failover comes first).
pub async fn next_delivery_within(
    consumer: &mut lapin::Consumer,
    within: std::time::Duration,
) -> lapin::message::Delivery {
    use futures_util::StreamExt;
    match tokio::time::timeout(within, consumer.next()).await {
        Ok(Some(Ok(delivery))) => delivery,
        Ok(Some(Err(error))) => panic!("consumer failed: {error}"),
        Ok(None) => panic!("consumer ended"),
        Err(_) => panic!("no delivery within {within:?}"),
    }
}

/// Asserts that no delivery arrives within `millis`.
pub async fn assert_no_delivery(consumer: &mut lapin::Consumer, millis: u64) {
    use futures_util::StreamExt;
    if let Ok(Some(delivery)) = tokio::time::timeout(std::time::Duration::from_millis(millis), consumer.next()).await {
        panic!("unexpected delivery: {delivery:?}");
    }
}

/// Opens a channel in confirm mode.
pub async fn confirm_channel(connection: &lapin::Connection) -> lapin::Channel {
    let channel = channel(connection).await;
    match channel.confirm_select(lapin::options::ConfirmSelectOptions::default()).await {
        Ok(()) => channel,
        Err(error) => panic!("confirm.select failed: {error}"),
    }
}

/// Asserts that `result` failed with the AMQP reply `code`.
pub fn assert_code<T: std::fmt::Debug>(result: lapin::Result<T>, code: u16, what: &str) {
    match result {
        Ok(value) => panic!("{what}: expected reply code {code}, got success {value:?}"),
        Err(error) => assert_eq!(reply_code(&error), Some(code), "{what}: unexpected error {error}"),
    }
}

/// A field table from (key, value) pairs.
pub fn table(entries: &[(&str, lapin::types::AMQPValue)]) -> lapin::types::FieldTable {
    let mut table = lapin::types::FieldTable::default();
    for (key, value) in entries {
        table.insert((*key).into(), value.clone());
    }
    table
}

/// A long-string field value.
pub fn text(value: &str) -> lapin::types::AMQPValue {
    lapin::types::AMQPValue::LongString(value.into())
}

/// Takes every ready message of `queue` with `basic.get` (no ack).
pub async fn drain(channel: &lapin::Channel, queue: &str) -> Vec<lapin::message::BasicGetMessage> {
    let mut out = Vec::new();
    let no_ack = lapin::options::BasicGetOptions { no_ack: true };
    loop {
        match channel.basic_get(queue.into(), no_ack).await {
            Ok(Some(message)) => out.push(message),
            Ok(None) => return out,
            Err(error) => panic!("basic.get on {queue} failed: {error}"),
        }
    }
}

/// A consumer on a queue of its own on `channel`, to observe the broker closing the channel:
/// the close arrives asynchronously after a failing method, and a call made meanwhile may fail
/// with lapin's "Closing" state instead of the reply code. See [`channel_close_code`].
pub async fn close_watcher(channel: &lapin::Channel) -> lapin::Consumer {
    let exclusive = lapin::options::QueueDeclareOptions { exclusive: true, ..Default::default() };
    let queue = match channel.queue_declare("".into(), exclusive, lapin::types::FieldTable::default()).await {
        Ok(queue) => queue,
        Err(error) => panic!("cannot declare the watcher's queue: {error}"),
    };
    let options = lapin::options::BasicConsumeOptions::default();
    match channel.basic_consume(queue.name().clone(), "close-watcher".into(), options, Default::default()).await {
        Ok(consumer) => consumer,
        Err(error) => panic!("cannot start the close watcher: {error}"),
    }
}

/// The reply code the broker closed the watched channel with (within a few seconds).
pub async fn channel_close_code(watcher: &mut lapin::Consumer) -> Option<u16> {
    use futures_util::StreamExt;
    match tokio::time::timeout(std::time::Duration::from_secs(5), watcher.next()).await {
        Ok(Some(Err(error))) => reply_code(&error),
        other => panic!("expected the channel to be closed, got {other:?}"),
    }
}
