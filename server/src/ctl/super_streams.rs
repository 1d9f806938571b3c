//! The super stream verbs, rabbitmq-streams' `add_super_stream` and `delete_super_stream`,
//! and Warren's `add_partitions`: RabbitMQ's layout made through the management API, so that
//! what either broker's tools create is the same thing. A super stream NAME is a direct
//! exchange NAME with `x-super-stream: true` and one stream per partition bound to it,
//! NAME-0 .. NAME-(N-1) with routing keys 0 .. N-1 (or NAME-KEY with routing key KEY for
//! `--routing-keys`), each binding carrying its place in `x-stream-partition-order`.

use super::client::{encode, Client};
use super::output::say;
use super::CtlError;
use serde_json::{json, Map, Value};
use warren_delivery::exchange::super_stream::{PARTITION_ORDER_ARGUMENT, SUPER_STREAM_ARGUMENT};

/// Partitions of a super stream at most (each is a stream with its files).
pub const MAX_PARTITIONS: usize = 1024;

/// How a super stream's partitions are named and keyed.
pub enum Partitions {
    /// N partitions keyed 0 .. N-1.
    Numbered(u32),
    /// One partition per key.
    Keyed(Vec<String>),
}

impl Partitions {
    /// The partitions `--routing-keys` or `--partitions` name (`default` of them if neither).
    pub fn given(routing_keys: &Option<Vec<String>>, count: Option<u32>, default: u32) -> Self {
        match routing_keys {
            Some(keys) => Partitions::Keyed(keys.clone()),
            None => Partitions::Numbered(count.unwrap_or(default)),
        }
    }

    /// The routing keys, in partition order, of these partitions numbered from `first` on,
    /// beside `existing` ones.
    fn keys(&self, first: usize, existing: &[String]) -> Result<Vec<String>, CtlError> {
        let keys: Vec<String> = match self {
            Partitions::Numbered(n) => (0..*n as usize).map(|i| (first + i).to_string()).collect(),
            Partitions::Keyed(keys) => keys.clone(),
        };
        let total = existing.len() + keys.len();
        if keys.is_empty() || total > MAX_PARTITIONS {
            return Err(CtlError::Failed(format!("a super stream has 1 to {MAX_PARTITIONS} partitions, not {total}")));
        }
        if let Some(taken) = keys.iter().find(|key| existing.contains(key)) {
            return Err(CtlError::Failed(format!(
                "the super stream already has a partition with routing key '{taken}'"
            )));
        }
        if let Some(empty) = keys.iter().position(String::is_empty) {
            return Err(CtlError::Failed(format!("--routing-keys: key {} is empty", empty + 1)));
        }
        let mut sorted = keys.clone();
        sorted.sort();
        if let Some(pair) = sorted.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(CtlError::Failed(format!("--routing-keys: '{}' is given twice", pair[0])));
        }
        Ok(keys)
    }
}

/// The stream arguments each partition is declared with (retention, segment size).
pub struct PartitionArguments {
    /// `x-max-age`, e.g. 7D.
    pub max_age: Option<String>,
    /// `x-max-length-bytes`.
    pub max_length_bytes: Option<u64>,
    /// `x-stream-max-segment-size-bytes`.
    pub max_segment_size_bytes: Option<u64>,
}

impl PartitionArguments {
    fn as_json(&self) -> Value {
        let mut arguments = Map::new();
        arguments.insert("x-queue-type".into(), json!("stream"));
        // As rabbitmq-streams does by default: partition leaders spread over the nodes.
        arguments.insert("x-queue-leader-locator".into(), json!("balanced"));
        if let Some(age) = &self.max_age {
            arguments.insert("x-max-age".into(), json!(age));
        }
        if let Some(bytes) = self.max_length_bytes {
            arguments.insert("x-max-length-bytes".into(), json!(bytes));
        }
        if let Some(bytes) = self.max_segment_size_bytes {
            arguments.insert("x-stream-max-segment-size-bytes".into(), json!(bytes));
        }
        Value::Object(arguments)
    }
}

