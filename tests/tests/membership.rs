//! A cluster's nodes and a quorum queue's members change while it runs: `grow` and `shrink`,
//! `forget_cluster_node` of a stopped node, and `join_cluster` of a new one (three, then four
//! real `warren` processes on 127.0.0.1).

use lapin::options::*;
use lapin::types::FieldTable;
use std::time::{Duration, Instant};
use warren_tests::cluster::*;
use warren_tests::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grow_and_shrink_move_every_quorum_queue() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = start_cluster(dir.path(), false).await;
    let a = cluster.connect(0).await;
    let ch = confirm_channel(&a).await;
    let single = table(&[
        ("x-queue-type", text("quorum")),
        ("x-quorum-initial-group-size", lapin::types::AMQPValue::LongInt(1)),
    ]);
    for queue in ["g1", "g2"] {
        ch.queue_declare(queue.into(), durable(), single.clone()).await.expect("declare");
        assert_eq!(publish_within(&ch, queue, queue.as_bytes(), Duration::from_secs(5)).await, Some(true));
    }
    tokio::task::block_in_place(|| ctl(&cluster, 0, &["grow", "warren@b", "all"]));
    for queue in ["g1", "g2"] {
        wait_for_status(&cluster, 0, queue, "grown", |s| s.contains("member: warren@b")).await;
    }
    tokio::task::block_in_place(|| ctl(&cluster, 0, &["shrink", "warren@a"]));
    for queue in ["g1", "g2"] {
        wait_for_status(&cluster, 1, queue, "shrunk", |s| {
            s.contains("leader: warren@b") && !s.contains("member: warren@a")
        })
        .await;
        let got = cluster.connect(1).await.create_channel().await.expect("channel");
        let message = got.basic_get(queue.into(), BasicGetOptions { no_ack: true }).await.expect("get");
        assert_eq!(message.map(|m| m.delivery.data), Some(queue.as_bytes().to_vec()), "{queue} moved whole");
    }
    let status = tokio::task::block_in_place(|| ctl(&cluster, 1, &["cluster_status"]));
    assert!(NAMES.iter().all(|name| status.contains(&format!("{name} running"))), "{status}");
    every_node_shows_its_figures(&cluster);
}

