//! The catalog's snapshot end to end on real brokers: a node whose catalog differs (it fell
//! behind while queues, bindings, users and vhosts came and went) installs another node's
//! snapshot and ends with the same catalog; the snapshot survives a restart of its machine.

use super::{CatalogMachine, CatalogSnapshot};
use crate::access::{AccessChange, PasswordChange, PermissionSpec};
use crate::broker::Broker;
use crate::connection_id::ConnectionId;
use crate::exchange::{Binding, Destination, ExchangeDefinition};
use crate::message_store::LogStoreConfig;
use crate::queue::QueueDefinition;
use crate::quorum::{SingleNode, LOCAL_NODE_ID};
use crate::raft_adapter::StateMachine;
use amq_protocol::types::FieldTable;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

fn open(dir: &Path) -> Arc<Broker> {
    Broker::open(dir, LogStoreConfig::default()).expect("broker")
}

fn access(broker: &Broker, change: AccessChange) {
    broker.apply_access(&change).expect("access change");
}

fn declare_queue(broker: &Broker, vhost: &str, name: &str) {
    let definition = QueueDefinition {
        name: name.into(),
        durable: true,
        exclusive_owner: None,
        auto_delete: false,
        arguments: FieldTable::default(),
    };
    broker.vhost(vhost).expect("vhost").declare_queue(definition, ConnectionId(0)).expect("declare");
}

fn declare_exchange(broker: &Broker, vhost: &str, name: &str, kind: &str) {
    let definition =
        ExchangeDefinition::declared(name, kind, true, false, false, FieldTable::default()).expect("valid");
    broker.vhost(vhost).expect("vhost").declare_exchange(definition).expect("declare");
}

fn bind(broker: &Broker, vhost: &str, source: &str, queue: &str, key: &str) {
    let binding = Binding {
        destination: Destination::Queue(queue.into()),
        routing_key: key.into(),
        arguments: FieldTable::default(),
    };
    broker.vhost(vhost).expect("vhost").bind(source, binding, ConnectionId(0)).expect("bind");
}

fn user(name: &str) -> AccessChange {
    AccessChange::PutUser { name: name.into(), password: PasswordChange::Keep, tags: Some(vec!["monitoring".into()]) }
}

fn vhost(name: &str) -> AccessChange {
    AccessChange::PutVhost { name: name.into(), description: String::new() }
}

fn permit(vhost: &str, user: &str) -> AccessChange {
    let spec = PermissionSpec { configure: "^$".into(), write: ".*".into(), read: ".*".into() };
    AccessChange::SetPermissions { vhost: vhost.into(), user: user.into(), permissions: spec }
}

/// One definition as comparable data: vhost, what it is, name, and its type, homes or key.
type Entry = (String, String, String, String);

/// The catalog as comparable data: access changes and definitions, sorted.
fn catalog(broker: &Broker) -> (Vec<String>, Vec<Entry>) {
    let snapshot = CatalogSnapshot::capture(broker, LOCAL_NODE_ID, BTreeSet::new(), Vec::new());
    let mut access: Vec<String> = snapshot.access.iter().map(|change| format!("{change:?}")).collect();
    access.sort();
    let mut definitions = Vec::new();
    for vhost in &snapshot.vhosts {
        let d = &vhost.definitions;
        let name = || vhost.name.clone();
        definitions.extend(d.exchanges.iter().map(|e| (name(), "exchange".into(), e.name.clone(), e.kind.clone())));
        definitions.extend(d.queues.iter().map(|q| (name(), "queue".into(), q.name.clone(), format!("{:?}", q.homes))));
        definitions.extend(
            d.bindings
                .iter()
                .map(|b| (name(), "binding".into(), format!("{}->{}", b.source, b.destination), b.routing_key.clone())),
        );
    }
    definitions.sort();
    (access, definitions)
}

