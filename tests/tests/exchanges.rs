//! Exchanges with lapin: declare (passive, equivalence, reserved names, unknown types), routing by
//! direct, fanout, topic and headers exchanges, exchange-to-exchange bindings, alternate and
//! internal exchanges, delete and auto-delete, and the errors RabbitMQ answers with.

use std::time::Duration;

use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, ExchangeKind};
use warren_tests::*;

const ACCESS_REFUSED: u16 = 403;
const NOT_FOUND: u16 = 404;
const PRECONDITION_FAILED: u16 = 406;
const COMMAND_INVALID: u16 = 503;

async fn declare_exchange(ch: &lapin::Channel, name: &str, kind: ExchangeKind) {
    declare_exchange_with(ch, name, kind, ExchangeDeclareOptions::default(), FieldTable::default())
        .await
        .unwrap_or_else(|error| panic!("declare exchange {name}: {error}"));
}

async fn declare_exchange_with(
    ch: &lapin::Channel,
    name: &str,
    kind: ExchangeKind,
    options: ExchangeDeclareOptions,
    args: FieldTable,
) -> lapin::Result<()> {
    ch.exchange_declare(name.into(), kind, options, args).await
}

async fn passive_exchange(ch: &lapin::Channel, name: &str) -> lapin::Result<()> {
    let passive = ExchangeDeclareOptions { passive: true, ..Default::default() };
    declare_exchange_with(ch, name, ExchangeKind::Direct, passive, FieldTable::default()).await
}

async fn declare_queue(ch: &lapin::Channel, name: &str) {
    ch.queue_declare(name.into(), QueueDeclareOptions::default(), FieldTable::default())
        .await
        .unwrap_or_else(|error| panic!("declare queue {name}: {error}"));
}

async fn bind(ch: &lapin::Channel, queue: &str, exchange: &str, key: &str) {
    bind_with(ch, queue, exchange, key, FieldTable::default()).await;
}

async fn bind_with(ch: &lapin::Channel, queue: &str, exchange: &str, key: &str, args: FieldTable) {
    ch.queue_bind(queue.into(), exchange.into(), key.into(), QueueBindOptions::default(), args)
        .await
        .unwrap_or_else(|error| panic!("bind {queue} to {exchange} with {key:?}: {error}"));
}

/// Publishes and waits for the broker's confirm (the channel must be in confirm mode).
async fn publish(ch: &lapin::Channel, exchange: &str, key: &str, body: &[u8]) {
    publish_props(ch, exchange, key, body, BasicProperties::default()).await;
}

async fn publish_props(ch: &lapin::Channel, exchange: &str, key: &str, body: &[u8], props: BasicProperties) {
    ch.basic_publish(exchange.into(), key.into(), BasicPublishOptions::default(), body, props)
        .await
        .unwrap_or_else(|error| panic!("publish to {exchange:?} with {key:?}: {error}"))
        .await
        .unwrap_or_else(|error| panic!("confirm of publish to {exchange:?} with {key:?}: {error}"));
}

/// Publishes on a fresh confirm channel and returns what the confirm resolved to: a refused
/// publish closes the channel, which fails the pending confirm with the broker's reply code.
async fn confirmed_publish(conn: &lapin::Connection, exchange: &str, key: &str) -> lapin::Result<()> {
    let ch = confirm_channel(conn).await;
    let confirm = ch
        .basic_publish(
            exchange.into(),
            key.into(),
            BasicPublishOptions::default(),
            b"refused",
            BasicProperties::default(),
        )
        .await?;
    confirm.await.map(|confirmation| panic!("publish to {exchange:?} was confirmed: {confirmation:?}"))
}

/// Takes one message from `queue` with basic.get (auto-ack), returning its body.
async fn get(ch: &lapin::Channel, queue: &str) -> Option<Vec<u8>> {
    ch.basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap_or_else(|error| panic!("basic.get on {queue}: {error}"))
        .map(|message| message.delivery.data.clone())
}

/// Drains every message of each queue and returns the names of those that held `body`,
/// asserting that no queue held anything else.
async fn queues_holding(ch: &lapin::Channel, queues: &[&str], body: &[u8]) -> Vec<String> {
    let mut holding = Vec::new();
    for queue in queues {
        let mut count = 0;
        while let Some(got) = get(ch, queue).await {
            assert_eq!(got, body, "queue {queue} holds an unexpected message");
            count += 1;
        }
        assert!(count <= 1, "queue {queue} got {count} copies of {:?}", String::from_utf8_lossy(body));
        if count == 1 {
            holding.push(queue.to_string());
        }
    }
    holding
}

