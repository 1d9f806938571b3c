//! Direct reply-to with lapin, as RabbitMQ documents it: a requester consumes from the
//! pseudo-queue `amq.rabbitmq.reply-to` in no-ack mode and publishes requests with that
//! `reply_to`; responders see a unique `amq.rabbitmq.reply-to.<token>` and publish replies to
//! it through the default exchange; the reply goes straight to the requester, through no queue.

use lapin::options::*;
use lapin::types::FieldTable;
use lapin::BasicProperties;
use warren_tests::*;

const PSEUDO_QUEUE: &str = "amq.rabbitmq.reply-to";
const ACCESS_REFUSED: u16 = 403;
const NOT_FOUND: u16 = 404;
const PRECONDITION_FAILED: u16 = 406;
const NO_ROUTE: u16 = 312;

fn no_ack() -> BasicConsumeOptions {
    BasicConsumeOptions { no_ack: true, ..Default::default() }
}

async fn consume_replies(ch: &lapin::Channel) -> lapin::Consumer {
    ch.basic_consume(PSEUDO_QUEUE.into(), "replies".into(), no_ack(), FieldTable::default())
        .await
        .expect("consume from the reply pseudo-queue in no-ack mode")
}

async fn declare(ch: &lapin::Channel, name: &str) {
    ch.queue_declare(name.into(), QueueDeclareOptions::default(), FieldTable::default())
        .await
        .unwrap_or_else(|error| panic!("declare {name}: {error}"));
}

fn asking_for_a_reply() -> BasicProperties {
    BasicProperties::default().with_reply_to(PSEUDO_QUEUE.into()).with_correlation_id("req-1".into())
}

/// Publishes a request to `queue` and returns the `reply_to` the responder sees there.
async fn request(requester: &lapin::Channel, responder: &lapin::Channel, queue: &str) -> String {
    requester
        .basic_publish("".into(), queue.into(), BasicPublishOptions::default(), b"question", asking_for_a_reply())
        .await
        .expect("publish the request");
    let mut requests = responder
        .basic_consume(queue.into(), "".into(), no_ack(), FieldTable::default())
        .await
        .expect("consume requests");
    let delivered = next_delivery(&mut requests).await;
    assert_eq!(delivered.properties.correlation_id().as_ref().map(|c| c.as_str()), Some("req-1"));
    delivered.properties.reply_to().as_ref().map(|r| r.to_string()).expect("the request has a reply_to")
}

/// Publishes `body` with confirms to the reply address; the basic.return if it came back.
async fn reply(responder: &lapin::Channel, address: &str, body: &[u8], mandatory: bool) -> Option<u16> {
    let confirm = responder
        .basic_publish(
            "".into(),
            address.into(),
            BasicPublishOptions { mandatory, ..Default::default() },
            body,
            BasicProperties::default().with_correlation_id("req-1".into()),
        )
        .await
        .expect("publish the reply")
        .await
        .expect("confirm of the reply");
    assert!(confirm.is_ack(), "a reply is confirmed whether or not it reached the requester");
    confirm.take_message().map(|returned| returned.reply_code)
}

/// The start of most tests here: a requester channel with a reply consumer has sent one request
/// to queue "rpc", which the responder channel (in confirm mode) took; `address` is its reply
/// address. With `own_connections`, requester and responder are on two connections (the
/// requester's is `requester_connection`, the other `_responder_connection`); otherwise both
/// channels share `requester_connection`.
struct Rpc {
    broker: warren_tests::TestBroker,
    requester_connection: lapin::Connection,
    _responder_connection: Option<lapin::Connection>,
    requester: lapin::Channel,
    responder: lapin::Channel,
    replies: lapin::Consumer,
    address: String,
}