/// The cluster's catalog: two vhosts, a user with permissions, exchanges, queues, bindings.
fn ahead(broker: &Broker) {
    access(broker, vhost("orders"));
    access(broker, user("alice"));
    access(broker, permit("orders", "alice"));
    declare_exchange(broker, "/", "events", "topic");
    declare_queue(broker, "/", "kept");
    declare_queue(broker, "/", "new-here");
    bind(broker, "/", "events", "kept", "a.#");
    bind(broker, "/", "events", "new-here", "b.*");
    declare_exchange(broker, "orders", "incoming", "direct");
    declare_queue(broker, "orders", "pending");
    bind(broker, "orders", "incoming", "pending", "new");
}

/// A node that fell behind: part of the catalog, and things deleted since.
fn behind(broker: &Broker) {
    access(broker, vhost("gone"));
    access(broker, user("bob"));
    access(broker, permit("/", "bob"));
    declare_exchange(broker, "/", "events", "topic");
    declare_exchange(broker, "/", "retired", "fanout");
    declare_queue(broker, "/", "kept");
    declare_queue(broker, "/", "deleted-since");
    bind(broker, "/", "events", "kept", "old.key");
    bind(broker, "/", "retired", "kept", "");
    declare_queue(broker, "gone", "lost");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_fell_behind_installs_the_snapshot_and_ends_with_the_same_catalog() {
    let dir = tempfile::tempdir().expect("tempdir");
    let leader = open(&dir.path().join("leader"));
    ahead(&leader);
    let leader_machine =
        CatalogMachine::open(LOCAL_NODE_ID, &leader, SingleNode::shared(), dir.path().join("leader-applied"), 0)
            .expect("machine");
    let snapshot = leader_machine.take_snapshot().await.expect("snapshot");

    let follower = open(&dir.path().join("follower"));
    behind(&follower);
    assert_ne!(catalog(&follower), catalog(&leader), "the follower starts behind");
    let machine =
        CatalogMachine::open(LOCAL_NODE_ID, &follower, SingleNode::shared(), dir.path().join("follower-applied"), 0)
            .expect("machine");
    machine.install(snapshot.clone()).await.expect("install");

    assert_eq!(catalog(&follower), catalog(&leader));
    assert!(follower.vhost("gone").is_none(), "a vhost deleted since is gone");
    assert!(follower.access().user("bob").is_none(), "a user deleted since is gone");
    let vhost = follower.vhost("/").expect("vhost");
    assert!(vhost.queue("deleted-since").is_err() && vhost.exchange("retired").is_err());
    let got = machine.current_snapshot().expect("read").expect("kept as the current snapshot");
    assert_eq!(got.meta, snapshot.meta);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_current_snapshot_outlives_its_machine_and_installing_it_twice_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = open(&dir.path().join("data"));
    ahead(&broker);
    let applied = dir.path().join("applied");
    let machine = CatalogMachine::open(LOCAL_NODE_ID, &broker, SingleNode::shared(), &applied, 0).expect("open");
    let built = machine.take_snapshot().await.expect("snapshot");
    drop(machine);

    let reopened = CatalogMachine::open(LOCAL_NODE_ID, &broker, SingleNode::shared(), &applied, 0).expect("reopen");
    let current = reopened.current_snapshot().expect("read").expect("present after a restart");
    assert_eq!(current.meta, built.meta);
    let before = catalog(&broker);
    reopened.install(current.clone()).await.expect("install over the same catalog");
    assert_eq!(catalog(&broker), before);

    CatalogMachine::remove_applied(&applied).expect("remove");
    let fresh = CatalogMachine::open(LOCAL_NODE_ID, &broker, SingleNode::shared(), &applied, 0).expect("afresh");
    assert!(fresh.current_snapshot().expect("read").is_none(), "join_cluster starts without it");
}

#[test]
fn a_snapshot_of_a_newer_format_is_refused_with_the_reason() {
    let newer = br#"{"format":99,"access":[],"vhosts":[],"forgotten":[],"joined":[]}"#;
    let error = CatalogSnapshot::decode(newer).expect_err("refused");
    assert!(error.to_string().contains("format 99") && error.to_string().contains("upgrade"), "{error}");
}
