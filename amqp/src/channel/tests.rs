//! The channel's methods, driven through a real connection on a real broker (see
//! `test_client`): queue and exchange declares, binds, purge and delete; basic.qos, publish
//! (content assembly and its errors, mandatory returns, the message size limit), get, consume
//! and ack; publisher confirms; and transactions. Each test states an outcome the AMQP 0-9-1
//! specification or RabbitMQ documents: the reply methods and their fields, the delivered
//! content, or the close (channel or connection) and its reply code.

use crate::connection::Phase;
use crate::test_client::{
    channel_close_of, connection_close, content_body, content_header, method, publish, publish_with, Closing,
    TestClient,
};
use crate::ProtocolConfig;
use amq_protocol::frame::{AMQPContentHeader, AMQPFrame};
use amq_protocol::protocol::{basic, confirm, exchange, queue, tx, AMQPClass};
use amq_protocol::types::{AMQPValue, FieldTable, LongString};

/// The channel every test uses.
const CH: u16 = 1;

fn closing(code: u16, (class_id, method_id): (u16, u16)) -> Closing {
    Closing { code, class_id, method_id }
}

fn queue_method(method: queue::AMQPMethod) -> AMQPFrame {
    self::method(CH, AMQPClass::Queue(method))
}

fn basic_method(method: basic::AMQPMethod) -> AMQPFrame {
    self::method(CH, AMQPClass::Basic(method))
}

fn declare(name: &str) -> queue::Declare {
    queue::Declare { queue: name.into(), ..Default::default() }
}

fn declare_queue(name: &str) -> AMQPFrame {
    queue_method(queue::AMQPMethod::Declare(declare(name)))
}

fn declare_ok(name: &str, message_count: u32, consumer_count: u32) -> AMQPFrame {
    queue_method(queue::AMQPMethod::DeclareOk(queue::DeclareOk { queue: name.into(), message_count, consumer_count }))
}

fn passive_declare(name: &str) -> AMQPFrame {
    queue_method(queue::AMQPMethod::Declare(queue::Declare { passive: true, ..declare(name) }))
}

fn declare_exchange(name: &str, kind: &str) -> AMQPFrame {
    let declare = exchange::Declare { exchange: name.into(), kind: kind.into(), ..Default::default() };
    method(CH, AMQPClass::Exchange(exchange::AMQPMethod::Declare(declare)))
}

fn exchange_declare_ok() -> AMQPFrame {
    method(CH, AMQPClass::Exchange(exchange::AMQPMethod::DeclareOk(exchange::DeclareOk {})))
}

fn bind(queue: &str, exchange: &str, routing_key: &str) -> AMQPFrame {
    let bind = queue::Bind {
        queue: queue.into(),
        exchange: exchange.into(),
        routing_key: routing_key.into(),
        ..Default::default()
    };
    queue_method(queue::AMQPMethod::Bind(bind))
}

fn get(queue: &str) -> AMQPFrame {
    basic_method(basic::AMQPMethod::Get(basic::Get { queue: queue.into(), no_ack: true }))
}

fn get_empty() -> AMQPFrame {
    basic_method(basic::AMQPMethod::GetEmpty(basic::GetEmpty {}))
}

fn ack(delivery_tag: u64, multiple: bool) -> AMQPFrame {
    basic_method(basic::AMQPMethod::Ack(basic::Ack { delivery_tag, multiple }))
}

fn confirm_select() -> AMQPFrame {
    method(CH, AMQPClass::Confirm(confirm::AMQPMethod::Select(confirm::Select { nowait: false })))
}

fn tx(method: tx::AMQPMethod) -> AMQPFrame {
    self::method(CH, AMQPClass::Tx(method))
}

/// The body of a message taken by `basic.get` from the replies to it: get-ok, then the
/// header and body frames.
fn got_body(replies: &[AMQPFrame]) -> Vec<u8> {
    let [AMQPFrame::Method(CH, AMQPClass::Basic(basic::AMQPMethod::GetOk(_))), AMQPFrame::Header(CH, header), bodies @ ..] =
        replies
    else {
        panic!("expected get-ok and its content, got {replies:?}");
    };
    let body: Vec<u8> = bodies
        .iter()
        .flat_map(|frame| match frame {
            AMQPFrame::Body(CH, bytes) => bytes.clone(),
            other => panic!("expected body frames, got {other:?}"),
        })
        .collect();
    assert_eq!(header.body_size, body.len() as u64, "the header announces the body's size");
    body
}

