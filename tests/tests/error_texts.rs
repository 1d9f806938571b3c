//! What a client reads when refused, with lapin: the reply code RabbitMQ sends and a text that
//! names the problem plainly (the default exchange by that name, values as they were written).

use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::ExchangeKind;
use warren_tests::*;

const ACCESS_REFUSED: u16 = 403;
const PRECONDITION_FAILED: u16 = 406;

/// The reply code and text a refusal carried.
fn refusal<T: std::fmt::Debug>(result: lapin::Result<T>) -> (u16, String) {
    match result {
        Ok(value) => panic!("expected a refusal, got {value:?}"),
        Err(error) => match error.kind() {
            lapin::ErrorKind::ProtocolError(amqp) => (amqp.get_id(), amqp.get_message().to_string()),
            _ => panic!("expected a protocol error, got {error}"),
        },
    }
}

const DEFAULT_EXCHANGE_REFUSED: &str = "ACCESS_REFUSED - operation not permitted on the default exchange";

#[tokio::test]
async fn passive_declare_of_the_default_exchange_is_403() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let passive = ExchangeDeclareOptions { passive: true, ..Default::default() };
    let result = ch.exchange_declare("".into(), ExchangeKind::Direct, passive, FieldTable::default()).await;
    assert_eq!(refusal(result), (ACCESS_REFUSED, DEFAULT_EXCHANGE_REFUSED.to_string()));
    broker.shutdown().await;
}

#[tokio::test]
async fn declaring_deleting_and_binding_the_default_exchange_name_it_plainly() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let declare =
        ch.exchange_declare("".into(), ExchangeKind::Direct, ExchangeDeclareOptions::default(), FieldTable::default());
    assert_eq!(refusal(declare.await), (ACCESS_REFUSED, DEFAULT_EXCHANGE_REFUSED.to_string()));
    let ch = channel(&conn).await;
    let delete = ch.exchange_delete("".into(), ExchangeDeleteOptions::default()).await;
    assert_eq!(refusal(delete), (ACCESS_REFUSED, DEFAULT_EXCHANGE_REFUSED.to_string()));
    let ch = channel(&conn).await;
    let bind = ch
        .exchange_bind(
            "amq.direct".into(),
            "".into(),
            "k".into(),
            ExchangeBindOptions::default(),
            FieldTable::default(),
        )
        .await;
    assert_eq!(refusal(bind), (ACCESS_REFUSED, DEFAULT_EXCHANGE_REFUSED.to_string()));
    broker.shutdown().await;
}

#[tokio::test]
async fn reserved_names_are_refused_with_rabbitmq_texts() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let declare = ch
        .exchange_declare(
            "amq.custom".into(),
            ExchangeKind::Direct,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await;
    let expected = "ACCESS_REFUSED - exchange name 'amq.custom' contains reserved prefix 'amq.*'";
    assert_eq!(refusal(declare), (ACCESS_REFUSED, expected.to_string()));
    let ch = channel(&conn).await;
    let delete = ch.exchange_delete("amq.direct".into(), ExchangeDeleteOptions::default()).await;
    let expected = "ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost '/' not allowed";
    assert_eq!(refusal(delete), (ACCESS_REFUSED, expected.to_string()));
    let ch = channel(&conn).await;
    let queue = ch.queue_declare("amq.mine".into(), QueueDeclareOptions::default(), FieldTable::default()).await;
    let expected = "ACCESS_REFUSED - queue name 'amq.mine' contains reserved prefix 'amq.*'";
    assert_eq!(refusal(queue), (ACCESS_REFUSED, expected.to_string()));
    broker.shutdown().await;
}