/// Checks that the connection survived a channel error: a new channel works.
async fn assert_connection_usable(conn: &lapin::Connection) {
    let ch = channel(conn).await;
    passive_exchange(&ch, "amq.direct").await.expect("connection still usable after a channel error");
}

fn int(value: i32) -> AMQPValue {
    AMQPValue::LongInt(value)
}

#[tokio::test]
async fn default_and_amq_exchanges_exist() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    for name in ["amq.direct", "amq.fanout", "amq.topic", "amq.headers", "amq.match"] {
        passive_exchange(&ch, name).await.unwrap_or_else(|error| panic!("passive declare of {name}: {error}"));
    }
    // The default exchange routes by queue name.
    declare_queue(&ch, "by-name").await;
    publish(&ch, "", "by-name", b"via default").await;
    assert_eq!(get(&ch, "by-name").await.as_deref(), Some(&b"via default"[..]));
    broker.shutdown().await;
}

#[tokio::test]
async fn passive_declare_of_missing_exchange_is_404() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    assert_code(passive_exchange(&ch, "no-such-exchange").await, NOT_FOUND, "passive declare");
    assert_connection_usable(&conn).await;
    broker.shutdown().await;
}

#[tokio::test]
async fn redeclare_with_different_properties_is_406() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare_exchange(&ch, "x", ExchangeKind::Direct).await;

    let different: [(&str, ExchangeKind, ExchangeDeclareOptions); 3] = [
        ("type", ExchangeKind::Topic, ExchangeDeclareOptions::default()),
        ("durable", ExchangeKind::Direct, ExchangeDeclareOptions { durable: true, ..Default::default() }),
        ("auto_delete", ExchangeKind::Direct, ExchangeDeclareOptions { auto_delete: true, ..Default::default() }),
    ];
    for (what, kind, options) in different {
        let ch = channel(&conn).await;
        let result = declare_exchange_with(&ch, "x", kind, options, FieldTable::default()).await;
        assert_code(result, PRECONDITION_FAILED, &format!("redeclare with different {what}"));
    }
    // The same declaration is still accepted, and the exchange kept its original type.
    let ch = channel(&conn).await;
    declare_exchange(&ch, "x", ExchangeKind::Direct).await;
    broker.shutdown().await;
}

#[tokio::test]
async fn unknown_exchange_type_closes_the_connection_with_503() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let result = declare_exchange_with(
        &ch,
        "strange",
        ExchangeKind::Custom("nope".into()),
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await;
    assert_code(result, COMMAND_INVALID, "declare with unknown type");

    // A connection error: the whole connection is closed, not just the channel.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while conn.status().connected() {
        assert!(tokio::time::Instant::now() < deadline, "connection still open after 503");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(conn.create_channel().await.is_err(), "a closed connection must not open channels");

    // Nothing was declared, and the broker still serves new connections.
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    assert_code(passive_exchange(&ch, "strange").await, NOT_FOUND, "passive declare after failed declare");
    broker.shutdown().await;
}

#[tokio::test]
async fn declaring_an_amq_prefixed_exchange_is_403() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let result = declare_exchange_with(
        &ch,
        "amq.custom",
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await;
    assert_code(result, ACCESS_REFUSED, "declare amq.custom");
    let ch = channel(&conn).await;
    assert_code(passive_exchange(&ch, "amq.custom").await, NOT_FOUND, "amq.custom must not exist");
    assert_connection_usable(&conn).await;
    broker.shutdown().await;
}

#[tokio::test]
async fn direct_exchange_routes_by_exact_key() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    declare_exchange(&ch, "d", ExchangeKind::Direct).await;
    for queue in ["q1", "q2"] {
        declare_queue(&ch, queue).await;
    }
    bind(&ch, "q1", "d", "k1").await;
    bind(&ch, "q2", "d", "k2").await;
    bind(&ch, "q1", "d", "shared").await;
    bind(&ch, "q2", "d", "shared").await;

    let cases: [(&str, &[&str]); 5] =
        [("k1", &["q1"]), ("k2", &["q2"]), ("shared", &["q1", "q2"]), ("K1", &[]), ("k1.x", &[])];
    for (key, expected) in cases {
        publish(&ch, "d", key, key.as_bytes()).await;
        assert_eq!(queues_holding(&ch, &["q1", "q2"], key.as_bytes()).await, expected, "routing key {key:?}");
    }
    broker.shutdown().await;
}

