//! Priorities, TTL, length limits, dead-lettering, delivery limits, delayed messages,
//! consumer priorities, single active consumer and tag filters, with lapin.

use lapin::options::*;
use lapin::types::{AMQPValue, FieldArray, FieldTable};
use lapin::{BasicProperties, ExchangeKind};
use std::time::{Duration, Instant};
use warren_tests::*;

async fn declare(ch: &lapin::Channel, name: &str, arguments: FieldTable) {
    ch.queue_declare(name.into(), QueueDeclareOptions::default(), arguments).await.expect("declare");
}

async fn publish_with(ch: &lapin::Channel, exchange: &str, key: &str, body: &[u8], props: BasicProperties) {
    ch.basic_publish(exchange.into(), key.into(), BasicPublishOptions::default(), body, props).await.expect("publish");
}

async fn count(ch: &lapin::Channel, queue: &str) -> Option<u32> {
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    ch.queue_declare(queue.into(), passive, FieldTable::default()).await.ok().map(|q| q.message_count())
}

/// Polls `queue`'s ready count until `done` holds, for at most 5 s (timings by generous bounds).
async fn wait_for_count(conn: &lapin::Connection, queue: &str, done: impl Fn(Option<u32>) -> bool) -> Option<u32> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let ch = channel(conn).await;
        let seen = count(&ch, queue).await;
        if done(seen) || Instant::now() > deadline {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn header<'a>(props: &'a BasicProperties, name: &str) -> Option<&'a AMQPValue> {
    props.headers().as_ref().and_then(|h| h.inner().get(name))
}

fn deaths(props: &BasicProperties) -> Vec<FieldTable> {
    match header(props, "x-death") {
        Some(AMQPValue::FieldArray(array)) => array
            .as_slice()
            .iter()
            .filter_map(|v| match v {
                AMQPValue::FieldTable(t) => Some(t.clone()),
                _ => None,
            })
            .collect(),
        other => panic!("no x-death array: {other:?}"),
    }
}

/// A fanout dead-letter exchange `dlx` bound to queue `dlq`.
async fn dead_letter_setup(ch: &lapin::Channel) {
    ch.exchange_declare("dlx".into(), ExchangeKind::Fanout, Default::default(), FieldTable::default())
        .await
        .expect("dlx");
    declare(ch, "dlq", FieldTable::default()).await;
    ch.queue_bind("dlq".into(), "dlx".into(), "".into(), Default::default(), FieldTable::default())
        .await
        .expect("bind");
}

#[tokio::test]
async fn priorities_order_delivery_and_cap_at_the_maximum() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare(&ch, "prio", table(&[("x-max-priority", AMQPValue::ShortShortUInt(10))])).await;
    for (body, priority) in [("p1", Some(1)), ("p9", Some(9)), ("none", None), ("p5", Some(5)), ("p200", Some(200))] {
        let mut props = BasicProperties::default();
        if let Some(priority) = priority {
            props = props.with_priority(priority);
        }
        publish_with(&ch, "", "prio", body.as_bytes(), props).await;
    }
    let order: Vec<String> =
        drain(&ch, "prio").await.iter().map(|g| String::from_utf8_lossy(&g.delivery.data).into_owned()).collect();
    assert_eq!(order, vec!["p200", "p9", "p5", "p1", "none"]);
    broker.shutdown().await;
}

#[tokio::test]
async fn ttl_removes_messages_promptly_even_behind_the_head() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare(&ch, "ttl-queue", table(&[("x-message-ttl", AMQPValue::LongInt(200))])).await;
    publish_with(&ch, "", "ttl-queue", b"short", BasicProperties::default()).await;
    assert_eq!(wait_for_count(&conn, "ttl-queue", |c| c == Some(0)).await, Some(0), "queue TTL");

    declare(&ch, "per-message", FieldTable::default()).await;
    publish_with(&ch, "", "per-message", b"long", BasicProperties::default().with_expiration("60000".into())).await;
    publish_with(&ch, "", "per-message", b"short", BasicProperties::default().with_expiration("100".into())).await;
    assert_eq!(wait_for_count(&conn, "per-message", |c| c == Some(1)).await, Some(1), "expired behind the head");
    let left = drain(&ch, "per-message").await;
    assert_eq!(left[0].delivery.data, b"long");
    broker.shutdown().await;
}