/// A client with channel 1 open and queue `name` declared on it.
async fn with_queue(name: &str) -> TestClient {
    let mut client = TestClient::with_channel().await;
    assert_eq!(client.drive([declare_queue(name)]).await, [declare_ok(name, 0, 0)]);
    client
}

// Queues and exchanges.

#[tokio::test]
async fn queue_declare_with_a_name_is_answered_with_declare_ok_naming_it() {
    let mut client = TestClient::with_channel().await;
    assert_eq!(client.drive([declare_queue("orders")]).await, [declare_ok("orders", 0, 0)]);
}

#[tokio::test]
async fn queue_declare_with_an_empty_name_creates_a_queue_with_a_server_generated_amq_gen_name() {
    let mut client = TestClient::with_channel().await;
    let replies = client.drive([declare_queue("")]).await;
    let [AMQPFrame::Method(CH, AMQPClass::Queue(queue::AMQPMethod::DeclareOk(ok)))] = &replies[..] else {
        panic!("expected declare-ok, got {replies:?}");
    };
    let name = ok.queue.as_str();
    assert!(name.starts_with("amq.gen-") && name.len() > "amq.gen-".len(), "generated name {name:?}");
    assert_eq!(client.drive([passive_declare(name)]).await, [declare_ok(name, 0, 0)], "the queue exists");
}

#[tokio::test]
async fn queue_declare_again_reports_the_messages_the_queue_holds() {
    let mut client = with_queue("orders").await;
    client.drive(publish(CH, "", "orders", b"one")).await;
    assert_eq!(client.drive([declare_queue("orders")]).await, [declare_ok("orders", 1, 0)]);
}

#[tokio::test]
async fn queue_declare_with_nowait_creates_the_queue_without_a_reply() {
    let mut client = TestClient::with_channel().await;
    let nowait = queue::Declare { nowait: true, ..declare("quiet") };
    assert_eq!(client.drive([queue_method(queue::AMQPMethod::Declare(nowait))]).await, []);
    assert_eq!(client.drive([passive_declare("quiet")]).await, [declare_ok("quiet", 0, 0)]);
}

#[tokio::test]
async fn a_passive_declare_of_a_missing_queue_closes_the_channel_with_404() {
    let mut client = TestClient::with_channel().await;
    let replies = client.drive([passive_declare("missing")]).await;
    assert_eq!(channel_close_of(&replies, CH), closing(404, (50, 10)));
    assert_eq!(client.phase(), Phase::Open, "a channel error leaves the connection open");
}

#[tokio::test]
async fn redeclaring_a_queue_with_another_durability_closes_the_channel_with_406() {
    let mut client = with_queue("orders").await;
    let durable = queue::Declare { durable: true, ..declare("orders") };
    let replies = client.drive([queue_method(queue::AMQPMethod::Declare(durable))]).await;
    assert_eq!(channel_close_of(&replies, CH), closing(406, (50, 10)));
}

#[tokio::test]
async fn exchange_declare_of_a_known_type_is_answered_with_declare_ok() {
    let mut client = TestClient::with_channel().await;
    for kind in ["direct", "fanout", "topic", "headers"] {
        assert_eq!(client.drive([declare_exchange(&format!("ex-{kind}"), kind)]).await, [exchange_declare_ok()]);
    }
}

/// RabbitMQ answers an unknown type with a connection error: 503 COMMAND_INVALID.
#[tokio::test]
async fn exchange_declare_with_an_unknown_type_closes_the_connection_with_503() {
    let mut client = TestClient::with_channel().await;
    let replies = client.drive([declare_exchange("ex", "no-such-type")]).await;
    assert_eq!(connection_close(&replies), closing(503, (40, 10)));
    assert_eq!(client.phase(), Phase::Closing);
}

