//! The connection state machine, driven with real frames on a real broker (see `test_client`):
//! the handshake (start, start-ok and login, tune and tune-ok limits, open), heartbeats, frame
//! errors, opening and closing channels and the channel limit, and the close handshake in both
//! directions. Each test states an outcome the AMQP 0-9-1 specification or RabbitMQ documents:
//! the reply methods, their reply codes and the class and method they blame, and the phase the
//! connection is left in.

use super::Phase;
use crate::test_client::{
    channel_close, channel_close_ok, channel_open, connection_close, connection_method, encode, handshake, method,
    open_vhost, start_ok, start_ok_with, tune_ok, Closing, TestClient,
};
use crate::ProtocolConfig;
use amq_protocol::frame::{AMQPFrame, WriteContext};
use amq_protocol::protocol::{channel, connection, queue, AMQPClass};
use amq_protocol::types::generation::gen_field_table;
use amq_protocol::types::{AMQPValue, FieldTable, LongString};

/// The protocol settings every test runs with unless it says otherwise.
const CHANNEL_MAX: u16 = 2047;
const FRAME_MAX: u32 = 131_072;
const HEARTBEAT_SECS: u16 = 60;

/// A client that has logged in and awaits tune-ok.
async fn logged_in() -> TestClient {
    let mut client = TestClient::connect();
    client.drive([start_ok("guest", "guest")]).await;
    assert_eq!(client.phase(), Phase::AwaitTuneOk);
    client
}

/// A client through tune-ok, awaiting connection.open.
async fn tuned() -> TestClient {
    let mut client = logged_in().await;
    assert_eq!(client.drive([tune_ok(CHANNEL_MAX, FRAME_MAX, 0)]).await, []);
    assert_eq!(client.phase(), Phase::AwaitOpen);
    client
}

fn closing(code: u16, (class_id, method_id): (u16, u16)) -> Closing {
    Closing { code, class_id, method_id }
}

fn close_ok() -> AMQPFrame {
    connection_method(connection::AMQPMethod::CloseOk(connection::CloseOk {}))
}

fn client_close() -> AMQPFrame {
    let close = connection::Close { reply_code: 200, reply_text: "Goodbye".into(), class_id: 0, method_id: 0 };
    connection_method(connection::AMQPMethod::Close(close))
}

fn heartbeat_on(channel: u16) -> Vec<u8> {
    let frame = if channel == 0 { AMQPFrame::Heartbeat } else { AMQPFrame::InvalidHeartbeat(channel) };
    encode(&frame)
}

fn declare_queue(channel: u16, name: &str) -> AMQPFrame {
    let declare = queue::Declare { queue: name.into(), ..Default::default() };
    method(channel, AMQPClass::Queue(queue::AMQPMethod::Declare(declare)))
}

fn channel_open_ok(id: u16) -> AMQPFrame {
    method(id, AMQPClass::Channel(channel::AMQPMethod::OpenOk(channel::OpenOk {})))
}

// The handshake.

#[tokio::test]
async fn a_new_connection_sends_start_offering_0_9_plain_amqplain_and_en_us() {
    let mut client = TestClient::connect();
    let replies = client.drive([]).await;
    let [AMQPFrame::Method(0, AMQPClass::Connection(connection::AMQPMethod::Start(start)))] = &replies[..] else {
        panic!("expected connection.start, got {replies:?}");
    };
    assert_eq!((start.version_major, start.version_minor), (0, 9));
    assert_eq!(start.mechanisms.to_string(), "PLAIN AMQPLAIN");
    assert_eq!(start.locales.to_string(), "en_US");
    assert_eq!(client.phase(), Phase::AwaitStartOk);
}