/// `add_super_stream`: the exchange, then each partition and its binding.
pub fn add_super_stream(
    client: &Client,
    vhost: &str,
    name: &str,
    partitions: &Partitions,
    arguments: &PartitionArguments,
) -> Result<(), CtlError> {
    let keys = partitions.keys(0, &[])?;
    let exchange = json!({ "type": "direct", "durable": true, "arguments": { SUPER_STREAM_ARGUMENT: true } });
    client.send("PUT", &format!("/api/exchanges/{}/{}", encode(vhost), encode(name)), &exchange)?;
    let stream = json!({ "durable": true, "arguments": arguments.as_json() });
    for (order, key) in keys.iter().enumerate() {
        declare_partition(client, vhost, name, key, order, &stream)?;
    }
    say(&format!("declared super stream '{name}' with {} partitions\n", keys.len()));
    Ok(())
}

/// Declares partition NAME-KEY with `stream` (its declaration in the API's shape) and binds
/// it to the super stream with `key` at place `order`.
fn declare_partition(
    client: &Client,
    vhost: &str,
    name: &str,
    key: &str,
    order: usize,
    stream: &Value,
) -> Result<(), CtlError> {
    let partition = format!("{name}-{key}");
    client.send("PUT", &format!("/api/queues/{}/{}", encode(vhost), encode(&partition)), stream)?;
    let path = format!("/api/bindings/{}/e/{}/q/{}", encode(vhost), encode(name), encode(&partition));
    let binding = json!({ "routing_key": key, "arguments": { PARTITION_ORDER_ARGUMENT: order } });
    client.send("POST", &path, &binding)?;
    Ok(())
}

/// A super stream's partitions as its bindings say: (order, stream, routing key), in order.
fn partitions_of(client: &Client, vhost: &str, name: &str) -> Result<Vec<(u64, String, String)>, CtlError> {
    let exchange_path = format!("/api/exchanges/{}/{}", encode(vhost), encode(name));
    let exchange = client.get(&exchange_path)?;
    if exchange["arguments"][SUPER_STREAM_ARGUMENT] != json!(true) {
        return Err(CtlError::Failed(format!("'{name}' is an exchange but not a super stream")));
    }
    let bindings = client.get(&format!("{exchange_path}/bindings/source"))?;
    let mut partitions: Vec<(u64, String, String)> = bindings
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["destination_type"] == "queue")
        .filter_map(|b| {
            let order = b["arguments"][PARTITION_ORDER_ARGUMENT].as_u64()?;
            Some((order, b["destination"].as_str()?.to_string(), b["routing_key"].as_str()?.to_string()))
        })
        .collect();
    partitions.sort();
    Ok(partitions)
}

/// `add_partitions`: more partitions for a super stream, bound after its last one and
/// declared with the arguments of its first. Keys map to partitions by their number, so from
/// then on some keys go to the new partitions (new messages only; what is stored stays).
pub fn add_partitions(client: &Client, vhost: &str, name: &str, partitions: &Partitions) -> Result<(), CtlError> {
    let existing = partitions_of(client, vhost, name)?;
    let Some((_, first, _)) = existing.first() else {
        return Err(CtlError::Failed(format!("super stream '{name}' has no partitions to take the arguments of")));
    };
    let existing_keys: Vec<String> = existing.iter().map(|(_, _, key)| key.clone()).collect();
    let keys = partitions.keys(existing.len(), &existing_keys)?;
    let first = client.get(&format!("/api/queues/{}/{}", encode(vhost), encode(first)))?;
    let stream = json!({ "durable": true, "arguments": first["arguments"] });
    let next_order = existing.last().map_or(0, |(order, _, _)| *order as usize + 1);
    for (i, key) in keys.iter().enumerate() {
        declare_partition(client, vhost, name, key, next_order + i, &stream)?;
    }
    say(&format!("super stream '{name}' has {} partitions now\n", existing.len() + keys.len()));
    Ok(())
}

/// `delete_super_stream`: every partition (the streams bound with a partition order), then
/// the exchange.
pub fn delete_super_stream(client: &Client, vhost: &str, name: &str) -> Result<(), CtlError> {
    let partitions = partitions_of(client, vhost, name)?;
    for (_, partition, _) in &partitions {
        client.delete(&format!("/api/queues/{}/{}", encode(vhost), encode(partition)), &[])?;
    }
    client.delete(&format!("/api/exchanges/{}/{}", encode(vhost), encode(name)), &[])?;
    say(&format!("deleted super stream '{name}' and its {} partitions\n", partitions.len()));
    Ok(())
}
