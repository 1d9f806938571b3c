//! The verbs about the node itself: `status` (the overview and this node's memory, disk, file
//! descriptors, alarms, files), `environment` (its settings and where each came from) and
//! `set_log_level` (its log filter, changed while it runs).

use super::client::Client;
use super::output::{say, Format};
use super::CtlError;
use serde_json::{json, Value};

/// Bytes in a mebibyte, for the sizes `status` prints.
const MIB_BYTES: f64 = 1024.0 * 1024.0;

/// `status`: the overview, with this node's figures from `/api/nodes`.
pub fn status(client: &Client, format: Format) -> Result<(), CtlError> {
    let overview = client.get("/api/overview")?;
    let nodes = client.get("/api/nodes")?;
    let this = nodes.as_array().into_iter().flatten().find(|n| n["name"] == overview["node"]).cloned();
    let node = this.unwrap_or(Value::Null);
    if format == Format::Json {
        let both = json!({ "overview": overview, "node": node });
        say(&format!("{}\n", serde_json::to_string_pretty(&both).unwrap_or_default()));
        return Ok(());
    }
    let mut lines = overview_lines(&overview);
    lines.extend(node_lines(&node));
    say(&lines.into_iter().map(|l| l + "\n").collect::<String>());
    Ok(())
}

fn overview_lines(overview: &Value) -> Vec<String> {
    let totals = &overview["object_totals"];
    let queued = &overview["queue_totals"];
    let rates = &overview["message_stats"];
    let listeners: Vec<String> = overview["listeners"].as_array().into_iter().flatten().map(listener).collect();
    vec![
        format!(
            "{} {} on node {}, cluster {}",
            overview["product_name"].as_str().unwrap_or("Warren"),
            overview["product_version"].as_str().unwrap_or("?"),
            overview["node"].as_str().unwrap_or("?"),
            overview["cluster_name"].as_str().unwrap_or("?")
        ),
        format!("uptime: {} s", overview["uptime_ms"].as_u64().unwrap_or(0) / 1000),
        format!("listeners: {}", listeners.join(", ")),
        format!(
            "connections: {}, channels: {}, consumers: {}, queues: {}, exchanges: {}",
            totals["connections"], totals["channels"], totals["consumers"], totals["queues"], totals["exchanges"]
        ),
        format!(
            "messages: {} ({} ready, {} unacknowledged)",
            queued["messages"], queued["messages_ready"], queued["messages_unacknowledged"]
        ),
        format!(
            "rates: publish {:.1}/s, deliver {:.1}/s, ack {:.1}/s",
            rate(rates, "publish"),
            rate(rates, "deliver_get"),
            rate(rates, "ack")
        ),
    ]
}

fn listener(l: &Value) -> String {
    format!("{} {}:{}", l["protocol"].as_str().unwrap_or("?"), l["ip_address"].as_str().unwrap_or("?"), l["port"])
}

/// This node's memory, disk, descriptors, alarms and files.
fn node_lines(node: &Value) -> Vec<String> {
    let mib = |key: &str| node[key].as_f64().map_or("?".to_string(), |b| format!("{:.1} MiB", b / MIB_BYTES));
    let alarms: Vec<&str> = [("mem_alarm", "memory"), ("disk_free_alarm", "disk")]
        .into_iter()
        .filter(|(key, _)| node[*key].as_bool() == Some(true))
        .map(|(_, name)| name)
        .collect();
    let files = |key: &str| {
        let names: Vec<&str> = node[key].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    };
    vec![
        format!("memory: {} used, high watermark {}", mib("mem_used"), mib("mem_limit")),
        format!("disk: {} free, limit {}", mib("disk_free"), mib("disk_free_limit")),
        format!(
            "file descriptors: {} used of {}, sockets: {}",
            node["fd_used"], node["fd_total"], node["sockets_used"]
        ),
        format!("alarms: {}", if alarms.is_empty() { "none".to_string() } else { alarms.join(", ") }),
        format!("data directory: {}", node["db_dir"].as_str().unwrap_or("?")),
        format!("config file: {}", files("config_files")),
        format!("log file: {}", files("log_files")),
    ]
}

fn rate(stats: &Value, name: &str) -> f64 {
    stats[format!("{name}_details")]["rate"].as_f64().unwrap_or(0.0)
}

/// `environment`: every setting, its value and where it came from.
pub fn environment(client: &Client, format: Format) -> Result<(), CtlError> {
    let environment = client.get("/api/environment")?;
    if format == Format::Json {
        say(&format!("{}\n", serde_json::to_string_pretty(&environment).unwrap_or_default()));
        return Ok(());
    }
    let settings = environment["settings"].as_object().cloned().unwrap_or_default();
    let width = settings.keys().map(String::len).max().unwrap_or(0);
    let mut out = String::new();
    for (key, setting) in &settings {
        let value = setting["value"].as_str().unwrap_or_default();
        let source = setting["source"].as_str().unwrap_or_default();
        out.push_str(&format!("{key:<width$}  {value}  ({source})\n"));
    }
    say(&out);
    Ok(())
}

/// `set_log_level`: a level (`debug`) or `RUST_LOG` directives (`info,warren_amqp=debug`).
pub fn set_log_level(client: &Client, level: &str) -> Result<(), CtlError> {
    client.send("PUT", "/api/log-level", &json!({ "level": level }))?;
    say(&format!("Log filter set to {level}\n"));
    Ok(())
}