#[tokio::test]
async fn start_ok_with_the_right_plain_credentials_is_answered_with_tune_offering_the_configured_limits() {
    let mut client = TestClient::connect();
    client.drive([]).await;
    let replies = client.drive([start_ok("guest", "guest")]).await;
    let tune = connection::Tune { channel_max: CHANNEL_MAX, frame_max: FRAME_MAX, heartbeat: HEARTBEAT_SECS };
    assert_eq!(replies, [connection_method(connection::AMQPMethod::Tune(tune))]);
    assert_eq!(client.phase(), Phase::AwaitTuneOk);
}

#[tokio::test]
async fn start_ok_with_amqplain_credentials_logs_in() {
    let mut client = TestClient::connect();
    client.drive([]).await;
    let mut table = FieldTable::default();
    table.insert("LOGIN".into(), AMQPValue::LongString(LongString::from("guest")));
    table.insert("PASSWORD".into(), AMQPValue::LongString(LongString::from("guest")));
    let encoded = gen_field_table(&table)(WriteContext::from(Vec::new())).expect("the table encodes").write;
    // AMQPLAIN's response is the table without its length prefix.
    let replies = client.drive([start_ok_with("AMQPLAIN", encoded[4..].to_vec())]).await;
    assert!(matches!(&replies[..], [AMQPFrame::Method(0, AMQPClass::Connection(connection::AMQPMethod::Tune(_)))]));
    assert_eq!(client.phase(), Phase::AwaitTuneOk);
}

#[tokio::test]
async fn start_ok_with_a_wrong_password_closes_the_connection_with_403_access_refused() {
    let mut client = TestClient::connect();
    client.drive([]).await;
    let replies = client.drive([start_ok("guest", "not the password")]).await;
    assert_eq!(connection_close(&replies), closing(403, (10, 11)));
    assert_eq!(client.phase(), Phase::Closing);
}

#[tokio::test]
async fn start_ok_for_an_unknown_user_closes_the_connection_with_403_access_refused() {
    let mut client = TestClient::connect();
    client.drive([]).await;
    let replies = client.drive([start_ok("nobody", "guest")]).await;
    assert_eq!(connection_close(&replies), closing(403, (10, 11)));
}

/// The specification (connection.start-ok, field mechanism): "If the mechanism field does not
/// contain one of the security mechanisms proposed by the server in the Start method, the
/// server MUST close the connection without sending any further data." RabbitMQ does so.
#[tokio::test]
async fn start_ok_with_a_mechanism_not_offered_closes_the_socket_without_sending_anything() {
    let mut client = TestClient::connect();
    client.drive([]).await;
    let replies = client.drive([start_ok_with("CRAM-MD5", b"guest".to_vec())]).await;
    assert_eq!(replies, []);
    assert_eq!(client.phase(), Phase::Closed);
}

#[tokio::test]
async fn tune_ok_sets_the_channel_max_frame_max_and_heartbeat_the_client_chose() {
    let mut client = logged_in().await;
    let replies = client.drive([tune_ok(10, 8192, 30)]).await;
    assert_eq!(replies, []);
    let tuning = client.tuning();
    assert_eq!((tuning.channel_max, tuning.frame_max, tuning.heartbeat_secs), (10, 8192, 30));
    assert_eq!(client.phase(), Phase::AwaitOpen);
}

#[tokio::test]
async fn tune_ok_with_heartbeat_zero_turns_heartbeats_off() {
    let mut client = logged_in().await;
    client.drive([tune_ok(CHANNEL_MAX, FRAME_MAX, 0)]).await;
    assert_eq!(client.tuning().heartbeat_secs, 0);
}

#[tokio::test]
async fn tune_ok_with_a_frame_max_below_the_4096_minimum_closes_the_connection_with_530() {
    let mut client = logged_in().await;
    let replies = client.drive([tune_ok(CHANNEL_MAX, 4095, 0)]).await;
    assert_eq!(connection_close(&replies), closing(530, (10, 31)));
    assert_eq!(client.phase(), Phase::Closing);
}