/// `/api/nodes` on one node shows every node's own figures: each node is asked for its memory,
/// descriptors, uptime and listeners (its own AMQP port among them).
fn every_node_shows_its_figures(cluster: &Cluster) {
    let http = cluster.nodes[1].as_ref().and_then(|node| node.http_addr).expect("B's management API");
    let nodes = warren_tests::http::Api::new(http).get("/api/nodes");
    assert_eq!(nodes.status, 200, "{:?}", nodes.body);
    for (index, name) in NAMES.iter().enumerate() {
        let node = nodes.body.as_array().into_iter().flatten().find(|n| n["name"] == *name).expect("listed");
        assert!(node["figures_error"].is_null(), "{name}: {node}");
        for figure in ["mem_used", "mem_limit", "disk_free", "fd_used", "fd_total", "uptime"] {
            assert!(node[figure].as_u64().is_some_and(|value| value > 0), "{name} {figure}: {node}");
        }
        let amqp_port = cluster.nodes[index].as_ref().map(|n| n.amqp_addr.port()).expect("running");
        let listeners = node["listeners"].as_array().cloned().unwrap_or_default();
        let amqp = listeners.iter().find(|l| l["protocol"] == "amqp").expect("an AMQP listener");
        assert_eq!(amqp["port"], amqp_port, "{name}'s own listener: {node}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_node_is_forgotten() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cluster = start_cluster(dir.path(), false).await;
    let a = cluster.connect(0).await;
    declare_when_formed(&a.create_channel().await.expect("channel"), "kept").await;
    wait_for_status(&cluster, 0, "kept", "three members", |s| s.contains("member: warren@c")).await;
    let stream = table(&[("x-queue-type", text("stream"))]);
    a.create_channel().await.expect("channel").queue_declare("log".into(), durable(), stream).await.expect("stream");
    let stream_status = |cluster: &Cluster| tokio::task::block_in_place(|| ctl(cluster, 0, &["stream_status", "log"]));
    // The stream's group starts on its members just after the declare is answered.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !stream_status(&cluster).contains("warren@c") {
        assert!(Instant::now() < deadline, "C holds a replica: {}", stream_status(&cluster));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let refused = tokio::task::block_in_place(|| try_ctl(&cluster, 0, &["forget_cluster_node", "warren@c"]));
    assert!(refused.is_err_and(|e| e.contains("running")), "a running node is not forgotten");
    if let Some(node) = cluster.nodes[2].take() {
        node.kill9();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !tokio::task::block_in_place(|| ctl(&cluster, 0, &["cluster_status"])).contains("warren@c down") {
        assert!(Instant::now() < deadline, "C is seen down");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::task::block_in_place(|| ctl(&cluster, 0, &["forget_cluster_node", "warren@c"]));

    wait_for_status(&cluster, 0, "kept", "C's replica removed", |s| !s.contains("member: warren@c")).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while stream_status(&cluster).contains("warren@c") {
        assert!(Instant::now() < deadline, "C's stream replica removed: {}", stream_status(&cluster));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for node in [0, 1] {
        let status = tokio::task::block_in_place(|| ctl(&cluster, node, &["cluster_status"]));
        assert!(!status.contains("warren@c"), "C is no longer a node of the cluster: {status}");
    }
    // A new quorum queue's default group is the nodes left; both take publishes.
    let b = cluster.connect(1).await;
    let ch = confirm_channel(&b).await;
    ch.queue_declare("new".into(), durable(), quorum()).await.expect("declare");
    wait_for_status(&cluster, 1, "new", "two members, A and B", |s| {
        s.contains("member: warren@a") && s.contains("member: warren@b") && !s.contains("warren@c")
    })
    .await;
    for queue in ["kept", "new", "log"] {
        assert_eq!(publish_within(&ch, queue, b"after", Duration::from_secs(5)).await, Some(true), "{queue}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_node_joins_a_formed_cluster() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cluster = start_cluster(dir.path(), false).await;
    let a = cluster.connect(0).await;
    declare_when_formed(&a.create_channel().await.expect("channel"), "q").await;
    let on_a = confirm_channel(&a).await;
    on_a.queue_declare("classic".into(), durable(), FieldTable::default()).await.expect("classic queue on A");
    for i in 0..100u32 {
        assert_eq!(publish_within(&on_a, "q", &i.to_be_bytes(), Duration::from_secs(5)).await, Some(true));
    }
    assert_eq!(publish_within(&on_a, "classic", b"on A", Duration::from_secs(5)).await, Some(true));

    // D runs on its own; with a queue of its own it may not join (joining would replace it).
    let d = cluster.start_lone(dir.path(), "warren@d");
    let through_b = cluster.cluster_address(1);
    let d_conn = cluster.connect(d).await;
    let d_ch = d_conn.create_channel().await.expect("channel");
    d_ch.queue_declare("mine".into(), durable(), FieldTable::default()).await.expect("D's own queue");
    let refused = tokio::task::block_in_place(|| try_ctl(&cluster, d, &["join_cluster", &through_b]));
    assert!(refused.as_ref().is_err_and(|e| e.contains("1 queue(s)")), "a node with a queue is refused: {refused:?}");
    d_ch.queue_delete("mine".into(), QueueDeleteOptions::default()).await.expect("delete");
    let joined = tokio::task::block_in_place(|| try_ctl(&cluster, d, &["join_cluster", &through_b]));
    assert!(joined.is_ok(), "D joins through B: {joined:?}");
    let d_address = cluster.cluster_address(d);
    let refused = tokio::task::block_in_place(|| try_ctl(&cluster, 0, &["join_cluster", &d_address]));
    assert!(refused.as_ref().is_err_and(|e| e.contains("in a cluster with")), "A is in a cluster: {refused:?}");

    // Every node counts four, all running.
    for node in [0, 1, 2, d] {
        wait_for_cluster_status(&cluster, node, |s| {
            ["a", "b", "c", "d"].iter().all(|n| s.contains(&format!("warren@{n} running")))
        })
        .await;
    }
    // D knows the definitions and reaches the queues of the others.
    let d_conn = cluster.connect(d).await;
    assert_eq!(passive_count(&d_conn, "q").await, Some(100), "the quorum queue, from D");
    let got = d_conn.create_channel().await.expect("channel");
    let message = got.basic_get("classic".into(), BasicGetOptions { no_ack: true }).await.expect("get");
    assert_eq!(message.map(|m| m.delivery.data), Some(b"on A".to_vec()), "A's classic queue, from D");

    // D takes a replica of the quorum queue, and keeps its place in the cluster across a
    // restart; with A gone, D serves every message.
    tokio::task::block_in_place(|| ctl(&cluster, 0, &["add_member", "q", "warren@d"]));
    wait_for_status(&cluster, d, "q", "D is a member", |s| s.contains("member: warren@d")).await;
    cluster.nodes[d].take().expect("running").kill9();
    cluster.restart(d);
    wait_for_cluster_status(&cluster, d, |s| s.contains("warren@a running") && s.contains("warren@d running")).await;
    cluster.nodes[0].take().expect("running").kill9();
    let d_conn = cluster.connect(d).await;
    let on_d = d_conn.create_channel().await.expect("channel");
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.len() < 100 {
        assert!(Instant::now() < deadline, "got {} of 100 from D", got.len());
        match on_d.basic_get("q".into(), BasicGetOptions { no_ack: true }).await {
            Ok(Some(message)) => {
                got.push(u32::from_be_bytes(message.delivery.data.as_slice().try_into().expect("4 bytes")))
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    assert_eq!(got, (0..100).collect::<Vec<u32>>(), "every message, in order");
}

/// Polls `warren ctl cluster_status` on `node` until `done` holds of its output.
async fn wait_for_cluster_status(cluster: &Cluster, node: usize, done: impl Fn(&str) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = tokio::task::block_in_place(|| try_ctl(cluster, node, &["cluster_status"])).unwrap_or_default();
        if done(&status) {
            return;
        }
        if Instant::now() > deadline {
            dump_warnings(cluster);
            panic!("node {node}'s cluster status: {status}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
