//! Users, virtual hosts and permissions, exercised with lapin and the real `warren ctl`:
//! every AMQP operation allowed and refused as RabbitMQ's access-control table says, vhost
//! isolation, deletion and limits, RabbitMQ-hashed users from a definitions file, what
//! survives a restart, and the failed-login throttle.

use lapin::options::{
    BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, ExchangeDeclareOptions, ExchangeDeleteOptions,
    QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions, QueuePurgeOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties, ExchangeKind};
use serde_json::json;
use std::time::{Duration, Instant};
use warren_tests::http::Api;
use warren_tests::raw_client::RawClient;
use warren_tests::TestBroker;
use warren_tests::{assert_code, channel, confirm_channel, connect, start_broker, start_broker_in, table, text};

const ACCESS_REFUSED: u16 = 403;
const NOT_ALLOWED: u16 = 530;

fn api(broker: &TestBroker) -> Api {
    Api::new(broker.http_addr.expect("management API"))
}

fn ctl(broker: &TestBroker, args: &[&str]) -> String {
    let url = format!("http://{}", broker.http_addr.expect("management API"));
    let (ok, out, err) = warren_tests::process::run_ctl(&url, args);
    assert!(ok, "warren ctl {args:?} failed: {err}");
    out
}

async fn connect_as(broker: &TestBroker, user: &str, password: &str, vhost: &str) -> lapin::Result<Connection> {
    let vhost: String = vhost.bytes().map(|b| format!("%{b:02x}")).collect();
    let uri = format!("amqp://{user}:{password}@{}/{vhost}", broker.amqp_addr);
    Connection::connect(&uri, ConnectionProperties::default()).await
}

fn declare_options() -> QueueDeclareOptions {
    QueueDeclareOptions::default()
}