/// A queue with TTL'd messages keeps one timer in the broker's wheel, not one per message:
/// timers are not cancelled when their message is consumed first, so a timer per message
/// made the wheel hold rate × TTL of them. A shorter per-message `expiration` still arms an
/// earlier one, and expires on time.
#[tokio::test]
async fn messages_with_a_ttl_share_their_queues_timer() {
    const MESSAGES: usize = 5_000;
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    declare(&ch, "ttl-many", table(&[("x-message-ttl", AMQPValue::LongInt(60_000))])).await;
    let before = broker.broker.pending_timers();
    for _ in 0..MESSAGES {
        let publish =
            ch.basic_publish("".into(), "ttl-many".into(), Default::default(), b"m", BasicProperties::default());
        // The confirm is awaited below, for all of them at once.
        drop(publish.await.expect("publish"));
    }
    ch.wait_for_confirms().await.expect("confirms");
    let with_ttl = broker.broker.pending_timers() - before;
    assert!(with_ttl <= 2, "{MESSAGES} messages with a TTL hold {with_ttl} timers");
    let short = BasicProperties::default().with_expiration("100".into());
    publish_with(&ch, "", "ttl-many", b"short", short).await;
    let count = wait_for_count(&conn, "ttl-many", |c| c == Some(MESSAGES as u32)).await;
    assert_eq!(count, Some(MESSAGES as u32), "the short one expired behind {MESSAGES} others");
    broker.shutdown().await;
}

#[tokio::test]
async fn rejected_messages_are_dead_lettered_with_x_death() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    dead_letter_setup(&ch).await;
    declare(&ch, "work", table(&[("x-dead-letter-exchange", text("dlx"))])).await;
    ch.exchange_declare("src".into(), ExchangeKind::Direct, Default::default(), FieldTable::default())
        .await
        .expect("src");
    ch.queue_bind("work".into(), "src".into(), "job".into(), Default::default(), FieldTable::default())
        .await
        .expect("bind");
    publish_with(&ch, "src", "job", b"bad", BasicProperties::default().with_expiration("60000".into())).await;
    let got = ch.basic_get("work".into(), BasicGetOptions::default()).await.expect("get").expect("message");
    got.delivery.reject(BasicRejectOptions { requeue: false }).await.expect("reject");
    wait_for_count(&conn, "dlq", |c| c == Some(1)).await;
    let dead = drain(&ch, "dlq").await.remove(0);
    let props = &dead.delivery.properties;
    assert_eq!(props.expiration(), &None, "expiration is removed");
    let entry = &deaths(props)[0];
    assert_eq!(entry.inner().get("count"), Some(&AMQPValue::LongLongInt(1)));
    assert_eq!(entry.inner().get("reason"), Some(&text("rejected")));
    assert_eq!(entry.inner().get("queue"), Some(&text("work")));
    assert_eq!(entry.inner().get("exchange"), Some(&text("src")));
    assert_eq!(entry.inner().get("original-expiration"), Some(&text("60000")));
    let mut keys = FieldArray::default();
    keys.push(text("job"));
    assert_eq!(entry.inner().get("routing-keys"), Some(&AMQPValue::FieldArray(keys)));
    assert!(matches!(entry.inner().get("time"), Some(AMQPValue::Timestamp(_))));
    for (name, value) in [("x-first-death-queue", "work"), ("x-first-death-reason", "rejected")] {
        assert_eq!(header(props, name), Some(&text(value)), "{name}");
    }
    assert_eq!(header(props, "x-first-death-exchange"), Some(&text("src")));
    assert_eq!(header(props, "x-last-death-queue"), Some(&text("work")));
    assert_eq!(dead.delivery.exchange.as_str(), "dlx");
    assert_eq!(dead.delivery.routing_key.as_str(), "job");
    broker.shutdown().await;
}

