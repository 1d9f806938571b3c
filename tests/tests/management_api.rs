//! The management HTTP API through a real HTTP client, against a broker on free ports: every
//! endpoint, its error statuses, and a definitions export imported into a fresh broker.

use futures_util::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::BasicProperties;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use warren_tests::http::Api;
use warren_tests::*;

fn api_of(broker: &warren_tests::TestBroker) -> Api {
    Api::new(broker.http_addr.expect("the management API runs"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_valid_credentials_is_401_with_rabbitmqs_error_body() {
    let broker = start_broker().await;
    let api = api_of(&broker);
    for anonymous in [api.as_user(None), api.as_user(Some(("guest", "wrong"))), api.as_user(Some(("nobody", "x")))] {
        let answer = anonymous.get("/api/overview");
        assert_eq!(answer.status, 401);
        assert_eq!(answer.body["error"], "not_authorised", "{:?}", answer.body);
    }
    let whoami = api.get("/api/whoami");
    assert_eq!(whoami.body, json!({"name": "guest", "tags": ["administrator"]}));
}

/// Bodies are read as RabbitMQ reads them: JSON whatever the `Content-Type` (curl scripts send
/// none, or a form's), and one that is not JSON, or not what the route takes, is RabbitMQ's 400
/// `{"error":"bad_request","reason":...}`, not a 415 or a 422 in plain text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_bodies_are_json_whatever_the_content_type_and_bad_ones_are_400_with_a_reason() {
    let broker = start_broker().await;
    let http = broker.http_addr.expect("management API");
    let put = |path: &str, content_type: &str, body: &str| -> (u16, String) {
        tokio::task::block_in_place(|| {
            let request = ureq::put(&format!("http://{http}{path}"))
                .set("authorization", "Basic Z3Vlc3Q6Z3Vlc3Q=")
                .set("content-type", content_type);
            match request.send_string(body) {
                Ok(response) => (response.status(), response.into_string().unwrap_or_default()),
                Err(ureq::Error::Status(status, response)) => (status, response.into_string().unwrap_or_default()),
                Err(error) => panic!("PUT {path}: {error}"),
            }
        })
    };
    let form = "application/x-www-form-urlencoded";
    assert_eq!(put("/api/queues/%2F/plain", form, r#"{"durable": true}"#).0, 201, "declared whatever the type");
    for body in ["{", r#"{"durable": "maybe"}"#, "[1]"] {
        let (status, text) = put("/api/queues/%2F/bad", "application/json", body);
        assert_eq!(status, 400, "{body}: {text}");
        let answer: serde_json::Value = serde_json::from_str(&text).expect("a JSON answer");
        assert_eq!(answer["error"], "bad_request", "{text}");
        assert!(answer["reason"].as_str().is_some_and(|r| r.contains("line 1")), "says where: {text}");
    }
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_vhosts_users_permissions_and_health_checks() {
    let broker = start_broker().await;
    let api = api_of(&broker);
    let overview = api.get("/api/overview").body;
    assert_eq!(overview["product_name"], "Warren");
    assert_eq!(overview["object_totals"]["queues"], 0);
    let amqp_port = broker.amqp_addr.port();
    let listeners = overview["listeners"].as_array().expect("listeners");
    assert!(listeners.iter().any(|l| l["protocol"] == "amqp" && l["port"] == amqp_port), "{listeners:?}");
    assert_eq!(api.get("/api/vhosts").body[0]["name"], "/");
    assert_eq!(api.get("/api/vhosts/%2F").body["name"], "/");
    assert_eq!(api.get("/api/vhosts/nowhere").status, 404);
    let users = api.get("/api/users").body;
    assert_eq!(users[0]["name"], "guest");
    assert_eq!(users[0]["hashing_algorithm"], "rabbit_password_hashing_sha256");
    assert_eq!(api.get("/api/users/nobody").status, 404);
    assert_eq!(api.get("/api/permissions").body[0]["configure"], ".*");
    assert_eq!(api.get("/api/nodes").body[0]["running"], true);

    assert_eq!(api.get("/api/health/checks/alarms").body["status"], "ok");
    assert_eq!(api.get("/api/health/checks/local-alarms").body["status"], "ok");
    assert_eq!(api.get(&format!("/api/health/checks/port-listener/{amqp_port}")).status, 200);
    let missing = api.get("/api/health/checks/port-listener/1");
    assert_eq!((missing.status, missing.body["status"].as_str()), (503, Some("failed")));
    assert_eq!(api.get("/api/aliveness-test/%2F").body["status"], "ok");
    assert_eq!(api.get("/api/aliveness-test/nowhere").status, 404);
    assert_eq!(api.get("/api/health/checks/protocol-listener/amqp").status, 200);
    assert_eq!(api.get("/api/health/checks/protocol-listener/amqp091").status, 200, "RabbitMQ's other name");
    assert_eq!(api.get("/api/health/checks/protocol-listener/stream").status, 200, "the Stream protocol");
    let mqtt = api.get("/api/health/checks/protocol-listener/mqtt");
    assert_eq!((mqtt.status, mqtt.body["missing"].as_str()), (503, Some("mqtt")));
    assert_eq!(api.get("/api/health/checks/virtual-hosts").body["status"], "ok");
    assert_eq!(api.get("/api/health/checks/node-is-quorum-critical").body["status"], "ok", "no quorum queue yet");
    // RabbitMQ's rule: a queue whose running members are no more than a bare majority is
    // critical, a one-member quorum queue on a node alone among them.
    let quorum = json!({"durable": true, "arguments": {"x-queue-type": "quorum"}});
    assert_eq!(api.put("/api/queues/%2F/alone", quorum).status, 201);
    // The queue's Raft member starts just after the declare's answer.
    let deadline = Instant::now() + Duration::from_secs(10);
    let critical = loop {
        let answer = api.get("/api/health/checks/node-is-quorum-critical");
        if answer.status == 503 || Instant::now() > deadline {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(critical.status, 503, "{:?}", critical.body);
    assert_eq!(critical.body["queues"], json!([{"name": "alone", "virtual_host": "/", "type": "quorum"}]));
    assert_eq!(critical.body["queues_not_shown"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchanges_queues_and_bindings_are_declared_listed_and_deleted() {
    let broker = start_broker().await;
    let api = api_of(&broker);
    assert_eq!(api.put("/api/exchanges/%2F/orders", json!({"type": "topic", "durable": true})).status, 201);
    assert_eq!(api.put("/api/exchanges/%2F/orders", json!({"type": "topic", "durable": true})).status, 204);
    assert_eq!(api.put("/api/exchanges/%2F/orders", json!({"type": "fanout"})).status, 400, "not equivalent");
    assert_eq!(api.put("/api/exchanges/%2F/odd", json!({"type": "nonsense"})).status, 400);
    assert_eq!(api.get("/api/exchanges/%2F/orders").body["type"], "topic");
    let names: Vec<Value> =
        api.get("/api/exchanges/%2F").body.as_array().expect("list").iter().map(|e| e["name"].clone()).collect();
    assert!(names.contains(&json!("")) && names.contains(&json!("amq.topic")) && names.contains(&json!("orders")));

    let arguments = json!({"x-max-length": 5, "x-queue-type": "classic"});
    assert_eq!(api.put("/api/queues/%2F/eu", json!({"durable": true, "arguments": arguments})).status, 201);
    assert_eq!(api.put("/api/queues/%2F/us", json!({"durable": true})).status, 201);
    assert_eq!(api.put("/api/queues/%2F/eu", json!({"durable": true, "arguments": {"x-max-length": 6}})).status, 400);
    let eu = api.get("/api/queues/%2F/eu").body;
    assert_eq!((eu["type"].as_str(), eu["arguments"]["x-max-length"].as_i64()), (Some("classic"), Some(5)));
    assert_eq!(api.get("/api/queues/%2F/nowhere").status, 404);

    let created = api.post("/api/bindings/%2F/e/orders/q/eu", json!({"routing_key": "eu.#"}));
    assert_eq!((created.status, created.location.as_deref()), (201, Some("eu.#")));
    assert_eq!(api.post("/api/bindings/%2F/e/orders/q/nowhere", json!({"routing_key": "x"})).status, 404);
    let of_eu = api.get("/api/queues/%2F/eu/bindings").body;
    assert_eq!(of_eu.as_array().map(Vec::len), Some(2), "the default exchange's and orders': {of_eu}");
    assert_eq!(api.get("/api/exchanges/%2F/orders/bindings/source").body[0]["destination"], "eu");
    assert_eq!(api.get("/api/bindings/%2F/e/orders/q/eu/eu.%23").body["routing_key"], "eu.#");

    // Published through the API to the topic exchange, the message lands in eu.
    let routed = api.post(
        "/api/exchanges/%2F/orders/publish",
        json!({"routing_key": "eu.de", "payload": "bestellung", "payload_encoding": "string", "properties": {}}),
    );
    assert_eq!(routed.body, json!({"routed": true}));
    let unroutable =
        api.post("/api/exchanges/%2F/orders/publish", json!({"routing_key": "asia", "payload": "x", "properties": {}}));
    assert_eq!(unroutable.body, json!({"routed": false}));
    let listed = api.get("/api/queues?sort=messages&sort_reverse=true&columns=name,messages").body;
    assert_eq!(listed[0], json!({"name": "eu", "messages": 1}), "sorted by depth, only those columns: {listed}");
    assert_eq!(api.delete("/api/queues/%2F/eu?if-empty=true").status, 400, "not empty");

    assert_eq!(api.delete("/api/bindings/%2F/e/orders/q/eu/eu.%23").status, 204);
    assert_eq!(api.get("/api/exchanges/%2F/orders/bindings/source").body, json!([]));
    assert_eq!(api.delete("/api/queues/%2F/eu/contents").status, 204);
    assert_eq!(api.get("/api/queues/%2F/eu").body["messages"], 0);
    assert_eq!(api.delete("/api/queues/%2F/eu?if-empty=true").status, 204);
    assert_eq!(api.delete("/api/exchanges/%2F/orders").status, 204);
    assert_eq!(api.get("/api/exchanges/%2F/orders").status, 404);
    assert_eq!(api.delete("/api/exchanges/%2F/amq.default").status, 400, "the default exchange stays");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_takes_messages_as_its_ackmode_says() {
    let broker = start_broker().await;
    let api = api_of(&broker);
    api.put("/api/queues/%2F/work", json!({"durable": false}));
    for n in 0..3 {
        let body = json!({"routing_key": "work", "payload": format!("job {n}"), "properties": {"priority": 1, "headers": {"n": n}}});
        api.post("/api/exchanges/%2F/amq.default/publish", body);
    }
    let peeked = api
        .post("/api/queues/%2F/work/get", json!({"count": 2, "ackmode": "ack_requeue_true", "encoding": "auto"}))
        .body;
    assert_eq!(peeked.as_array().map(Vec::len), Some(2));
    assert_eq!(peeked[0]["payload"], "job 0");
    assert_eq!(peeked[0]["properties"]["headers"]["n"], 0);
    assert_eq!(peeked[1]["message_count"], 1);
    assert_eq!(api.get("/api/queues/%2F/work").body["messages"], 3, "requeued, nothing taken");
    let taken = api
        .post("/api/queues/%2F/work/get", json!({"count": 10, "ackmode": "ack_requeue_false", "encoding": "base64"}))
        .body;
    assert_eq!(taken.as_array().map(Vec::len), Some(3));
    assert_eq!(taken[0]["redelivered"], true);
    assert_eq!(taken[0]["payload_encoding"], "base64");
    assert_eq!(api.get("/api/queues/%2F/work").body["messages"], 0);
    assert_eq!(api.post("/api/queues/%2F/work/get", json!({"count": 1, "ackmode": "keep"})).status, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_channels_and_consumers_are_listed_and_a_connection_is_closed_with_a_reason() {
    let broker = start_broker().await;
    let api = api_of(&broker);
    let properties = lapin::ConnectionProperties::default().with_connection_name("billing-worker".into());
    let conn = lapin::Connection::connect(&amqp_uri(&broker), properties).await.expect("connect");
    let ch = conn.create_channel().await.expect("channel");
    ch.basic_qos(7, BasicQosOptions::default()).await.expect("qos");
    ch.queue_declare("jobs".into(), QueueDeclareOptions::default(), FieldTable::default()).await.expect("declare");
    let _consumer = ch
        .basic_consume("jobs".into(), "worker-1".into(), Default::default(), FieldTable::default())
        .await
        .expect("consume");

    let connections = api.get("/api/connections").body;
    let connection = &connections[0];
    assert_eq!((connection["user"].as_str(), connection["vhost"].as_str()), (Some("guest"), Some("/")));
    assert_eq!(connection["ssl"], false, "a plain TCP connection");
    assert_eq!(connection["client_properties"]["connection_name"], "billing-worker");
    assert_eq!(connection["channels"], 1);
    let name = connection["name"].as_str().expect("name").to_string();
    let encoded = name.replace(' ', "%20").replace('>', "%3E");
    assert_eq!(api.get(&format!("/api/connections/{encoded}")).body["name"], name.as_str());
    let channels = api.get("/api/channels").body;
    assert_eq!((channels[0]["prefetch_count"].as_u64(), channels[0]["consumer_count"].as_u64()), (Some(7), Some(1)));
    assert_eq!(api.get(&format!("/api/connections/{encoded}/channels")).body[0]["number"], 1);
    let consumers = api.get("/api/consumers/%2F").body;
    assert_eq!(
        (consumers[0]["consumer_tag"].as_str(), consumers[0]["queue"]["name"].as_str()),
        (Some("worker-1"), Some("jobs"))
    );
    assert_eq!(consumers[0]["prefetch_count"], 7);
    assert_eq!(api.get("/api/connections/nobody").status, 404);

    let mut events = conn.events_listener();
    let closed = api.delete_with(&format!("/api/connections/{encoded}"), &[("X-Reason", "maintenance window")]);
    assert_eq!(closed.status, 204);
    let error = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match events.next().await {
                Some(lapin::Event::Error(error)) => return error.to_string(),
                Some(_) => continue,
                None => return String::from("no error event"),
            }
        }
    })
    .await
    .expect("the connection was closed");
    assert!(error.contains("CONNECTION_FORCED") && error.contains("maintenance window"), "{error}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while api.get("/api/connections").body.as_array().is_some_and(|c| !c.is_empty()) {
        assert!(Instant::now() < deadline, "the connection left the list");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_rates_follow_the_traffic() {
    let broker = start_broker().await;
    let api = api_of(&broker);
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    ch.queue_declare("busy".into(), QueueDeclareOptions::default(), FieldTable::default()).await.expect("declare");
    let mut consumer = ch
        .basic_consume(
            "busy".into(),
            "c".into(),
            BasicConsumeOptions { no_ack: true, ..Default::default() },
            FieldTable::default(),
        )
        .await
        .expect("consume");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        for _ in 0..50 {
            ch.basic_publish("".into(), "busy".into(), Default::default(), b"x", BasicProperties::default())
                .await
                .expect("publish");
        }
        while let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(20), consumer.next()).await {}
        let stats = api.get("/api/queues/%2F/busy").body["message_stats"].clone();
        let publish = stats["publish_details"]["rate"].as_f64().unwrap_or_default();
        let deliver = stats["deliver_get_details"]["rate"].as_f64().unwrap_or_default();
        if publish > 0.0 && deliver > 0.0 {
            assert!(stats["publish"].as_u64() >= Some(50), "{stats}");
            let overview = api.get("/api/overview").body;
            assert!(overview["message_stats"]["publish_details"]["rate"].as_f64() > Some(0.0), "{overview}");
            return;
        }
        assert!(Instant::now() < deadline, "rates never showed the traffic: {stats}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_is_replayed_by_offset_time_and_tag_without_being_consumed() {
    let broker = start_broker().await;
    let api = api_of(&broker);
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    let stream = table(&[("x-queue-type", text("stream"))]);
    ch.queue_declare("events".into(), durable(), stream).await.expect("declare");
    let before = warren_delivery_now_ms();
    for n in 0..10u32 {
        let tag = if n % 2 == 0 { "even" } else { "odd" };
        let headers = table(&[("x-stream-filter-value", text(tag))]);
        let properties = BasicProperties::default().with_headers(headers);
        let confirm = ch
            .basic_publish("".into(), "events".into(), Default::default(), format!("event {n}").as_bytes(), properties)
            .await
            .expect("publish")
            .await
            .expect("confirm");
        assert!(confirm.is_ack());
    }
    let page = api.get("/api/queues/%2F/events/messages?offset=3&count=4").body;
    let offsets: Vec<u64> =
        page["messages"].as_array().expect("messages").iter().filter_map(|m| m["offset"].as_u64()).collect();
    assert_eq!(offsets, [3, 4, 5, 6]);
    assert_eq!(page["messages"][0]["payload"], "event 3");
    assert_eq!((page["next_offset"].as_u64(), page["end_offset"].as_u64()), (Some(7), Some(10)));
    let odd = api.get("/api/queues/%2F/events/messages?offset=first&count=100&filter=odd").body;
    let payloads: Vec<&str> =
        odd["messages"].as_array().expect("messages").iter().filter_map(|m| m["payload"].as_str()).collect();
    assert_eq!(payloads, ["event 1", "event 3", "event 5", "event 7", "event 9"]);
    let last = api.get("/api/queues/%2F/events/messages?offset=last").body;
    assert_eq!(last["messages"][0]["offset"], 9);
    let since = api.get(&format!("/api/queues/%2F/events/messages?timestamp={before}&count=1")).body;
    assert_eq!(since["messages"][0]["offset"], 0);
    assert!(since["messages"][0]["timestamp"].as_i64() >= Some(before as i64));
    // Nothing was consumed: a consumer from the start still gets all ten.
    ch.basic_qos(100, BasicQosOptions::default()).await.expect("qos");
    let from_first = table(&[("x-stream-offset", text("first"))]);
    let mut consumer =
        ch.basic_consume("events".into(), "reader".into(), Default::default(), from_first).await.expect("consume");
    for n in 0..10u32 {
        let delivery = next_delivery(&mut consumer).await;
        assert_eq!(delivery.data, format!("event {n}").into_bytes());
    }
    assert_eq!(api.get("/api/queues/%2F/events/messages?offset=soon").status, 400);
    ch.queue_declare("plain".into(), QueueDeclareOptions::default(), FieldTable::default()).await.expect("declare");
    assert_eq!(api.get("/api/queues/%2F/plain/messages").status, 400, "a transient queue keeps no log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_queue_log_is_replayed_with_what_it_still_holds() {
    let broker = start_broker().await;
    let api = api_of(&broker);
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    ch.queue_declare("orders".into(), durable(), FieldTable::default()).await.expect("declare");
    for n in 0..6u32 {
        let confirm = ch
            .basic_publish(
                "".into(),
                "orders".into(),
                Default::default(),
                format!("order {n}").as_bytes(),
                BasicProperties::default().with_delivery_mode(2),
            )
            .await
            .expect("publish")
            .await
            .expect("confirm");
        assert!(confirm.is_ack());
    }
    // A transient message lives in memory only: the log never holds it.
    ch.basic_publish("".into(), "orders".into(), Default::default(), b"transient", BasicProperties::default())
        .await
        .expect("publish")
        .await
        .expect("confirm");
    for _ in 0..3 {
        let got = ch.basic_get("orders".into(), BasicGetOptions::default()).await.expect("get").expect("a message");
        got.ack(BasicAckOptions::default()).await.expect("ack");
    }
    let page = api.get("/api/queues/%2F/orders/messages?offset=first&count=100").body;
    let payloads: Vec<&str> =
        page["messages"].as_array().expect("messages").iter().filter_map(|m| m["payload"].as_str()).collect();
    assert_eq!(payloads, ["order 0", "order 1", "order 2", "order 3", "order 4", "order 5"], "acked ones included");
    let from_four = api.get("/api/queues/%2F/orders/messages?offset=4").body;
    assert_eq!(from_four["messages"][0]["payload"], "order 4");
    let queue = api.get("/api/queues/%2F/orders").body;
    assert_eq!(queue["messages"], 4, "browsing consumed nothing: three persistent and the transient one remain");
}

fn warren_delivery_now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn definitions_exported_from_one_broker_load_into_a_fresh_one() {
    let first = start_broker().await;
    let api = api_of(&first);
    api.put(
        "/api/exchanges/%2F/ledger",
        json!({"type": "direct", "durable": true, "arguments": {"alternate-exchange": "amq.fanout"}}),
    );
    api.put("/api/queues/%2F/entries", json!({"durable": true, "arguments": {"x-max-priority": 5}}));
    api.put("/api/queues/%2F/audit", json!({"durable": true, "arguments": {"x-queue-type": "stream"}}));
    api.post("/api/bindings/%2F/e/ledger/q/entries", json!({"routing_key": "posted"}));
    api.post("/api/bindings/%2F/e/ledger/q/audit", json!({"routing_key": "posted", "arguments": {"kind": "copy"}}));
    let exported = api.get("/api/definitions").body;
    assert_eq!(exported["queues"].as_array().map(Vec::len), Some(2));
    assert_eq!(exported["exchanges"].as_array().map(Vec::len), Some(1), "amq.* stay out: {}", exported["exchanges"]);
    assert_eq!(exported["bindings"].as_array().map(Vec::len), Some(2));

    let second = start_broker().await;
    let fresh = api_of(&second);
    let mut with_extras = exported.clone();
    with_extras["vhosts"] = json!([{"name": "/"}, {"name": "staging"}]);
    with_extras["users"] = json!([{"name": "alice", "password_hash": "x", "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": []}]);
    with_extras["policies"] = json!([{"name": "ha", "vhost": "/", "pattern": ".*", "definition": {}}]);
    let report = fresh.post("/api/definitions", with_extras).body;
    // Two vhosts, guest's permission in "/", an exchange, two queues, two bindings; alice's
    // hash is not one (skipped), nor is a policy that sets nothing.
    assert_eq!(report["applied"], 8, "{report}");
    let skipped: Vec<&str> =
        report["skipped"].as_array().expect("skipped").iter().filter_map(|s| s["kind"].as_str()).collect();
    assert_eq!(skipped, ["user", "policy"], "{report}");
    assert_eq!(fresh.get("/api/vhosts/staging").status, 200);
    assert_eq!(fresh.get("/api/queues/%2F/entries").body["arguments"]["x-max-priority"], 5);
    assert_eq!(fresh.get("/api/queues/%2F/audit").body["type"], "stream");
    assert_eq!(fresh.get("/api/exchanges/%2F/ledger").body["arguments"]["alternate-exchange"], "amq.fanout");
    let bindings = fresh.get("/api/exchanges/%2F/ledger/bindings/source").body;
    assert_eq!(bindings.as_array().map(Vec::len), Some(2));
    let again = fresh.get("/api/definitions").body;
    assert_eq!(again["queues"], exported["queues"], "the same definitions come back out");
    assert_eq!(fresh.post("/api/definitions", json!([1, 2])).status, 400);
}

/// A definitions file as RabbitMQ 3.10 exports it, with every kind of item: users (with
/// limits), vhosts, permissions, topic permissions, policies (one of keys Warren has no feature
/// for), an operator policy and vhost limits (RabbitMQ exports both as `parameters`), global
/// parameters, classic and quorum queues and a stream, exchanges, a binding.
fn rabbitmq_export() -> Value {
    json!({
        "rabbit_version": "3.10.8", "rabbitmq_version": "3.10.8",
        "product_name": "RabbitMQ", "product_version": "3.10.8",
        "users": [{"name": "ops", "password_hash": "27cx5+wEi8R8uwTeTr3hk5azuV3yYxxAtwPPhCyrbdsxVhqq",
                   "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": ["administrator"],
                   "limits": {"max-connections": 10, "max-channels": 20}}],
        "vhosts": [{"name": "/"}, {"name": "prod"}],
        "permissions": [{"user": "ops", "vhost": "prod", "configure": ".*", "write": ".*", "read": ".*"}],
        "topic_permissions": [{"user": "ops", "vhost": "prod", "exchange": "amq.topic", "write": "^a", "read": ".*"}],
        "parameters": [
            {"value": {"max-connections": 100, "max-queues": 50}, "vhost": "prod", "component": "vhost-limits",
             "name": "limits"},
            {"value": {"pattern": ".*", "definition": {"max-length": 1000}, "priority": 0, "apply-to": "queues"},
             "vhost": "prod", "component": "operator_policy", "name": "cap"}
        ],
        "global_parameters": [{"name": "cluster_name", "value": "rabbit@host"},
                              {"name": "internal_cluster_id", "value": "rabbitmq-cluster-id-x"}],
        "policies": [{"vhost": "prod", "name": "ttl-dlx", "pattern": "^orders\\.", "apply-to": "queues",
                      "definition": {"message-ttl": 60000, "dead-letter-exchange": "dlx", "max-length": 10000},
                      "priority": 1},
                     {"vhost": "prod", "name": "retention", "pattern": "^events$", "apply-to": "streams",
                      "definition": {"max-age": "7D", "max-length-bytes": 1_000_000_000_u64}, "priority": 0},
                     {"vhost": "prod", "name": "mirrored", "pattern": "^legacy\\.", "apply-to": "queues",
                      "definition": {"ha-mode": "all", "ha-sync-mode": "automatic"}, "priority": 0}],
        "queues": [{"name": "orders.eu", "vhost": "prod", "durable": true, "auto_delete": false, "arguments": {}},
                   {"name": "payments", "vhost": "prod", "durable": true, "auto_delete": false,
                    "arguments": {"x-queue-type": "quorum"}},
                   {"name": "events", "vhost": "prod", "durable": true, "auto_delete": false,
                    "arguments": {"x-queue-type": "stream"}},
                   {"name": "legacy.jobs", "vhost": "prod", "durable": true, "auto_delete": false, "arguments": {}}],
        "exchanges": [{"name": "dlx", "vhost": "prod", "type": "fanout", "durable": true, "auto_delete": false,
                       "internal": false, "arguments": {}},
                      {"name": "events.topic", "vhost": "prod", "type": "topic", "durable": true,
                       "auto_delete": false, "internal": false, "arguments": {}}],
        "bindings": [{"source": "events.topic", "vhost": "prod", "destination": "events", "destination_type": "queue",
                      "routing_key": "#", "arguments": {}}]
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rabbitmq_export_applies_its_policies_and_parameters_and_round_trips() {
    let broker = start_broker().await;
    let api = api_of(&broker);
    let report = api.post("/api/definitions", rabbitmq_export()).body;
    // ops and their limits, two vhosts, a permission, a topic permission, two global
    // parameters, the vhost limits, the operator policy, three policies, four queues, two
    // exchanges and a binding: every item.
    assert_eq!(report["applied"], 20, "{report}");
    assert_eq!(report["skipped"], json!([]), "{report}");
    assert_eq!(api.get("/api/overview").body["cluster_name"], "rabbit@host", "the cluster_name parameter names it");
    let queue = api.get("/api/queues/prod/orders.eu").body;
    assert_eq!((queue["policy"].as_str(), queue["operator_policy"].as_str()), (Some("ttl-dlx"), Some("cap")));
    assert_eq!(queue["effective_policy_definition"]["max-length"], 1000, "the operator policy caps it");
    assert_eq!(api.get("/api/vhost-limits/prod").body[0]["value"]["max-queues"], 50);
    let limits = api.get("/api/user-limits/ops").body;
    assert_eq!(limits[0]["value"]["max-channels"], 20, "{limits}");
    let stream = api.get("/api/queues/prod/events").body;
    assert_eq!((stream["type"].as_str(), stream["policy"].as_str()), (Some("stream"), Some("retention")), "{stream}");
    assert_eq!(stream["effective_policy_definition"]["max-age"], "7D");
    assert_eq!(api.get("/api/queues/prod/payments").body["type"], "quorum");
    let legacy = api.get("/api/queues/prod/legacy.jobs").body;
    assert_eq!(legacy["policy"], "mirrored", "a policy of keys without effect still applies: {legacy}");
    let policies = api.get("/api/policies/prod").body;
    let mirrored = policies.as_array().and_then(|all| all.iter().find(|p| p["name"] == "mirrored")).expect("listed");
    let no_effect: Vec<&String> = mirrored["no_effect"].as_object().expect("key: why").keys().collect();
    assert_eq!(no_effect, ["ha-mode", "ha-sync-mode"], "reported as having no effect: {mirrored}");
    let bindings = api.get("/api/exchanges/prod/events.topic/bindings/source").body;
    assert_eq!(bindings.as_array().map(Vec::len), Some(1), "{bindings}");

    let exported = api.get("/api/definitions").body;
    let second = start_broker().await;
    let fresh = api_of(&second);
    let again = fresh.post("/api/definitions", exported.clone()).body;
    assert_eq!(again["skipped"], json!([]), "{again}");
    let round_trip = fresh.get("/api/definitions").body;
    let globals = exported["global_parameters"].as_array().expect("global parameters");
    assert_eq!(globals.len(), 1, "RabbitMQ's internal parameters stay out of an export: {globals:?}");
    for key in [
        "users",
        "bindings",
        "policies",
        "parameters",
        "global_parameters",
        "vhosts",
        "queues",
        "exchanges",
        "permissions",
        "topic_permissions",
    ] {
        assert_eq!(round_trip[key], exported[key], "{key} come back out the same");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_lists_are_paged_filtered_and_sorted() {
    let broker = start_broker().await;
    let api = api_of(&broker);
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    for n in 0..30u32 {
        let name = format!("shard-{n:02}");
        ch.queue_declare(name.as_str().into(), QueueDeclareOptions::default(), FieldTable::default())
            .await
            .expect("declare");
        for _ in 0..n % 7 {
            ch.basic_publish("".into(), name.as_str().into(), Default::default(), b"m", BasicProperties::default())
                .await
                .expect("publish")
                .await
                .expect("confirm");
        }
    }
    let page = api.get("/api/queues/%2F?page=2&page_size=10&sort=name").body;
    assert_eq!(
        (page["page_count"].as_u64(), page["total_count"].as_u64(), page["item_count"].as_u64()),
        (Some(3), Some(30), Some(10))
    );
    assert_eq!(page["items"][0]["name"], "shard-10");
    let deepest = api.get("/api/queues?page=1&page_size=3&sort=messages&sort_reverse=true&columns=name,messages").body;
    assert!(deepest["items"].as_array().expect("items").iter().all(|q| q["messages"] == 6), "{deepest}");
    // The columns sorted on the queue's own figures agree with the JSON they show.
    for column in ["messages", "messages_ready", "messages_unacknowledged", "consumers", "message_stats.publish"] {
        let listed = api.get(&format!("/api/queues?sort={column}&sort_reverse=1")).body;
        let values: Vec<f64> = listed
            .as_array()
            .expect("queues")
            .iter()
            .map(|q| column.split('.').fold(q, |v, key| &v[key]).as_f64().unwrap_or(-1.0))
            .collect();
        assert!(values.windows(2).all(|w| w[0] >= w[1]), "sorted by {column}, descending: {values:?}");
    }
    let matched = api.get("/api/queues?name=shard-2%5B0-4%5D&use_regex=true").body;
    assert_eq!(matched.as_array().map(Vec::len), Some(5));
    assert_eq!(api.get("/api/queues?page=9&page_size=10").status, 400);
    assert_eq!(api.get("/api/queues?name=%28&use_regex=true").status, 400);
}

/// The value of the unlabelled sample `name` in a Prometheus exposition.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_metrics_count_what_happens() {
    let broker = start_broker().await;
    let http = broker.http_addr.expect("management API");
    let scrape = |path: &str| -> String {
        tokio::task::block_in_place(|| {
            ureq::get(&format!("http://{http}{path}")).call().expect("scrape").into_string().expect("text")
        })
    };
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    let durable_queue = QueueDeclareOptions { durable: true, ..Default::default() };
    ch.queue_declare("metered".into(), durable_queue, FieldTable::default()).await.expect("declare");
    for _ in 0..20 {
        let persistent = BasicProperties::default().with_delivery_mode(2);
        let confirm =
            ch.basic_publish("".into(), "metered".into(), Default::default(), b"m", persistent).await.expect("publish");
        assert!(confirm.await.expect("confirm").is_ack());
    }
    let text = scrape("/metrics");
    let received = sample(&text, r#"rabbitmq_global_messages_received_total{protocol="amqp091"}"#);
    assert!(received >= Some(20.0), "the 20 publishes (other tests of this process count too): {received:?}");
    assert_eq!(sample(&text, "rabbitmq_connections"), Some(1.0));
    assert_eq!(sample(&text, "rabbitmq_queues"), Some(1.0));
    assert_eq!(sample(&text, "rabbitmq_queue_messages_ready"), Some(20.0));
    assert!(sample(&text, "warren_queue_disk_bytes") > Some(0.0), "durable messages are on disk");
    assert!(sample(&text, "warren_fsync_seconds_count") > Some(0.0), "fsyncs are timed");
    assert!(sample(&text, "warren_confirm_latency_seconds_count") > Some(0.0), "confirms are timed");
    assert!(sample(&text, "rabbitmq_process_resident_memory_bytes") > Some(0.0));
    assert!(!text.contains("queue=\"metered\""), "the aggregated endpoint has no series per queue");
    // RabbitMQ's dashboards join every query on the node's identity.
    let identity = text.lines().find(|l| l.starts_with("rabbitmq_identity_info{")).expect("rabbitmq_identity_info");
    assert!(identity.contains("rabbitmq_node=\"") && identity.contains("rabbitmq_cluster=\""), "{identity}");
    assert!(identity.ends_with(" 1"), "{identity}");
    let build = text.lines().find(|l| l.starts_with("rabbitmq_build_info{")).expect("rabbitmq_build_info");
    assert!(build.contains("rabbitmq_version=\"") && build.contains("product_name=\"Warren\""), "{build}");
    // The node's counters: since the process started (other tests in this binary count too).
    assert!(sample(&text, "rabbitmq_process_max_fds") > Some(0.0));
    let confirmed = sample(&text, r#"rabbitmq_global_messages_confirmed_total{protocol="amqp091"}"#);
    assert!(confirmed >= Some(20.0), "the 20 confirms");
    let routed = sample(&text, r#"rabbitmq_global_messages_routed_total{protocol="amqp091"}"#);
    assert!(routed >= Some(20.0), "the 20 routed publishes");
    let before = |name: &str| sample(&text, name).unwrap_or_else(|| panic!("{name} is exposed"));
    let churn = [
        "rabbitmq_connections_opened_total",
        "rabbitmq_connections_closed_total",
        "rabbitmq_channels_opened_total",
        "rabbitmq_channels_closed_total",
        "rabbitmq_queues_declared_total",
        "rabbitmq_queues_created_total",
        "rabbitmq_queues_deleted_total",
        r#"rabbitmq_global_messages_unroutable_dropped_total{protocol="amqp091"}"#,
        r#"rabbitmq_global_messages_unroutable_returned_total{protocol="amqp091"}"#,
    ];
    let counted: Vec<f64> = churn.iter().map(|name| before(name)).collect();
    {
        let conn = connect(&broker).await;
        let ch = channel(&conn).await;
        ch.queue_declare("churned".into(), QueueDeclareOptions::default(), FieldTable::default())
            .await
            .expect("declare");
        ch.queue_delete("churned".into(), Default::default()).await.expect("delete");
        for mandatory in [false, true] {
            let options = BasicPublishOptions { mandatory, ..Default::default() };
            ch.basic_publish("".into(), "nowhere".into(), options, b"lost", BasicProperties::default())
                .await
                .expect("publish");
        }
        // A round trip: both publishes were handled before the connection goes.
        ch.queue_declare("churned".into(), QueueDeclareOptions::default(), FieldTable::default())
            .await
            .expect("declare");
        conn.close(200, "bye".into()).await.expect("close");
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = scrape("/metrics");
        let grown: Vec<bool> = churn.iter().zip(&counted).map(|(name, was)| sample(&now, name) > Some(*was)).collect();
        if grown.iter().all(|g| *g) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "every churn counter grows: {:?}",
            churn.iter().zip(grown).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let per_object = scrape("/metrics/per-object");
    assert!(per_object.contains(r#"rabbitmq_queue_messages_ready{vhost="/",queue="metered"} 20"#), "{per_object}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_feed_pushes_figures_every_second_and_answers_browse_requests() {
    use futures_util::SinkExt;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Message;
    let broker = start_broker().await;
    let http = broker.http_addr.expect("management API");
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    ch.queue_declare("feed-log".into(), durable(), table(&[("x-queue-type", text("stream"))])).await.expect("declare");
    for n in 0..5u8 {
        let body = [n];
        let confirm =
            ch.basic_publish("".into(), "feed-log".into(), Default::default(), &body, BasicProperties::default());
        assert!(confirm.await.expect("publish").await.expect("confirm").is_ack());
    }

    // Without credentials the upgrade is refused.
    let anonymous = tokio_tungstenite::connect_async(format!("ws://{http}/ws")).await;
    assert!(anonymous.is_err(), "no feed without a login");
    // A session cookie from /api/login opens it, as the UI does.
    let login = tokio::task::block_in_place(|| {
        let form = json!({"username": "guest", "password": "guest"});
        ureq::post(&format!("http://{http}/api/login")).send_json(form).expect("login")
    });
    let cookie = login.header("set-cookie").expect("a session cookie").to_string();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "{cookie}");
    let mut request = format!("ws://{http}/ws").into_client_request().expect("request");
    let session = cookie.split(';').next().expect("name=value").to_string();
    request.headers_mut().insert("cookie", session.parse().expect("header"));
    let (mut feed, _) = tokio_tungstenite::connect_async(request).await.expect("the feed opens");
    let hello = next_json(&mut feed).await;
    assert_eq!((hello["type"].as_str(), hello["user"].as_str()), (Some("hello"), Some("guest")));
    assert!(hello["history"].is_array());
    let tick = next_json(&mut feed).await;
    assert_eq!(tick["type"], "tick");
    assert!(tick.get("queues").is_none(), "queues only when subscribed");

    ch.queue_declare("feed-idle".into(), durable(), FieldTable::default()).await.expect("declare");
    // The queue table comes filtered, sorted and paged by the broker: the deepest queue alone.
    let table = json!({"sort": "messages", "sort_reverse": true, "page_size": 1});
    let subscribe = json!({"type": "subscribe", "queues": table, "queue": {"vhost": "/", "name": "feed-log"}});
    feed.send(Message::Text(subscribe.to_string().into())).await.expect("send");
    let mut answers = Vec::new();
    let tick = loop {
        let tick = next_json(&mut feed).await;
        if tick["queues"]["items"].is_array() {
            break tick;
        }
        answers.push(tick);
        assert!(answers.len() < 3, "the subscription is answered: {answers:?}");
    };
    let queues = &tick["queues"];
    assert_eq!(queues["items"][0]["name"], "feed-log", "{queues}");
    assert_eq!((queues["page_count"].as_u64(), queues["total_count"].as_u64()), (Some(2), Some(2)));
    assert_eq!(tick["queue"]["type"], "stream");
    let started = Instant::now();
    let following = loop {
        let tick = next_json(&mut feed).await;
        if tick["type"] == "tick" {
            break tick;
        }
    };
    assert!(started.elapsed() < Duration::from_millis(2_500), "pushed about every second");
    assert_eq!(following["overview"]["connections"], 1);

    let browse = json!({"type": "browse", "id": 7, "vhost": "/", "queue": "feed-log", "offset": "2", "count": 2});
    feed.send(Message::Text(browse.to_string().into())).await.expect("send");
    let answer = loop {
        let message = next_json(&mut feed).await;
        if message["type"] == "messages" {
            break message;
        }
    };
    assert_eq!(answer["id"], 7);
    let offsets: Vec<u64> =
        answer["messages"].as_array().expect("messages").iter().filter_map(|m| m["offset"].as_u64()).collect();
    assert_eq!(offsets, [2, 3]);
    let odd = json!({"type": "browse", "id": 8, "vhost": "/", "queue": "nowhere"});
    feed.send(Message::Text(odd.to_string().into())).await.expect("send");
    let refused = loop {
        let message = next_json(&mut feed).await;
        if message["type"] == "messages" {
            break message;
        }
    };
    assert!(refused["error"].as_str().is_some_and(|e| e.contains("nowhere")), "{refused}");
}

type Feed = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The feed's next JSON message (within 5 s).
async fn next_json(feed: &mut Feed) -> Value {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(5), feed.next()).await.expect("a message");
        if let tokio_tungstenite::tungstenite::Message::Text(text) = message.expect("open").expect("frame") {
            return serde_json::from_str(text.as_str()).expect("json");
        }
    }
}