#[tokio::test]
async fn tune_ok_with_a_frame_max_above_the_offer_closes_the_connection_with_530() {
    let mut client = logged_in().await;
    let replies = client.drive([tune_ok(CHANNEL_MAX, FRAME_MAX + 1, 0)]).await;
    assert_eq!(connection_close(&replies), closing(530, (10, 31)));
    assert_eq!(client.phase(), Phase::Closing);
}

#[tokio::test]
async fn tune_ok_with_a_channel_max_above_the_offer_closes_the_connection_with_530() {
    let mut client = logged_in().await;
    let replies = client.drive([tune_ok(CHANNEL_MAX + 1, FRAME_MAX, 0)]).await;
    assert_eq!(connection_close(&replies), closing(530, (10, 31)));
}

#[tokio::test]
async fn open_of_the_default_vhost_is_answered_with_open_ok() {
    let mut client = tuned().await;
    let replies = client.drive([open_vhost("/")]).await;
    assert_eq!(replies, [connection_method(connection::AMQPMethod::OpenOk(connection::OpenOk {}))]);
    assert_eq!(client.phase(), Phase::Open);
}

#[tokio::test]
async fn open_of_a_vhost_that_does_not_exist_closes_the_connection_with_530_not_allowed() {
    let mut client = tuned().await;
    let replies = client.drive([open_vhost("/nowhere")]).await;
    assert_eq!(connection_close(&replies), closing(530, (10, 40)));
    assert_eq!(client.phase(), Phase::Closing);
}

/// A frame on a channel before the connection is open is an unexpected frame (505), as
/// RabbitMQ answers; no method was decoded, so the close blames none (class and method 0).
#[tokio::test]
async fn a_channel_open_before_connection_open_closes_the_connection_with_505_blaming_no_method() {
    let mut client = tuned().await;
    let replies = client.drive([channel_open(1)]).await;
    assert_eq!(connection_close(&replies), closing(505, (0, 0)));
    assert_eq!(client.phase(), Phase::Closing);
}

/// A connection method out of the handshake's order is an invalid sequence of methods: 503
/// COMMAND_INVALID by the specification's definition of the code.
#[tokio::test]
async fn a_second_tune_ok_closes_the_connection_with_503_command_invalid() {
    let mut client = tuned().await;
    let replies = client.drive([tune_ok(CHANNEL_MAX, FRAME_MAX, 0)]).await;
    assert_eq!(connection_close(&replies), closing(503, (10, 31)));
}

#[tokio::test]
async fn connection_open_before_start_ok_closes_the_connection_with_503() {
    let mut client = TestClient::connect();
    client.drive([]).await;
    let replies = client.drive([open_vhost("/")]).await;
    assert_eq!(connection_close(&replies), closing(503, (10, 40)));
    assert_eq!(client.phase(), Phase::Closing);
}

// Heartbeats and frame errors.

#[tokio::test]
async fn a_heartbeat_during_the_handshake_is_ignored() {
    let mut client = logged_in().await;
    assert_eq!(client.drive_bytes(&heartbeat_on(0)).await, []);
    assert_eq!(client.phase(), Phase::AwaitTuneOk);
}

#[tokio::test]
async fn a_heartbeat_on_channel_0_of_an_open_connection_is_ignored() {
    let mut client = TestClient::open().await;
    assert_eq!(client.drive_bytes(&heartbeat_on(0)).await, []);
    assert_eq!(client.phase(), Phase::Open);
}

/// The specification (4.2.7): "Heartbeat frames MUST have a channel number of zero. A peer
/// that receives an invalid heartbeat frame MUST raise a connection exception with reply code
/// 501 (frame error)."
#[tokio::test]
async fn a_heartbeat_on_a_non_zero_channel_closes_the_connection_with_501() {
    let mut client = TestClient::with_channel().await;
    let replies = client.drive_bytes(&heartbeat_on(1)).await;
    assert_eq!(connection_close(&replies).code, 501);
    assert_eq!(client.phase(), Phase::Closing);
}