#[tokio::test]
async fn fanout_exchange_copies_to_every_bound_queue() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    declare_exchange(&ch, "f", ExchangeKind::Fanout).await;
    let queues = ["f1", "f2", "f3"];
    for (i, queue) in queues.iter().enumerate() {
        declare_queue(&ch, queue).await;
        // The binding key is ignored by a fanout exchange.
        bind(&ch, queue, "f", &format!("ignored-{i}")).await;
    }
    declare_queue(&ch, "unbound").await;
    for key in ["", "anything", "f1"] {
        publish(&ch, "f", key, b"broadcast").await;
        assert_eq!(queues_holding(&ch, &["f1", "f2", "f3", "unbound"], b"broadcast").await, queues, "key {key:?}");
    }
    broker.shutdown().await;
}

#[tokio::test]
async fn topic_exchange_matches_star_and_hash() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    declare_exchange(&ch, "t", ExchangeKind::Topic).await;
    // One queue per binding pattern, named after it.
    let patterns = ["#", "a.*", "*.b", "a.#", "#.b", "a.#.b", "a.*.b", "*.*", "a.b", "", "*"];
    let queue_of = |pattern: &str| format!("q[{pattern}]");
    let queues: Vec<String> = patterns.iter().map(|p| queue_of(p)).collect();
    let queue_refs: Vec<&str> = queues.iter().map(String::as_str).collect();
    for pattern in patterns {
        declare_queue(&ch, &queue_of(pattern)).await;
        bind(&ch, &queue_of(pattern), "t", pattern).await;
    }

    // Routing key, and the patterns that match it (as RabbitMQ matches them: words are split on
    // '.', the empty key has no words, "a..b" has an empty middle word).
    let cases: [(&str, &[&str]); 10] = [
        ("a.b", &["#", "a.*", "*.b", "a.#", "#.b", "a.#.b", "*.*", "a.b"]),
        ("a", &["#", "a.#", "*"]),
        ("b", &["#", "#.b", "*"]),
        ("a.x.b", &["#", "a.#", "#.b", "a.#.b", "a.*.b"]),
        ("a.x.y.b", &["#", "a.#", "#.b", "a.#.b"]),
        ("a.b.c", &["#", "a.#"]),
        ("a..b", &["#", "a.#", "#.b", "a.#.b", "a.*.b"]),
        ("", &["#", ""]),
        (".", &["#", "*.*"]),
        ("x.a.b.y", &["#"]),
    ];
    for (key, expected) in cases {
        let body = format!("key={key}");
        publish(&ch, "t", key, body.as_bytes()).await;
        let expected: Vec<String> = expected.iter().map(|p| queue_of(p)).collect();
        let mut got = queues_holding(&ch, &queue_refs, body.as_bytes()).await;
        got.sort();
        let mut expected = expected;
        expected.sort();
        assert_eq!(got, expected, "routing key {key:?}");
    }
    broker.shutdown().await;
}