#[tokio::test]
async fn expired_messages_are_dead_lettered_with_the_dead_letter_routing_key() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    ch.exchange_declare("dlx-direct".into(), ExchangeKind::Direct, Default::default(), FieldTable::default())
        .await
        .expect("dlx");
    declare(&ch, "expired-dlq", FieldTable::default()).await;
    ch.queue_bind("expired-dlq".into(), "dlx-direct".into(), "dead".into(), Default::default(), FieldTable::default())
        .await
        .expect("bind");
    let arguments = table(&[
        ("x-message-ttl", AMQPValue::LongInt(100)),
        ("x-dead-letter-exchange", text("dlx-direct")),
        ("x-dead-letter-routing-key", text("dead")),
    ]);
    declare(&ch, "short-lived", arguments).await;
    publish_with(&ch, "", "short-lived", b"late", BasicProperties::default()).await;
    assert_eq!(wait_for_count(&conn, "expired-dlq", |c| c == Some(1)).await, Some(1));
    let dead = drain(&ch, "expired-dlq").await.remove(0);
    assert_eq!(deaths(&dead.delivery.properties)[0].inner().get("reason"), Some(&text("expired")));
    assert_eq!(dead.delivery.routing_key.as_str(), "dead");
    broker.shutdown().await;
}

#[tokio::test]
async fn a_dead_letter_cycle_without_rejection_is_dropped_and_counts_accumulate() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    // "ping" expires into "pong" which rejects back into "ping": count grows per (queue, reason).
    let to = |dlx: &str| table(&[("x-dead-letter-exchange", text("")), ("x-dead-letter-routing-key", text(dlx))]);
    let mut ping = to("pong");
    ping.insert("x-message-ttl".into(), AMQPValue::LongInt(50));
    declare(&ch, "ping", ping).await;
    declare(&ch, "pong", to("ping")).await;
    publish_with(&ch, "", "ping", b"ball", BasicProperties::default()).await;
    wait_for_count(&conn, "pong", |c| c == Some(1)).await;
    let got = ch.basic_get("pong".into(), BasicGetOptions::default()).await.expect("get").expect("in pong");
    got.delivery.reject(BasicRejectOptions { requeue: false }).await.expect("reject");
    wait_for_count(&conn, "pong", |c| c == Some(1)).await;
    let got = ch.basic_get("pong".into(), BasicGetOptions::default()).await.expect("get").expect("back in pong");
    let entries = deaths(&got.delivery.properties);
    assert_eq!(entries[0].inner().get("queue"), Some(&text("ping")));
    assert_eq!(entries[0].inner().get("count"), Some(&AMQPValue::LongLongInt(2)), "newest first, merged");
    assert_eq!(entries[1].inner().get("reason"), Some(&text("rejected")));
    broker.shutdown().await;
}

#[tokio::test]
async fn an_expiry_loop_is_cut_where_it_closes() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    for (name, next) in [("tick", "tock"), ("tock", "tick")] {
        let arguments = table(&[
            ("x-message-ttl", AMQPValue::LongInt(50)),
            ("x-dead-letter-exchange", text("")),
            ("x-dead-letter-routing-key", text(next)),
        ]);
        declare(&ch, name, arguments).await;
    }
    publish_with(&ch, "", "tick", b"loop", BasicProperties::default()).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(count(&ch, "tick").await, Some(0), "tick -> tock -> tick would close a cycle: dropped");
    assert_eq!(count(&ch, "tock").await, Some(0));
    broker.shutdown().await;
}