#[tokio::test]
async fn a_frame_larger_than_the_negotiated_frame_max_closes_the_connection_with_501_and_stops_reading() {
    let mut client = TestClient::with_channel().await;
    let mut arguments = FieldTable::default();
    arguments.insert("x-filler".into(), AMQPValue::LongString(vec![b'x'; FRAME_MAX as usize].into()));
    let declare = queue::Declare { queue: "q".into(), arguments, ..Default::default() };
    let oversized = method(1, AMQPClass::Queue(queue::AMQPMethod::Declare(declare)));
    let replies = client.drive([oversized]).await;
    assert_eq!(connection_close(&replies).code, 501);
    assert_eq!(client.phase(), Phase::Closed);
}

#[tokio::test]
async fn a_frame_of_an_unknown_type_closes_the_connection_with_501() {
    let mut client = TestClient::open().await;
    let replies = client.drive_bytes(&[9, 0, 0, 0, 0, 0, 0, 0xCE]).await;
    assert_eq!(connection_close(&replies).code, 501);
    assert_eq!(client.phase(), Phase::Closed);
}

#[tokio::test]
async fn a_frame_not_ended_by_0xce_closes_the_connection_with_501() {
    let mut client = TestClient::open().await;
    let mut bytes = encode(&channel_open(1));
    *bytes.last_mut().expect("a frame has an end octet") = 0;
    let replies = client.drive_bytes(&bytes).await;
    assert_eq!(connection_close(&replies).code, 501);
    assert_eq!(client.phase(), Phase::Closed);
}

// Channels.

#[tokio::test]
async fn channel_open_is_answered_with_open_ok_on_that_channel() {
    let mut client = TestClient::open().await;
    assert_eq!(client.drive([channel_open(7)]).await, [channel_open_ok(7)]);
}

#[tokio::test]
async fn a_second_channel_open_on_the_same_channel_closes_the_connection_with_504() {
    let mut client = TestClient::with_channel().await;
    let replies = client.drive([channel_open(1)]).await;
    assert_eq!(connection_close(&replies), closing(504, (20, 10)));
    assert_eq!(client.phase(), Phase::Closing);
}

#[tokio::test]
async fn a_method_on_a_channel_never_opened_closes_the_connection_with_504() {
    let mut client = TestClient::with_channel().await;
    let replies = client.drive([declare_queue(3, "q")]).await;
    assert_eq!(connection_close(&replies), closing(504, (50, 10)));
    assert_eq!(client.phase(), Phase::Closing);
}

#[tokio::test]
async fn channel_close_is_answered_with_close_ok() {
    let mut client = TestClient::with_channel().await;
    assert_eq!(client.drive([channel_close(1)]).await, [channel_close_ok(1)]);
    assert_eq!(client.phase(), Phase::Open);
}

#[tokio::test]
async fn a_closed_channel_number_can_be_opened_again() {
    let mut client = TestClient::with_channel().await;
    client.drive([channel_close(1)]).await;
    assert_eq!(client.drive([channel_open(1)]).await, [channel_open_ok(1)]);
}

#[tokio::test]
async fn a_method_on_a_channel_the_client_closed_closes_the_connection_with_504() {
    let mut client = TestClient::with_channel().await;
    client.drive([channel_close(1)]).await;
    let replies = client.drive([declare_queue(1, "q")]).await;
    assert_eq!(connection_close(&replies), closing(504, (50, 10)));
}

#[tokio::test]
async fn a_channel_closed_by_the_broker_discards_methods_until_the_clients_close_ok() {
    let mut client = TestClient::with_channel().await;
    let passive = queue::Declare { queue: "missing".into(), passive: true, ..Default::default() };
    let replies = client.drive([method(1, AMQPClass::Queue(queue::AMQPMethod::Declare(passive)))]).await;
    assert!(matches!(&replies[..], [AMQPFrame::Method(1, AMQPClass::Channel(channel::AMQPMethod::Close(_)))]));
    assert_eq!(client.drive([declare_queue(1, "q")]).await, [], "discarded while the close is unanswered");
    assert_eq!(client.drive([channel_close_ok(1)]).await, []);
    assert_eq!(client.drive([channel_open(1)]).await, [channel_open_ok(1)]);
}