#[tokio::test]
async fn headers_exchange_matches_all_any_and_with_x() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    declare_exchange(&ch, "h", ExchangeKind::Headers).await;
    let bindings: [(&str, FieldTable); 6] = [
        ("all", table(&[("x-match", text("all")), ("a", int(1)), ("b", text("two"))])),
        ("default", table(&[("a", int(1)), ("b", text("two"))])),
        ("any", table(&[("x-match", text("any")), ("a", int(1)), ("b", text("two"))])),
        // With plain all/any, headers starting with "x-" are ignored in the binding...
        ("all-ignoring-x", table(&[("x-match", text("all")), ("x-tag", text("t")), ("a", int(1))])),
        // ... and with all-with-x / any-with-x they take part in the match.
        ("all-with-x", table(&[("x-match", text("all-with-x")), ("x-tag", text("t")), ("a", int(1))])),
        ("any-with-x", table(&[("x-match", text("any-with-x")), ("x-tag", text("t")), ("c", int(3))])),
    ];
    let queues: Vec<&str> = bindings.iter().map(|(name, _)| *name).collect();
    for (queue, args) in &bindings {
        declare_queue(&ch, queue).await;
        // The routing key is ignored by a headers exchange.
        bind_with(&ch, queue, "h", "ignored", args.clone()).await;
    }

    let cases: [(&str, FieldTable, &[&str]); 8] = [
        ("a and b", table(&[("a", int(1)), ("b", text("two"))]), &["all", "default", "any", "all-ignoring-x"]),
        ("a only", table(&[("a", int(1))]), &["any", "all-ignoring-x"]),
        ("a, wrong b", table(&[("a", int(1)), ("b", text("three"))]), &["any", "all-ignoring-x"]),
        (
            "x-tag and a",
            table(&[("x-tag", text("t")), ("a", int(1))]),
            &["any", "all-ignoring-x", "all-with-x", "any-with-x"],
        ),
        ("x-tag only", table(&[("x-tag", text("t"))]), &["any-with-x"]),
        ("b and c", table(&[("b", text("two")), ("c", int(3))]), &["any", "any-with-x"]),
        (
            "a and b plus extra",
            table(&[("a", int(1)), ("b", text("two")), ("z", int(9))]),
            &["all", "default", "any", "all-ignoring-x"],
        ),
        ("unrelated", table(&[("z", int(1))]), &[]),
    ];
    for (what, headers, expected) in cases {
        let body = format!("headers: {what}");
        let props = BasicProperties::default().with_headers(headers);
        publish_props(&ch, "h", "key", body.as_bytes(), props).await;
        assert_eq!(queues_holding(&ch, &queues, body.as_bytes()).await, expected, "message with {what}");
    }
    // A message without any headers matches none of these bindings.
    publish(&ch, "h", "key", b"no headers").await;
    assert_eq!(queues_holding(&ch, &queues, b"no headers").await, Vec::<String>::new());
    broker.shutdown().await;
}

#[tokio::test]
async fn exchange_to_exchange_binding_routes_and_unbind_stops_it() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    declare_exchange(&ch, "source", ExchangeKind::Topic).await;
    declare_exchange(&ch, "destination", ExchangeKind::Fanout).await;
    declare_queue(&ch, "sink").await;
    bind(&ch, "sink", "destination", "").await;
    ch.exchange_bind(
        "destination".into(),
        "source".into(),
        "orders.#".into(),
        ExchangeBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("exchange.bind");

    publish(&ch, "source", "orders.new", b"routed").await;
    publish(&ch, "source", "payments.new", b"not routed").await;
    assert_eq!(get(&ch, "sink").await.as_deref(), Some(&b"routed"[..]));
    assert_eq!(get(&ch, "sink").await, None, "only the matching key crosses the binding");

    ch.exchange_unbind(
        "destination".into(),
        "source".into(),
        "orders.#".into(),
        ExchangeUnbindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("exchange.unbind");
    publish(&ch, "source", "orders.new", b"after unbind").await;
    assert_eq!(get(&ch, "sink").await, None, "unbound exchanges must not route");
    // The destination itself still routes.
    publish(&ch, "destination", "", b"direct to destination").await;
    assert_eq!(get(&ch, "sink").await.as_deref(), Some(&b"direct to destination"[..]));
    broker.shutdown().await;
}

#[tokio::test]
async fn alternate_exchange_receives_unroutable_messages() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    declare_exchange(&ch, "ae", ExchangeKind::Fanout).await;
    declare_queue(&ch, "unrouted").await;
    bind(&ch, "unrouted", "ae", "").await;
    let args = table(&[("alternate-exchange", text("ae"))]);
    declare_exchange_with(&ch, "main", ExchangeKind::Direct, ExchangeDeclareOptions::default(), args)
        .await
        .expect("declare with alternate-exchange");
    declare_queue(&ch, "routed").await;
    bind(&ch, "routed", "main", "known").await;

    publish(&ch, "main", "known", b"known").await;
    assert_eq!(queues_holding(&ch, &["routed", "unrouted"], b"known").await, ["routed"]);
    publish(&ch, "main", "unknown", b"unknown").await;
    assert_eq!(queues_holding(&ch, &["routed", "unrouted"], b"unknown").await, ["unrouted"]);
    broker.shutdown().await;
}