#[tokio::test]
async fn a_passive_declare_of_a_missing_exchange_closes_the_channel_with_404() {
    let mut client = TestClient::with_channel().await;
    let passive = exchange::Declare { exchange: "missing".into(), passive: true, ..Default::default() };
    let replies = client.drive([method(CH, AMQPClass::Exchange(exchange::AMQPMethod::Declare(passive)))]).await;
    assert_eq!(channel_close_of(&replies, CH), closing(404, (40, 10)));
}

#[tokio::test]
async fn a_queue_bound_to_a_direct_exchange_receives_what_is_published_with_its_key() {
    let mut client = with_queue("orders").await;
    client.drive([declare_exchange("shop", "direct")]).await;
    let bind_ok = queue_method(queue::AMQPMethod::BindOk(queue::BindOk {}));
    assert_eq!(client.drive([bind("orders", "shop", "new")]).await, [bind_ok]);
    client.drive(publish(CH, "shop", "old", b"not routed")).await;
    client.drive(publish(CH, "shop", "new", b"routed")).await;
    assert_eq!(got_body(&client.drive([get("orders")]).await), b"routed");
    assert_eq!(client.drive([get("orders")]).await, [get_empty()]);
}

#[tokio::test]
async fn queue_purge_is_answered_with_the_count_of_messages_purged() {
    let mut client = with_queue("orders").await;
    client.drive([publish(CH, "", "orders", b"1"), publish(CH, "", "orders", b"2")].concat()).await;
    let purge = queue_method(queue::AMQPMethod::Purge(queue::Purge { queue: "orders".into(), nowait: false }));
    let purge_ok = queue_method(queue::AMQPMethod::PurgeOk(queue::PurgeOk { message_count: 2 }));
    assert_eq!(client.drive([purge]).await, [purge_ok]);
    assert_eq!(client.drive([get("orders")]).await, [get_empty()]);
}

#[tokio::test]
async fn queue_delete_is_answered_with_the_count_of_messages_deleted_and_the_queue_is_gone() {
    let mut client = with_queue("orders").await;
    client.drive(publish(CH, "", "orders", b"1")).await;
    let delete =
        queue_method(queue::AMQPMethod::Delete(queue::Delete { queue: "orders".into(), ..Default::default() }));
    let delete_ok = queue_method(queue::AMQPMethod::DeleteOk(queue::DeleteOk { message_count: 1 }));
    assert_eq!(client.drive([delete]).await, [delete_ok]);
    assert_eq!(channel_close_of(&client.drive([passive_declare("orders")]).await, CH).code, 404);
}

#[tokio::test]
async fn an_empty_queue_name_means_the_queue_last_declared_on_the_channel() {
    let mut client = with_queue("orders").await;
    client.drive(publish(CH, "", "orders", b"hi")).await;
    assert_eq!(got_body(&client.drive([get("")]).await), b"hi");
}

// basic.qos, publish, get, consume and ack.

#[tokio::test]
async fn basic_qos_is_answered_with_qos_ok() {
    let mut client = TestClient::with_channel().await;
    let qos = basic_method(basic::AMQPMethod::Qos(basic::Qos { prefetch_count: 10, global: false }));
    assert_eq!(client.drive([qos]).await, [basic_method(basic::AMQPMethod::QosOk(basic::QosOk {}))]);
}

#[tokio::test]
async fn a_publish_to_the_default_exchange_reaches_the_queue_named_by_its_key_and_basic_get_returns_it() {
    let mut client = with_queue("orders").await;
    assert_eq!(client.drive(publish(CH, "", "orders", b"hello")).await, [], "a publish has no reply");
    let replies = client.drive([get("orders")]).await;
    let get_ok = basic::GetOk {
        delivery_tag: 1,
        redelivered: false,
        exchange: "".into(),
        routing_key: "orders".into(),
        message_count: 0,
    };
    assert_eq!(replies[0], basic_method(basic::AMQPMethod::GetOk(get_ok)));
    assert_eq!(got_body(&replies), b"hello");
}