#[tokio::test]
async fn channel_max_limits_the_channels_open_at_once_with_530() {
    let config = ProtocolConfig { channel_max: 2, ..ProtocolConfig::default() };
    let mut client = TestClient::open_with(config).await;
    client.open_channel(1).await;
    client.open_channel(200).await;
    let replies = client.drive([channel_open(3)]).await;
    assert_eq!(connection_close(&replies), closing(530, (20, 10)));
}

#[tokio::test]
async fn a_channel_closed_by_the_client_no_longer_counts_against_channel_max() {
    let config = ProtocolConfig { channel_max: 1, ..ProtocolConfig::default() };
    let mut client = TestClient::open_with(config).await;
    client.open_channel(1).await;
    client.drive([channel_close(1)]).await;
    assert_eq!(client.drive([channel_open(2)]).await, [channel_open_ok(2)]);
}

#[tokio::test]
async fn channel_flow_is_answered_with_flow_ok_carrying_the_same_flag() {
    let mut client = TestClient::with_channel().await;
    for active in [false, true] {
        let flow = method(1, AMQPClass::Channel(channel::AMQPMethod::Flow(channel::Flow { active })));
        let flow_ok = method(1, AMQPClass::Channel(channel::AMQPMethod::FlowOk(channel::FlowOk { active })));
        assert_eq!(client.drive([flow]).await, [flow_ok]);
    }
}

// Closing the connection.

#[tokio::test]
async fn connection_close_from_the_client_is_answered_with_close_ok_and_ends_the_connection() {
    let mut client = TestClient::with_channel().await;
    assert_eq!(client.drive([client_close()]).await, [close_ok()]);
    assert_eq!(client.phase(), Phase::Closed);
}

#[tokio::test]
async fn connection_close_during_the_handshake_is_answered_with_close_ok() {
    let mut client = logged_in().await;
    assert_eq!(client.drive([client_close()]).await, [close_ok()]);
    assert_eq!(client.phase(), Phase::Closed);
}

/// connection.close: "After sending this method, any received methods except Close and
/// Close-OK MUST be discarded."
#[tokio::test]
async fn after_the_broker_closes_the_connection_it_discards_everything_but_close_ok() {
    let mut client = TestClient::with_channel().await;
    client.drive([channel_open(1)]).await;
    assert_eq!(client.phase(), Phase::Closing);
    assert_eq!(client.drive([channel_open(2), declare_queue(1, "q")]).await, []);
    assert_eq!(client.phase(), Phase::Closing);
    assert_eq!(client.drive([close_ok()]).await, []);
    assert_eq!(client.phase(), Phase::Closed);
}

#[tokio::test]
async fn a_client_close_crossing_the_brokers_close_is_answered_with_close_ok() {
    let mut client = TestClient::with_channel().await;
    client.drive([channel_open(1)]).await;
    assert_eq!(client.drive([client_close()]).await, [close_ok()]);
    assert_eq!(client.phase(), Phase::Closed);
}

#[tokio::test]
async fn the_whole_handshake_in_one_read_opens_the_connection() {
    let mut client = TestClient::connect();
    let replies = client.drive(handshake(tune_ok(CHANNEL_MAX, FRAME_MAX, 0))).await;
    let [start, tune, open_ok] = &replies[..] else { panic!("expected start, tune and open-ok, got {replies:?}") };
    assert!(matches!(start, AMQPFrame::Method(0, AMQPClass::Connection(connection::AMQPMethod::Start(_)))));
    assert!(matches!(tune, AMQPFrame::Method(0, AMQPClass::Connection(connection::AMQPMethod::Tune(_)))));
    assert_eq!(open_ok, &connection_method(connection::AMQPMethod::OpenOk(connection::OpenOk {})));
    assert_eq!(client.phase(), Phase::Open);
}
