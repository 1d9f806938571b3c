//! [`BindingTable`]: an exchange's bindings in the order they were made, each found by what
//! identifies it (destination, routing key, arguments) without a scan.
//!
//! An exchange with 100,000 bindings (one per queue, as applications declare them) answered
//! every bind and unbind with a search through all of them; here a binding is found through
//! its destination and key, among the few that differ only in their arguments.

use super::{Binding, Destination};
use std::collections::{BTreeMap, HashMap};

/// An exchange's bindings.
#[derive(Debug, Default)]
pub(super) struct BindingTable {
    /// The bindings, by the order they were made in.
    by_order: BTreeMap<u64, Binding>,
    /// Where each binding is in `by_order`, by destination then routing key.
    by_destination: HashMap<Destination, HashMap<String, Vec<u64>>>,
    next_order: u64,
}

impl BindingTable {
    /// Adds `binding`; false if an identical one is there.
    pub(super) fn insert(&mut self, binding: Binding) -> bool {
        if self.find(&binding).is_some() {
            return false;
        }
        let order = self.next_order;
        self.next_order += 1;
        let keys = self.by_destination.entry(binding.destination.clone()).or_default();
        keys.entry(binding.routing_key.clone()).or_default().push(order);
        self.by_order.insert(order, binding);
        true
    }

    /// Whether an identical binding is there.
    pub(super) fn contains(&self, binding: &Binding) -> bool {
        self.find(binding).is_some()
    }

    /// Removes the binding identical to `binding`; whether there was one.
    pub(super) fn remove(&mut self, binding: &Binding) -> bool {
        let Some(order) = self.find(binding) else { return false };
        self.by_order.remove(&order);
        if let Some(keys) = self.by_destination.get_mut(&binding.destination) {
            if let Some(orders) = keys.get_mut(&binding.routing_key) {
                orders.retain(|o| *o != order);
                if orders.is_empty() {
                    keys.remove(&binding.routing_key);
                }
            }
            if keys.is_empty() {
                self.by_destination.remove(&binding.destination);
            }
        }
        true
    }

    /// Whether some binding leads to `destination` with `routing_key` (whatever its arguments).
    pub(super) fn routes(&self, routing_key: &str, destination: &Destination) -> bool {
        self.by_destination.get(destination).is_some_and(|keys| keys.contains_key(routing_key))
    }

    /// The bindings to `destination`, in the order they were made.
    pub(super) fn to_destination(&self, destination: &Destination) -> Vec<Binding> {
        let Some(keys) = self.by_destination.get(destination) else { return Vec::new() };
        let mut orders: Vec<u64> = keys.values().flatten().copied().collect();
        orders.sort_unstable();
        orders.iter().filter_map(|order| self.by_order.get(order).cloned()).collect()
    }

    /// How many there are.
    pub(super) fn len(&self) -> usize {
        self.by_order.len()
    }

    /// The bindings, in the order they were made.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Binding> {
        self.by_order.values()
    }

    fn find(&self, binding: &Binding) -> Option<u64> {
        let orders = self.by_destination.get(&binding.destination)?.get(&binding.routing_key)?;
        orders.iter().copied().find(|order| self.by_order.get(order).is_some_and(|b| b == binding))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use amq_protocol::types::{AMQPValue, FieldTable};

    fn binding(destination: &str, key: &str, argument: Option<&str>) -> Binding {
        let mut arguments = FieldTable::default();
        if let Some(value) = argument {
            arguments.insert("x-match".into(), AMQPValue::LongString(value.into()));
        }
        Binding { destination: Destination::Queue(destination.into()), routing_key: key.into(), arguments }
    }

    fn keys(table: &BindingTable) -> Vec<String> {
        table.iter().map(|b| format!("{:?}:{}", b.destination, b.routing_key)).collect()
    }

    #[test]
    fn bindings_keep_their_order_and_identical_ones_are_one() {
        let mut table = BindingTable::default();
        assert!(table.insert(binding("b", "k", None)));
        assert!(table.insert(binding("a", "k", None)));
        assert!(table.insert(binding("a", "k", Some("all"))), "other arguments: another binding");
        assert!(!table.insert(binding("a", "k", None)));
        assert_eq!(table.len(), 3);
        assert_eq!(keys(&table)[..2], [r#"Queue("b"):k"#, r#"Queue("a"):k"#]);
        assert!(table.contains(&binding("a", "k", Some("all"))));
        assert!(!table.contains(&binding("a", "k", Some("any"))));
    }

    #[test]
    fn removing_one_of_two_bindings_with_one_key_leaves_the_route() {
        let mut table = BindingTable::default();
        table.insert(binding("a", "k", None));
        table.insert(binding("a", "k", Some("all")));
        table.insert(binding("a", "j", None));
        assert!(table.remove(&binding("a", "k", None)));
        assert!(!table.remove(&binding("a", "k", None)), "already gone");
        assert!(table.routes("k", &Destination::Queue("a".into())), "the other binding with key k remains");
        assert!(table.remove(&binding("a", "k", Some("all"))));
        assert!(!table.routes("k", &Destination::Queue("a".into())));
        assert_eq!(table.to_destination(&Destination::Queue("a".into())), [binding("a", "j", None)]);
        assert!(table.remove(&binding("a", "j", None)));
        assert!(table.by_destination.is_empty(), "no empty index entries are left behind");
        assert_eq!(table.len(), 0);
    }

    #[test]
    fn the_bindings_to_a_destination_come_in_the_order_they_were_made() {
        let mut table = BindingTable::default();
        for (destination, key) in [("q", "z"), ("r", "x"), ("q", "a"), ("q", "m")] {
            table.insert(binding(destination, key, None));
        }
        let keys: Vec<String> =
            table.to_destination(&Destination::Queue("q".into())).into_iter().map(|b| b.routing_key).collect();
        assert_eq!(keys, ["z", "a", "m"]);
    }
}
