//! One tenant cannot stall another (issue #28, item 9): while a client of one vhost declares
//! durable queues and binds them, one at a time and as fast as it can (each change rewrites
//! that vhost's definitions until the catalog replaces the file), a publisher of another vhost
//! keeps getting its confirms. Runs the real binary.

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection};
use serde_json::json;
use std::time::{Duration, Instant};
use warren_tests::http::Api;
use warren_tests::process::WarrenProcess;

/// How long the declaring tenant works.
const DECLARING: Duration = Duration::from_secs(6);
/// The longest a confirm of the other tenant may wait: the declaring tenant's whole run
/// stalled it before (13 s at 5,000 queues in the issue); a second is ample on a slow machine.
const LONGEST_CONFIRM: Duration = Duration::from_secs(2);

async fn connect(broker: &WarrenProcess, vhost: &str) -> Connection {
    let uri = format!("amqp://guest:guest@{}/{vhost}", broker.amqp_addr);
    Connection::connect(&uri, Default::default()).await.expect("connect")
}

/// Declares and binds durable queues in `vhost` until `DECLARING` has passed; how many.
async fn declare_for_a_while(broker: &WarrenProcess) -> usize {
    let connection = connect(broker, "declaring").await;
    let channel = connection.create_channel().await.expect("channel");
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    let started = Instant::now();
    let mut declared = 0;
    while started.elapsed() < DECLARING {
        let name = format!("q{declared}");
        channel.queue_declare(name.as_str().into(), durable, FieldTable::default()).await.expect("declare");
        let bind = QueueBindOptions::default();
        channel
            .queue_bind(name.as_str().into(), "amq.direct".into(), name.as_str().into(), bind, FieldTable::default())
            .await
            .expect("bind");
        declared += 1;
    }
    declared
}

/// Publishes persistent messages one confirm at a time in `vhost` for as long as `until`
/// says; the longest a confirm took.
async fn publish_meanwhile(broker: &WarrenProcess, until: Instant) -> (Duration, usize) {
    let connection = connect(broker, "publishing").await;
    let channel = connection.create_channel().await.expect("channel");
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    channel.queue_declare("events".into(), durable, FieldTable::default()).await.expect("declare");
    channel.confirm_select(ConfirmSelectOptions::default()).await.expect("confirms");
    let (mut longest, mut confirmed) = (Duration::ZERO, 0);
    while Instant::now() < until {
        let started = Instant::now();
        let properties = BasicProperties::default().with_delivery_mode(2);
        let publish =
            channel.basic_publish("".into(), "events".into(), BasicPublishOptions::default(), b"x", properties);
        assert!(publish.await.expect("publish").await.expect("confirm").is_ack());
        longest = longest.max(started.elapsed());
        confirmed += 1;
    }
    (longest, confirmed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_declaring_durable_queues_does_not_stall_anothers_confirms() {
    let data = tempfile::tempdir().expect("data directory");
    let broker = WarrenProcess::start(data.path(), &[]);
    let api = Api::new(broker.http_addr.expect("the management API runs"));
    for vhost in ["declaring", "publishing"] {
        assert!(api.put(&format!("/api/vhosts/{vhost}"), json!({})).status < 300);
    }
    let until = Instant::now() + DECLARING;
    let (declared, (longest, confirmed)) =
        tokio::join!(declare_for_a_while(&broker), publish_meanwhile(&broker, until));
    eprintln!(
        "while {declared} durable queues were declared and bound in one vhost, the other's {confirmed} confirms took {longest:?} at most"
    );
    assert!(confirmed > 0);
    assert!(longest < LONGEST_CONFIRM, "a confirm waited {longest:?} for another tenant's declares");
}