#[tokio::test]
async fn length_limits_drop_head_or_reject_publish() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    dead_letter_setup(&ch).await;
    declare(&ch, "capped", table(&[("x-max-length", AMQPValue::LongInt(2)), ("x-dead-letter-exchange", text("dlx"))]))
        .await;
    for body in [b"1", b"2", b"3", b"4"] {
        publish_with(&ch, "", "capped", body, BasicProperties::default()).await;
    }
    let kept: Vec<Vec<u8>> = drain(&ch, "capped").await.into_iter().map(|g| g.delivery.data).collect();
    assert_eq!(kept, vec![b"3".to_vec(), b"4".to_vec()]);
    let dropped = drain(&ch, "dlq").await;
    assert_eq!(dropped.len(), 2);
    assert_eq!(deaths(&dropped[0].delivery.properties)[0].inner().get("reason"), Some(&text("maxlen")));

    let overflow = table(&[("x-max-length-bytes", AMQPValue::LongInt(10)), ("x-overflow", text("reject-publish"))]);
    declare(&ch, "refusing", overflow).await;
    ch.confirm_select(ConfirmSelectOptions::default()).await.expect("confirms");
    let mut outcomes = Vec::new();
    for body in [&b"12345"[..], b"67890", b"x"] {
        let confirm = ch
            .basic_publish("".into(), "refusing".into(), Default::default(), body, Default::default())
            .await
            .expect("publish");
        outcomes.push(confirm.await.expect("confirmation").is_ack());
    }
    assert_eq!(outcomes, vec![true, true, false], "the third would pass 10 bytes: nacked");
    assert_eq!(count(&ch, "refusing").await, Some(2));
    broker.shutdown().await;
}

#[tokio::test]
async fn delivery_limit_counts_redeliveries_then_dead_letters() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    dead_letter_setup(&ch).await;
    declare(
        &ch,
        "limited",
        table(&[("x-delivery-limit", AMQPValue::LongInt(2)), ("x-dead-letter-exchange", text("dlx"))]),
    )
    .await;
    publish_with(&ch, "", "limited", b"poison", BasicProperties::default()).await;
    let mut counts = Vec::new();
    for _ in 0..3 {
        let got = ch.basic_get("limited".into(), BasicGetOptions::default()).await.expect("get").expect("message");
        counts.push(header(&got.delivery.properties, "x-delivery-count").cloned());
        got.delivery.nack(BasicNackOptions { requeue: true, ..Default::default() }).await.expect("nack");
    }
    assert_eq!(counts, vec![None, Some(AMQPValue::LongLongInt(1)), Some(AMQPValue::LongLongInt(2))]);
    assert_eq!(wait_for_count(&conn, "dlq", |c| c == Some(1)).await, Some(1));
    assert_eq!(count(&ch, "limited").await, Some(0));
    let dead = drain(&ch, "dlq").await.remove(0);
    assert_eq!(deaths(&dead.delivery.properties)[0].inner().get("reason"), Some(&text("delivery_limit")));
    broker.shutdown().await;
}

#[tokio::test]
async fn delayed_messages_route_when_due_and_mandatory_returns_at_once() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let delayed = ExchangeKind::Custom("x-delayed-message".into());
    ch.exchange_declare(
        "later".into(),
        delayed.clone(),
        Default::default(),
        table(&[("x-delayed-type", text("direct"))]),
    )
    .await
    .expect("declare delayed");
    declare(&ch, "due", FieldTable::default()).await;
    ch.queue_bind("due".into(), "later".into(), "k".into(), Default::default(), FieldTable::default())
        .await
        .expect("bind");
    let delay = |ms: i64| BasicProperties::default().with_headers(table(&[("x-delay", AMQPValue::LongLongInt(ms))]));
    let sent = Instant::now();
    publish_with(&ch, "later", "k", b"in 600 ms", delay(600)).await;
    publish_with(&ch, "later", "k", b"now", delay(0)).await;
    publish_with(&ch, "later", "k", b"negative is now", delay(-5)).await;
    assert_eq!(count(&ch, "due").await, Some(2));
    assert_eq!(wait_for_count(&conn, "due", |c| c == Some(3)).await, Some(3));
    assert!(sent.elapsed() >= Duration::from_millis(600), "fired early: {:?}", sent.elapsed());
    ch.confirm_select(ConfirmSelectOptions::default()).await.expect("confirms");
    let confirm = ch
        .basic_publish(
            "later".into(),
            "nobody".into(),
            BasicPublishOptions { mandatory: true, ..Default::default() },
            b"x",
            delay(60_000),
        )
        .await
        .expect("publish")
        .await
        .expect("confirmation");
    assert_eq!(confirm.take_message().map(|m| m.reply_code), Some(312), "returned at publish time");
    let bad = channel(&conn).await;
    let error = bad
        .exchange_declare("no-type".into(), delayed, Default::default(), FieldTable::default())
        .await
        .expect_err("x-delayed-type is required");
    assert_eq!(reply_code(&error), Some(406));
    broker.shutdown().await;
}

