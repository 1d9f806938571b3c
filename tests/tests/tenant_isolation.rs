//! One tenant cannot stall another (issue #28, item 9): while clients of one vhost declare
//! durable queues and bind them as fast as they can (each change rewrites that vhost's whole
//! definitions file, megabytes here, until the catalog replaces the file), a publisher of
//! another vhost keeps getting its confirms. Runs the real binary.

use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Connection};
use serde_json::json;
use std::time::{Duration, Instant};
use warren_tests::http::Api;
use warren_tests::process::WarrenProcess;

/// How long the declaring tenant works.
const DECLARING: Duration = Duration::from_secs(4);
/// Its clients declaring at once.
const DECLARERS: usize = 4;
/// Exchanges it holds before it starts, each with an argument of [`BIG_ARGUMENT_BYTES`]: what
/// makes each rewrite of its definitions long (megabytes).
const BIG_EXCHANGES: usize = 16;
/// As large as one frame carries.
const BIG_ARGUMENT_BYTES: usize = 100 * 1024;
/// Confirms the other tenant gets at least meanwhile, one at a time: a handful before, each
/// waiting out rewrite after rewrite on the async threads (645 ms the longest); thousands now,
/// 20 ms the longest as a rule. (A confirm can still wait for the disk: its fsync may have to
/// write the other tenant's megabytes first, as the file system orders them.)
const FEWEST_CONFIRMS: usize = 100;

async fn connect(broker: &WarrenProcess, vhost: &str) -> Connection {
    let uri = format!("amqp://guest:guest@{}/{vhost}", broker.amqp_addr);
    Connection::connect(&uri, Default::default()).await.expect("connect")
}

/// Makes the declaring vhost's definitions large: durable exchanges with big arguments.
async fn fill_definitions(broker: &WarrenProcess) {
    let connection = connect(broker, "declaring").await;
    let channel = connection.create_channel().await.expect("channel");
    let durable = ExchangeDeclareOptions { durable: true, ..Default::default() };
    let mut arguments = FieldTable::default();
    arguments.insert("padding".into(), AMQPValue::LongString("p".repeat(BIG_ARGUMENT_BYTES).into()));
    for i in 0..BIG_EXCHANGES {
        let name = format!("big{i}");
        let kind = lapin::ExchangeKind::Direct;
        channel.exchange_declare(name.as_str().into(), kind, durable, arguments.clone()).await.expect("declare");
    }
}

/// Declares and binds durable queues named `prefix...` until `until`; how many.
async fn declare_until(broker: &WarrenProcess, prefix: usize, until: Instant) -> usize {
    let connection = connect(broker, "declaring").await;
    let channel = connection.create_channel().await.expect("channel");
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    let mut declared = 0;
    while Instant::now() < until {
        let name = format!("q{prefix}-{declared}");
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
    let everything = json!({"configure": ".*", "write": ".*", "read": ".*"});
    for vhost in ["declaring", "publishing"] {
        assert!(api.put(&format!("/api/vhosts/{vhost}"), json!({})).status < 300);
        assert!(api.put(&format!("/api/permissions/{vhost}/guest"), everything.clone()).status < 300);
    }
    fill_definitions(&broker).await;
    let until = Instant::now() + DECLARING;
    let declarers = (0..DECLARERS).map(|i| declare_until(&broker, i, until));
    let (declared, (longest, confirmed)) =
        tokio::join!(futures_util::future::join_all(declarers), publish_meanwhile(&broker, until));
    let declared: usize = declared.into_iter().sum();
    eprintln!(
        "while {declared} durable queues were declared and bound in one vhost, the other's {confirmed} confirms took {longest:?} at most"
    );
    assert!(confirmed >= FEWEST_CONFIRMS, "only {confirmed} confirms while the other tenant declared");
}
