//! A client for the unit tests of the connection and channel state machines.
//!
//! It drives a real [`Connection`] on a real broker (on disk, in a scratch directory of its
//! own) with frames encoded by amq-protocol, and reads back what the connection's writer
//! ([`run_writer`]) puts on the wire, parsed by amq-protocol: the tests see the bytes a client
//! would see. A method whose reply waits (see `pending_reply`) is awaited as the read loop
//! would await it.

use crate::connection::{Client, Connection, Phase, Tuning};
use crate::outbox::{run_writer, Outbox};
use crate::ProtocolConfig;
use amq_protocol::frame::{gen_frame, parse_frame, AMQPContentHeader, AMQPFrame, WriteContext};
use amq_protocol::protocol::{basic, channel, connection, AMQPClass};
use amq_protocol::types::{FieldTable, LongString};
use bytes::BytesMut;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, DuplexStream};
use warren_delivery::message_store::LogStoreConfig;
use warren_delivery::Broker;

/// How long a reply may take before the test fails.
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);
/// Room in the in-memory socket between the writer and the test.
const WIRE_BYTES: usize = 1 << 20;

/// A connection driven by a test, as a client at 127.0.0.1 (so `guest` may log in).
pub(crate) struct TestClient {
    connection: Connection,
    /// The client's end of the socket the connection's writer writes to.
    wire: DuplexStream,
    /// Bytes read from `wire` and not yet parsed into a frame.
    unread: BytesMut,
    /// Declared last: removed after the broker that uses it is dropped.
    _data: tempfile::TempDir,
}

impl TestClient {
    /// A connection that has just accepted the protocol header (`connection.start` is queued),
    /// with the default protocol settings.
    pub(crate) fn connect() -> Self {
        Self::connect_with(ProtocolConfig::default())
    }

    /// As [`TestClient::connect`], with `config`.
    pub(crate) fn connect_with(config: ProtocolConfig) -> Self {
        let data = tempfile::tempdir().expect("a scratch directory");
        let broker = Broker::open(data.path(), LogStoreConfig::default()).expect("the broker opens");
        let (outbox, receiver) = Outbox::new();
        let frame_max = Arc::new(AtomicU32::new(config.frame_max));
        let client = Client {
            peer: ([127, 0, 0, 1], 40_000).into(),
            local: ([127, 0, 0, 1], 5672).into(),
            tls: false,
            certificate_login: None,
        };
        let connection = Connection::new(broker, Arc::new(config), client, outbox, Arc::clone(&frame_max));
        let (socket, wire) = tokio::io::duplex(WIRE_BYTES);
        tokio::spawn(run_writer(socket, receiver, frame_max, Arc::clone(connection.info())));
        TestClient { connection, wire, unread: BytesMut::new(), _data: data }
    }

    /// A connection through the handshake (guest/guest, default tuning, vhost `/`): open.
    pub(crate) async fn open() -> Self {
        Self::open_with(ProtocolConfig::default()).await
    }

    /// As [`TestClient::open`], with `config`; tune-ok accepts what the server offers.
    pub(crate) async fn open_with(config: ProtocolConfig) -> Self {
        let offer = (config.channel_max, config.frame_max, config.heartbeat_secs);
        let mut client = Self::connect_with(config);
        let replies = client.drive(handshake(tune_ok(offer.0, offer.1, offer.2))).await;
        let opened = method(0, AMQPClass::Connection(connection::AMQPMethod::OpenOk(connection::OpenOk {})));
        assert_eq!(replies.last(), Some(&opened), "the handshake ends with open-ok: {replies:?}");
        assert_eq!(client.phase(), Phase::Open);
        client
    }

    /// An open connection with channel 1 open.
    pub(crate) async fn with_channel() -> Self {
        let mut client = Self::open().await;
        client.open_channel(1).await;
        client
    }

    /// Opens channel `id`, checking the broker answers open-ok.
    pub(crate) async fn open_channel(&mut self, id: u16) {
        let replies = self.drive([channel_open(id)]).await;
        assert_eq!(replies, [method(id, AMQPClass::Channel(channel::AMQPMethod::OpenOk(channel::OpenOk {})))]);
    }

