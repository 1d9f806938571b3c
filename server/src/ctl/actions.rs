//! The verbs that change or read things through the API: queues, exchanges, bindings,
//! connections, messages, definitions.

use super::client::{encode, Client};
use super::output::{print, say, Format};
use super::CtlError;
use serde_json::{json, Value};

fn queue_path(vhost: &str, queue: &str) -> String {
    format!("/api/queues/{}/{}", encode(vhost), encode(queue))
}

fn json_argument(text: &Option<String>) -> Result<Value, CtlError> {
    match text {
        None => Ok(json!({})),
        Some(text) => serde_json::from_str(text).map_err(|e| CtlError::Failed(format!("--arguments is not JSON: {e}"))),
    }
}

/// `declare_queue`.
pub fn declare_queue(
    client: &Client,
    vhost: &str,
    queue: &str,
    kind: &str,
    durable: bool,
    arguments: &Option<String>,
) -> Result<(), CtlError> {
    let mut arguments = json_argument(arguments)?;
    arguments["x-queue-type"] = json!(kind);
    client.send("PUT", &queue_path(vhost, queue), &json!({ "durable": durable, "arguments": arguments }))?;
    say(&format!("declared {kind} queue '{queue}'\n"));
    Ok(())
}

/// `delete_queue`.
pub fn delete_queue(
    client: &Client,
    vhost: &str,
    queue: &str,
    if_empty: bool,
    if_unused: bool,
) -> Result<(), CtlError> {
    client.delete(&format!("{}?if-empty={if_empty}&if-unused={if_unused}", queue_path(vhost, queue)), &[])?;
    say(&format!("deleted queue '{queue}'\n"));
    Ok(())
}

/// `purge_queue`.
pub fn purge_queue(client: &Client, vhost: &str, queue: &str) -> Result<(), CtlError> {
    client.delete(&format!("{}/contents", queue_path(vhost, queue)), &[])?;
    say(&format!("purged queue '{queue}'\n"));
    Ok(())
}

/// `set_vm_memory_high_watermark` and `set_disk_free_limit`: one threshold of the resource
/// alarms, checked by the broker (a bad value is its 400, with the reason).
pub fn set_resource_limit(client: &Client, setting: &str, value: &str) -> Result<(), CtlError> {
    client.send("PUT", "/api/resource-limits", &json!({ setting: value }))?;
    say(&format!("{setting} set to {value}\n"));
    Ok(())
}

/// `declare_exchange`.
pub fn declare_exchange(
    client: &Client,
    vhost: &str,
    exchange: &str,
    kind: &str,
    durable: bool,
    arguments: &Option<String>,
) -> Result<(), CtlError> {
    let body = json!({ "type": kind, "durable": durable, "arguments": json_argument(arguments)? });
    client.send("PUT", &format!("/api/exchanges/{}/{}", encode(vhost), encode(exchange)), &body)?;
    say(&format!("declared {kind} exchange '{exchange}'\n"));
    Ok(())
}

/// `bind`.
pub fn bind(
    client: &Client,
    vhost: &str,
    source: &str,
    destination: &str,
    to_exchange: bool,
    routing_key: &str,
    arguments: &Option<String>,
) -> Result<(), CtlError> {
    let kind = if to_exchange { "e" } else { "q" };
    let path = format!("/api/bindings/{}/e/{}/{kind}/{}", encode(vhost), encode(source), encode(destination));
    client.send("POST", &path, &json!({ "routing_key": routing_key, "arguments": json_argument(arguments)? }))?;
    say(&format!("bound '{source}' to '{destination}' with routing key '{routing_key}'\n"));
    Ok(())
}

/// `close_connection`.
pub fn close_connection(client: &Client, name: &str, reason: &str) -> Result<(), CtlError> {
    client.delete(&format!("/api/connections/{}", encode(name)), &[("X-Reason", reason)])?;
    say(&format!("closing connection '{name}'\n"));
    Ok(())
}

/// `close_all_connections`: the connections of `vhost` (every vhost's when `None`).
pub fn close_all_connections(client: &Client, vhost: Option<&str>, reason: &str) -> Result<(), CtlError> {
    let connections = client.get("/api/connections")?;
    let mut closed = 0;
    for connection in connections.as_array().into_iter().flatten() {
        let (Some(name), in_vhost) = (connection["name"].as_str(), connection["vhost"].as_str()) else { continue };
        if vhost.is_some_and(|wanted| in_vhost != Some(wanted)) {
            continue;
        }
        close_connection(client, name, reason)?;
        closed += 1;
    }
    say(&format!("closed {closed} connection(s)\n"));
    Ok(())
}