impl Rpc {
    async fn start(own_connections: bool) -> Rpc {
        let broker = start_broker().await;
        let requester_connection = connect(&broker).await;
        let responder_connection = if own_connections { Some(connect(&broker).await) } else { None };
        let requester = channel(&requester_connection).await;
        let responder = confirm_channel(responder_connection.as_ref().unwrap_or(&requester_connection)).await;
        declare(&responder, "rpc").await;
        let replies = consume_replies(&requester).await;
        let address = request(&requester, &responder, "rpc").await;
        Rpc {
            broker,
            requester_connection,
            _responder_connection: responder_connection,
            requester,
            responder,
            replies,
            address,
        }
    }
}

#[tokio::test]
async fn a_reply_reaches_the_requester_through_no_queue() {
    let mut rpc = Rpc::start(true).await;
    assert!(
        rpc.address.starts_with("amq.rabbitmq.reply-to.") && rpc.address.len() > PSEUDO_QUEUE.len() + 1,
        "{}",
        rpc.address
    );
    assert_eq!(reply(&rpc.responder, &rpc.address, b"answer", true).await, None, "a live requester is a route");

    let answer = next_delivery(&mut rpc.replies).await;
    assert_eq!(answer.data, b"answer");
    assert_eq!(answer.exchange.as_str(), "");
    assert_eq!(answer.routing_key.as_str(), rpc.address);
    assert!(!answer.redelivered);
    assert_eq!(answer.properties.correlation_id().as_ref().map(|c| c.as_str()), Some("req-1"));
    // No queue was declared for it: only the request queue exists.
    let vhost = rpc.broker.broker.vhost("/").expect("default vhost");
    let names: Vec<String> = vhost.queues().iter().map(|q| q.name().to_string()).collect();
    assert_eq!(names, ["rpc"]);
    rpc.broker.shutdown().await;
}

#[tokio::test]
async fn each_requester_channel_gets_its_own_address() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let responder = confirm_channel(&conn).await;
    declare(&responder, "rpc-a").await;
    declare(&responder, "rpc-b").await;
    let (first, second) = (channel(&conn).await, channel(&conn).await);
    let (mut first_replies, mut second_replies) = (consume_replies(&first).await, consume_replies(&second).await);
    let first_address = request(&first, &responder, "rpc-a").await;
    let second_address = request(&second, &responder, "rpc-b").await;
    assert_ne!(first_address, second_address);

    reply(&responder, &second_address, b"for the second", false).await;
    reply(&responder, &first_address, b"for the first", false).await;
    assert_eq!(next_delivery(&mut first_replies).await.data, b"for the first");
    assert_eq!(next_delivery(&mut second_replies).await.data, b"for the second");
    assert_no_delivery(&mut first_replies, 200).await;
    broker.shutdown().await;
}

#[tokio::test]
async fn consuming_replies_in_ack_mode_is_406() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let result =
        ch.basic_consume(PSEUDO_QUEUE.into(), "".into(), BasicConsumeOptions::default(), FieldTable::default()).await;
    assert_code(result, PRECONDITION_FAILED, "reply consumer in ack mode");
    broker.shutdown().await;
}

#[tokio::test]
async fn a_second_reply_consumer_on_a_channel_is_406() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let _replies = consume_replies(&ch).await;
    let result = ch.basic_consume(PSEUDO_QUEUE.into(), "again".into(), no_ack(), FieldTable::default()).await;
    assert_code(result, PRECONDITION_FAILED, "second reply consumer");
    broker.shutdown().await;
}

#[tokio::test]
async fn requesting_a_reply_without_a_reply_consumer_is_406() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare(&ch, "rpc").await;
    let mut watcher = close_watcher(&ch).await;
    ch.basic_publish("".into(), "rpc".into(), BasicPublishOptions::default(), b"question", asking_for_a_reply())
        .await
        .expect("publish is asynchronous");
    let code = channel_close_code(&mut watcher).await;
    assert_eq!(code, Some(PRECONDITION_FAILED), "publish asking for a reply without a reply consumer");
    let ch = confirm_channel(&conn).await;
    assert_eq!(drain(&ch, "rpc").await.len(), 0, "the request was not routed");
    broker.shutdown().await;
}