#[tokio::test]
async fn internal_exchange_refuses_direct_publish_with_403() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    let internal = ExchangeDeclareOptions { internal: true, ..Default::default() };
    declare_exchange_with(&ch, "inner", ExchangeKind::Fanout, internal, FieldTable::default())
        .await
        .expect("declare internal");
    declare_exchange(&ch, "outer", ExchangeKind::Fanout).await;
    declare_queue(&ch, "behind-inner").await;
    bind(&ch, "behind-inner", "inner", "").await;
    ch.exchange_bind("inner".into(), "outer".into(), "".into(), ExchangeBindOptions::default(), FieldTable::default())
        .await
        .expect("exchange.bind");

    // Through another exchange, an internal exchange routes.
    publish(&ch, "outer", "", b"via outer").await;
    assert_eq!(get(&ch, "behind-inner").await.as_deref(), Some(&b"via outer"[..]));

    // Published to directly, it is refused with a channel error.
    assert_code(confirmed_publish(&conn, "inner", "").await, ACCESS_REFUSED, "publish to internal exchange");
    assert_connection_usable(&conn).await;

    let ch = channel(&conn).await;
    assert_eq!(get(&ch, "behind-inner").await, None, "the refused message must not be routed");
    broker.shutdown().await;
}

#[tokio::test]
async fn exchange_delete_if_unused_refuses_bound_exchange() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare_exchange(&ch, "busy", ExchangeKind::Direct).await;
    declare_queue(&ch, "bound").await;
    bind(&ch, "bound", "busy", "k").await;

    let if_unused = ExchangeDeleteOptions { if_unused: true, ..Default::default() };
    assert_code(ch.exchange_delete("busy".into(), if_unused).await, PRECONDITION_FAILED, "delete if_unused");

    let ch = channel(&conn).await;
    passive_exchange(&ch, "busy").await.expect("the exchange survives a refused delete");
    ch.exchange_delete("busy".into(), ExchangeDeleteOptions::default()).await.expect("delete");
    assert_code(passive_exchange(&ch, "busy").await, NOT_FOUND, "passive declare after delete");

    // Its bindings went with it; the queue itself stays.
    let ch = channel(&conn).await;
    let ok = ch
        .queue_declare(
            "bound".into(),
            QueueDeclareOptions { passive: true, ..Default::default() },
            FieldTable::default(),
        )
        .await
        .expect("the bound queue survives");
    assert_eq!(ok.message_count(), 0);
    // An unbound exchange may be deleted with if_unused.
    declare_exchange(&ch, "idle", ExchangeKind::Direct).await;
    ch.exchange_delete("idle".into(), if_unused).await.expect("delete if_unused of an unused exchange");
    assert_code(passive_exchange(&ch, "idle").await, NOT_FOUND, "passive declare after delete");
    broker.shutdown().await;
}

#[tokio::test]
async fn auto_delete_exchange_goes_with_its_last_binding() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let auto_delete = ExchangeDeclareOptions { auto_delete: true, ..Default::default() };
    declare_exchange_with(&ch, "ephemeral", ExchangeKind::Direct, auto_delete, FieldTable::default())
        .await
        .expect("declare auto-delete");
    // Never having had a binding, it stays.
    passive_exchange(&ch, "ephemeral").await.expect("auto-delete exchange exists before any binding");

    declare_queue(&ch, "e1").await;
    declare_queue(&ch, "e2").await;
    bind(&ch, "e1", "ephemeral", "k").await;
    bind(&ch, "e2", "ephemeral", "k").await;
    ch.queue_unbind("e1".into(), "ephemeral".into(), "k".into(), FieldTable::default()).await.expect("unbind e1");
    passive_exchange(&ch, "ephemeral").await.expect("still one binding left");

    ch.queue_unbind("e2".into(), "ephemeral".into(), "k".into(), FieldTable::default()).await.expect("unbind e2");
    assert_code(passive_exchange(&ch, "ephemeral").await, NOT_FOUND, "auto-delete exchange after its last unbind");

    // Deleting the last bound queue removes the binding, and so the exchange, too.
    let ch = channel(&conn).await;
    declare_exchange_with(&ch, "ephemeral2", ExchangeKind::Fanout, auto_delete, FieldTable::default())
        .await
        .expect("declare auto-delete");
    bind(&ch, "e1", "ephemeral2", "").await;
    ch.queue_delete("e1".into(), QueueDeleteOptions::default()).await.expect("delete e1");
    assert_code(passive_exchange(&ch, "ephemeral2").await, NOT_FOUND, "auto-delete exchange after its queue went");
    broker.shutdown().await;
}