#[tokio::test]
async fn argument_errors_show_values_as_the_user_wrote_them() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    for (argument, value, shown) in [
        ("x-queue-type", text("lazy"), "got \"lazy\""),
        ("x-overflow", text("spill"), "got \"spill\""),
        ("x-max-priority", AMQPValue::LongInt(300), "got 300"),
        ("x-single-active-consumer", AMQPValue::LongString("yes".into()), "got \"yes\""),
    ] {
        let ch = channel(&conn).await;
        let result = ch.queue_declare("q".into(), QueueDeclareOptions::default(), table(&[(argument, value)])).await;
        let (code, message) = refusal(result);
        assert_eq!(code, PRECONDITION_FAILED, "{message}");
        assert!(message.contains(argument) && message.ends_with(shown), "{argument}: {message}");
    }
    broker.shutdown().await;
}

#[tokio::test]
async fn a_user_id_that_is_not_the_connections_user_is_406() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    ch.queue_declare("claims".into(), QueueDeclareOptions::default(), FieldTable::default()).await.expect("declare");
    let honest = lapin::BasicProperties::default().with_user_id("guest".into());
    let confirm = ch.basic_publish("".into(), "claims".into(), Default::default(), b"me", honest).await;
    assert!(confirm.expect("publish").await.expect("confirm").is_ack(), "the connection's own user is fine");
    let forged = lapin::BasicProperties::default().with_user_id("bob".into());
    let published = ch.basic_publish("".into(), "claims".into(), Default::default(), b"not me", forged).await;
    let refused = match published {
        Ok(confirm) => confirm.await.map(|_| ()),
        Err(error) => Err(error),
    };
    assert_eq!(
        refusal(refused),
        (
            PRECONDITION_FAILED,
            "PRECONDITION_FAILED - user_id property set to 'bob' but authenticated user was 'guest'".to_string()
        )
    );
    let other = channel(&conn).await;
    let kept = other.queue_declare(
        "claims".into(),
        QueueDeclareOptions { passive: true, ..Default::default() },
        FieldTable::default(),
    );
    assert_eq!(kept.await.expect("passive").message_count(), 1, "only the honest message was enqueued");
    broker.shutdown().await;
}

/// Texts name the queue's own vhost, not always '/'.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_about_a_queue_name_its_vhost() {
    let broker = start_broker().await;
    let api = warren_tests::http::Api::new(broker.http_addr.expect("management API"));
    assert_eq!(api.put("/api/vhosts/tenant", serde_json::json!({})).status, 201);
    let everything = serde_json::json!({"configure": ".*", "write": ".*", "read": ".*"});
    // The vhost's creator may already have them (as in RabbitMQ): 201 or 204.
    let status = api.put("/api/permissions/tenant/guest", everything).status;
    assert!(status == 201 || status == 204, "set permissions: {status}");
    let uri = format!("amqp://guest:guest@{}/tenant", broker.amqp_addr);
    let owner = lapin::Connection::connect(&uri, Default::default()).await.expect("owner");
    let other = lapin::Connection::connect(&uri, Default::default()).await.expect("other");
    let owner_ch = channel(&owner).await;
    let exclusive = QueueDeclareOptions { exclusive: true, ..Default::default() };
    owner_ch.queue_declare("mine".into(), exclusive, FieldTable::default()).await.expect("declare");
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    let locked = channel(&other).await.queue_declare("mine".into(), passive, FieldTable::default()).await;
    let text = "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue 'mine' in vhost 'tenant'";
    assert_eq!(refusal(locked), (405, text.to_string()));

    owner_ch
        .queue_declare("shared".into(), QueueDeclareOptions::default(), FieldTable::default())
        .await
        .expect("declare");
    let alone = BasicConsumeOptions { exclusive: true, ..Default::default() };
    // Kept: a dropped lapin consumer cancels itself.
    let _alone =
        owner_ch.basic_consume("shared".into(), "alone".into(), alone, FieldTable::default()).await.expect("consume");
    let ch = channel(&other).await;
    let second =
        ch.basic_consume("shared".into(), "second".into(), BasicConsumeOptions::default(), FieldTable::default());
    let text = "ACCESS_REFUSED - queue 'shared' in vhost 'tenant' has an exclusive consumer";
    assert_eq!(refusal(second.await), (ACCESS_REFUSED, text.to_string()));
    broker.shutdown().await;
}