#[tokio::test]
async fn a_reply_to_a_requester_that_is_gone_is_dropped_or_returned_when_mandatory() {
    let rpc = Rpc::start(true).await;
    rpc.requester.close(200, "done".into()).await.expect("close the rpc.requester's channel");

    assert_eq!(reply(&rpc.responder, &rpc.address, b"too late", true).await, Some(NO_ROUTE));
    assert_eq!(reply(&rpc.responder, &rpc.address, b"too late", false).await, None, "dropped quietly");
    rpc.broker.shutdown().await;
}

#[tokio::test]
async fn a_cancelled_reply_consumer_leaves_its_address_stale() {
    let rpc = Rpc::start(false).await;
    rpc.requester.basic_cancel("replies".into(), BasicCancelOptions::default()).await.expect("cancel");

    // A new reply consumer on the same channel gets a new address; the old one leads nowhere.
    let mut replies = consume_replies(&rpc.requester).await;
    rpc.requester
        .basic_publish("".into(), "rpc".into(), BasicPublishOptions::default(), b"again", asking_for_a_reply())
        .await
        .expect("publish the second request");
    let new_address = loop {
        let delivered = drain(&rpc.responder, "rpc").await;
        if let Some(message) = delivered.first() {
            break message.properties.reply_to().as_ref().map(|r| r.to_string()).expect("reply_to");
        }
    };
    assert_ne!(rpc.address, new_address);
    assert_eq!(reply(&rpc.responder, &rpc.address, b"stale", true).await, Some(NO_ROUTE));
    reply(&rpc.responder, &new_address, b"fresh", true).await;
    assert_eq!(next_delivery(&mut replies).await.data, b"fresh");
    rpc.broker.shutdown().await;
}

#[tokio::test]
async fn a_forged_reply_address_is_refused_quietly() {
    let mut rpc = Rpc::start(false).await;

    // The same connection and channel with another key, then nonsense after the prefix.
    let (prefix, key) = rpc.address.rsplit_once('.').expect("a dotted rpc.address");
    let flipped = if key.starts_with('0') { "1" } else { "0" };
    let forged = format!("{prefix}.{flipped}{}", &key[1..]);
    assert_eq!(reply(&rpc.responder, &forged, b"forged", true).await, Some(NO_ROUTE));
    assert_eq!(reply(&rpc.responder, "amq.rabbitmq.reply-to.not-a-token", b"junk", true).await, Some(NO_ROUTE));
    assert_no_delivery(&mut rpc.replies, 300).await;
    assert!(!rpc.requester_connection.status().closed(), "nothing was closed");
    rpc.broker.shutdown().await;
}

#[tokio::test]
async fn declaring_a_reply_address_tells_whether_the_requester_is_there() {
    let rpc = Rpc::start(true).await;
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    let there =
        rpc.responder.queue_declare(rpc.address.as_str().into(), passive, FieldTable::default()).await.expect("there");
    assert_eq!((there.message_count(), there.consumer_count()), (0, 1));
    let pseudo =
        rpc.responder.queue_declare(PSEUDO_QUEUE.into(), passive, FieldTable::default()).await.expect("pseudo");
    assert_eq!(pseudo.name().as_str(), PSEUDO_QUEUE);

    rpc.requester_connection.close(200, "bye".into()).await.expect("requester leaves");
    let result = rpc.responder.queue_declare(rpc.address.as_str().into(), passive, FieldTable::default()).await;
    assert_code(result, NOT_FOUND, "declare of a gone requester's rpc.address");
    rpc.broker.shutdown().await;
}

#[tokio::test]
async fn reply_addresses_cannot_be_bound() {
    let broker = start_broker().await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let result = ch
        .queue_bind(
            PSEUDO_QUEUE.into(),
            "amq.direct".into(),
            "k".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await;
    assert_code(result, ACCESS_REFUSED, "binding the reply pseudo-queue");
    broker.shutdown().await;
}