#[tokio::test]
async fn durable_delayed_messages_survive_a_restart_and_fire_late_ones_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = start_broker_in(dir.path()).await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    ch.confirm_select(ConfirmSelectOptions::default()).await.expect("confirms");
    let durable_exchange = ExchangeDeclareOptions { durable: true, ..Default::default() };
    let delayed = ExchangeKind::Custom("x-delayed-message".into());
    ch.exchange_declare("held".into(), delayed, durable_exchange, table(&[("x-delayed-type", text("fanout"))]))
        .await
        .expect("declare");
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    ch.queue_declare("after-restart".into(), durable, FieldTable::default()).await.expect("queue");
    ch.queue_bind("after-restart".into(), "held".into(), "".into(), Default::default(), FieldTable::default())
        .await
        .expect("bind");
    for (body, delay) in [(&b"due during downtime"[..], 300), (b"due after restart", 3000)] {
        let props = BasicProperties::default()
            .with_delivery_mode(2)
            .with_headers(table(&[("x-delay", AMQPValue::LongLongInt(delay))]));
        let confirm =
            ch.basic_publish("held".into(), "".into(), Default::default(), body, props).await.expect("publish");
        assert!(confirm.await.expect("confirm").is_ack());
    }
    broker.shutdown().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let broker = start_broker_in(dir.path()).await;
    let conn = connect(&broker).await;
    assert_eq!(wait_for_count(&conn, "after-restart", |c| c == Some(1)).await, Some(1), "the overdue one at once");
    assert_eq!(wait_for_count(&conn, "after-restart", |c| c == Some(2)).await, Some(2), "the other when due");
    broker.shutdown().await;
}

#[tokio::test]
async fn consumer_priorities_and_single_active_consumer() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare(&ch, "ranked", FieldTable::default()).await;
    let low = channel(&conn).await;
    let high = channel(&conn).await;
    for c in [&low, &high] {
        c.basic_qos(1, BasicQosOptions::default()).await.expect("qos");
    }
    let consume = |c: &lapin::Channel, tag: &str, priority: i32| {
        let c = c.clone();
        let tag = tag.to_string();
        async move {
            c.basic_consume(
                "ranked".into(),
                tag.as_str().into(),
                Default::default(),
                table(&[("x-priority", AMQPValue::LongInt(priority))]),
            )
            .await
            .expect("consume")
        }
    };
    let mut low_consumer = consume(&low, "low", 1).await;
    let mut high_consumer = consume(&high, "high", 10).await;
    publish_with(&ch, "", "ranked", b"first", BasicProperties::default()).await;
    assert_eq!(next_delivery(&mut high_consumer).await.data, b"first");
    publish_with(&ch, "", "ranked", b"second", BasicProperties::default()).await;
    assert_eq!(next_delivery(&mut low_consumer).await.data, b"second", "high has no credit left");

    declare(&ch, "single", table(&[("x-single-active-consumer", AMQPValue::Boolean(true))])).await;
    let mut first =
        ch.basic_consume("single".into(), "first".into(), Default::default(), FieldTable::default()).await.expect("c1");
    let mut second = ch
        .basic_consume("single".into(), "second".into(), Default::default(), FieldTable::default())
        .await
        .expect("c2");
    for body in [b"a", b"b"] {
        publish_with(&ch, "", "single", body, BasicProperties::default()).await;
    }
    for _ in 0..2 {
        next_delivery(&mut first).await.ack(BasicAckOptions::default()).await.expect("ack");
    }
    assert_no_delivery(&mut second, 200).await;
    ch.basic_cancel("first".into(), Default::default()).await.expect("cancel");
    publish_with(&ch, "", "single", b"c", BasicProperties::default()).await;
    assert_eq!(next_delivery(&mut second).await.data, b"c", "the next consumer takes over");
    broker.shutdown().await;
}