/// alice may configure and read `alice.*`, write `alice.*` and the default exchange; guest
/// made `bob.q` and `bob.x`, which alice may not touch.
async fn alice_and_bob(broker: &TestBroker) -> Connection {
    let api = api(broker);
    assert_eq!(api.put("/api/users/alice", json!({"password": "wonderland", "tags": ""})).status, 201);
    let permissions = json!({"configure": "^alice\\.", "write": "^(alice\\.|amq\\.default$)", "read": "^alice\\."});
    assert_eq!(api.put("/api/permissions/%2F/alice", permissions).status, 201);
    let guest = connect(broker).await;
    let setup = channel(&guest).await;
    setup.queue_declare("bob.q".into(), declare_options(), FieldTable::default()).await.expect("bob.q");
    let options = ExchangeDeclareOptions::default();
    setup.exchange_declare("bob.x".into(), ExchangeKind::Fanout, options, FieldTable::default()).await.expect("bob.x");
    connect_as(broker, "alice", "wonderland", "/").await.expect("alice connects")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_amqp_operation_is_checked_against_the_users_permissions() {
    let broker = start_broker().await;
    let alice = alice_and_bob(&broker).await;
    let fresh = || async { channel(&alice).await };
    let none = FieldTable::default;

    // Declares need configure; passive declares need nothing.
    let ch = fresh().await;
    ch.queue_declare("alice.q".into(), declare_options(), none()).await.expect("own queue");
    let options = ExchangeDeclareOptions::default();
    ch.exchange_declare("alice.x".into(), ExchangeKind::Fanout, options, none()).await.expect("own exchange");
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    ch.queue_declare("bob.q".into(), passive, none()).await.expect("a passive declare needs nothing");
    let refused = fresh().await.queue_declare("bob.other".into(), declare_options(), none()).await;
    match &refused {
        Err(error) => assert!(
            error.to_string().contains("access to queue 'bob.other' in vhost '/' refused for user 'alice'"),
            "{error}"
        ),
        Ok(_) => panic!("declared a queue outside its permissions"),
    }
    assert_code(refused, ACCESS_REFUSED, "queue.declare outside configure");
    let server_named = fresh().await.queue_declare("".into(), declare_options(), none()).await;
    assert_code(server_named, ACCESS_REFUSED, "a server-named queue is amq.gen-*, outside ^alice\\.");
    let exchange = fresh().await.exchange_declare("bob.y".into(), ExchangeKind::Direct, options, none()).await;
    assert_code(exchange, ACCESS_REFUSED, "exchange.declare outside configure");
    let with_dlx = table(&[("x-dead-letter-exchange", text("bob.x"))]);
    let dlx = fresh().await.queue_declare("alice.dl".into(), declare_options(), with_dlx).await;
    assert_code(dlx, ACCESS_REFUSED, "a dead-letter exchange needs write");
    let with_ae = table(&[("alternate-exchange", text("bob.x"))]);
    let ae = fresh().await.exchange_declare("alice.ae".into(), ExchangeKind::Direct, options, with_ae).await;
    assert_code(ae, ACCESS_REFUSED, "an alternate exchange needs write");

    // Binds need write on the destination and read on the source.
    let ch = fresh().await;
    ch.queue_bind("alice.q".into(), "alice.x".into(), "".into(), QueueBindOptions::default(), none())
        .await
        .expect("own bind");
    for (queue, exchange, what) in [
        ("alice.q", "bob.x", "bind from an exchange without read"),
        ("bob.q", "alice.x", "bind to a queue without write"),
    ] {
        let ch = fresh().await;
        let bound = ch.queue_bind(queue.into(), exchange.into(), "".into(), QueueBindOptions::default(), none()).await;
        assert_code(bound, ACCESS_REFUSED, what);
    }

    // Publishing needs write on the exchange (the default one is amq.default).
    let ch = confirm_channel(&alice).await;
    let confirm = ch
        .basic_publish("".into(), "alice.q".into(), BasicPublishOptions::default(), b"hi", BasicProperties::default())
        .await
        .expect("publish");
    assert!(confirm.await.expect("confirm").is_ack());
    let ch = confirm_channel(&alice).await;
    let publish = ch
        .basic_publish("bob.x".into(), "".into(), BasicPublishOptions::default(), b"no", BasicProperties::default())
        .await;
    let refused = match publish {
        Ok(confirm) => confirm.await.map(|_| ()),
        Err(error) => Err(error),
    };
    assert_code(refused.and(ch.basic_qos(1, Default::default()).await), ACCESS_REFUSED, "publish without write");

    // Get, consume and purge need read; delete needs configure.
    let ch = fresh().await;
    let got = ch.basic_get("alice.q".into(), BasicGetOptions { no_ack: true }).await.expect("own get");
    assert_eq!(got.expect("the message").data, b"hi");
    assert_code(fresh().await.basic_get("bob.q".into(), BasicGetOptions::default()).await, ACCESS_REFUSED, "get");
    let consume = fresh().await.basic_consume("bob.q".into(), "".into(), BasicConsumeOptions::default(), none()).await;
    assert_code(consume, ACCESS_REFUSED, "consume");
    assert_code(fresh().await.queue_purge("bob.q".into(), QueuePurgeOptions::default()).await, ACCESS_REFUSED, "purge");
    let delete = fresh().await.queue_delete("bob.q".into(), QueueDeleteOptions::default()).await;
    assert_code(delete, ACCESS_REFUSED, "queue.delete");
    let delete = fresh().await.exchange_delete("bob.x".into(), ExchangeDeleteOptions::default()).await;
    assert_code(delete, ACCESS_REFUSED, "exchange.delete");
    fresh().await.queue_delete("alice.q".into(), QueueDeleteOptions::default()).await.expect("own delete");

    // The refusals closed channels, not the connection; and nothing of bob's changed.
    assert!(alice.status().connected());
    let queue = api(&broker).get("/api/queues/%2F/bob.q").body;
    assert_eq!(queue["name"], "bob.q");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vhost_needs_permissions_to_be_opened() {
    let broker = start_broker().await;
    let api = api(&broker);
    assert_eq!(api.put("/api/users/carol", json!({"password": "pw", "tags": ""})).status, 201);
    assert_eq!(api.put("/api/vhosts/private", json!({})).status, 201);
    let refused = connect_as(&broker, "carol", "pw", "private").await;
    assert_code(refused, NOT_ALLOWED, "no permissions in the vhost");
    assert_code(connect_as(&broker, "carol", "pw", "nowhere").await, NOT_ALLOWED, "no such vhost");
    assert_code(connect_as(&broker, "carol", "wrong", "/").await, ACCESS_REFUSED, "wrong password");
    let everything = json!({"configure": ".*", "write": ".*", "read": ".*"});
    assert_eq!(api.put("/api/permissions/private/carol", everything).status, 201);
    connect_as(&broker, "carol", "pw", "private").await.expect("permitted now");
    // Without a management tag, the HTTP API is closed to carol.
    assert_eq!(api.as_user(Some(("carol", "pw"))).get("/api/overview").status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vhosts_are_isolated_and_deleting_one_closes_its_connections_and_removes_its_data() {
    let broker = start_broker().await;
    let api = api(&broker);
    ctl(&broker, &["add_vhost", "tenant"]);
    ctl(&broker, &["-p", "tenant", "set_permissions", "guest", ".*", ".*", ".*"]);
    let root = connect(&broker).await;
    let tenant = connect_as(&broker, "guest", "guest", "tenant").await.expect("tenant");
    for (connection, body) in [(&root, "root"), (&tenant, "tenant")] {
        let ch = confirm_channel(connection).await;
        ch.queue_declare("shared".into(), warren_tests::durable(), FieldTable::default()).await.expect("declare");
        let persistent = BasicProperties::default().with_delivery_mode(2);
        let confirm = ch
            .basic_publish("".into(), "shared".into(), BasicPublishOptions::default(), body.as_bytes(), persistent)
            .await
            .expect("publish");
        confirm.await.expect("confirmed");
    }
    for (connection, body) in [(&root, "root"), (&tenant, "tenant")] {
        let got = channel(connection).await.basic_get("shared".into(), BasicGetOptions { no_ack: true }).await;
        let got = got.expect("get").expect("one message each");
        assert_eq!(got.data, body.as_bytes(), "each vhost sees its own queue");
    }
    let tenant_vhost = broker.broker.vhost("tenant").expect("the vhost");
    let tenant_dir = tenant_vhost.data_dir().expect("stored").to_path_buf();
    drop(tenant_vhost);
    assert!(tenant_dir.exists(), "the tenant's data lives in {}", tenant_dir.display());

    ctl(&broker, &["delete_vhost", "tenant"]);
    for _ in 0..50 {
        if !tenant.status().connected() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!tenant.status().connected(), "the tenant's connection is closed");
    assert!(root.status().connected(), "others stay");
    assert!(!tenant_dir.exists(), "its data is gone");
    assert_eq!(api.get("/api/vhosts/tenant").status, 404);
    ctl(&broker, &["add_vhost", "tenant"]);
    ctl(&broker, &["-p", "tenant", "set_permissions", "guest", ".*", ".*", ".*"]);
    let again = connect_as(&broker, "guest", "guest", "tenant").await.expect("recreated");
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    let gone = channel(&again).await.queue_declare("shared".into(), passive, FieldTable::default()).await;
    assert_code(gone, 404, "a recreated vhost starts empty");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vhost_limits_cap_connections_and_queues() {
    let broker = start_broker().await;
    ctl(&broker, &["add_vhost", "small"]);
    ctl(&broker, &["-p", "small", "set_permissions", "guest", ".*", ".*", ".*"]);
    ctl(&broker, &["-p", "small", "set_vhost_limits", r#"{"max-connections": 1, "max-queues": 2}"#]);
    assert!(ctl(&broker, &["-p", "small", "list_vhost_limits"]).contains("max-connections"));
    let first = connect_as(&broker, "guest", "guest", "small").await.expect("the first connection");
    match connect_as(&broker, "guest", "guest", "small").await {
        Err(error) => {
            assert!(error.to_string().contains("connection limit (1) is reached"), "{error}");
        }
        Ok(_) => panic!("a second connection past max-connections 1"),
    }
    let ch = channel(&first).await;
    for name in ["one", "two"] {
        ch.queue_declare(name.into(), declare_options(), FieldTable::default()).await.expect("within the limit");
    }
    let third = ch.queue_declare("three".into(), declare_options(), FieldTable::default()).await;
    assert_code(third, 406, "past max-queues");
    ctl(&broker, &["-p", "small", "set_vhost_limits", "{}"]);
    connect_as(&broker, "guest", "guest", "small").await.expect("no limit any more");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_made_with_ctl_survive_a_restart_and_deleted_ones_cannot_log_in() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = start_broker_in(dir.path()).await;
    ctl(&broker, &["add_user", "dave", "first"]);
    let again = warren_tests::process::run_ctl(
        &format!("http://{}", broker.http_addr.expect("api")),
        &["add_user", "dave", "x"],
    );
    assert!(!again.0 && again.2.contains("already exists"), "{again:?}");
    ctl(&broker, &["set_user_tags", "dave", "monitoring"]);
    ctl(&broker, &["set_permissions", "dave", "^dave", ".*", ".*"]);
    ctl(&broker, &["change_password", "dave", "second"]);
    let users = ctl(&broker, &["list_users"]);
    assert!(users.contains("dave") && users.contains("monitoring"), "{users}");
    assert!(ctl(&broker, &["list_permissions"]).contains("^dave"));
    broker.shutdown().await;

    let broker = start_broker_in(dir.path()).await;
    assert_code(connect_as(&broker, "dave", "first", "/").await, ACCESS_REFUSED, "the old password");
    let dave = connect_as(&broker, "dave", "second", "/").await.expect("the new password, after a restart");
    let refused = channel(&dave).await.queue_declare("other".into(), declare_options(), FieldTable::default()).await;
    assert_code(refused, ACCESS_REFUSED, "permissions survive a restart");
    assert_eq!(api(&broker).as_user(Some(("dave", "second"))).get("/api/overview").status, 200, "monitoring");
    assert_eq!(
        api(&broker).as_user(Some(("dave", "second"))).put("/api/vhosts/mine", json!({})).status,
        401,
        "only administrators change vhosts"
    );
    let monitoring = api(&broker).as_user(Some(("dave", "second")));
    let node = json!({"node": "warren@elsewhere"});
    let cluster_changes = [
        monitoring.post("/api/queues/quorum/%2F/q/replicas/add", node.clone()),
        monitoring.post("/api/queues/quorum/replicas/on/warren@elsewhere/grow", node.clone()),
        monitoring.delete("/api/queues/quorum/replicas/on/warren@elsewhere/shrink"),
        monitoring.post("/api/cluster/join", node),
        monitoring.delete("/api/nodes/warren@elsewhere"),
    ];
    for answer in cluster_changes {
        assert_eq!(answer.status, 401, "only administrators change the cluster: {:?}", answer.body);
    }
    ctl(&broker, &["clear_password", "dave"]);
    assert_code(connect_as(&broker, "dave", "second", "/").await, ACCESS_REFUSED, "no password any more");
    assert!(ctl(&broker, &["list_users"]).contains("monitoring"), "clear_password keeps the tags");
    ctl(&broker, &["delete_user", "dave"]);
    assert!(!ctl(&broker, &["list_users"]).contains("dave"), "a deleted user is gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_with_rabbitmq_password_hashes_import_and_log_in() {
    let broker = start_broker().await;
    let definitions = json!({
        "users": [
            // RabbitMQ's own hashes: `rabbitmqctl hash_password foobarbaz` and the widely
            // copied hash of "guest".
            {"name": "from-rabbit", "password_hash": "27cx5+wEi8R8uwTeTr3hk5azuV3yYxxAtwPPhCyrbdsxVhqq",
             "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": ["management"]},
            {"name": "guest-like", "password_hash": "BMfxN8drrYcIqXZMr+pWTpDT0nMcOagMduLX0bjr4jwud/pN",
             "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": "administrator"},
            // Salt 01020304, made with Python's hashlib.
            {"name": "sha512-user", "password_hash": "AQIDBNvNo2kxouYGqxiF9g+j+8J9yjug5ZzdmP+If88ewdnBr8Ei14Jx19Gf41KFqHZ7+7aT+b6IGjanlObuM/2wEys=",
             "hashing_algorithm": "rabbit_password_hashing_sha512", "tags": ""},
            {"name": "md5-user", "password_hash": "AQIDBGhwKnzYQWMSr0mJO4UJXZY=",
             "hashing_algorithm": "rabbit_password_hashing_md5", "tags": ""},
            {"name": "broken", "password_hash": "not-a-hash", "hashing_algorithm": "rabbit_password_hashing_sha256"}
        ],
        "vhosts": [{"name": "imported", "limits": {"max-queues": 5}}],
        "permissions": [
            {"user": "from-rabbit", "vhost": "imported", "configure": ".*", "write": ".*", "read": ".*"},
            {"user": "guest-like", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"},
            {"user": "sha512-user", "vhost": "/", "configure": "", "write": "", "read": ".*"},
            {"user": "md5-user", "vhost": "/", "configure": "", "write": "", "read": ".*"}
        ]
    });
    let report = api(&broker).post("/api/definitions", definitions).body;
    let skipped = report["skipped"].as_array().expect("skipped").clone();
    assert!(skipped.iter().any(|s| s["name"] == "broken"), "{report}");
    connect_as(&broker, "from-rabbit", "foobarbaz", "imported").await.expect("sha256 from RabbitMQ");
    assert_code(connect_as(&broker, "from-rabbit", "foobarba", "imported").await, ACCESS_REFUSED, "a wrong one");
    connect_as(&broker, "guest-like", "guest", "/").await.expect("the guest hash");
    connect_as(&broker, "sha512-user", "sha512-pass", "/").await.expect("sha512");
    connect_as(&broker, "md5-user", "md5-pass", "/").await.expect("md5");
    let exported = api(&broker).get("/api/definitions").body;
    let user = exported["users"].as_array().expect("users").iter().find(|u| u["name"] == "sha512-user").cloned();
    assert_eq!(user.expect("exported")["hashing_algorithm"], "rabbit_password_hashing_sha512");
    let vhost = exported["vhosts"].as_array().expect("vhosts").iter().find(|v| v["name"] == "imported").cloned();
    assert_eq!(vhost.expect("exported")["limits"]["max-queues"], 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_that_keeps_failing_to_log_in_is_slowed_and_a_right_password_is_not() {
    let broker = start_broker().await;
    let guesser: std::net::IpAddr = "127.0.0.1".parse().expect("ip");
    let other: std::net::IpAddr = "127.0.0.2".parse().expect("ip");
    let attempt = |from, password: &'static str| {
        let addr = broker.amqp_addr;
        async move {
            let started = Instant::now();
            let mut client = RawClient::connect_from(from, addr).await;
            let answer = client.log_in("guest", password).await;
            (started.elapsed(), answer)
        }
    };
    for _ in 0..10 {
        let (took, answer) = attempt(guesser, "wrong").await;
        assert!(format!("{answer:?}").contains("403"), "{answer:?}");
        assert!(took < Duration::from_millis(900), "the first failures are answered at once: {took:?}");
    }
    let (took, _) = attempt(guesser, "wrong").await;
    assert!(took >= Duration::from_millis(950), "the 11th waits at least a second: {took:?}");
    let (took, answer) = attempt(guesser, "guest").await;
    assert!(took < Duration::from_millis(900), "the right password from there is answered at once: {took:?}");
    assert!(format!("{answer:?}").contains("Tune"), "{answer:?}");
    let (took, _) = attempt(other, "wrong").await;
    assert!(took < Duration::from_millis(900), "another address is not slowed: {took:?}");
    let metrics = api(&broker).get_text("/metrics");
    let failed = metrics
        .lines()
        .find_map(|l| l.strip_prefix("rabbitmq_auth_attempts_failed_total "))
        .and_then(|v| v.parse::<f64>().ok());
    assert_eq!(failed, Some(12.0), "every failure is counted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_taken_away_applies_to_open_channels() {
    let broker = start_broker().await;
    let guest = connect(&broker).await;
    let ch = confirm_channel(&guest).await;
    ch.queue_declare("kept".into(), declare_options(), FieldTable::default()).await.expect("declare");
    let publish =
        || ch.basic_publish("".into(), "kept".into(), BasicPublishOptions::default(), b"x", BasicProperties::default());
    assert!(publish().await.expect("publish").await.expect("confirm").is_ack(), "allowed first");
    let no_write = json!({"configure": ".*", "write": "", "read": ".*"});
    assert_eq!(api(&broker).put("/api/permissions/%2F/guest", no_write).status, 204);
    let refused = match publish().await {
        Ok(confirm) => confirm.await.map(|_| ()),
        Err(error) => Err(error),
    };
    assert_code(
        refused.and(ch.basic_qos(1, Default::default()).await),
        ACCESS_REFUSED,
        "the same channel, after the change",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_start_creates_the_default_user_and_vhost_it_is_given() {
    let broker = warren_tests::start_broker_with(|config| {
        config.access = warren_server::AccessSettings {
            default_user: "admin".into(),
            default_pass: "s3cret".into(),
            default_vhost: "prod".into(),
            loopback_users: vec!["guest".into()],
        };
    })
    .await;
    let admin = connect_as(&broker, "admin", "s3cret", "prod").await.expect("the default user in the default vhost");
    channel(&admin)
        .await
        .queue_declare("q".into(), declare_options(), FieldTable::default())
        .await
        .expect("every permission");
    assert_code(
        connect_as(&broker, "guest", "guest", "/").await,
        ACCESS_REFUSED,
        "no guest when another user is the default",
    );
    assert_eq!(api(&broker).as_user(Some(("admin", "s3cret"))).get("/api/vhosts/prod").status, 200, "administrator");
}
