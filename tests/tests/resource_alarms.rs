//! Memory and disk alarms: a watermark below what the broker uses blocks publishing
//! connections (`connection.blocked`, then nothing more read from them) while consumers keep
//! draining; raising it at run time unblocks them, and nothing is lost.

use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::BasicProperties;
use serde_json::json;
use std::time::Duration;
use warren_server::{MemoryWatermark, ResourceLimits};
use warren_tests::http::Api;
use warren_tests::{confirm_channel, connect, next_delivery, start_broker_with};

/// Runs `warren ctl` against `broker`: (succeeded, stdout, stderr).
fn ctl(broker: &warren_tests::TestBroker, args: &[&str]) -> (bool, String, String) {
    let url = format!("http://{}", broker.http_addr.expect("management API"));
    warren_tests::process::run_ctl(&url, args)
}

/// Publishes `m{n}` to queue `flood`; the confirm to wait for.
async fn publish_to_flood(channel: lapin::Channel, n: u32) -> lapin::PublisherConfirm {
    let body = format!("m{n}");
    let options = BasicPublishOptions::default();
    match channel.basic_publish("".into(), "flood".into(), options, body.as_bytes(), BasicProperties::default()).await {
        Ok(confirm) => confirm,
        Err(error) => panic!("publish {n}: {error}"),
    }
}

/// Polls `check` every 100 ms for up to `secs` seconds.
async fn eventually(secs: u64, what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..secs * 10 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("not within {secs} s: {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_alarm_blocks_publishers_until_it_clears_and_loses_nothing() {
    // One byte of memory: the alarm is set at the first check.
    let broker = start_broker_with(|config| {
        config.resource_limits =
            ResourceLimits { memory_high_watermark: MemoryWatermark::Bytes(1), ..ResourceLimits::default() };
    })
    .await;
    let api = Api::new(broker.http_addr.expect("management API"));
    let publisher = connect(&broker).await;
    let consumer = connect(&broker).await;
    let publishing = confirm_channel(&publisher).await;
    publishing
        .queue_declare("flood".into(), QueueDeclareOptions::default(), FieldTable::default())
        .await
        .expect("declare");
    let publish = |n: u32| publish_to_flood(publishing.clone(), n);
    eventually(5, "the memory alarm", || api.get("/api/health/checks/alarms").status == 503).await;
    let alarms = api.get("/api/health/checks/local-alarms").body;
    assert_eq!(alarms["alarms"][0]["resource"], "memory", "{alarms}");

    // The first publish is read (the connection had not published yet); it blocks the
    // connection, and lapin hears connection.blocked.
    let first = publish(1).await;
    eventually(5, "connection.blocked", || publisher.status().blocked()).await;
    // lapin itself may hold a publish while it is blocked: publish and confirm in a task.
    let second = tokio::spawn({
        let publish = publish(2);
        async move { publish.await.await.map(|confirm| confirm.is_ack()) }
    });
    let metrics = api.get_text("/metrics");
    assert!(metrics.lines().any(|l| l == "rabbitmq_alarms_memory_used_watermark 1"), "{metrics}");

    // A connection that only consumes is not blocked: it drains and acks.
    let draining = consumer.create_channel().await.expect("channel");
    let mut deliveries = draining
        .basic_consume("flood".into(), "drain".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .expect("consume");
    let delivery = next_delivery(&mut deliveries).await;
    assert_eq!(&delivery.data[..], b"m1");
    delivery.ack(BasicAckOptions::default()).await.expect("ack");
    assert!(first.await.expect("confirm").is_ack());
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(!second.is_finished(), "a blocked connection's publish was confirmed");

    // Raised at run time, as `warren ctl set_vm_memory_high_watermark 0.9`: unblocked, and the
    // held publish goes through.
    let (raised, _, err) = ctl(&broker, &["set_vm_memory_high_watermark", "0.9"]);
    assert!(raised, "warren ctl set_vm_memory_high_watermark: {err}");
    eventually(5, "connection.unblocked", || !publisher.status().blocked()).await;
    let second = tokio::time::timeout(Duration::from_secs(5), second).await;
    assert!(matches!(second, Ok(Ok(Ok(true)))), "the held publish is confirmed: {second:?}");
    let third = publish(3).await;
    assert!(third.await.expect("confirm").is_ack());
    for expected in [b"m2", b"m3"] {
        let delivery = next_delivery(&mut deliveries).await;
        assert_eq!(&delivery.data[..], expected);
        delivery.ack(BasicAckOptions::default()).await.expect("ack");
    }
    assert_eq!(api.get("/api/health/checks/alarms").status, 200);
    assert_eq!(api.put("/api/resource-limits", json!({"vm_memory_high_watermark": "lots"})).status, 400);
    let (refused, _, err) = ctl(&broker, &["set_disk_free_limit", "plenty"]);
    assert!(!refused && err.contains("400") && err.contains("not a size"), "{err}");
    assert!(ctl(&broker, &["set_disk_free_limit", "1GB"]).0);
    assert_eq!(api.get("/api/resource-limits").body["disk_free_limit"], 1_000_000_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_alarm_is_reported_with_its_limit() {
    // More free space asked for than any disk has.
    let broker = start_broker_with(|config| {
        config.resource_limits = ResourceLimits { disk_free_limit_bytes: u64::MAX, ..ResourceLimits::default() };
    })
    .await;
    let api = Api::new(broker.http_addr.expect("management API"));
    eventually(5, "the disk alarm", || api.get("/api/health/checks/alarms").status == 503).await;
    let node = &api.get("/api/nodes").body[0];
    assert_eq!((node["disk_free_alarm"].as_bool(), node["mem_alarm"].as_bool()), (Some(true), Some(false)), "{node}");
    assert!(node["disk_free"].as_u64().is_some_and(|free| free > 0), "{node}");
    let metrics = api.get_text("/metrics");
    assert!(metrics.lines().any(|l| l == "rabbitmq_alarms_free_disk_space_watermark 1"), "{metrics}");
}