#[tokio::test]
async fn tag_filters_deliver_exactly_the_matching_messages() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare(&ch, "tagged", FieldTable::default()).await;
    let tagged = |tag: Option<&str>| {
        let mut props = BasicProperties::default();
        if let Some(tag) = tag {
            props = props.with_headers(table(&[("x-stream-filter-value", text(tag))]));
        }
        props
    };
    for (body, tag) in
        [("r1", Some("red")), ("b1", Some("blue")), ("n1", None), ("r2", Some("red")), ("g1", Some("green"))]
    {
        publish_with(&ch, "", "tagged", body.as_bytes(), tagged(tag)).await;
    }
    let mut reds = ch
        .basic_consume("tagged".into(), "reds".into(), opts_no_ack(), table(&[("x-stream-filter", text("red"))]))
        .await
        .expect("consume");
    assert_eq!(next_delivery(&mut reds).await.data, b"r1");
    assert_eq!(next_delivery(&mut reds).await.data, b"r2");
    assert_no_delivery(&mut reds, 200).await;
    assert_eq!(count(&ch, "tagged").await, Some(3), "what no consumer matches stays queued");
    let mut filter = FieldArray::default();
    filter.push(text("blue"));
    filter.push(text("green"));
    let wanted = table(&[
        ("x-stream-filter", AMQPValue::FieldArray(filter)),
        ("x-stream-match-unfiltered", AMQPValue::Boolean(true)),
    ]);
    let mut others = ch.basic_consume("tagged".into(), "others".into(), opts_no_ack(), wanted).await.expect("consume");
    let mut got: Vec<Vec<u8>> = Vec::new();
    for _ in 0..3 {
        got.push(next_delivery(&mut others).await.data);
    }
    assert_eq!(got, vec![b"b1".to_vec(), b"n1".to_vec(), b"g1".to_vec()]);
    broker.shutdown().await;
}

#[tokio::test]
async fn unused_queues_expire() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare(&ch, "fleeting", table(&[("x-expires", AMQPValue::LongInt(300))])).await;
    declare(&ch, "watched", table(&[("x-expires", AMQPValue::LongInt(300))])).await;
    let _consumer =
        ch.basic_consume("watched".into(), "w".into(), Default::default(), FieldTable::default()).await.expect("c");
    // Polling with passive declares would keep it alive (they count as use, as in RabbitMQ).
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(count(&channel(&conn).await, "fleeting").await, None, "unused queue deleted");
    assert!(count(&channel(&conn).await, "watched").await.is_some(), "a queue with a consumer stays");
    broker.shutdown().await;
}

#[tokio::test]
async fn malformed_arguments_are_406_naming_the_argument() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    for (name, value) in [
        ("x-max-priority", AMQPValue::LongInt(300)),
        ("x-overflow", text("spill")),
        ("x-message-ttl", AMQPValue::LongInt(-1)),
        ("x-dead-letter-exchange", AMQPValue::LongInt(1)),
    ] {
        let ch = channel(&conn).await;
        let error =
            ch.queue_declare("bad-args".into(), Default::default(), table(&[(name, value)])).await.expect_err(name);
        assert_eq!(reply_code(&error), Some(406), "{name}: {error}");
        assert!(error.to_string().contains(name), "{error}");
    }
    let ch = channel(&conn).await;
    let error = ch
        .basic_consume("nowhere".into(), "".into(), Default::default(), table(&[("x-priority", text("high"))]))
        .await
        .expect_err("404 first");
    assert_eq!(reply_code(&error), Some(404));
    broker.shutdown().await;
}