#[tokio::test]
async fn publish_to_missing_exchange_is_404() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;

    // Without confirms, the channel error arrives asynchronously: a consumer on the channel sees it.
    let ch = channel(&conn).await;
    let watch = ch
        .queue_declare("".into(), QueueDeclareOptions { exclusive: true, ..Default::default() }, FieldTable::default())
        .await
        .expect("declare a queue to watch the channel");
    let mut watcher = ch
        .basic_consume(watch.name().clone(), "watcher".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .expect("consume");
    ch.basic_publish("nowhere".into(), "k".into(), BasicPublishOptions::default(), b"lost", BasicProperties::default())
        .await
        .expect("publish is asynchronous");
    match tokio::time::timeout(Duration::from_secs(5), futures_util::StreamExt::next(&mut watcher)).await {
        Ok(Some(Err(error))) => assert_eq!(reply_code(&error), Some(NOT_FOUND), "unexpected error {error}"),
        other => panic!("expected the channel to close with 404, got {other:?}"),
    }
    assert!(!ch.status().connected(), "the channel is closed by the error");
    assert_connection_usable(&conn).await;

    // With confirms, the pending confirm fails with the channel error.
    assert_code(confirmed_publish(&conn, "nowhere", "k").await, NOT_FOUND, "confirmed publish to a missing exchange");
    assert_connection_usable(&conn).await;
    broker.shutdown().await;
}

#[tokio::test]
async fn binding_to_missing_queue_or_from_missing_exchange_is_404() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare_queue(&ch, "present").await;
    declare_exchange(&ch, "present-x", ExchangeKind::Direct).await;
    let bind_result = |queue: &'static str, exchange: &'static str| {
        let conn = &conn;
        async move {
            let ch = channel(conn).await;
            ch.queue_bind(queue.into(), exchange.into(), "k".into(), QueueBindOptions::default(), FieldTable::default())
                .await
        }
    };
    assert_code(bind_result("missing", "amq.direct").await, NOT_FOUND, "bind a missing queue");
    assert_code(bind_result("present", "missing-x").await, NOT_FOUND, "bind from a missing exchange");

    let exchange_bind = |destination: &'static str, source: &'static str| {
        let conn = &conn;
        async move {
            let ch = channel(conn).await;
            ch.exchange_bind(
                destination.into(),
                source.into(),
                "k".into(),
                ExchangeBindOptions::default(),
                FieldTable::default(),
            )
            .await
        }
    };
    assert_code(exchange_bind("missing-x", "present-x").await, NOT_FOUND, "exchange.bind to a missing destination");
    assert_code(exchange_bind("present-x", "missing-x").await, NOT_FOUND, "exchange.bind from a missing source");
    assert_connection_usable(&conn).await;
    broker.shutdown().await;
}

#[tokio::test]
async fn binding_to_the_default_exchange_is_403() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare_queue(&ch, "q").await;
    let result =
        ch.queue_bind("q".into(), "".into(), "other".into(), QueueBindOptions::default(), FieldTable::default()).await;
    assert_code(result, ACCESS_REFUSED, "bind to the default exchange");

    let ch = channel(&conn).await;
    let result = ch.queue_unbind("q".into(), "".into(), "q".into(), FieldTable::default()).await;
    assert_code(result, ACCESS_REFUSED, "unbind from the default exchange");

    // The implicit binding still works and nothing was added.
    let ch = confirm_channel(&conn).await;
    publish(&ch, "", "q", b"by name").await;
    publish(&ch, "", "other", b"not bound").await;
    assert_eq!(get(&ch, "q").await.as_deref(), Some(&b"by name"[..]));
    assert_eq!(get(&ch, "q").await, None);
    broker.shutdown().await;
}

