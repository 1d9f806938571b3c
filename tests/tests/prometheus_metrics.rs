//! The Prometheus endpoints against RabbitMQ's: every family of RabbitMQ 3.10.8's `/metrics`
//! (`tests/fixtures/rabbitmq-3.10.8-metric-families.txt`) is served or said not to be, with
//! why; `/metrics/per-object` labels queues, channels and connections as RabbitMQ does;
//! `/metrics/detailed` serves the groups and vhosts asked for; the Raft families count a
//! quorum queue's entries and the catalog's.

use lapin::options::*;
use lapin::types::FieldTable;
use lapin::BasicProperties;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use warren_tests::*;

const FIXTURE: &str = include_str!("../fixtures/rabbitmq-3.10.8-metric-families.txt");

/// The families a scrape declares (its `# TYPE` lines).
fn families(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// The value of the sample whose line starts with `series` (a name, with its labels if any).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn scrape(broker: &TestBroker, path: &str) -> String {
    let http = broker.http_addr.expect("management API");
    tokio::task::block_in_place(|| {
        ureq::get(&format!("http://{http}{path}")).call().expect("scrape").into_string().expect("text")
    })
}

/// Why a family of RabbitMQ's is not served, if Warren says it is not.
fn not_served_because(family: &str) -> Option<&'static str> {
    warren_webui::METRICS_NOT_SERVED.iter().find_map(|(name, why)| {
        let matches = match name.strip_suffix('*') {
            Some(prefix) => family.starts_with(prefix),
            None => family == *name,
        };
        matches.then_some(*why)
    })
}

