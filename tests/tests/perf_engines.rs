//! warren-perf against an in-process broker: short loads through the raw engine (the default)
//! must end with counts that add up, on classic queues (acks one by one or multiple, auto-ack,
//! confirms, bodies split over several frames, pacing) and on a stream read from `first` after
//! a backlog; and the lapin engine must report in the same format.

use serde_json::Value;
use std::process::Command;
use warren_tests::TestBroker;
use warren_tests::{amqp_uri, start_broker};

/// Runs warren-perf with `arguments` (separated by spaces) against `broker`; returns its JSON
/// summary, failing the test if it exits with an error or lost messages.
async fn perf(broker: &TestBroker, arguments: &str) -> Value {
    let mut command = Command::new(env!("CARGO_BIN_EXE_warren-perf"));
    command.arg("--uri").arg(amqp_uri(broker)).args(["--json", "--interval", "0", "--grace-secs", "5"]);
    command.args(arguments.split_whitespace());
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("the warren-perf runner did not panic")
        .expect("warren-perf starts");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "warren-perf {arguments}: {}\n{stderr}", output.status);
    match serde_json::from_slice(&output.stdout) {
        Ok(summary) => summary,
        Err(error) => panic!("warren-perf {arguments}: no JSON summary ({error}): {stderr}"),
    }
}

fn number(summary: &Value, key: &str) -> u64 {
    summary[key].as_u64().unwrap_or_else(|| panic!("no {key} in {summary}"))
}

/// Asserts that `published` messages were published and `consumed` delivered, all expected.
fn assert_counts(summary: &Value, published: u64, consumed: u64) {
    assert_eq!(number(summary, "published"), published, "{summary}");
    assert_eq!(number(summary, "consumed"), consumed, "{summary}");
    assert_eq!(number(summary, "expected"), consumed, "{summary}");
    assert_eq!((number(summary, "lost"), number(summary, "extra")), (0, 0), "{summary}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_engine_counts_add_up_on_classic_queues() {
    let broker = start_broker().await;

    let simple = perf(&broker, "--queue-prefix raw-simple --count 20000 --size 100").await;
    assert_eq!(simple["engine"], "raw");
    assert_counts(&simple, 20_000, 20_000);

    // Two producers and consumers over two queues, confirms, multiple acks, and bodies of three
    // frames each (frame_max is 128 KiB).
    let big = "--queue-prefix raw-big --producers 2 --consumers 2 --queues 2 --size 300000 --count 101 \
               --confirm 10 --persistent --durable --prefetch 20 --multi-ack-every 5";
    let big = perf(&broker, big).await;
    assert_counts(&big, 101, 101);
    assert_eq!((number(&big, "confirmed"), number(&big, "nacked")), (101, 0));

    let fanout = "--queue-prefix raw-fanout --exchange-type fanout --queues 2 --consumers 2 --auto-ack --count 5000";
    assert_counts(&perf(&broker, fanout).await, 5000, 10_000);

    // Paced: 2000 msg/s for half a second publishes about a thousand, never much more.
    let paced = perf(&broker, "--queue-prefix raw-paced --rate 2000 --duration 0.5").await;
    let published = number(&paced, "published");
    assert!((1..=1100).contains(&published), "{paced}");
    assert_counts(&paced, published, published);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_engine_replays_a_stream_backlog_to_every_consumer() {
    let broker = start_broker().await;
    let arguments = "--queue-prefix raw-stream --queue-type stream --stream-offset first --backlog --count 20000 \
                     --size 100 --persistent --confirm 500 --consumers 2 --prefetch 1000 --multi-ack-every 100";
    let summary = perf(&broker, arguments).await;
    assert_eq!(summary["queue_type"], "stream");
    assert_eq!(number(&summary, "confirmed"), 20_000, "{summary}");
    // Each of the two consumers reads the whole stream.
    assert_counts(&summary, 20_000, 40_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_engines_report_the_same_way() {
    let broker = start_broker().await;
    let mut summaries = Vec::new();
    for engine in ["raw", "lapin"] {
        let arguments = format!(
            "--engine {engine} --queue-prefix engines-{engine} --count 3000 --confirm 100 --multi-ack-every 10"
        );
        let summary = perf(&broker, &arguments).await;
        assert_eq!(summary["engine"], engine);
        assert_counts(&summary, 3000, 3000);
        summaries.push(summary);
    }
    let keys = |summary: &Value| summary.as_object().map(|fields| fields.keys().cloned().collect::<Vec<_>>());
    assert_eq!(keys(&summaries[0]), keys(&summaries[1]));
}