#[tokio::test]
async fn redeclaring_a_builtin_exchange_checks_equivalence_not_the_name() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    // RabbitMQ refuses the "amq." prefix only when creating: an equivalent redeclare is fine.
    let durable = ExchangeDeclareOptions { durable: true, ..Default::default() };
    for (name, kind) in [("amq.direct", ExchangeKind::Direct), ("amq.topic", ExchangeKind::Topic)] {
        declare_exchange_with(&ch, name, kind, durable, FieldTable::default())
            .await
            .unwrap_or_else(|error| panic!("equivalent redeclare of {name}: {error}"));
    }
    // A different one is 406, as for any exchange.
    let result =
        declare_exchange_with(&ch, "amq.direct", ExchangeKind::Direct, Default::default(), FieldTable::default()).await;
    assert_code(result, PRECONDITION_FAILED, "redeclare amq.direct as transient");
    broker.shutdown().await;
}

#[tokio::test]
async fn deleting_builtin_exchanges_is_403() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    for name in ["amq.direct", "amq.fanout", ""] {
        let ch = channel(&conn).await;
        let result = ch.exchange_delete(name.into(), ExchangeDeleteOptions::default()).await;
        assert_code(result, ACCESS_REFUSED, &format!("delete {name:?}"));
    }
    let ch = channel(&conn).await;
    passive_exchange(&ch, "amq.direct").await.expect("amq.direct survives");
    broker.shutdown().await;
}

#[tokio::test]
async fn deleting_a_missing_exchange_is_ok() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    // RabbitMQ's exchange.delete is idempotent.
    ch.exchange_delete("never-declared".into(), ExchangeDeleteOptions::default()).await.expect("delete missing");
    declare_exchange(&ch, "once", ExchangeKind::Fanout).await;
    ch.exchange_delete("once".into(), ExchangeDeleteOptions::default()).await.expect("delete");
    ch.exchange_delete("once".into(), ExchangeDeleteOptions::default()).await.expect("delete again");
    broker.shutdown().await;
}

#[tokio::test]
async fn redeclare_compares_only_the_alternate_exchange_argument() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let custom = table(&[("x-custom", int(1))]);
    declare_exchange_with(&ch, "with-args", ExchangeKind::Direct, Default::default(), custom)
        .await
        .expect("declare with an argument");
    // Arguments RabbitMQ does not interpret take no part in equivalence.
    declare_exchange_with(&ch, "with-args", ExchangeKind::Direct, Default::default(), FieldTable::default())
        .await
        .expect("redeclare without the argument");
    let other = table(&[("x-custom", int(2))]);
    declare_exchange_with(&ch, "with-args", ExchangeKind::Direct, Default::default(), other)
        .await
        .expect("redeclare with another value");
    // alternate-exchange does.
    let ae = table(&[("alternate-exchange", text("ae"))]);
    let result = declare_exchange_with(&ch, "with-args", ExchangeKind::Direct, Default::default(), ae).await;
    assert_code(result, PRECONDITION_FAILED, "redeclare with an alternate-exchange");
    broker.shutdown().await;
}

#[tokio::test]
async fn redeclare_with_a_different_alternate_exchange_is_406() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let ae = table(&[("alternate-exchange", text("ae1"))]);
    declare_exchange_with(&ch, "guarded", ExchangeKind::Direct, Default::default(), ae.clone()).await.expect("declare");
    declare_exchange_with(&ch, "guarded", ExchangeKind::Direct, Default::default(), ae).await.expect("same redeclare");
    let other = table(&[("alternate-exchange", text("ae2"))]);
    let result = declare_exchange_with(&ch, "guarded", ExchangeKind::Direct, Default::default(), other).await;
    assert_code(result, PRECONDITION_FAILED, "redeclare with another alternate-exchange");
    let ch = channel(&conn).await;
    let result =
        declare_exchange_with(&ch, "guarded", ExchangeKind::Direct, Default::default(), FieldTable::default()).await;
    assert_code(result, PRECONDITION_FAILED, "redeclare without the alternate-exchange");
    broker.shutdown().await;
}