#[tokio::test]
async fn basic_get_on_an_empty_queue_is_answered_with_get_empty() {
    let mut client = with_queue("orders").await;
    assert_eq!(client.drive([get("orders")]).await, [get_empty()]);
}

#[tokio::test]
async fn basic_get_on_a_missing_queue_closes_the_channel_with_404() {
    let mut client = TestClient::with_channel().await;
    let replies = client.drive([get("missing")]).await;
    assert_eq!(channel_close_of(&replies, CH), closing(404, (60, 70)));
}

#[tokio::test]
async fn basic_get_counts_the_messages_left_behind_the_one_it_returns() {
    let mut client = with_queue("orders").await;
    client.drive([publish(CH, "", "orders", b"1"), publish(CH, "", "orders", b"2")].concat()).await;
    let replies = client.drive([get("orders")]).await;
    let AMQPFrame::Method(CH, AMQPClass::Basic(basic::AMQPMethod::GetOk(ok))) = &replies[0] else {
        panic!("expected get-ok, got {replies:?}");
    };
    assert_eq!(ok.message_count, 1);
}

#[tokio::test]
async fn the_properties_of_a_message_come_back_as_they_were_published() {
    let mut client = with_queue("orders").await;
    let mut headers = FieldTable::default();
    headers.insert("origin".into(), AMQPValue::LongString(LongString::from("test")));
    let properties = basic::AMQPProperties::default()
        .with_content_type("text/plain".into())
        .with_message_id("m-1".into())
        .with_headers(headers);
    let publish = basic::Publish { routing_key: "orders".into(), ..Default::default() };
    client.drive(publish_with(CH, publish, properties.clone(), b"hi")).await;
    let replies = client.drive([get("orders")]).await;
    let expected = AMQPContentHeader { class_id: 60, body_size: 2, properties };
    assert_eq!(replies[1], AMQPFrame::Header(CH, expected));
}

#[tokio::test]
async fn a_body_split_over_several_frames_is_delivered_whole() {
    let mut client = with_queue("orders").await;
    let frames = vec![
        basic_method(basic::AMQPMethod::Publish(basic::Publish { routing_key: "orders".into(), ..Default::default() })),
        content_header(CH, 11, Default::default()),
        content_body(CH, b"hello"),
        content_body(CH, b" "),
        content_body(CH, b"world"),
    ];
    assert_eq!(client.drive(frames).await, []);
    assert_eq!(got_body(&client.drive([get("orders")]).await), b"hello world");
}

#[tokio::test]
async fn a_content_header_announcing_an_empty_body_completes_the_publish() {
    let mut client = with_queue("orders").await;
    client.drive(publish(CH, "", "orders", b"")).await;
    let replies = client.drive([get("orders")]).await;
    assert_eq!(replies.len(), 2, "get-ok and a header, no body frame: {replies:?}");
    assert_eq!(got_body(&replies), b"");
}

#[tokio::test]
async fn a_content_header_without_a_publish_closes_the_connection_with_505() {
    let mut client = TestClient::with_channel().await;
    let replies = client.drive([content_header(CH, 2, Default::default())]).await;
    assert_eq!(connection_close(&replies).code, 505);
    assert_eq!(client.phase(), Phase::Closing);
}

#[tokio::test]
async fn a_body_frame_without_a_content_header_closes_the_connection_with_505() {
    let mut client = TestClient::with_channel().await;
    let publish = basic::Publish { routing_key: "orders".into(), ..Default::default() };
    let replies = client.drive([basic_method(basic::AMQPMethod::Publish(publish)), content_body(CH, b"hi")]).await;
    assert_eq!(connection_close(&replies).code, 505);
}

#[tokio::test]
async fn a_method_where_content_is_expected_closes_the_connection_with_505() {
    let mut client = with_queue("orders").await;
    let mut frames = publish(CH, "", "orders", b"hello");
    frames.truncate(2);
    frames.push(get("orders"));
    let replies = client.drive(frames).await;
    assert_eq!(connection_close(&replies).code, 505);
}

