//! The recorded durable definitions against the live ones: after every kind of change
//! (cascading deletes, auto-delete exchanges, bindings to transient things), the set the
//! journal records equals what the live exchanges and queues say must be stored, and a
//! broker that stops without folding its journal (a crash) comes back with exactly that.

use crate::broker::{Broker, DEFAULT_VHOST};
use crate::connection_id::ConnectionId;
use crate::definitions::Definitions;
use crate::exchange::{Binding, Destination, ExchangeDefinition};
use crate::message_store::LogStoreConfig;
use crate::queue::QueueDefinition;
use crate::vhost::VirtualHost;
use amq_protocol::types::{AMQPValue, FieldTable};
use std::path::Path;
use std::sync::Arc;

const ANYONE: ConnectionId = ConnectionId(0);

fn open_vhost(dir: &Path) -> (Arc<Broker>, Arc<VirtualHost>) {
    let broker = Broker::open(dir, LogStoreConfig::default()).expect("broker opens");
    let vhost = broker.vhost(DEFAULT_VHOST).expect("default vhost");
    (broker, vhost)
}

fn queue(name: &str, durable: bool) -> QueueDefinition {
    QueueDefinition {
        name: name.to_string(),
        durable,
        exclusive_owner: None,
        auto_delete: false,
        arguments: FieldTable::default(),
    }
}

fn exchange(name: &str, kind: &str, auto_delete: bool) -> ExchangeDefinition {
    ExchangeDefinition::declared(name, kind, true, auto_delete, false, FieldTable::default()).expect("valid")
}

fn to_queue(name: &str, key: &str) -> Binding {
    Binding { destination: Destination::Queue(name.into()), routing_key: key.into(), arguments: FieldTable::default() }
}

fn to_exchange(name: &str) -> Binding {
    Binding {
        destination: Destination::Exchange(name.into()),
        routing_key: String::new(),
        arguments: FieldTable::default(),
    }
}

/// The definitions sorted, so that two sets compare whatever order they were listed in.
fn sorted(mut definitions: Definitions) -> Definitions {
    definitions.exchanges.sort_by(|a, b| a.name.cmp(&b.name));
    definitions.queues.sort_by(|a, b| a.name.cmp(&b.name));
    let key = |b: &crate::definitions::BindingRecord| {
        (b.source.clone(), b.destination.clone(), b.routing_key.clone(), serde_json::to_string(&b.arguments).ok())
    };
    definitions.bindings.sort_by_key(key);
    definitions
}

fn assert_recorded_as_live(vhost: &VirtualHost, step: &str) {
    let recorded = vhost.storage.as_ref().and_then(|s| s.recorded()).expect("the vhost records its definitions");
    assert_eq!(sorted(recorded), sorted(vhost.durable_definitions()), "after {step}");
}

