//! [`DurableSet`]: a virtual host's durable definitions held in memory as the records they are
//! stored as, changed one [`DefinitionsChange`] at a time.
//!
//! The set is what the definitions file would hold if it were rewritten now: a change is
//! applied here and appended to the journal (`journal`), and the file is rewritten from the
//! set only once in a while, so a declare costs one append however many definitions exist.
//! Applying a change is pure and deterministic, so replaying the journal over the file at
//! start gives the set back. Deletes carry their consequences as the virtual host does: a
//! queue or an exchange takes the bindings to and from it along.

use super::{BindingRecord, Definitions, ExchangeRecord, QueueRecord};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// One change of a virtual host's durable definitions, as the journal records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum DefinitionsChange {
    /// A durable exchange is declared (or replaced).
    PutExchange(ExchangeRecord),
    /// A durable exchange goes, with the bindings from and to it.
    RemoveExchange {
        /// Its name.
        name: String,
    },
    /// A durable queue is declared, or its record changes (where it lives).
    PutQueue(QueueRecord),
    /// A durable queue goes, with the bindings to it.
    RemoveQueue {
        /// Its name.
        name: String,
    },
    /// A binding between durable things is made.
    PutBinding(BindingRecord),
    /// A binding goes.
    RemoveBinding(BindingRecord),
}

impl DefinitionsChange {
    /// Refuses a change whose arguments nest deeper than the protocol accepts (it could not
    /// be read back).
    pub fn check_depth(&self) -> Result<(), String> {
        let arguments = match self {
            DefinitionsChange::PutExchange(record) => &record.arguments,
            DefinitionsChange::PutQueue(record) => &record.arguments,
            DefinitionsChange::PutBinding(record) | DefinitionsChange::RemoveBinding(record) => &record.arguments,
            DefinitionsChange::RemoveExchange { .. } | DefinitionsChange::RemoveQueue { .. } => return Ok(()),
        };
        crate::field_table::check_depth(arguments).map_err(|e| format!("its arguments: {e}"))
    }
}

/// What identifies a binding: RabbitMQ's (source, destination, key, arguments). Arguments
/// are compared as their JSON text, which is canonical (a field table is a sorted map).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct BindingKey {
    source: String,
    to_exchange: bool,
    destination: String,
    routing_key: String,
    arguments: String,
}

impl BindingKey {
    fn of(record: &BindingRecord) -> Self {
        BindingKey {
            source: record.source.clone(),
            to_exchange: record.to_exchange,
            destination: record.destination.clone(),
            routing_key: record.routing_key.clone(),
            arguments: serde_json::to_string(&record.arguments).unwrap_or_default(),
        }
    }

    /// The smallest key with source `source`: where that source's bindings begin.
    fn first_from(source: &str) -> Self {
        BindingKey {
            source: source.to_string(),
            to_exchange: false,
            destination: String::new(),
            routing_key: String::new(),
            arguments: String::new(),
        }
    }
}

/// A binding's destination: whether it is an exchange, and its name.
type DestinationKey = (bool, String);

/// The durable definitions of one virtual host, indexed so that every change costs
/// O(log n) plus the bindings it takes along.
#[derive(Debug, Default)]
pub struct DurableSet {
    exchanges: BTreeMap<String, ExchangeRecord>,
    queues: BTreeMap<String, QueueRecord>,
    bindings: BTreeMap<BindingKey, BindingRecord>,
    /// The bindings to each destination, so that a delete finds them without a scan.
    by_destination: BTreeMap<DestinationKey, BTreeSet<BindingKey>>,
}

impl DurableSet {
    /// The set that `definitions` describe.
    pub fn of(definitions: Definitions) -> Self {
        let mut set = DurableSet::default();
        for record in definitions.exchanges {
            set.apply(DefinitionsChange::PutExchange(record));
        }
        for record in definitions.queues {
            set.apply(DefinitionsChange::PutQueue(record));
        }
        for record in definitions.bindings {
            set.apply(DefinitionsChange::PutBinding(record));
        }
        set
    }

    /// The set as the definitions document stores it.
    pub fn definitions(&self) -> Definitions {
        Definitions {
            exchanges: self.exchanges.values().cloned().collect(),
            queues: self.queues.values().cloned().collect(),
            bindings: self.bindings.values().cloned().collect(),
        }
    }