/// The specification (4.2.6): "A peer that receives an incomplete or badly-formatted content
/// MUST raise a connection exception with reply code 505 (unexpected frame)."
#[tokio::test]
async fn a_body_longer_than_its_header_announced_closes_the_connection_with_505() {
    let mut client = with_queue("orders").await;
    let frames = vec![
        basic_method(basic::AMQPMethod::Publish(basic::Publish { routing_key: "orders".into(), ..Default::default() })),
        content_header(CH, 3, Default::default()),
        content_body(CH, b"hello"),
    ];
    let replies = client.drive(frames).await;
    assert_eq!(connection_close(&replies).code, 505);
    assert_eq!(client.phase(), Phase::Closing);
}

#[tokio::test]
async fn a_body_over_the_maximum_message_size_closes_the_channel_with_406() {
    let config = ProtocolConfig { max_message_bytes: 4, ..ProtocolConfig::default() };
    let mut client = TestClient::open_with(config).await;
    client.open_channel(CH).await;
    let replies = client.drive(publish(CH, "", "orders", b"hello")).await;
    assert_eq!(channel_close_of(&replies, CH), closing(406, (60, 40)));
}

#[tokio::test]
async fn a_publish_to_a_missing_exchange_closes_the_channel_with_404() {
    let mut client = TestClient::with_channel().await;
    let replies = client.drive(publish(CH, "missing", "key", b"hi")).await;
    assert_eq!(channel_close_of(&replies, CH), closing(404, (60, 40)));
}

/// RabbitMQ has never implemented `immediate`; it closes the connection with 540.
#[tokio::test]
async fn a_publish_with_immediate_closes_the_connection_with_540() {
    let mut client = with_queue("orders").await;
    let immediate = basic::Publish { routing_key: "orders".into(), immediate: true, ..Default::default() };
    let replies = client.drive(publish_with(CH, immediate, Default::default(), b"hi")).await;
    assert_eq!(connection_close(&replies), closing(540, (60, 40)));
}

#[tokio::test]
async fn an_unroutable_mandatory_publish_comes_back_with_basic_return_312_no_route() {
    let mut client = TestClient::with_channel().await;
    let mandatory = basic::Publish { routing_key: "nowhere".into(), mandatory: true, ..Default::default() };
    let replies = client.drive(publish_with(CH, mandatory, Default::default(), b"lost")).await;
    let returned = basic::Return {
        reply_code: 312,
        reply_text: "NO_ROUTE".into(),
        exchange: "".into(),
        routing_key: "nowhere".into(),
    };
    assert_eq!(
        replies,
        [
            basic_method(basic::AMQPMethod::Return(returned)),
            content_header(CH, 4, Default::default()),
            content_body(CH, b"lost"),
        ]
    );
}

#[tokio::test]
async fn an_unroutable_publish_without_mandatory_is_dropped_without_a_reply() {
    let mut client = TestClient::with_channel().await;
    assert_eq!(client.drive(publish(CH, "", "nowhere", b"lost")).await, []);
    assert_eq!(client.phase(), Phase::Open);
}

#[tokio::test]
async fn with_prefetch_one_a_consumer_gets_its_next_message_once_it_acks_the_first() {
    let mut client = with_queue("orders").await;
    client.drive([publish(CH, "", "orders", b"1"), publish(CH, "", "orders", b"2")].concat()).await;
    client.drive([basic_method(basic::AMQPMethod::Qos(basic::Qos { prefetch_count: 1, global: false }))]).await;
    let consume = basic::Consume { queue: "orders".into(), consumer_tag: "c".into(), ..Default::default() };
    let replies = client.drive([basic_method(basic::AMQPMethod::Consume(consume))]).await;
    let deliver = |delivery_tag| {
        basic_method(basic::AMQPMethod::Deliver(basic::Deliver {
            consumer_tag: "c".into(),
            delivery_tag,
            redelivered: false,
            exchange: "".into(),
            routing_key: "orders".into(),
        }))
    };
    let consume_ok = basic_method(basic::AMQPMethod::ConsumeOk(basic::ConsumeOk { consumer_tag: "c".into() }));
    let first = [deliver(1), content_header(CH, 1, Default::default()), content_body(CH, b"1")];
    assert_eq!(replies, [[consume_ok].as_slice(), &first].concat());
    let second = [deliver(2), content_header(CH, 1, Default::default()), content_body(CH, b"2")];
    assert_eq!(client.drive([ack(1, false)]).await, second);
}