/// A named change made to a virtual host.
type Step = (&'static str, Box<dyn Fn(&VirtualHost)>);

#[test]
fn every_change_is_recorded_as_the_live_definitions_say_and_survives_a_crash() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (broker, vhost) = open_vhost(dir.path());
    let mut headers = FieldTable::default();
    headers.insert("x-match".into(), AMQPValue::LongString("any".into()));
    let steps: Vec<Step> = vec![
        (
            "exchanges",
            Box::new(|v| {
                v.declare_exchange(exchange("orders", "topic", false)).expect("declare");
                v.declare_exchange(exchange("fan", "fanout", true)).expect("declare");
                v.declare_exchange(exchange("hdr", "headers", false)).expect("declare");
            }),
        ),
        (
            "queues",
            Box::new(|v| {
                for (name, durable) in [("kept", true), ("other", true), ("passing", false)] {
                    drop(v.declare_queue(queue(name, durable), ANYONE).expect("declare"));
                }
            }),
        ),
        (
            "bindings",
            Box::new(move |v| {
                v.bind("orders", to_queue("kept", "a.#"), ANYONE).expect("bind");
                v.bind("orders", to_queue("kept", "b.*"), ANYONE).expect("bind");
                v.bind("orders", to_queue("passing", "c"), ANYONE).expect("bind to a transient queue");
                v.bind("fan", to_queue("other", ""), ANYONE).expect("bind");
                v.bind("amq.direct", to_queue("other", "k"), ANYONE).expect("bind from a standard exchange");
                v.bind("orders", to_exchange("fan"), ANYONE).expect("exchange to exchange");
                v.bind("hdr", to_queue("kept", ""), ANYONE).expect("bind");
            }),
        ),
        ("an unbind", Box::new(|v| v.unbind("orders", &to_queue("kept", "b.*"), ANYONE).expect("unbind"))),
        (
            "a queue delete that empties an auto-delete exchange",
            Box::new(|v| {
                drop(v.delete_queue("other", false, false, ANYONE).expect("delete"));
                assert!(v.exchange("fan").is_err(), "fan lost its last binding as a source");
            }),
        ),
        ("an exchange delete", Box::new(|v| v.delete_exchange("hdr", false).expect("delete"))),
        (
            "a re-declare",
            Box::new(|v| {
                drop(v.declare_queue(queue("other", true), ANYONE).expect("declare"));
                v.bind("orders", to_queue("other", "again"), ANYONE).expect("bind");
            }),
        ),
    ];
    for (step, change) in &steps {
        change(&vhost);
        assert_recorded_as_live(&vhost, step);
    }
    let before = sorted(vhost.durable_definitions());
    drop(vhost);
    drop(broker); // no close: the journal is not folded into the file, as after a crash
    let (_broker, vhost) = open_vhost(dir.path());
    assert_eq!(sorted(vhost.durable_definitions()), before);
    assert_recorded_as_live(&vhost, "the restart");
    assert!(vhost.exchange("orders").is_ok() && vhost.exchange("hdr").is_err() && vhost.queue("passing").is_err());
}

#[test]
fn the_journal_is_folded_into_the_file_once_it_is_long_and_the_state_comes_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (broker, vhost) = open_vhost(dir.path());
    vhost.storage.as_ref().expect("stored").compact_after_min_records_for_tests(16);
    drop(vhost.declare_queue(queue("q", true), ANYONE).expect("declare"));
    for round in 0..100 {
        vhost.bind("amq.topic", to_queue("q", &format!("k{round}")), ANYONE).expect("bind");
        if round % 2 == 0 {
            vhost.unbind("amq.topic", &to_queue("q", &format!("k{round}")), ANYONE).expect("unbind");
        }
    }
    let journals: Vec<u64> = std::fs::read_dir(vhost.data_dir().expect("on disk"))
        .expect("list")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".journal"))
        .map(|e| e.metadata().expect("metadata").len())
        .collect();
    assert_eq!(journals.len(), 1, "one journal at a time");
    assert!(journals[0] < 16 * 200, "150 changes, folded at least every 51: {} bytes", journals[0]);
    let before = sorted(vhost.durable_definitions());
    assert_eq!(before.bindings.len(), 50);
    drop(vhost);
    drop(broker);
    let (_broker, vhost) = open_vhost(dir.path());
    assert_eq!(sorted(vhost.durable_definitions()), before);
}

#[test]
fn a_torn_last_record_loses_only_that_change_and_is_kept_aside() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (broker, vhost) = open_vhost(dir.path());
    drop(vhost.declare_queue(queue("first", true), ANYONE).expect("declare"));
    drop(vhost.declare_queue(queue("torn", true), ANYONE).expect("declare"));
    let vhost_dir = vhost.data_dir().expect("on disk").to_path_buf();
    drop(vhost);
    drop(broker);
    let journal = std::fs::read_dir(&vhost_dir)
        .expect("list")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "journal"))
        .expect("a journal");
    let bytes = std::fs::read(&journal).expect("read");
    std::fs::write(&journal, &bytes[..bytes.len() - 5]).expect("tear the last record");
    let (_broker, vhost) = open_vhost(dir.path());
    assert!(vhost.queue("first").is_ok());
    assert!(vhost.queue("torn").is_err(), "its declare was never completed on disk");
    let aside = std::fs::read_dir(&vhost_dir)
        .expect("list")
        .flatten()
        .any(|e| e.file_name().to_string_lossy().contains(".journal.damaged-"));
    assert!(aside, "the damaged journal is kept for inspection");
}
