//! A virtual host whose name is as long as access control allows (255 bytes) has a data
//! directory like any other: its durable queue and persistent message survive a restart.
//! (Its directory cannot be the name's hex, 510 characters: longer than a file name may be.)

use lapin::options::{BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use serde_json::json;
use warren_tests::http::Api;
use warren_tests::{channel, durable, start_broker_in, TestBroker};

/// The longest vhost name access control accepts.
const LONGEST_NAME_BYTES: usize = 255;
/// Delivery mode of a persistent message.
const PERSISTENT: u8 = 2;
const CREATED: u16 = 201;
const NO_CONTENT: u16 = 204;

/// A 255-byte name with bytes an URI and a path must escape (`/`, space, `%`).
fn longest_name() -> String {
    let head = "tenant/with space%";
    format!("{head}{}", "v".repeat(LONGEST_NAME_BYTES - head.len()))
}

/// Every byte of `text` percent-encoded: a vhost in a URI path or an API path segment.
fn percent(text: &str) -> String {
    text.bytes().map(|b| format!("%{b:02X}")).collect()
}

fn api(broker: &TestBroker) -> Api {
    Api::new(broker.http_addr.expect("management API"))
}

async fn connect_to(broker: &TestBroker, vhost: &str) -> Connection {
    let uri = format!("amqp://guest:guest@{}/{}", broker.amqp_addr, percent(vhost));
    Connection::connect(&uri, ConnectionProperties::default()).await.expect("guest opens the long vhost")
}

/// Makes vhost `name` through the API, lets guest in, and leaves a persistent message in its
/// durable queue `kept`.
async fn fill(broker: &TestBroker, name: &str) {
    let api = api(broker);
    assert_eq!(api.put(&format!("/api/vhosts/{}", percent(name)), json!({})).status, CREATED);
    let everything = json!({"configure": ".*", "write": ".*", "read": ".*"});
    let permitted = api.put(&format!("/api/permissions/{}/guest", percent(name)), everything).status;
    assert!([CREATED, NO_CONTENT].contains(&permitted), "{permitted}");
    let connection = connect_to(broker, name).await;
    let ch = channel(&connection).await;
    ch.confirm_select(ConfirmSelectOptions::default()).await.expect("confirms");
    ch.queue_declare("kept".into(), durable(), FieldTable::default()).await.expect("declare");
    let persistent = BasicProperties::default().with_delivery_mode(PERSISTENT);
    let options = BasicPublishOptions::default();
    let confirm =
        ch.basic_publish("".into(), "kept".into(), options, b"still here", persistent).await.expect("publish");
    assert!(confirm.await.expect("confirm").is_ack());
}

/// Vhost `name` is there, with its queue `kept` and the message [`fill`] left in it.
async fn find_again(broker: &TestBroker, name: &str) {
    let vhost = api(broker).get(&format!("/api/vhosts/{}", percent(name)));
    assert_eq!(vhost.body["name"], json!(name), "the vhost is back");
    let connection = connect_to(broker, name).await;
    let ch = channel(&connection).await;
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    let queue = ch.queue_declare("kept".into(), passive, FieldTable::default()).await.expect("the queue is back");
    assert_eq!(queue.message_count(), 1);
    let got = ch.basic_get("kept".into(), BasicGetOptions { no_ack: true }).await.expect("get");
    assert_eq!(got.expect("the message is back").delivery.data, b"still here");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vhost_with_the_longest_name_keeps_its_queues_and_messages_over_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let name = longest_name();
    assert_eq!(name.len(), LONGEST_NAME_BYTES);
    let broker = start_broker_in(dir.path()).await;
    fill(&broker, &name).await;
    broker.shutdown().await;
    let broker = start_broker_in(dir.path()).await;
    find_again(&broker, &name).await;
}