/// `publish`.
pub fn publish(
    client: &Client,
    vhost: &str,
    exchange: &str,
    routing_key: &str,
    payload: &str,
    persistent: bool,
    headers: &[(String, String)],
) -> Result<(), CtlError> {
    let exchange_segment = if exchange.is_empty() { "amq.default".to_string() } else { encode(exchange) };
    let mut properties = json!({ "delivery_mode": if persistent { 2 } else { 1 } });
    if !headers.is_empty() {
        let headers: serde_json::Map<String, Value> =
            headers.iter().map(|(name, value)| (name.clone(), Value::String(value.clone()))).collect();
        properties["headers"] = Value::Object(headers);
    }
    let body = json!({
        "routing_key": routing_key, "payload": payload, "payload_encoding": "string", "properties": properties,
    });
    let answer = client.send("POST", &format!("/api/exchanges/{}/{exchange_segment}/publish", encode(vhost)), &body)?;
    match answer["routed"].as_bool() {
        Some(true) => say("message published and routed\n"),
        _ => return Err(CtlError::Failed("message published, but no queue took it (unroutable)".into())),
    }
    Ok(())
}

/// The columns `get` and `browse` show of a message.
fn message_columns(with_offset: bool) -> Vec<String> {
    let mut columns = vec!["routing_key".to_string(), "payload".into(), "payload_bytes".into(), "redelivered".into()];
    if with_offset {
        columns =
            vec!["offset".into(), "timestamp".into(), "routing_key".into(), "payload".into(), "payload_bytes".into()];
    }
    columns
}

/// `get`.
pub fn get(
    client: &Client,
    vhost: &str,
    queue: &str,
    count: u32,
    ackmode: &str,
    format: Format,
) -> Result<(), CtlError> {
    let body = json!({ "count": count, "ackmode": ackmode, "encoding": "auto" });
    let messages = client.send("POST", &format!("{}/get", queue_path(vhost, queue)), &body)?;
    let items = messages.as_array().cloned().unwrap_or_default();
    print(format, &message_columns(false), &items, |item, column| item[column].clone());
    Ok(())
}

/// `browse`: a queue's log (a stream's, or a durable queue's) read by offset, nothing consumed.
pub fn browse(
    client: &Client,
    vhost: &str,
    queue: &str,
    offset: &str,
    count: u32,
    filter: &Option<String>,
    format: Format,
) -> Result<(), CtlError> {
    let mut path = format!("{}/messages?offset={}&count={count}", queue_path(vhost, queue), encode(offset));
    if let Some(filter) = filter {
        path.push_str(&format!("&filter={}", encode(filter)));
    }
    let read = client.get(&path)?;
    let items = read["messages"].as_array().cloned().unwrap_or_default();
    print(format, &message_columns(true), &items, |item, column| item[column].clone());
    if format == Format::Table {
        say(&format!(
            "next offset: {} (the log holds {} to {})\n",
            read["next_offset"], read["first_offset"], read["end_offset"]
        ));
    }
    Ok(())
}

/// `export_definitions FILE` (`-`: standard output).
pub fn export_definitions(client: &Client, file: &str) -> Result<(), CtlError> {
    let definitions = client.get("/api/definitions")?;
    let text = serde_json::to_string_pretty(&definitions).unwrap_or_default() + "\n";
    if file == "-" {
        say(&text);
        return Ok(());
    }
    std::fs::write(file, text).map_err(|e| CtlError::Failed(format!("cannot write {file}: {e}")))?;
    say(&format!("exported definitions to {file}\n"));
    Ok(())
}

/// `import_definitions FILE` (`-`: standard input).
pub fn import_definitions(client: &Client, file: &str) -> Result<(), CtlError> {
    let text = if file == "-" {
        std::io::read_to_string(std::io::stdin())
            .map_err(|e| CtlError::Failed(format!("cannot read standard input: {e}")))?
    } else {
        std::fs::read_to_string(file).map_err(|e| CtlError::Failed(format!("cannot read {file}: {e}")))?
    };
    let definitions: Value =
        serde_json::from_str(&text).map_err(|e| CtlError::Failed(format!("{file} is not JSON: {e}")))?;
    let report = client.send("POST", "/api/definitions", &definitions)?;
    say(&format!("imported {} definitions\n", report["applied"]));
    for skipped in report["skipped"].as_array().into_iter().flatten() {
        say(&format!(
            "skipped {} '{}': {}\n",
            skipped["kind"].as_str().unwrap_or("?"),
            skipped["name"].as_str().unwrap_or("?"),
            skipped["reason"].as_str().unwrap_or("?")
        ));
    }
    Ok(())
}
