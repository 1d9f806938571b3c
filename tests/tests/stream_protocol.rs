//! RabbitMQ's Stream protocol end to end: a client speaking the protocol's frames (written
//! here from its reference, independently of the broker's codec), messages built and read
//! with RabbitMQ's own AMQP 1.0 codec (the `rabbitmq-stream-protocol` crate), and lapin on
//! the same streams over 0-9-1.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures_util::StreamExt;
use lapin::options::{BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::BasicProperties;
use rabbitmq_stream_protocol::codec::{Decoder, Encoder};
use rabbitmq_stream_protocol::message::Message as AmqpMessage;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use warren_tests::{connect, start_broker};

const TIMEOUT: Duration = Duration::from_secs(10);
const OK: u16 = 1;
const NO_OFFSET: u16 = 0x13;
const FRAME_TOO_LARGE: u16 = 0x0e;
const UNKNOWN_FRAME: u16 = 0x0d;

/// One frame's content: key, version, then the fields.
fn frame(key: u16, version: u16, fields: impl FnOnce(&mut BytesMut)) -> Bytes {
    let mut content = BytesMut::new();
    content.put_u16(key);
    content.put_u16(version);
    fields(&mut content);
    let mut out = BytesMut::new();
    out.put_u32(content.len() as u32);
    out.put_slice(&content);
    out.freeze()
}

fn put_str(out: &mut BytesMut, text: &str) {
    out.put_i16(text.len() as i16);
    out.put_slice(text.as_bytes());
}

fn read_str(frame: &mut Bytes) -> String {
    let len = frame.get_i16() as usize;
    String::from_utf8(frame.split_to(len).to_vec()).expect("utf-8")
}

/// A bare client: frames out, frames in, and the handshake.
struct Client {
    socket: TcpStream,
    buffer: BytesMut,
    correlation: u32,
}

impl Client {
    async fn open(addr: SocketAddr) -> Client {
        let socket = TcpStream::connect(addr).await.expect("connects");
        let mut client = Client { socket, buffer: BytesMut::new(), correlation: 0 };
        let id = client.next_id();
        client
            .send(frame(0x11, 1, |o| {
                o.put_u32(id);
                o.put_i32(1);
                put_str(o, "product");
                put_str(o, "warren-tests");
            }))
            .await;
        assert_eq!(client.response(0x8011).await.1, OK, "peer properties");
        let id = client.next_id();
        client.send(frame(0x12, 1, |o| o.put_u32(id))).await;
        let (_, code, mut mechanisms) = client.response(0x8012).await;
        assert_eq!(code, OK);
        assert_eq!(mechanisms.get_i32(), 1);
        assert_eq!(read_str(&mut mechanisms), "PLAIN");
        let id = client.next_id();
        client
            .send(frame(0x13, 1, |o| {
                o.put_u32(id);
                put_str(o, "PLAIN");
                o.put_i32(12);
                o.put_slice(b"\0guest\0guest");
            }))
            .await;
        assert_eq!(client.response(0x8013).await.1, OK, "authenticated");
        let mut tune = client.next_frame().await;
        assert_eq!((tune.get_u16(), tune.get_u16()), (0x14, 1), "the server tunes");
        let (frame_max, heartbeat) = (tune.get_u32(), tune.get_u32());
        assert!(frame_max >= 65_536, "{frame_max}");
        client
            .send(frame(0x14, 1, |o| {
                o.put_u32(frame_max);
                o.put_u32(heartbeat);
            }))
            .await;
        let id = client.next_id();
        client
            .send(frame(0x15, 1, |o| {
                o.put_u32(id);
                put_str(o, "/");
            }))
            .await;
        assert_eq!(client.response(0x8015).await.1, OK, "opened");
        client
    }

    fn next_id(&mut self) -> u32 {
        self.correlation += 1;
        self.correlation
    }

    async fn send(&mut self, frame: Bytes) {
        self.socket.write_all(&frame).await.expect("sent");
    }

    /// The next frame's content, or None once the broker closed the socket.
    async fn try_next_frame(&mut self) -> Option<Bytes> {
        loop {
            if self.buffer.len() >= 4 {
                let size = u32::from_be_bytes(self.buffer[..4].try_into().expect("4 bytes")) as usize;
                if self.buffer.len() >= 4 + size {
                    self.buffer.advance(4);
                    return Some(self.buffer.split_to(size).freeze());
                }
            }
            let read = tokio::time::timeout(TIMEOUT, self.socket.read_buf(&mut self.buffer)).await;
            match read.expect("the broker answers in time") {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    }

    async fn next_frame(&mut self) -> Bytes {
        self.try_next_frame().await.expect("a frame")
    }

    /// The next frame with `key`, skipping others (heartbeats, deliveries not waited for):
    /// its correlation id, code and the rest.
    async fn response(&mut self, key: u16) -> (u32, u16, Bytes) {
        loop {
            let mut frame = self.next_frame().await;
            if frame.get_u16() == key {
                frame.get_u16();
                let correlation = frame.get_u32();
                return (correlation, frame.get_u16(), frame);
            }
        }
    }

    async fn request(&mut self, key: u16, fields: impl FnOnce(&mut BytesMut)) -> (u16, Bytes) {
        let id = self.next_id();
        self.send(frame(key, 1, |o| {
            o.put_u32(id);
            fields(o);
        }))
        .await;
        let (correlation, code, rest) = self.response(key | 0x8000).await;
        assert_eq!(correlation, id);
        (code, rest)
    }

    async fn create(&mut self, stream: &str) -> u16 {
        self.request(0x0d, |o| {
            put_str(o, stream);
            o.put_i32(1);
            put_str(o, "max-length-bytes");
            put_str(o, "100000000");
        })
        .await
        .0
    }

    async fn declare_publisher(&mut self, id: u8, reference: &str, stream: &str) -> u16 {
        self.request(0x01, |o| {
            o.put_u8(id);
            put_str(o, reference);
            put_str(o, stream);
        })
        .await
        .0
    }

    /// Publishes `messages` (publishing id, AMQP 1.0 message) and returns the confirmed ids.
    async fn publish(&mut self, publisher: u8, messages: &[(u64, AmqpMessage)]) -> Vec<u64> {
        self.send(frame(0x02, 1, |o| {
            o.put_u8(publisher);
            o.put_i32(messages.len() as i32);
            for (id, message) in messages {
                let mut encoded = Vec::new();
                message.encode(&mut encoded).expect("encodes");
                o.put_u64(*id);
                o.put_i32(encoded.len() as i32);
                o.put_slice(&encoded);
            }
        }))
        .await;
        let mut confirmed = Vec::new();
        while confirmed.len() < messages.len() {
            let mut frame = self.next_frame().await;
            let key = frame.get_u16();
            assert_ne!(key, 0x04, "a publish error");
            if key == 0x03 {
                frame.get_u16();
                assert_eq!(frame.get_u8(), publisher);
                let count = frame.get_i32();
                confirmed.extend((0..count).map(|_| frame.get_u64()));
            }
        }
        confirmed
    }

    /// Subscribes from offset `first` with one credit; the messages of the first chunk, with
    /// their offsets.
    async fn read_from(&mut self, subscription: u8, stream: &str, first: u64) -> Vec<(u64, AmqpMessage)> {
        let (code, _) = self
            .request(0x07, |o| {
                o.put_u8(subscription);
                put_str(o, stream);
                o.put_u16(4);
                o.put_u64(first);
                o.put_u16(1);
                o.put_i32(0);
            })
            .await;
        assert_eq!(code, OK, "subscribed");
        loop {
            let mut frame = self.next_frame().await;
            if frame.get_u16() != 0x08 {
                continue;
            }
            let version = frame.get_u16();
            assert_eq!(frame.get_u8(), subscription);
            if version >= 2 {
                frame.get_u64();
            }
            return chunk_messages(frame);
        }
    }
}

/// The messages of an Osiris chunk, checked against its header.
fn chunk_messages(mut chunk: Bytes) -> Vec<(u64, AmqpMessage)> {
    assert_eq!(chunk.get_u8(), 0x50, "magic and version");
    assert_eq!(chunk.get_u8(), 0, "a user chunk");
    let entries = chunk.get_u16();
    assert_eq!(chunk.get_u32(), u32::from(entries), "one record an entry");
    chunk.get_i64();
    chunk.get_u64();
    let first_offset = chunk.get_u64();
    let crc = chunk.get_u32();
    let data_length = chunk.get_u32() as usize;
    chunk.advance(8); // trailer length, bloom size, reserved
    assert_eq!(chunk.len(), data_length);
    assert_eq!(crc32(&chunk), crc, "the chunk's CRC");
    (0..u64::from(entries))
        .map(|index| {
            let size = chunk.get_u32() as usize;
            let (rest, message) = AmqpMessage::decode(&chunk[..size]).expect("RabbitMQ's codec reads it");
            assert!(rest.is_empty());
            chunk.advance(size);
            (first_offset + index, message)
        })
        .collect()
}

/// CRC-32 (IEEE), bit by bit: the test checks the broker's, so it has its own.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for byte in data {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

fn body(message: &AmqpMessage) -> Vec<u8> {
    message.data().map(<[u8]>::to_vec).unwrap_or_default()
}

fn stream_addr(broker: &warren_tests::TestBroker) -> SocketAddr {
    broker.stream_addr.expect("the stream listener runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_client_publishes_with_confirms_and_without_duplicates_and_reads_back() {
    let broker = start_broker().await;
    let mut client = Client::open(stream_addr(&broker)).await;
    assert_eq!(client.create("events").await, OK);
    assert_eq!(client.create("events").await, 0x05, "stream already exists");
    assert_eq!(client.declare_publisher(7, "app-1", "events").await, OK);
    let message = |text: &str| AmqpMessage::builder().body(text.as_bytes().to_vec()).build();
    let sent = [(1, message("one")), (2, message("two")), (2, message("two again")), (3, message("three"))];
    let mut confirmed = client.publish(7, &sent).await;
    confirmed.sort_unstable();
    assert_eq!(confirmed, [1, 2, 2, 3], "a duplicate is confirmed too");

    // The management API lists the connection and its publisher, as RabbitMQ's stream plugin.
    let api = warren_tests::http::Api::new(broker.http_addr.expect("the management API runs"));
    let publishers = tokio::task::block_in_place(|| api.get("/api/stream/publishers/%2F/events"));
    assert_eq!(publishers.status, 200);
    assert_eq!(publishers.body[0]["reference"], "app-1", "{:?}", publishers.body);
    assert_eq!(publishers.body[0]["publisher_id"], 7);
    let connections = tokio::task::block_in_place(|| api.get("/api/stream/connections"));
    assert_eq!(connections.body.as_array().map(Vec::len), Some(1), "{:?}", connections.body);
    assert_eq!(connections.body[0]["protocol"], "stream");

    let read = client.read_from(1, "events", 0).await;
    let bodies: Vec<Vec<u8>> = read.iter().map(|(_, m)| body(m)).collect();
    assert_eq!(bodies, [b"one".to_vec(), b"two".to_vec(), b"three".to_vec()], "the duplicate was not stored");
    assert_eq!(read.iter().map(|(offset, _)| *offset).collect::<Vec<_>>(), [0, 1, 2]);

    // A producer that comes back asks where it was and carries on without duplicates.
    let mut again = Client::open(stream_addr(&broker)).await;
    let (code, mut sequence) = again
        .request(0x05, |o| {
            put_str(o, "app-1");
            put_str(o, "events");
        })
        .await;
    assert_eq!((code, sequence.get_u64()), (OK, 3));
    assert_eq!(again.declare_publisher(1, "app-1", "events").await, OK);
    assert_eq!(again.publish(1, &[(3, message("three, resent")), (4, message("four"))]).await.len(), 2);
    let read = again.read_from(1, "events", 3).await;
    assert_eq!(read.iter().map(|(_, m)| body(m)).collect::<Vec<_>>(), [b"four".to_vec()]);
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_are_shared_with_091_clients_both_ways() {
    let broker = start_broker().await;
    let amqp = connect(&broker).await;
    let channel = amqp.create_channel().await.expect("channel");
    let mut arguments = FieldTable::default();
    arguments.insert("x-queue-type".into(), AMQPValue::LongString(LongString::from("stream")));
    let durable = QueueDeclareOptions { durable: true, ..QueueDeclareOptions::default() };
    channel.queue_declare("shared".into(), durable, arguments).await.expect("a stream over 0-9-1");
    let mut headers = FieldTable::default();
    headers.insert("region".into(), AMQPValue::LongString(LongString::from("eu")));
    let properties =
        BasicProperties::default().with_content_type("text/plain".into()).with_headers(headers).with_delivery_mode(2);
    let confirm = channel
        .basic_publish("".into(), "shared".into(), BasicPublishOptions::default(), b"from 0-9-1", properties)
        .await
        .expect("published");
    drop(confirm);

    let mut client = Client::open(stream_addr(&broker)).await;
    assert_eq!(client.declare_publisher(1, "", "shared").await, OK);
    let from_stream = AmqpMessage::builder()
        .body(b"from the stream protocol".to_vec())
        .application_properties()
        .insert("region", "us")
        .message_builder()
        .build();
    assert_eq!(client.publish(1, &[(1, from_stream)]).await, [1]);
    let read = client.read_from(1, "shared", 0).await;
    assert_eq!(read.len(), 2, "both messages, in order");
    assert_eq!(body(&read[0].1), b"from 0-9-1");
    let properties = read[0].1.properties().expect("0-9-1 properties as AMQP 1.0 properties");
    assert_eq!(properties.content_type.as_ref().map(|s| s.to_string()).as_deref(), Some("text/plain"));
    let region = read[0].1.application_properties().and_then(|p| p.get("region")).map(|v| format!("{v:?}"));
    assert!(region.as_ref().is_some_and(|v| v.contains("eu")), "headers as application properties: {region:?}");
    assert_eq!(body(&read[1].1), b"from the stream protocol");

    // And a 0-9-1 consumer reads the stream-published message with its application
    // properties as headers.
    channel.basic_qos(10, BasicQosOptions::default()).await.expect("qos");
    let mut offset = FieldTable::default();
    offset.insert("x-stream-offset".into(), AMQPValue::LongString(LongString::from("first")));
    let mut consumer = channel
        .basic_consume("shared".into(), "reader".into(), BasicConsumeOptions::default(), offset)
        .await
        .expect("consumes");
    let mut bodies = Vec::new();
    let mut region = None;
    while bodies.len() < 2 {
        let delivery =
            tokio::time::timeout(TIMEOUT, consumer.next()).await.expect("in time").expect("open").expect("ok");
        if delivery.data == b"from the stream protocol" {
            region = delivery.properties.headers().as_ref().and_then(|h| h.inner().get("region").cloned());
        }
        bodies.push(delivery.data.clone());
        delivery.ack(Default::default()).await.expect("acked");
    }
    assert_eq!(bodies[1], b"from the stream protocol");
    assert_eq!(region, Some(AMQPValue::LongString(LongString::from("us"))));
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_are_stored_on_the_server() {
    let broker = start_broker().await;
    let mut client = Client::open(stream_addr(&broker)).await;
    assert_eq!(client.create("tracked").await, OK);
    let query = |reference: &'static str| {
        move |o: &mut BytesMut| {
            put_str(o, reference);
            put_str(o, "tracked");
        }
    };
    assert_eq!(client.request(0x0b, query("reader")).await.0, NO_OFFSET, "nothing stored yet");
    client
        .send(frame(0x0a, 1, |o| {
            put_str(o, "reader");
            put_str(o, "tracked");
            o.put_u64(41);
        }))
        .await;
    // StoreOffset has no answer: the query after it sees it.
    let (code, mut offset) = client.request(0x0b, query("reader")).await;
    assert_eq!((code, offset.get_u64()), (OK, 41));
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_frames_close_the_connection_with_the_protocols_codes_and_nothing_else() {
    let broker = start_broker().await;
    // Over the frame limit: refused from its size alone.
    let mut client = Client::open(stream_addr(&broker)).await;
    client.send(Bytes::from_static(&[0x7f, 0xff, 0xff, 0xff, 0, 2])).await;
    let (_, code, _) = client.response(0x16).await;
    assert_eq!(code, FRAME_TOO_LARGE);
    assert!(client.try_next_frame().await.is_none(), "then closed");

    // A key no command has, and every cut of a valid Publish.
    let mut client = Client::open(stream_addr(&broker)).await;
    client.send(frame(0x7abc, 1, |_| {})).await;
    assert_eq!(client.response(0x16).await.1, UNKNOWN_FRAME);
    let publish = frame(0x02, 1, |o| {
        o.put_u8(0);
        o.put_i32(1);
        o.put_u64(1);
        o.put_i32(5);
        o.put_slice(b"hello");
    });
    for cut in 4..publish.len() - 1 {
        let mut client = Client::open(stream_addr(&broker)).await;
        let mut truncated = BytesMut::from(&publish[4..cut]);
        let mut framed = BytesMut::new();
        framed.put_u32(truncated.len() as u32);
        framed.put_slice(&truncated.split());
        client.send(framed.freeze()).await;
        let closed = client.response(0x16).await;
        assert_eq!(closed.1, UNKNOWN_FRAME, "cut at {cut}");
    }
    // The broker serves on.
    let mut client = Client::open(stream_addr(&broker)).await;
    assert_eq!(client.create("after").await, OK);
    broker.shutdown().await;
}