/// Traffic that moves every family: a classic and a quorum queue, a consumer that acks,
/// a `basic.get` on an empty queue, a dead letter, an unroutable publish.
async fn traffic(broker: &TestBroker) -> (lapin::Connection, lapin::Consumer) {
    let conn = connect(broker).await;
    let ch = confirm_channel(&conn).await;
    let quorum = table(&[("x-queue-type", text("quorum"))]);
    ch.queue_declare("metered.quorum".into(), durable(), quorum).await.expect("declare quorum");
    let dead = table(&[("x-dead-letter-exchange", text("")), ("x-dead-letter-routing-key", text("metered.dead"))]);
    ch.queue_declare("metered.dead".into(), durable(), FieldTable::default()).await.expect("declare");
    ch.queue_declare("metered.classic".into(), durable(), dead).await.expect("declare");
    for queue in ["metered.quorum", "metered.classic", "nowhere"] {
        for _ in 0..3 {
            let confirm = ch
                .basic_publish("".into(), queue.into(), Default::default(), b"m", BasicProperties::default())
                .await
                .expect("publish");
            assert!(confirm.await.expect("confirm").is_ack());
        }
    }
    let got = ch.basic_get("metered.classic".into(), BasicGetOptions::default()).await.expect("get");
    let rejected = got.expect("a message");
    rejected.delivery.reject(BasicRejectOptions { requeue: false }).await.expect("reject: dead-lettered");
    ch.queue_declare("metered.empty".into(), durable(), FieldTable::default()).await.expect("declare");
    assert!(ch.basic_get("metered.empty".into(), BasicGetOptions::default()).await.expect("get").is_none());
    ch.basic_qos(10, BasicQosOptions::default()).await.expect("qos");
    let mut consumer = ch
        .basic_consume("metered.quorum".into(), "tag".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .expect("consume");
    for _ in 0..3 {
        let delivery = next_delivery(&mut consumer).await;
        delivery.ack(BasicAckOptions::default()).await.expect("ack");
    }
    (conn, consumer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_family_of_rabbitmqs_metrics_is_served_or_said_not_to_be() {
    let broker = start_broker().await;
    let _traffic = traffic(&broker).await;
    let served = families(&scrape(&broker, "/metrics"));
    let rabbitmq: Vec<&str> = FIXTURE.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
    assert!(rabbitmq.len() > 190, "the fixture lists RabbitMQ's families: {}", rabbitmq.len());
    // The Erlang VM's and Mnesia's families (erlang_*) and the VM's figures under rabbitmq_
    // names have no counterpart in a broker that is not an Erlang node.
    let beyond_the_vm: Vec<&str> = rabbitmq
        .iter()
        .copied()
        .filter(|f| !f.starts_with("erlang_") && !warren_webui::METRICS_ERLANG_ONLY.contains(f))
        .collect();
    let mut unexplained = Vec::new();
    let mut contradicted = Vec::new();
    let mut covered = 0;
    for family in &beyond_the_vm {
        match (served.contains(*family), not_served_because(family)) {
            (true, None) => covered += 1,
            (true, Some(_)) => contradicted.push(*family),
            (false, Some(_)) => {}
            (false, None) => unexplained.push(*family),
        }
    }
    assert!(unexplained.is_empty(), "neither served nor said why not: {unexplained:?}");
    assert!(contradicted.is_empty(), "served, yet listed as not served: {contradicted:?}");
    println!(
        "RabbitMQ 3.10.8's families beyond the Erlang VM: {} of {} served ({:.0}%)",
        covered,
        beyond_the_vm.len(),
        100.0 * covered as f64 / beyond_the_vm.len() as f64
    );
    // Served by both RabbitMQ's official dashboards.
    for family in [
        "rabbitmq_identity_info",
        "rabbitmq_build_info",
        "rabbitmq_raft_term_total",
        "rabbitmq_raft_log_commit_index",
        "rabbitmq_raft_entry_commit_latency_seconds",
        "rabbitmq_global_messages_delivered_consume_manual_ack_total",
        "rabbitmq_process_open_tcp_sockets",
    ] {
        assert!(served.contains(family), "{family} is served");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn figures_count_what_the_traffic_did() {
    let broker = start_broker().await;
    let _traffic = traffic(&broker).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    let per_object = loop {
        let text = scrape(&broker, "/metrics/per-object");
        let acked = sample(&text, r#"rabbitmq_queue_messages_unacked{vhost="/",queue="metered.quorum"}"#);
        if acked == Some(0.0) {
            break text;
        }
        assert!(Instant::now() < deadline, "the acks are settled: {acked:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Per queue, with RabbitMQ's names and labels.
    let classic = r#"{vhost="/",queue="metered.classic"}"#;
    assert_eq!(sample(&per_object, &format!("rabbitmq_queue_messages_ready{classic}")), Some(2.0));
    assert_eq!(sample(&per_object, &format!("rabbitmq_queue_messages_published_total{classic}")), Some(3.0));
    let dead = r#"{vhost="/",queue="metered.dead"}"#;
    assert_eq!(sample(&per_object, &format!("rabbitmq_queue_messages{dead}")), Some(1.0), "the dead letter");
    let quorum = r#"{vhost="/",queue="metered.quorum"}"#;
    assert_eq!(sample(&per_object, &format!("rabbitmq_queue_consumers{quorum}")), Some(1.0));
    // The quorum queue's Raft member: its entries are committed and applied.
    let commit = sample(&per_object, &format!("rabbitmq_raft_log_commit_index{quorum}")).expect("commit index");
    let written = sample(&per_object, &format!("rabbitmq_raft_log_last_written_index{quorum}")).expect("written");
    assert!(commit >= 3.0 && written >= commit, "commit {commit}, written {written}");
    assert!(sample(&per_object, &format!("rabbitmq_raft_term_total{quorum}")) >= Some(1.0));
    assert!(sample(&per_object, &format!("rabbitmq_raft_entry_commit_latency_seconds{quorum}")) > Some(0.0));
    let metadata = r#"{vhost="",queue="metadata"}"#;
    assert!(sample(&per_object, &format!("rabbitmq_raft_log_commit_index{metadata}")) >= Some(4.0), "the declares");
    // Per channel and connection: the consumer's channel took 3 deliveries and acked them.
    let channel_line = per_object
        .lines()
        .find(|l| l.starts_with("rabbitmq_channel_messages_acked_total{") && l.ends_with(" 3"))
        .expect("the consumer's channel acked 3");
    let channel = channel_line.split_once('{').and_then(|(_, rest)| rest.split_once('}')).map(|(labels, _)| labels);
    let channel = channel.expect("labels");
    assert!(channel.starts_with("channel=\""), "{channel}");
    let of_channel = |name: &str| sample(&per_object, &format!("{name}{{{channel}}}"));
    assert_eq!(of_channel("rabbitmq_channel_messages_delivered_ack_total"), Some(3.0));
    assert_eq!(of_channel("rabbitmq_channel_get_empty_total"), Some(1.0));
    assert_eq!(of_channel("rabbitmq_channel_consumers"), Some(1.0));
    assert_eq!(of_channel("rabbitmq_consumer_prefetch"), Some(10.0));
    let connection =
        per_object.lines().find(|l| l.starts_with("rabbitmq_connection_incoming_bytes_total{connection=\""));
    assert!(connection.is_some_and(|l| !l.ends_with(" 0")), "{connection:?}");
    // The node's counters, by protocol and queue type (other tests of this process count too).
    let aggregated = scrape(&broker, "/metrics");
    let by_type = |name: &str, queue_type: &str| {
        sample(&aggregated, &format!(r#"{name}{{protocol="amqp091",queue_type="{queue_type}"}}"#))
    };
    assert!(by_type("rabbitmq_global_messages_delivered_consume_manual_ack_total", "rabbit_quorum_queue") >= Some(3.0));
    assert!(by_type("rabbitmq_global_messages_acknowledged_total", "rabbit_quorum_queue") >= Some(3.0));
    assert!(by_type("rabbitmq_global_messages_delivered_get_manual_ack_total", "rabbit_classic_queue") >= Some(1.0));
    assert!(by_type("rabbitmq_global_messages_get_empty_total", "rabbit_classic_queue") >= Some(1.0));
    let rejected = r#"rabbitmq_global_messages_dead_lettered_rejected_total{queue_type="rabbit_classic_queue",dead_letter_strategy="at_most_once"}"#;
    assert!(sample(&aggregated, rejected) >= Some(1.0), "the rejected message");
    assert!(sample(&aggregated, r#"rabbitmq_global_messages_received_confirm_total{protocol="amqp091"}"#) >= Some(9.0));
    assert!(sample(&aggregated, r#"rabbitmq_global_publishers{protocol="amqp091"}"#) >= Some(1.0));
    assert!(sample(&aggregated, r#"rabbitmq_global_consumers{protocol="amqp091"}"#) >= Some(1.0));
    assert!(sample(&aggregated, "rabbitmq_erlang_uptime_seconds") > Some(0.0));
    assert!(sample(&aggregated, "rabbitmq_io_sync_ops_total") > Some(0.0), "durable publishes sync");
    assert!(!aggregated.contains("queue=\"metered.classic\""), "no series per queue in /metrics");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_detailed_endpoint_serves_the_groups_and_vhosts_asked_for() {
    let broker = start_broker().await;
    let _traffic = traffic(&broker).await;
    let api = warren_tests::http::Api::new(broker.http_addr.expect("management API"));
    assert!(api.put("/api/vhosts/other", serde_json::json!({})).status < 300);
    let path = "/metrics/detailed?family=queue_coarse_metrics&family=ra_metrics&family=exchange_names&vhost=%2F";
    let text = scrape(&broker, path);
    let declared = families(&text);
    assert!(declared.contains("rabbitmq_detailed_queue_messages_ready"), "{declared:?}");
    assert!(declared.contains("rabbitmq_detailed_raft_log_commit_index"), "{declared:?}");
    assert!(declared.contains("rabbitmq_cluster_exchange_name"), "{declared:?}");
    assert!(declared.contains("rabbitmq_identity_info"), "the identity comes with every answer");
    assert!(!declared.contains("rabbitmq_detailed_queue_consumers"), "queue_metrics was not asked for");
    assert!(!declared.contains("rabbitmq_queues"), "no totals");
    let ready = r#"rabbitmq_detailed_queue_messages_ready{vhost="/",queue="metered.classic"}"#;
    assert_eq!(sample(&text, ready), Some(2.0), "{text}");
    assert!(!text.contains(r#"vhost="other""#), "only the vhost asked for");
    let nothing = families(&scrape(&broker, "/metrics/detailed"));
    assert_eq!(nothing, BTreeSet::from(["rabbitmq_build_info".into(), "rabbitmq_identity_info".into()]));
}
