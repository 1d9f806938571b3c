//! Auto-delete exchanges with lapin, as RabbitMQ deletes them: an auto-delete exchange goes
//! when its last binding (as a source) goes, however that happens (an unbind, the deletion of
//! the queue or exchange it led to), and its going removes the bindings that led to it, which
//! may take an auto-delete source of those with it. One that never had a binding stays.

use lapin::options::*;
use lapin::types::FieldTable;
use lapin::ExchangeKind;
use warren_tests::*;

const NOT_FOUND: u16 = 404;

async fn declare_exchange(ch: &lapin::Channel, name: &str, options: ExchangeDeclareOptions) {
    ch.exchange_declare(name.into(), ExchangeKind::Fanout, options, FieldTable::default())
        .await
        .unwrap_or_else(|error| panic!("declare exchange {name}: {error}"));
}

fn auto_delete() -> ExchangeDeclareOptions {
    ExchangeDeclareOptions { auto_delete: true, ..Default::default() }
}

async fn bind_exchange(ch: &lapin::Channel, destination: &str, source: &str) {
    ch.exchange_bind(
        destination.into(),
        source.into(),
        "".into(),
        ExchangeBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap_or_else(|error| panic!("bind {source} -> {destination}: {error}"));
}

async fn exists(conn: &lapin::Connection, name: &str) -> bool {
    let ch = channel(conn).await;
    let passive = ExchangeDeclareOptions { passive: true, ..Default::default() };
    match ch.exchange_declare(name.into(), ExchangeKind::Fanout, passive, FieldTable::default()).await {
        Ok(()) => true,
        Err(error) if reply_code(&error) == Some(NOT_FOUND) => false,
        Err(error) => panic!("passive declare of {name}: {error}"),
    }
}

#[tokio::test]
async fn an_auto_delete_exchange_goes_when_the_exchange_it_leads_to_is_deleted() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare_exchange(&ch, "source", auto_delete()).await;
    declare_exchange(&ch, "destination", ExchangeDeclareOptions::default()).await;
    bind_exchange(&ch, "destination", "source").await;
    assert!(exists(&conn, "source").await, "bound, it stays");

    ch.exchange_delete("destination".into(), ExchangeDeleteOptions::default()).await.expect("delete destination");
    assert!(!exists(&conn, "source").await, "its last binding went with the destination");
    broker.shutdown().await;
}

#[tokio::test]
async fn unbinding_the_last_exchange_binding_deletes_the_auto_delete_source() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare_exchange(&ch, "source", auto_delete()).await;
    declare_exchange(&ch, "first", ExchangeDeclareOptions::default()).await;
    declare_exchange(&ch, "second", ExchangeDeclareOptions::default()).await;
    bind_exchange(&ch, "first", "source").await;
    bind_exchange(&ch, "second", "source").await;
    let unbind = |destination: &'static str| {
        ch.exchange_unbind(
            destination.into(),
            "source".into(),
            "".into(),
            ExchangeUnbindOptions::default(),
            FieldTable::default(),
        )
    };
    unbind("first").await.expect("unbind first");
    assert!(exists(&conn, "source").await, "one binding left");
    unbind("second").await.expect("unbind second");
    assert!(!exists(&conn, "source").await, "no binding left");
    assert!(exists(&conn, "first").await && exists(&conn, "second").await, "destinations stay");
    broker.shutdown().await;
}

#[tokio::test]
async fn auto_deletion_cascades_through_exchange_bindings() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    // outer -> inner -> queue, both exchanges auto-delete.
    declare_exchange(&ch, "outer", auto_delete()).await;
    declare_exchange(&ch, "inner", auto_delete()).await;
    bind_exchange(&ch, "inner", "outer").await;
    ch.queue_declare("leaf".into(), QueueDeclareOptions::default(), FieldTable::default()).await.expect("queue");
    ch.queue_bind("leaf".into(), "inner".into(), "".into(), QueueBindOptions::default(), FieldTable::default())
        .await
        .expect("bind the queue");

    ch.queue_delete("leaf".into(), QueueDeleteOptions::default()).await.expect("delete the queue");
    assert!(!exists(&conn, "inner").await, "inner lost its only binding");
    assert!(!exists(&conn, "outer").await, "outer lost its only binding when inner went");
    broker.shutdown().await;
}

#[tokio::test]
async fn an_auto_delete_exchange_only_led_to_stays() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare_exchange(&ch, "never-a-source", auto_delete()).await;
    declare_exchange(&ch, "source", ExchangeDeclareOptions::default()).await;
    bind_exchange(&ch, "never-a-source", "source").await;
    ch.exchange_unbind(
        "never-a-source".into(),
        "source".into(),
        "".into(),
        ExchangeUnbindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("unbind");
    assert!(exists(&conn, "never-a-source").await, "only bindings from it count");
    broker.shutdown().await;
}

#[tokio::test]
async fn a_durable_auto_deleted_exchange_stays_deleted_after_a_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let broker = start_broker_in(dir.path()).await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let durable = ExchangeDeclareOptions { durable: true, ..Default::default() };
    declare_exchange(
        &ch,
        "durable-source",
        ExchangeDeclareOptions { durable: true, auto_delete: true, ..Default::default() },
    )
    .await;
    declare_exchange(&ch, "durable-destination", durable).await;
    bind_exchange(&ch, "durable-destination", "durable-source").await;
    ch.exchange_delete("durable-destination".into(), ExchangeDeleteOptions::default()).await.expect("delete");
    drop(conn);
    broker.shutdown().await;

    let broker = start_broker_in(dir.path()).await;
    let conn = connect(&broker).await;
    assert!(!exists(&conn, "durable-source").await, "the auto-deletion was stored");
    broker.shutdown().await;
}