fn opts_no_ack() -> BasicConsumeOptions {
    BasicConsumeOptions { no_ack: true, ..Default::default() }
}

/// Consumes one message from a fresh `queue` (declared with `arguments`) on a new channel with
/// manual acks and never acks it; returns the channel's close watcher.
async fn hold_one_unacked(
    conn: &lapin::Connection,
    queue: &str,
    arguments: FieldTable,
    consumer_arguments: FieldTable,
) -> (lapin::Channel, lapin::Consumer) {
    let ch = channel(conn).await;
    declare(&ch, queue, arguments).await;
    publish_with(&ch, "", queue, b"held", BasicProperties::default()).await;
    let mut consumer = ch
        .basic_consume(queue.into(), "holder".into(), BasicConsumeOptions::default(), consumer_arguments)
        .await
        .expect("consume");
    next_delivery(&mut consumer).await;
    let watcher = close_watcher(&ch).await;
    (ch, watcher)
}

#[tokio::test]
async fn a_delivery_unacked_past_the_consumer_timeout_closes_its_channel_with_406_and_is_requeued() {
    let broker = start_broker_with(|c| c.protocol.consumer_timeout_ms = Some(1_000)).await;
    let conn = connect(&broker).await;
    let (held_on, mut watcher) = hold_one_unacked(&conn, "slow", FieldTable::default(), FieldTable::default()).await;
    // An acking consumer on another channel of the same connection is not touched.
    let ch = channel(&conn).await;
    declare(&ch, "brisk", FieldTable::default()).await;
    let mut brisk = ch
        .basic_consume("brisk".into(), "".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .expect("consume");

    let started = Instant::now();
    assert_eq!(channel_close_code(&mut watcher).await, Some(406));
    assert!(started.elapsed() < Duration::from_secs(4), "closed {:?} after", started.elapsed());
    assert!(!held_on.status().connected(), "the holding channel is closed");

    publish_with(&ch, "", "brisk", b"ok", BasicProperties::default()).await;
    next_delivery(&mut brisk).await.ack(BasicAckOptions::default()).await.expect("the other channel works");
    let back = ch.basic_get("slow".into(), BasicGetOptions { no_ack: true }).await.expect("get").expect("requeued");
    assert_eq!((back.delivery.data.as_slice(), back.delivery.redelivered), (&b"held"[..], true));
    broker.shutdown().await;
}

#[tokio::test]
async fn x_consumer_timeout_on_a_queue_or_a_consumer_overrides_the_brokers() {
    // The broker's own timeout (30 minutes) never fires here: only the arguments can.
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let short = table(&[("x-consumer-timeout", AMQPValue::LongInt(1_000))]);
    let (_, mut by_queue) = hold_one_unacked(&conn, "short-queue", short.clone(), FieldTable::default()).await;
    let (_, mut by_consumer) = hold_one_unacked(&conn, "plain-queue", FieldTable::default(), short).await;
    let (untimed, _) = hold_one_unacked(&conn, "untimed", FieldTable::default(), FieldTable::default()).await;
    assert_eq!(channel_close_code(&mut by_queue).await, Some(406));
    assert_eq!(channel_close_code(&mut by_consumer).await, Some(406));
    assert!(untimed.status().connected(), "a delivery under the broker's timeout keeps its channel");

    let ch = channel(&conn).await;
    let zero = table(&[("x-consumer-timeout", AMQPValue::LongInt(0))]);
    let refused = ch.basic_consume("untimed".into(), "".into(), BasicConsumeOptions::default(), zero).await;
    assert_code(refused, 406, "x-consumer-timeout 0 on a consumer");
    broker.shutdown().await;
}
