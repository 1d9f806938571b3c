//! `warren ctl`, the real binary, against a broker's management API: the list verbs with
//! rabbitmqctl's columns, as tables and as JSON, the verbs that declare, publish, get, browse,
//! purge, bind, close and move definitions, its global options before or after the verb (as
//! rabbitmqctl takes them), and its errors (exit status 2 and a text that says what to fix).

use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};
use serde_json::Value;
use warren_tests::*;

/// Runs `warren ctl` against `broker`: (succeeded, stdout, stderr).
fn ctl(broker: &warren_tests::TestBroker, args: &[&str]) -> (bool, String, String) {
    let url = format!("http://{}", broker.http_addr.expect("management API"));
    ctl_at(&url, args)
}

fn ctl_at(url: &str, args: &[&str]) -> (bool, String, String) {
    warren_tests::process::run_ctl(url, args)
}

/// The reply code of a refused channel operation (ACCESS_REFUSED).
const ACCESS_REFUSED: u16 = 403;
/// The reply code of a refused `connection.open` (NOT_ALLOWED).
const NOT_ALLOWED: u16 = 530;

fn ok(broker: &warren_tests::TestBroker, args: &[&str]) -> String {
    let (succeeded, out, err) = ctl(broker, args);
    assert!(succeeded, "warren ctl {args:?} failed: {err}");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verbs_declare_publish_read_and_list_with_rabbitmqctls_columns() {
    let broker = start_broker().await;
    ok(&broker, &["declare_exchange", "orders", "topic"]);
    ok(&broker, &["declare_queue", "eu", "--arguments", r#"{"x-max-length": 50}"#]);
    ok(&broker, &["declare_queue", "log", "--type", "stream"]);
    ok(&broker, &["bind", "orders", "eu", "--routing-key", "eu.*"]);
    ok(&broker, &["bind", "orders", "log", "--routing-key", "#"]);
    ok(&broker, &["publish", "orders", "eu.de", "first order"]);
    ok(&broker, &["publish", "orders", "eu.fr", "second order"]);

    let table = ok(&broker, &["list_queues", "name", "type", "messages"]);
    let lines: Vec<Vec<&str>> = table.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(
        lines,
        [vec!["name", "type", "messages"], vec!["eu", "classic", "2"], vec!["log", "stream", "2"]],
        "{table}"
    );
    let json: Value = serde_json::from_str(&ok(&broker, &["--format", "json", "list_queues"])).expect("json");
    assert_eq!(json, serde_json::json!([{"name": "eu", "messages": 2}, {"name": "log", "messages": 2}]));
    let bindings = ok(&broker, &["list_bindings", "source_name", "destination_name", "routing_key"]);
    assert!(
        bindings.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["orders", "eu", "eu.*"]),
        "{bindings}"
    );
    assert!(ok(&broker, &["list_exchanges"]).lines().any(|l| l.starts_with("orders") && l.ends_with("topic")));
    assert!(ok(&broker, &["list_users"]).contains("administrator"));
    assert!(ok(&broker, &["list_vhosts"]).lines().any(|l| l == "/"));

    let got = ok(&broker, &["get", "eu", "--count", "5"]);
    assert!(got.contains("first order") && got.contains("second order"), "{got}");
    assert!(ok(&broker, &["list_queues"]).contains("eu    2"), "get put them back");
    let browsed = ok(&broker, &["browse", "log", "--offset", "1", "--count", "5"]);
    assert!(browsed.contains("second order") && !browsed.contains("first order"), "{browsed}");
    assert!(browsed.contains("next offset: 2"), "{browsed}");
    ok(&broker, &["publish", "orders", "us.ny", "tagged order", "--header", "x-stream-filter-value=us"]);
    let tagged = ok(&broker, &["browse", "log", "--filter", "us"]);
    assert!(tagged.contains("tagged order") && !tagged.contains("first order"), "{tagged}");
    let (succeeded, _, err) = ctl(&broker, &["publish", "orders", "us.ny", "x", "--header", "novalue"]);
    assert!(!succeeded && err.contains("NAME=VALUE"), "{err}");
    ok(&broker, &["purge_queue", "eu"]);
    assert!(ok(&broker, &["list_queues", "name", "messages"]).contains("eu    0"));
    let status = ok(&broker, &["status"]);
    assert!(status.contains("queues: 2") && status.contains("listeners: amqp"), "{status}");

    // Connections are listed and closed.
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.expect("channel");
    let names = ok(&broker, &["--format", "json", "list_connections", "name", "user"]);
    let listed: Value = serde_json::from_str(&names).expect("json");
    assert_eq!(listed[0]["user"], "guest");
    let name = listed[0]["name"].as_str().expect("name").to_string();
    assert!(ok(&broker, &["list_channels"]).contains(&name));
    ok(&broker, &["close_connection", &name, "go away"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while conn.status().connected() {
        assert!(std::time::Instant::now() < deadline, "closed");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    drop(channel);

    ok(&broker, &["delete_queue", "eu"]);
    assert!(!ok(&broker, &["list_queues"]).contains("eu"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn definitions_go_out_to_a_file_and_into_another_broker() {
    let first = start_broker().await;
    let conn = connect(&first).await;
    let ch = conn.create_channel().await.expect("channel");
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    ch.queue_declare("kept".into(), durable, FieldTable::default()).await.expect("declare");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("definitions.json");
    let file = file.to_str().expect("utf-8 path");
    ok(&first, &["export_definitions", file]);
    let second = start_broker().await;
    let imported = ok(&second, &["import_definitions", file]);
    // The queue, and the user, vhost and permission every broker starts with.
    assert!(imported.contains("imported 4 definitions"), "{imported}");
    assert!(ok(&second, &["list_queues"]).contains("kept"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_say_what_to_fix_and_exit_non_zero() {
    let broker = start_broker().await;
    let (succeeded, _, err) = ctl(&broker, &["purge_queue", "nowhere"]);
    assert!(!succeeded && err.contains("404") && err.contains("nowhere"), "{err}");
    let (succeeded, _, err) = ctl(&broker, &["--password", "wrong", "status"]);
    assert!(!succeeded && err.contains("401") && err.contains("--password"), "{err}");
    let (succeeded, _, err) = ctl(&broker, &["list_queues", "colour"]);
    assert!(!succeeded && err.contains("unknown column 'colour'"), "{err}");
    let (succeeded, _, err) = ctl_at("http://127.0.0.1:1", &["status"]);
    assert!(!succeeded && err.contains("cannot reach the management API"), "{err}");
    let (succeeded, _, err) = ctl(&broker, &["publish", "", "nowhere", "lost"]);
    assert!(!succeeded && err.contains("unroutable"), "{err}");
    let (succeeded, _, err) = ctl(&broker, &["no_such_verb"]);
    assert!(!succeeded && err.contains("no_such_verb"), "{err}");
}

/// Connects as `user` to `vhost` (percent-encoded in the URI, as every byte may need it).
async fn connect_as(
    broker: &warren_tests::TestBroker,
    user: &str,
    password: &str,
    vhost: &str,
) -> lapin::Result<Connection> {
    let vhost: String = vhost.bytes().map(|b| format!("%{b:02x}")).collect();
    let uri = format!("amqp://{user}:{password}@{}/{vhost}", broker.amqp_addr);
    Connection::connect(&uri, ConnectionProperties::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_vhost_may_follow_the_verb_as_in_rabbitmqctl() {
    let broker = start_broker().await;
    ok(&broker, &["add_user", "app", "s3cret"]);
    ok(&broker, &["add_vhost", "orders"]);
    ok(&broker, &["set_permissions", "-p", "orders", "app", r"^app\.", ".*", ".*"]);
    let listed = ok(&broker, &["list_permissions", "-p", "orders", "user", "configure"]);
    let rows: Vec<Vec<&str>> = listed.lines().map(|l| l.split_whitespace().collect()).collect();
    assert!(rows.contains(&vec!["app", r"^app\."]), "{listed}");

    // The permission is app's in orders, not in /, and its pattern is the one given.
    let refused = connect_as(&broker, "app", "s3cret", "/").await;
    assert_code(refused, NOT_ALLOWED, "no permissions in /");
    let app = connect_as(&broker, "app", "s3cret", "orders").await.expect("app opens orders");
    let ch = channel(&app).await;
    ch.queue_declare("app.jobs".into(), durable(), FieldTable::default()).await.expect("app.jobs is app's");
    let other = channel(&app).await.queue_declare("other".into(), durable(), FieldTable::default()).await;
    assert_code(other, ACCESS_REFUSED, "configure is ^app\\. only");
    let queues = ok(&broker, &["list_queues", "name", "-p", "orders"]);
    assert_eq!(queues.lines().collect::<Vec<_>>(), ["name", "app.jobs"], "{queues}");
    // rabbitmqctl's output flags, wherever they come: no header row, or JSON.
    let silent = ok(&broker, &["list_queues", "-p", "orders", "name", "--silent"]);
    assert_eq!(silent.lines().collect::<Vec<_>>(), ["app.jobs"], "{silent}");
    let quiet = ok(&broker, &["-q", "list_queues", "-p", "orders", "name"]);
    assert_eq!(quiet.lines().collect::<Vec<_>>(), ["name", "app.jobs"], "{quiet}");
    let json = ok(&broker, &["list_queues", "-p", "orders", "name", "--formatter", "json"]);
    let listed: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(listed, serde_json::json!([{"name": "app.jobs"}]), "{json}");

    let permissions = ok(&broker, &["list_user_permissions", "app", "--silent"]);
    let rows: Vec<Vec<&str>> = permissions.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows, [vec!["orders", r"^app\.", ".*", ".*"]], "{permissions}");

    // close_all_connections closes the vhost's (-p) connections, or every one with --global.
    let root = connect(&broker).await;
    ok(&broker, &["close_all_connections", "-p", "orders", "maintenance"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while app.status().connected() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(!app.status().connected(), "the connection to orders is closed");
    assert!(root.status().connected(), "the connection to / is not");
    ok(&broker, &["close_all_connections", "--global", "maintenance"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while root.status().connected() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(!root.status().connected(), "--global closes every connection");
}

/// `warren ctl VERB` at `url`: (exit code, stdout, stderr).
fn exit_code_of(url: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let output = tokio::task::block_in_place(|| {
        std::process::Command::new(warren_tests::process::warren_binary())
            .args(["ctl", "--url", url])
            .args(args)
            .output()
    })
    .expect("warren ctl runs");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).to_string();
    (output.status.code(), text(&output.stdout), text(&output.stderr))
}

/// rabbitmq-diagnostics' health checks: 0 when healthy, 69 (EX_UNAVAILABLE) with the reason
/// when not, and a node that cannot be reached fails them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_check_verbs_exit_as_rabbitmq_diagnostics_does() {
    const UNAVAILABLE: Option<i32> = Some(69);
    let broker = start_broker().await;
    let url = format!("http://{}", broker.http_addr.expect("management API"));
    let amqp_port = broker.amqp_addr.port().to_string();
    for verb in [
        &["ping"][..],
        &["check_running"],
        &["check_local_alarms"],
        &["check_alarms"],
        &["check_port_listener", &amqp_port],
        &["check_protocol_listener", "amqp"],
        &["check_port_connectivity"],
        &["check_virtual_hosts"],
        &["check_if_node_is_quorum_critical"],
        &["await_startup", "--timeout", "5"],
    ] {
        let (code, out, err) = exit_code_of(&url, verb);
        assert_eq!(code, Some(0), "{verb:?}: {out}{err}");
    }
    let (code, _, err) = exit_code_of(&url, &["check_port_listener", "1"]);
    assert_eq!(code, UNAVAILABLE, "{err}");
    assert!(err.contains("No active listener on port 1"), "{err}");
    let (code, out, err) = exit_code_of(&url, &["check_protocol_listener", "stream"]);
    assert_eq!(code, Some(0), "the Stream protocol listens: {out}{err}");
    let (code, _, err) = exit_code_of(&url, &["check_protocol_listener", "mqtt"]);
    assert_eq!(code, UNAVAILABLE, "{err}");

    let conn = connect(&broker).await;
    let quorum = table(&[("x-queue-type", text("quorum"))]);
    channel(&conn).await.queue_declare("lonely".into(), durable(), quorum).await.expect("declare");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let (code, err) = loop {
        let (code, _, err) = exit_code_of(&url, &["check_if_node_is_quorum_critical"]);
        if code == UNAVAILABLE || std::time::Instant::now() > deadline {
            break (code, err);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(code, UNAVAILABLE, "{err}");
    assert!(err.contains("lonely"), "names the queue: {err}");
    broker.shutdown().await;

    let (code, _, err) = exit_code_of(&url, &["ping"]);
    assert_eq!(code, UNAVAILABLE, "a stopped node fails the check: {err}");
    let (code, _, err) = exit_code_of(&url, &["await_startup", "--timeout", "1"]);
    assert_eq!(code, UNAVAILABLE, "{err}");
    assert!(err.contains("did not start"), "{err}");
}

/// The verbs about the node, against the real binary (whose log filter is the process's):
/// `status` with memory, disk, descriptors, alarms and files; `environment` with each
/// setting's source and the password hidden; `set_log_level` taking effect while it runs;
/// `authenticate_user`.
#[test]
fn node_verbs_show_the_nodes_figures_and_files_and_change_its_log_level() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("warren.toml");
    std::fs::write(&config, "heartbeat = 30\n").expect("config");
    let data = dir.path().join("data");
    let config_arg = config.to_string_lossy().to_string();
    let broker = warren_tests::process::WarrenProcess::start(&data, &["--config", &config_arg]);
    let url = format!("http://{}", broker.http_addr.expect("management API"));
    let ok = |args: &[&str]| {
        let (succeeded, out, err) = ctl_at(&url, args);
        assert!(succeeded, "warren ctl {args:?} failed: {err}");
        out
    };

    let status = ok(&["status"]);
    for line in ["memory: ", "disk: ", "file descriptors: ", "alarms: none"] {
        assert!(status.contains(line), "{status}");
    }
    let data_dir = std::path::absolute(&data).expect("absolute").display().to_string();
    assert!(status.contains(&format!("data directory: {data_dir}")), "{status}");
    assert!(status.contains(&format!("config file: {config_arg}")), "{status}");

    let environment: Value = serde_json::from_str(&ok(&["--formatter", "json", "environment"])).expect("json");
    let settings = &environment["settings"];
    assert_eq!(settings["heartbeat"], serde_json::json!({"value": "30", "source": "flag or file"}));
    assert_eq!(settings["fsync"]["source"], "default");
    assert_eq!(settings["default_pass"]["value"], "(hidden)");
    assert_eq!(environment["db_dir"], data_dir.as_str());

    // At warn, the API's own info line about the change is not written; at debug it is.
    ok(&["set_log_level", "warn"]);
    ok(&["set_log_level", "info,warren_webui=debug"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let changes = loop {
        let lines: Vec<String> = broker.log_lines().into_iter().filter(|l| l.contains("log filter changed")).collect();
        if !lines.is_empty() || std::time::Instant::now() > deadline {
            break lines;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(changes.len(), 1, "only the change made at an info level is logged: {changes:?}");
    assert!(changes[0].contains("warren_webui=debug"), "{changes:?}");
    let (succeeded, _, err) = ctl_at(&url, &["set_log_level", "warren_amqp=loud"]);
    assert!(!succeeded && err.contains("invalid log filter"), "{err}");

    assert!(ok(&["authenticate_user", "guest", "guest"]).contains("Success"));
    let (succeeded, _, err) = ctl_at(&url, &["authenticate_user", "guest", "wrong"]);
    assert!(!succeeded && err.contains("failed to authenticate user \"guest\""), "{err}");
    let consumers: Value = serde_json::from_str(&ok(&["--formatter", "json", "list_stream_consumers"])).expect("json");
    assert_eq!(consumers, serde_json::json!([]));
}