#[tokio::test]
async fn an_ack_of_an_unknown_delivery_tag_closes_the_channel_with_406() {
    let mut client = TestClient::with_channel().await;
    let replies = client.drive([ack(7, false)]).await;
    assert_eq!(channel_close_of(&replies, CH), closing(406, (60, 80)));
}

// Publisher confirms.

#[tokio::test]
async fn confirm_select_is_answered_with_select_ok() {
    let mut client = TestClient::with_channel().await;
    let select_ok = method(CH, AMQPClass::Confirm(confirm::AMQPMethod::SelectOk(confirm::SelectOk {})));
    assert_eq!(client.drive([confirm_select()]).await, [select_ok]);
}

#[tokio::test]
async fn in_confirm_mode_publishes_are_acked_with_delivery_tags_counting_from_one() {
    let mut client = with_queue("orders").await;
    client.drive([confirm_select()]).await;
    for expected in 1..=3 {
        let replies = client.drive(publish(CH, "", "orders", b"hi")).await;
        let [AMQPFrame::Method(CH, AMQPClass::Basic(basic::AMQPMethod::Ack(acked)))] = &replies[..] else {
            panic!("expected basic.ack, got {replies:?}");
        };
        assert_eq!(acked.delivery_tag, expected);
    }
}

#[tokio::test]
async fn publishes_confirmed_together_are_acked_at_once_with_multiple() {
    let mut client = with_queue("orders").await;
    client.drive([confirm_select()]).await;
    let replies = client.drive([publish(CH, "", "orders", b"1"), publish(CH, "", "orders", b"2")].concat()).await;
    assert_eq!(replies, [ack(2, true)]);
}

/// RabbitMQ confirms an unroutable message as soon as the exchange has no queue for it.
#[tokio::test]
async fn in_confirm_mode_an_unroutable_publish_is_acked() {
    let mut client = TestClient::with_channel().await;
    client.drive([confirm_select()]).await;
    let replies = client.drive(publish(CH, "", "nowhere", b"lost")).await;
    assert!(
        matches!(&replies[..], [AMQPFrame::Method(CH, AMQPClass::Basic(basic::AMQPMethod::Ack(a)))] if a.delivery_tag == 1)
    );
}

/// RabbitMQ sends the basic.return of a mandatory message before its basic.ack.
#[tokio::test]
async fn in_confirm_mode_an_unroutable_mandatory_publish_is_returned_before_it_is_acked() {
    let mut client = TestClient::with_channel().await;
    client.drive([confirm_select()]).await;
    let mandatory = basic::Publish { routing_key: "nowhere".into(), mandatory: true, ..Default::default() };
    let replies = client.drive(publish_with(CH, mandatory, Default::default(), b"lost")).await;
    assert!(matches!(replies.first(), Some(AMQPFrame::Method(CH, AMQPClass::Basic(basic::AMQPMethod::Return(_))))));
    assert!(
        matches!(replies.last(), Some(AMQPFrame::Method(CH, AMQPClass::Basic(basic::AMQPMethod::Ack(a)))) if a.delivery_tag == 1)
    );
}

#[tokio::test]
async fn a_persistent_publish_to_a_durable_queue_is_acked_once_written() {
    let mut client = TestClient::with_channel().await;
    let durable = queue::Declare { durable: true, ..declare("orders") };
    client.drive([queue_method(queue::AMQPMethod::Declare(durable)), confirm_select()]).await;
    let persistent = basic::AMQPProperties::default().with_delivery_mode(2);
    let publish = basic::Publish { routing_key: "orders".into(), ..Default::default() };
    let replies = client.drive(publish_with(CH, publish, persistent, b"kept")).await;
    let is_ack =
        |frame: &AMQPFrame| matches!(frame, AMQPFrame::Method(CH, AMQPClass::Basic(basic::AMQPMethod::Ack(_))));
    let acked = match replies.iter().find(|frame| is_ack(frame)) {
        Some(frame) => frame.clone(),
        None => client.wait_for(is_ack).await,
    };
    assert_eq!(acked, ack(1, true));
}

