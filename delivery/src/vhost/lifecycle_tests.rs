//! A queue's storage under concurrent declare and delete of the same durable name: each test
//! runs the second operation exactly inside the first (at an interleave point), then checks
//! that confirmed messages are in the queue's files and come back after a restart.

use crate::broker::{Broker, DEFAULT_VHOST};
use crate::connection_id::ConnectionId;
use crate::message::Message;
use crate::message_store::LogStoreConfig;
use crate::properties::Properties;
use crate::queue::{Published, QueueDefinition};
use crate::vhost::VirtualHost;
use amq_protocol::protocol::basic::{gen_properties, AMQPProperties};
use bytes::Bytes;
use std::path::Path;
use std::sync::{mpsc, Arc};
use std::time::Duration;

const QUEUE: &str = "contested";
const MESSAGES: usize = 10;
/// How long the paused operation lets the concurrent one run: long enough for it to finish
/// when nothing holds it back.
const CONCURRENT_GRACE: Duration = Duration::from_millis(300);

fn open_vhost(dir: &Path) -> (Arc<Broker>, Arc<VirtualHost>) {
    let broker = Broker::open(dir, LogStoreConfig::default()).expect("broker opens");
    let vhost = broker.vhost(DEFAULT_VHOST).expect("default vhost");
    (broker, vhost)
}

fn durable(name: &str) -> QueueDefinition {
    QueueDefinition {
        name: name.to_string(),
        durable: true,
        exclusive_owner: None,
        auto_delete: false,
        arguments: Default::default(),
    }
}

fn persistent_message(body: &'static str) -> Arc<Message> {
    let props = AMQPProperties::default().with_delivery_mode(2);
    let raw = gen_properties(&props)(amq_protocol::frame::WriteContext::from(Vec::new())).expect("encodes").write;
    Arc::new(Message {
        exchange: "".into(),
        routing_key: QUEUE.into(),
        properties: Properties::decode(Bytes::from(raw)).expect("valid properties"),
        body: Bytes::from_static(body.as_bytes()),
    })
}

/// Publishes persistent messages to the queue now in the map, as a confirming publisher
/// would: each is stored before it counts.
fn publish_confirmed(vhost: &VirtualHost) {
    let queue = vhost.queue(QUEUE).expect("queue exists");
    for _ in 0..MESSAGES {
        match queue.publish(persistent_message("confirmed")) {
            Ok(Published::Stored(Some(_))) => {}
            other => panic!("not stored durably: {other:?}"),
        }
    }
}

/// Runs `operation` on another thread and lets it run for [`CONCURRENT_GRACE`].
fn run_concurrently(operation: impl FnOnce() + Send + 'static) -> std::thread::JoinHandle<()> {
    let (done_tx, done_rx) = mpsc::channel();
    let handle = std::thread::spawn(move || {
        operation();
        let _ = done_tx.send(());
    });
    let _ = done_rx.recv_timeout(CONCURRENT_GRACE);
    handle
}

fn restart_and_count(broker: Arc<Broker>, vhost: Arc<VirtualHost>, dir: &Path) -> u32 {
    broker.close();
    drop((broker, vhost));
    let (broker, vhost) = open_vhost(dir);
    let count = vhost.queue(QUEUE).expect("queue recovered").message_count();
    broker.close();
    count
}

#[test]
fn a_declare_inside_a_delete_keeps_its_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (broker, vhost) = open_vhost(dir.path());
    vhost.declare_queue(durable(QUEUE), ConnectionId(1)).expect("first declare");
    let concurrent = Arc::clone(&vhost);
    let second = Arc::new(parking_lot::Mutex::new(None));
    let joined = Arc::clone(&second);
    vhost.interleave.arm("queue removed from the name map", move || {
        let handle = run_concurrently(move || {
            concurrent.declare_queue(durable(QUEUE), ConnectionId(2)).expect("second declare");
        });
        *joined.lock() = Some(handle);
    });
    drop(vhost.delete_queue(QUEUE, false, false, ConnectionId(1)).expect("delete"));
    let handle = second.lock().take().expect("the interleave point was reached");
    handle.join().expect("second declare finished");
    publish_confirmed(&vhost);
    assert_eq!(restart_and_count(broker, vhost, dir.path()), MESSAGES as u32);
}

#[test]
fn two_declares_of_one_name_share_one_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (broker, vhost) = open_vhost(dir.path());
    let concurrent = Arc::clone(&vhost);
    let second = Arc::new(parking_lot::Mutex::new(None));
    let joined = Arc::clone(&second);
    vhost.interleave.arm("queue storage created", move || {
        let handle = run_concurrently(move || {
            concurrent.declare_queue(durable(QUEUE), ConnectionId(2)).expect("second declare");
        });
        *joined.lock() = Some(handle);
    });
    vhost.declare_queue(durable(QUEUE), ConnectionId(1)).expect("first declare");
    let handle = second.lock().take().expect("the interleave point was reached");
    handle.join().expect("second declare finished");
    publish_confirmed(&vhost);
    assert_eq!(restart_and_count(broker, vhost, dir.path()), MESSAGES as u32);
}