#[tokio::test]
async fn alternate_exchange_is_used_only_when_the_exchange_itself_matches_nothing() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    declare_exchange(&ch, "ae", ExchangeKind::Fanout).await;
    declare_queue(&ch, "ae-queue").await;
    bind(&ch, "ae-queue", "ae", "").await;
    let with_ae = table(&[("alternate-exchange", text("ae"))]);
    declare_exchange_with(&ch, "guarded", ExchangeKind::Direct, Default::default(), with_ae)
        .await
        .expect("declare with alternate-exchange");

    // 1. The binding matches, to an exchange that routes nowhere: RabbitMQ drops the message,
    //    the alternate exchange is not involved.
    declare_exchange(&ch, "dead-end", ExchangeKind::Direct).await;
    ch.exchange_bind("dead-end".into(), "guarded".into(), "k".into(), Default::default(), FieldTable::default())
        .await
        .expect("exchange.bind");
    publish(&ch, "guarded", "k", b"matched a binding").await;
    assert_eq!(get(&ch, "ae-queue").await, None, "a matched message must not go to the alternate exchange");

    // 2. The binding matches a queue another path already reached: one copy, no alternate.
    declare_exchange(&ch, "top", ExchangeKind::Fanout).await;
    declare_queue(&ch, "shared").await;
    bind(&ch, "shared", "top", "").await;
    bind(&ch, "shared", "guarded", "s").await;
    ch.exchange_bind("guarded".into(), "top".into(), "".into(), Default::default(), FieldTable::default())
        .await
        .expect("exchange.bind");
    publish(&ch, "top", "s", b"two paths").await;
    assert_eq!(queues_holding(&ch, &["shared", "ae-queue"], b"two paths").await, ["shared"]);
    broker.shutdown().await;
}

#[tokio::test]
async fn exchange_bindings_deliver_one_copy_through_diamonds_and_cycles() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    for name in ["top", "left", "right"] {
        declare_exchange(&ch, name, ExchangeKind::Fanout).await;
    }
    let e2e = |destination: &'static str, source: &'static str| {
        let ch = ch.clone();
        async move {
            ch.exchange_bind(destination.into(), source.into(), "".into(), Default::default(), FieldTable::default())
                .await
                .unwrap_or_else(|error| panic!("bind {destination} to {source}: {error}"));
        }
    };
    // A diamond top -> left, right -> bottom, plus a cycle right -> top.
    e2e("left", "top").await;
    e2e("right", "top").await;
    e2e("top", "right").await;
    declare_queue(&ch, "bottom").await;
    bind(&ch, "bottom", "left", "").await;
    bind(&ch, "bottom", "right", "").await;
    declare_queue(&ch, "at-top").await;
    bind(&ch, "at-top", "top", "").await;

    for source in ["top", "left", "right"] {
        let body = format!("from {source}");
        publish(&ch, source, "", body.as_bytes()).await;
        let expected: &[&str] = if source == "left" { &["bottom"] } else { &["bottom", "at-top"] };
        assert_eq!(queues_holding(&ch, &["bottom", "at-top"], body.as_bytes()).await, expected, "{body}");
    }
    broker.shutdown().await;
}

#[tokio::test]
async fn headers_exchange_edge_cases() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    declare_exchange(&ch, "h", ExchangeKind::Headers).await;
    let bindings: [(&str, FieldTable); 3] = [
        // No headers to compare: "all" of nothing is true, "any" of nothing is false.
        ("empty-all", FieldTable::default()),
        ("empty-any", table(&[("x-match", text("any"))])),
        // A void value matches the header's presence, whatever its value.
        ("present", table(&[("flag", AMQPValue::Void)])),
    ];
    let queues: Vec<&str> = bindings.iter().map(|(name, _)| *name).collect();
    for (queue, args) in &bindings {
        declare_queue(&ch, queue).await;
        bind_with(&ch, queue, "h", "", args.clone()).await;
    }
    let cases: [(&str, Option<FieldTable>, &[&str]); 3] = [
        ("no headers", None, &["empty-all"]),
        ("flag=1", Some(table(&[("flag", int(1))])), &["empty-all", "present"]),
        ("flag=x", Some(table(&[("flag", text("x"))])), &["empty-all", "present"]),
    ];
    for (what, headers, expected) in cases {
        let props = match headers {
            Some(headers) => BasicProperties::default().with_headers(headers),
            None => BasicProperties::default(),
        };
        publish_props(&ch, "h", "", what.as_bytes(), props).await;
        assert_eq!(queues_holding(&ch, &queues, what.as_bytes()).await, expected, "message with {what}");
    }

    // An x-match value other than the four modes is refused.
    let ch = channel(&conn).await;
    let bad = table(&[("x-match", text("some")), ("a", int(1))]);
    let result = ch.queue_bind("empty-all".into(), "h".into(), "".into(), QueueBindOptions::default(), bad).await;
    assert_code(result, PRECONDITION_FAILED, "bind with x-match=some");
    assert_connection_usable(&conn).await;
    broker.shutdown().await;
}