// Transactions.

#[tokio::test]
async fn tx_select_is_answered_with_select_ok() {
    let mut client = TestClient::with_channel().await;
    assert_eq!(
        client.drive([tx(tx::AMQPMethod::Select(tx::Select {}))]).await,
        [tx(tx::AMQPMethod::SelectOk(tx::SelectOk {}))]
    );
}

#[tokio::test]
async fn a_publish_in_a_transaction_reaches_its_queue_only_at_commit() {
    let mut client = with_queue("orders").await;
    client.drive([tx(tx::AMQPMethod::Select(tx::Select {}))]).await;
    client.drive(publish(CH, "", "orders", b"held")).await;
    assert_eq!(client.drive([get("orders")]).await, [get_empty()], "not routed before commit");
    assert_eq!(
        client.drive([tx(tx::AMQPMethod::Commit(tx::Commit {}))]).await,
        [tx(tx::AMQPMethod::CommitOk(tx::CommitOk {}))]
    );
    assert_eq!(got_body(&client.drive([get("orders")]).await), b"held");
}

#[tokio::test]
async fn tx_rollback_discards_the_publishes_of_the_transaction() {
    let mut client = with_queue("orders").await;
    client.drive([tx(tx::AMQPMethod::Select(tx::Select {}))]).await;
    client.drive(publish(CH, "", "orders", b"dropped")).await;
    let rollback_ok = tx(tx::AMQPMethod::RollbackOk(tx::RollbackOk {}));
    assert_eq!(client.drive([tx(tx::AMQPMethod::Rollback(tx::Rollback {}))]).await, [rollback_ok]);
    client.drive([tx(tx::AMQPMethod::Commit(tx::Commit {}))]).await;
    assert_eq!(client.drive([get("orders")]).await, [get_empty()]);
}

#[tokio::test]
async fn a_durable_transaction_is_answered_with_commit_ok_after_its_message_is_written() {
    let mut client = TestClient::with_channel().await;
    let durable = queue::Declare { durable: true, ..declare("orders") };
    client.drive([queue_method(queue::AMQPMethod::Declare(durable)), tx(tx::AMQPMethod::Select(tx::Select {}))]).await;
    let persistent = basic::AMQPProperties::default().with_delivery_mode(2);
    let publish = basic::Publish { routing_key: "orders".into(), ..Default::default() };
    let mut frames = publish_with(CH, publish, persistent, b"kept");
    frames.push(tx(tx::AMQPMethod::Commit(tx::Commit {})));
    assert_eq!(client.drive(frames).await, [tx(tx::AMQPMethod::CommitOk(tx::CommitOk {}))]);
    assert_eq!(got_body(&client.drive([get("orders")]).await), b"kept");
}

#[tokio::test]
async fn tx_commit_on_a_channel_not_in_tx_mode_closes_the_channel_with_406() {
    let mut client = TestClient::with_channel().await;
    let replies = client.drive([tx(tx::AMQPMethod::Commit(tx::Commit {}))]).await;
    assert_eq!(channel_close_of(&replies, CH), closing(406, (90, 20)));
}

#[tokio::test]
async fn confirm_select_on_a_transactional_channel_closes_the_channel_with_406() {
    let mut client = TestClient::with_channel().await;
    client.drive([tx(tx::AMQPMethod::Select(tx::Select {}))]).await;
    let replies = client.drive([confirm_select()]).await;
    assert_eq!(channel_close_of(&replies, CH), closing(406, (85, 10)));
}

#[tokio::test]
async fn tx_select_on_a_channel_in_confirm_mode_closes_the_channel_with_406() {
    let mut client = TestClient::with_channel().await;
    client.drive([confirm_select()]).await;
    let replies = client.drive([tx(tx::AMQPMethod::Select(tx::Select {}))]).await;
    assert_eq!(channel_close_of(&replies, CH), closing(406, (90, 10)));
}
