//! Super streams (partitioned streams) in RabbitMQ's layout: a `direct` exchange declared
//! with `x-super-stream: true`, its partitions the streams bound to it, in the order of
//! their binding argument `x-stream-partition-order`. A publish goes by its routing key to the
//! partition bound with that key, as any direct exchange routes.
//!
//! **Extension**: a message with header `x-partition-key` goes instead to the partition its
//! key hashes to, the way RabbitMQ's stream clients pick one on their side (murmur3 32-bit,
//! seed 104729, the unsigned hash modulo the partitions, in partition order), so a 0-9-1
//! publisher gets key partitioning with no client code and a key lands on the same partition
//! whichever client published it. Adding partitions changes where keys go from then on.

use super::binding_table::BindingTable;
use super::router::Router;
use super::{Binding, Destination};
use crate::error::BrokerResult;
use crate::field_value::{string_of, whole_number_within};
use crate::message::Message;
use amq_protocol::types::{AMQPValue, FieldTable};

/// The exchange argument that makes a direct exchange a super stream.
pub const SUPER_STREAM_ARGUMENT: &str = "x-super-stream";
/// The binding argument giving a partition's place (0 first).
pub const PARTITION_ORDER_ARGUMENT: &str = "x-stream-partition-order";
/// The message header whose value picks the partition by hash.
pub const PARTITION_KEY_HEADER: &str = "x-partition-key";
/// The murmur3 seed of RabbitMQ's stream clients' hash routing strategy.
pub const PARTITION_HASH_SEED: u32 = 104_729;

/// A super stream's routing: its partitions in order, around the direct exchange's router.
#[derive(Debug)]
pub(super) struct SuperStreamRouter {
    by_key: Box<dyn Router>,
    partitions: Vec<Destination>,
}

impl SuperStreamRouter {
    /// Partitions over `by_key`, the router of a direct exchange.
    pub(super) fn new(by_key: Box<dyn Router>) -> Self {
        SuperStreamRouter { by_key, partitions: Vec::new() }
    }
}

impl Router for SuperStreamRouter {
    fn bind(&mut self, binding: &Binding, bound: &BindingTable) -> BrokerResult<()> {
        self.by_key.bind(binding, bound)?;
        self.partitions = partitions_of(bound.iter().chain(std::iter::once(binding)));
        Ok(())
    }

    fn unbind(&mut self, binding: &Binding, remaining: &BindingTable) {
        self.by_key.unbind(binding, remaining);
        self.partitions = partitions_of(remaining.iter());
    }

    /// By the message's partition key if it has one, as RabbitMQ's stream clients pick;
    /// otherwise by routing key.
    fn route(&self, message: &Message, bound: &BindingTable, out: &mut Vec<Destination>) {
        if !self.partitions.is_empty() {
            if let Some(key) = partition_key(message.properties.headers()) {
                out.push(self.partitions[partition_index(&key, self.partitions.len())].clone());
                return;
            }
        }
        self.by_key.route(message, bound, out);
    }

    fn partitions(&self) -> Option<&[Destination]> {
        Some(&self.partitions)
    }
}

/// Whether exchange arguments declare a super stream.
pub fn is_super_stream(arguments: &FieldTable) -> bool {
    matches!(arguments.inner().get(SUPER_STREAM_ARGUMENT), Some(AMQPValue::Boolean(true)))
}

/// The partitions in order: each binding's destination, by `x-stream-partition-order`, then
/// by when it was bound (bindings without the argument come last).
fn partitions_of<'a>(bindings: impl Iterator<Item = &'a Binding>) -> Vec<Destination> {
    let mut ordered: Vec<(u64, usize, &Destination)> = bindings
        .enumerate()
        .map(|(bound, binding)| (partition_order(binding).unwrap_or(u64::MAX), bound, &binding.destination))
        .collect();
    ordered.sort_by_key(|(order, bound, _)| (*order, *bound));
    let mut partitions: Vec<Destination> = Vec::with_capacity(ordered.len());
    for (_, _, destination) in ordered {
        // One stream bound twice (two keys) is one partition.
        if !partitions.contains(destination) {
            partitions.push(destination.clone());
        }
    }
    partitions
}

fn partition_order(binding: &Binding) -> Option<u64> {
    binding.arguments.inner().get(PARTITION_ORDER_ARGUMENT).and_then(|v| whole_number_within(v, 0, u64::MAX))
}

/// The bytes of a message's partition key, if its headers carry one: a string as it is, a
/// number as its decimal text.
fn partition_key(headers: Option<&FieldTable>) -> Option<Vec<u8>> {
    let value = headers?.inner().get(PARTITION_KEY_HEADER)?;
    if let Some(text) = string_of(value) {
        return Some(text.to_vec());
    }
    whole_number_within(value, 0, u64::MAX).map(|n| n.to_string().into_bytes())
}

/// The partition (0-based, of `partitions`) that `key` goes to; `partitions` is not 0.
pub fn partition_index(key: &[u8], partitions: usize) -> usize {
    let hash = murmur3::murmur3_32(&mut std::io::Cursor::new(key), PARTITION_HASH_SEED).unwrap_or(0);
    (u64::from(hash) % partitions as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field_value::test_values::table;
    use std::sync::Arc;

    #[test]
    fn keys_go_where_rabbitmq_stream_clients_send_them() {
        // Computed with Python's mmh3 (mmh3.hash(key, 104729, signed=False)): an independent
        // implementation of the hash RabbitMQ's clients use.
        for (key, hash, of_three, of_six) in [
            ("hello", 1_321_743_225u32, 0, 3),
            ("customer-42", 80_594_573, 2, 5),
            ("", 3_329_588_566, 1, 4),
            ("é", 2_922_484_690, 1, 4),
            ("0", 2_929_165_565, 2, 5),
        ] {
            let computed = murmur3::murmur3_32(&mut std::io::Cursor::new(key.as_bytes()), PARTITION_HASH_SEED);
            assert_eq!(computed.expect("hash"), hash, "{key:?}");
            assert_eq!(partition_index(key.as_bytes(), 3), of_three, "{key:?} of 3");
            assert_eq!(partition_index(key.as_bytes(), 6), of_six, "{key:?} of 6");
        }
    }

    fn bound(stream: &str, order: Option<i64>) -> Binding {
        let arguments = match order {
            Some(order) => table(&[(PARTITION_ORDER_ARGUMENT, AMQPValue::LongLongInt(order))]),
            None => FieldTable::default(),
        };
        Binding { destination: Destination::Queue(Arc::from(stream)), routing_key: stream.into(), arguments }
    }

    #[test]
    fn partitions_follow_their_order_argument() {
        let bindings = [bound("s-2", Some(2)), bound("s-0", Some(0)), bound("extra", None), bound("s-1", Some(1))];
        let names: Vec<String> = partitions_of(bindings.iter())
            .into_iter()
            .map(|d| match d {
                Destination::Queue(name) | Destination::Exchange(name) => name.to_string(),
            })
            .collect();
        assert_eq!(names, ["s-0", "s-1", "s-2", "extra"]);
    }

    #[test]
    fn a_partition_key_is_a_string_or_a_number() {
        let headers = table(&[(PARTITION_KEY_HEADER, AMQPValue::LongLongInt(42))]);
        assert_eq!(partition_key(Some(&headers)), Some(b"42".to_vec()));
        let headers = table(&[(PARTITION_KEY_HEADER, AMQPValue::Boolean(true))]);
        assert_eq!(partition_key(Some(&headers)), None);
        assert_eq!(partition_key(None), None);
    }
}