    /// Feeds `frames` to the connection, as one read, and returns every frame it sent in
    /// answer (and anything it had queued before).
    pub(crate) async fn drive(&mut self, frames: impl IntoIterator<Item = AMQPFrame>) -> Vec<AMQPFrame> {
        let bytes: Vec<u8> = frames.into_iter().flat_map(|frame| encode(&frame)).collect();
        self.drive_bytes(&bytes).await
    }

    /// Feeds raw bytes to the connection, as one read, and returns every frame it sent.
    pub(crate) async fn drive_bytes(&mut self, bytes: &[u8]) -> Vec<AMQPFrame> {
        let mut buf = BytesMut::from(bytes);
        self.connection.process(&mut buf);
        while let Some(mut pending) = self.connection.take_pending() {
            let outcome = tokio::time::timeout(REPLY_TIMEOUT, pending.outcome()).await.expect("the reply is ready");
            self.connection.complete_pending(pending.channel(), outcome);
            self.connection.process(&mut buf);
        }
        // A heartbeat marks the end of what the frames caused: the connection never sends one
        // by itself (its read loop does).
        self.connection.send_heartbeat();
        let mut replies = Vec::new();
        loop {
            match self.next_frame().await {
                AMQPFrame::Heartbeat => return replies,
                frame => replies.push(frame),
            }
        }
    }

    /// Reads frames until one satisfies `wanted` (one sent late, once a disk write is done),
    /// and returns it; fails after [`REPLY_TIMEOUT`].
    pub(crate) async fn wait_for(&mut self, wanted: impl Fn(&AMQPFrame) -> bool) -> AMQPFrame {
        loop {
            let frame = self.next_frame().await;
            if wanted(&frame) {
                return frame;
            }
        }
    }

    async fn next_frame(&mut self) -> AMQPFrame {
        loop {
            if let Some(size) = whole_frame_size(&self.unread) {
                let bytes = self.unread.split_to(size);
                let (_, frame) = parse_frame(&bytes[..]).expect("the connection sends frames amq-protocol parses");
                return frame;
            }
            let read = tokio::time::timeout(REPLY_TIMEOUT, self.wire.read_buf(&mut self.unread)).await;
            let read = read.expect("the connection writes before the timeout").expect("the wire reads");
            assert!(read > 0, "the connection's writer stopped");
        }
    }

    /// Where the connection stands.
    pub(crate) fn phase(&self) -> Phase {
        self.connection.phase()
    }

    /// What tuning agreed.
    pub(crate) fn tuning(&self) -> Tuning {
        self.connection.tuning()
    }
}

/// The size of the whole frame at the front of `buf`, if it is all there.
fn whole_frame_size(buf: &[u8]) -> Option<usize> {
    let header = buf.get(..crate::frame::FRAME_HEADER_BYTES)?;
    let payload = u32::from_be_bytes([header[3], header[4], header[5], header[6]]) as usize;
    let size = payload + crate::frame::FRAME_OVERHEAD_BYTES;
    (buf.len() >= size).then_some(size)
}

/// A frame as bytes on the wire.
pub(crate) fn encode(frame: &AMQPFrame) -> Vec<u8> {
    gen_frame(frame)(WriteContext::from(Vec::new())).expect("the frame encodes").write
}

/// A method frame.
pub(crate) fn method(channel: u16, method: AMQPClass) -> AMQPFrame {
    AMQPFrame::Method(channel, method)
}

/// A connection method on channel 0.
pub(crate) fn connection_method(method: connection::AMQPMethod) -> AMQPFrame {
    AMQPFrame::Method(0, AMQPClass::Connection(method))
}

/// `connection.start-ok` with PLAIN credentials.
pub(crate) fn start_ok(user: &str, password: &str) -> AMQPFrame {
    start_ok_with("PLAIN", format!("\0{user}\0{password}").into_bytes())
}

/// `connection.start-ok` with any mechanism and response.
pub(crate) fn start_ok_with(mechanism: &str, response: Vec<u8>) -> AMQPFrame {
    connection_method(connection::AMQPMethod::StartOk(connection::StartOk {
        client_properties: FieldTable::default(),
        mechanism: mechanism.into(),
        response: LongString::from(response),
        locale: "en_US".into(),
    }))
}