    /// How many records it holds.
    pub fn len(&self) -> usize {
        self.exchanges.len() + self.queues.len() + self.bindings.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Applies `change`; whether the set changed.
    pub fn apply(&mut self, change: DefinitionsChange) -> bool {
        match change {
            DefinitionsChange::PutExchange(record) => {
                self.exchanges.insert(record.name.clone(), record.clone()).as_ref() != Some(&record)
            }
            DefinitionsChange::RemoveExchange { name } => {
                let removed = self.exchanges.remove(&name).is_some();
                let bindings = self.remove_bindings_to(&(true, name.clone())) | self.remove_bindings_from(&name);
                removed | bindings
            }
            DefinitionsChange::PutQueue(record) => {
                self.queues.insert(record.name.clone(), record.clone()).as_ref() != Some(&record)
            }
            DefinitionsChange::RemoveQueue { name } => {
                let removed = self.queues.remove(&name).is_some();
                removed | self.remove_bindings_to(&(false, name))
            }
            DefinitionsChange::PutBinding(record) => self.put_binding(record),
            DefinitionsChange::RemoveBinding(record) => self.remove_binding(&BindingKey::of(&record)),
        }
    }

    fn put_binding(&mut self, record: BindingRecord) -> bool {
        let key = BindingKey::of(&record);
        let destination = (record.to_exchange, record.destination.clone());
        if self.bindings.insert(key.clone(), record).is_some() {
            return false;
        }
        self.by_destination.entry(destination).or_default().insert(key);
        true
    }

    fn remove_binding(&mut self, key: &BindingKey) -> bool {
        if self.bindings.remove(key).is_none() {
            return false;
        }
        let destination = (key.to_exchange, key.destination.clone());
        if let Some(keys) = self.by_destination.get_mut(&destination) {
            keys.remove(key);
            if keys.is_empty() {
                self.by_destination.remove(&destination);
            }
        }
        true
    }

    fn remove_bindings_to(&mut self, destination: &DestinationKey) -> bool {
        let Some(keys) = self.by_destination.remove(destination) else { return false };
        for key in &keys {
            self.bindings.remove(key);
        }
        !keys.is_empty()
    }

    fn remove_bindings_from(&mut self, source: &str) -> bool {
        let keys: Vec<BindingKey> = self
            .bindings
            .range(BindingKey::first_from(source)..)
            .take_while(|(key, _)| key.source == source)
            .map(|(key, _)| key.clone())
            .collect();
        for key in &keys {
            self.remove_binding(key);
        }
        !keys.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use amq_protocol::types::{AMQPValue, FieldTable};

    fn exchange(name: &str) -> DefinitionsChange {
        DefinitionsChange::PutExchange(ExchangeRecord {
            name: name.into(),
            kind: "direct".into(),
            auto_delete: false,
            internal: false,
            arguments: FieldTable::default(),
        })
    }

    fn queue(name: &str, homes: Vec<u64>) -> DefinitionsChange {
        DefinitionsChange::PutQueue(QueueRecord {
            name: name.into(),
            auto_delete: false,
            arguments: FieldTable::default(),
            homes,
        })
    }

    fn binding(source: &str, destination: &str, to_exchange: bool, key: &str) -> BindingRecord {
        BindingRecord {
            source: source.into(),
            destination: destination.into(),
            to_exchange,
            routing_key: key.into(),
            arguments: FieldTable::default(),
        }
    }

    fn binding_names(set: &DurableSet) -> Vec<String> {
        set.definitions().bindings.iter().map(|b| format!("{}>{}:{}", b.source, b.destination, b.routing_key)).collect()
    }

    #[test]
    fn removing_a_queue_takes_the_bindings_to_it_and_only_those() {
        let mut set = DurableSet::default();
        for change in [exchange("x"), queue("q", vec![]), queue("r", vec![])] {
            assert!(set.apply(change));
        }
        for b in [binding("x", "q", false, "a"), binding("x", "q", false, "b"), binding("x", "r", false, "a")] {
            assert!(set.apply(DefinitionsChange::PutBinding(b)));
        }
        assert!(set.apply(DefinitionsChange::RemoveQueue { name: "q".into() }));
        assert_eq!(binding_names(&set), ["x>r:a"]);
        assert!(!set.apply(DefinitionsChange::RemoveQueue { name: "q".into() }), "a second remove changes nothing");
    }

    #[test]
    fn removing_an_exchange_takes_the_bindings_from_and_to_it() {
        let mut set = DurableSet::default();
        for change in [exchange("w"), exchange("x"), exchange("y"), queue("q", vec![])] {
            set.apply(change);
        }
        for b in [binding("w", "x", true, ""), binding("x", "q", false, ""), binding("y", "q", false, "")] {
            set.apply(DefinitionsChange::PutBinding(b));
        }
        assert!(set.apply(DefinitionsChange::RemoveExchange { name: "x".into() }));
        assert_eq!(binding_names(&set), ["y>q:"]);
        assert_eq!(set.definitions().exchanges.len(), 2);
    }

    #[test]
    fn bindings_differing_only_in_arguments_are_two_and_go_one_at_a_time() {
        let mut set = DurableSet::default();
        set.apply(exchange("x"));
        set.apply(queue("q", vec![]));
        let plain = binding("x", "q", false, "k");
        let mut with_arguments = plain.clone();
        with_arguments.arguments.insert("x-match".into(), AMQPValue::LongString("all".into()));
        assert!(set.apply(DefinitionsChange::PutBinding(plain.clone())));
        assert!(set.apply(DefinitionsChange::PutBinding(with_arguments.clone())));
        assert!(!set.apply(DefinitionsChange::PutBinding(plain.clone())), "the same binding twice is one");
        assert!(set.apply(DefinitionsChange::RemoveBinding(plain)));
        assert_eq!(set.definitions().bindings, vec![with_arguments]);
    }

    #[test]
    fn a_queue_record_replaced_keeps_its_bindings_and_the_set_round_trips() {
        let mut set = DurableSet::default();
        set.apply(exchange("x"));
        set.apply(queue("q", vec![]));
        set.apply(DefinitionsChange::PutBinding(binding("x", "q", false, "k")));
        assert!(set.apply(queue("q", vec![7, 9])), "new homes are a change");
        assert!(!set.apply(queue("q", vec![7, 9])), "the same record again is none");
        let again = DurableSet::of(set.definitions());
        assert_eq!(again.definitions(), set.definitions());
        assert_eq!(again.definitions().queues[0].homes, [7, 9]);
        assert_eq!(binding_names(&again), ["x>q:k"]);
    }
}
