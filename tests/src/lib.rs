//! warren-tests: end-to-end tests of Warren with real AMQP clients.
//!
//! The tests live in `tests/tests/`; this library holds what they share: starting a broker
//! in-process on a free loopback port.

use std::net::SocketAddr;
use warren_server::{Config, RunningBroker};

/// A broker on 127.0.0.1 with an ephemeral port and a fresh data directory.
pub async fn start_broker() -> RunningBroker {
    start_broker_with(|_| {}).await
}

/// Like [`start_broker`], with settings adjusted by `adjust`.
pub async fn start_broker_with(adjust: impl FnOnce(&mut Config)) -> RunningBroker {
    let data_dir = std::env::temp_dir().join(format!("warren-test-{}-{}", std::process::id(), next_id()));
    let mut config = Config { amqp_listen: SocketAddr::from(([127, 0, 0, 1], 0)), data_dir, ..Config::default() };
    adjust(&mut config);
    match warren_server::start(config).await {
        Ok(running) => running,
        Err(error) => panic!("test broker did not start: {error}"),
    }
}

fn next_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The AMQP URI of a running test broker.
pub fn amqp_uri(running: &RunningBroker) -> String {
    format!("amqp://guest:guest@{}/%2f", running.amqp_addr)
}