/// `connection.tune-ok`.
pub(crate) fn tune_ok(channel_max: u16, frame_max: u32, heartbeat: u16) -> AMQPFrame {
    connection_method(connection::AMQPMethod::TuneOk(connection::TuneOk { channel_max, frame_max, heartbeat }))
}

/// `connection.open` of `vhost`.
pub(crate) fn open_vhost(vhost: &str) -> AMQPFrame {
    connection_method(connection::AMQPMethod::Open(connection::Open { virtual_host: vhost.into() }))
}

/// start-ok as guest, then `tune_ok`, then open of `/`.
pub(crate) fn handshake(tune_ok: AMQPFrame) -> [AMQPFrame; 3] {
    [start_ok("guest", "guest"), tune_ok, open_vhost("/")]
}

/// `channel.open` on `id`.
pub(crate) fn channel_open(id: u16) -> AMQPFrame {
    method(id, AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {})))
}

/// `channel.close` on `id`, as a client closing normally.
pub(crate) fn channel_close(id: u16) -> AMQPFrame {
    let close = channel::Close { reply_code: 200, reply_text: "OK".into(), class_id: 0, method_id: 0 };
    method(id, AMQPClass::Channel(channel::AMQPMethod::Close(close)))
}

/// `channel.close-ok` on `id`.
pub(crate) fn channel_close_ok(id: u16) -> AMQPFrame {
    method(id, AMQPClass::Channel(channel::AMQPMethod::CloseOk(channel::CloseOk {})))
}

/// A content header frame of class basic.
pub(crate) fn content_header(channel: u16, body_size: u64, properties: basic::AMQPProperties) -> AMQPFrame {
    AMQPFrame::Header(channel, AMQPContentHeader { class_id: crate::frame::BASIC_CLASS_ID, body_size, properties })
}

/// A content body frame.
pub(crate) fn content_body(channel: u16, bytes: &[u8]) -> AMQPFrame {
    AMQPFrame::Body(channel, bytes.to_vec())
}

/// `basic.publish` to `exchange` with `routing_key`, its header and one body frame (none if
/// `body` is empty), without properties.
pub(crate) fn publish(channel: u16, exchange: &str, routing_key: &str, body: &[u8]) -> Vec<AMQPFrame> {
    let publish = basic::Publish { exchange: exchange.into(), routing_key: routing_key.into(), ..Default::default() };
    publish_with(channel, publish, basic::AMQPProperties::default(), body)
}

/// A publish as `publish` says, with `properties`, its header and one body frame.
pub(crate) fn publish_with(
    channel: u16,
    publish: basic::Publish,
    properties: basic::AMQPProperties,
    body: &[u8],
) -> Vec<AMQPFrame> {
    let mut frames = vec![
        method(channel, AMQPClass::Basic(basic::AMQPMethod::Publish(publish))),
        content_header(channel, body.len() as u64, properties),
    ];
    if !body.is_empty() {
        frames.push(content_body(channel, body));
    }
    frames
}

/// What a `connection.close` or `channel.close` the broker sent says: its reply code and the
/// class and method it blames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Closing {
    pub(crate) code: u16,
    pub(crate) class_id: u16,
    pub(crate) method_id: u16,
}

/// The `connection.close` that `replies` consist of (fails if they are anything else).
pub(crate) fn connection_close(replies: &[AMQPFrame]) -> Closing {
    match replies {
        [AMQPFrame::Method(0, AMQPClass::Connection(connection::AMQPMethod::Close(close)))] => {
            Closing { code: close.reply_code, class_id: close.class_id, method_id: close.method_id }
        }
        other => panic!("expected a single connection.close, got {other:?}"),
    }
}

/// The `channel.close` on channel `id` that `replies` consist of (fails if they are anything
/// else).
pub(crate) fn channel_close_of(replies: &[AMQPFrame], id: u16) -> Closing {
    match replies {
        [AMQPFrame::Method(on, AMQPClass::Channel(channel::AMQPMethod::Close(close)))] if *on == id => {
            Closing { code: close.reply_code, class_id: close.class_id, method_id: close.method_id }
        }
        other => panic!("expected a single channel.close on channel {id}, got {other:?}"),
    }
}
