//! `list_stream_group_consumers` (rabbitmq-streams' verb): the consumers of one consumer
//! group of a stream, or of a super stream across its partitions, each with the partition it
//! reads, whether it is the active one and its last delivered offset.

use super::client::{encode, Client};
use super::lists::{print_items, STREAM_GROUP_CONSUMERS};
use super::output::Format;
use super::CtlError;
use serde_json::Value;

/// Lists the consumers of group `group` on `stream` (a stream or a super stream) of `vhost`.
pub fn list_group_consumers(
    client: &Client,
    vhost: &str,
    stream: &str,
    group: &str,
    columns: &[String],
    format: Format,
) -> Result<(), CtlError> {
    let rows = client.get(&format!("/api/stream/groups/{}/{}", encode(vhost), encode(stream)))?;
    let rows: Vec<&Value> =
        rows.as_array().into_iter().flatten().filter(|row| row["group"].as_str() == Some(group)).collect();
    if rows.is_empty() {
        return Err(CtlError::Failed(format!(
            "no consumer group '{group}' on '{stream}' in vhost '{vhost}' (list_stream_consumer_groups lists them)"
        )));
    }
    let consumers: Vec<Value> = rows.iter().flat_map(|row| consumers_of(row)).collect();
    print_items(&STREAM_GROUP_CONSUMERS, &consumers, columns, format)
}

/// The consumers of one group row, each with its row's stream, partition and group.
fn consumers_of(row: &Value) -> Vec<Value> {
    let consumers = row["consumers"].as_array().cloned().unwrap_or_default();
    consumers
        .into_iter()
        .map(|mut consumer| {
            let state = if consumer["active"].as_bool() == Some(true) { "active" } else { "waiting" };
            if let Value::Object(fields) = &mut consumer {
                fields.insert("stream".into(), row["stream"].clone());
                fields.insert("partition".into(), row["partition"].clone());
                fields.insert("group".into(), row["group"].clone());
                fields.insert("state".into(), Value::String(state.into()));
            }
            consumer
        })
        .collect()
}
