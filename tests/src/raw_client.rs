//! A bare AMQP client over a TCP socket, for tests that must send what no real client sends
//! (garbage, truncated or oversized frames, methods out of order) and see the exact reply.

use amq_protocol::frame::{gen_frame, parse_frame, AMQPFrame, WriteContext};
use amq_protocol::protocol::{channel, connection, queue, AMQPClass};
use amq_protocol::types::{FieldTable, LongString};
use bytes::BytesMut;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a test waits for the broker's next frame.
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// The AMQP 0-9-1 protocol header.
pub const PROTOCOL_HEADER: &[u8] = b"AMQP\x00\x00\x09\x01";

/// One frame's bytes.
pub fn encode(frame: &AMQPFrame) -> Vec<u8> {
    gen_frame(frame)(WriteContext::from(Vec::new())).expect("encode frame").write
}

/// A raw AMQP connection.
pub struct RawClient {
    stream: TcpStream,
    buf: BytesMut,
}

/// What the broker did next.
#[derive(Debug, PartialEq)]
pub enum Next {
    /// It sent a frame.
    Frame(Box<AMQPFrame>),
    /// It closed the socket.
    Closed,
    /// Nothing arrived in time.
    Silent,
}

impl RawClient {
    /// Opens a TCP connection.
    pub async fn connect(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect(addr).await.expect("tcp connect");
        RawClient { stream, buf: BytesMut::new() }
    }

    /// Opens a TCP connection from `local` (an address such as 127.0.0.2, port 0): a client
    /// at another address than the tests' usual 127.0.0.1.
    pub async fn connect_from(local: std::net::IpAddr, addr: SocketAddr) -> Self {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket.bind(SocketAddr::new(local, 0)).expect("bind the local address");
        let stream = socket.connect(addr).await.expect("tcp connect");
        RawClient { stream, buf: BytesMut::new() }
    }

    /// Sends the protocol header and a PLAIN start-ok for `user`/`password`; the method the
    /// broker answers (`connection.tune`, or the `connection.close` of a refused login).
    pub async fn log_in(&mut self, user: &str, password: &str) -> AMQPClass {
        self.send(PROTOCOL_HEADER).await;
        self.expect_method().await;
        let start_ok = connection::StartOk {
            client_properties: FieldTable::default(),
            mechanism: "PLAIN".into(),
            response: LongString::from(format!("\0{user}\0{password}").into_bytes()),
            locale: "en_US".into(),
        };
        self.send_method(0, AMQPClass::Connection(connection::AMQPMethod::StartOk(start_ok))).await;
        self.expect_method().await.1
    }

    /// Writes bytes as they are.
    pub async fn send(&mut self, bytes: &[u8]) {
        // The broker may already have hung up; tests look at what it sent, not at this.
        let _ = self.stream.write_all(bytes).await;
    }

    /// Encodes and writes one frame.
    pub async fn send_frame(&mut self, frame: AMQPFrame) {
        self.send(&encode(&frame)).await;
    }

    /// Encodes `frames` and writes them with one write, so that the broker reads them together.
    pub async fn send_together(&mut self, frames: &[AMQPFrame]) {
        let bytes: Vec<u8> = frames.iter().flat_map(encode).collect();
        self.send(&bytes).await;
    }

    /// Writes one frame of type `kind` around `payload`, which is sent as it is: for
    /// payloads no encoder would produce.
    pub async fn send_raw_frame(&mut self, kind: u8, channel: u16, payload: &[u8]) {
        let mut frame = Vec::with_capacity(payload.len() + 8);
        frame.push(kind);
        frame.extend_from_slice(&channel.to_be_bytes());
        frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        frame.extend_from_slice(payload);
        frame.push(0xCE);
        self.send(&frame).await;
    }

    /// Writes a method frame.
    pub async fn send_method(&mut self, channel: u16, method: AMQPClass) {
        self.send_frame(AMQPFrame::Method(channel, method)).await;
    }

    /// Reads raw bytes until the socket closes or nothing arrives for a while.
    pub async fn read_raw(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut chunk = [0u8; 1024];
        while let Ok(Ok(n)) = tokio::time::timeout(REPLY_TIMEOUT, self.stream.read(&mut chunk)).await {
            if n == 0 {
                break;
            }
            out.extend_from_slice(&chunk[..n]);
        }
        out
    }

    /// The broker's next frame, heartbeats skipped.
    pub async fn next(&mut self) -> Next {
        loop {
            if let Ok((rest, frame)) = parse_frame(&self.buf[..]) {
                let used = self.buf.len() - rest.len();
                let _ = self.buf.split_to(used);
                if frame == AMQPFrame::Heartbeat {
                    continue;
                }
                return Next::Frame(Box::new(frame));
            }
            match tokio::time::timeout(REPLY_TIMEOUT, self.stream.read_buf(&mut self.buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return Next::Closed,
                Ok(Ok(_)) => {}
                Err(_) => return Next::Silent,
            }
        }
    }

    /// The broker's next frame as (type, channel, payload), undecoded.
    pub async fn next_raw_frame(&mut self) -> Option<(u8, u16, Vec<u8>)> {
        loop {
            if self.buf.len() >= 7 {
                let size = u32::from_be_bytes([self.buf[3], self.buf[4], self.buf[5], self.buf[6]]) as usize;
                if self.buf.len() >= size + 8 {
                    let frame = self.buf.split_to(size + 8);
                    return Some((frame[0], u16::from_be_bytes([frame[1], frame[2]]), frame[7..7 + size].to_vec()));
                }
            }
            match tokio::time::timeout(REPLY_TIMEOUT, self.stream.read_buf(&mut self.buf)).await {
                Ok(Ok(n)) if n > 0 => {}
                _ => return None,
            }
        }
    }

    /// The next method frame, or a panic naming what came instead.
    pub async fn expect_method(&mut self) -> (u16, AMQPClass) {
        match self.next().await {
            Next::Frame(frame) => match *frame {
                AMQPFrame::Method(channel, method) => (channel, method),
                other => panic!("expected a method frame, got {other:?}"),
            },
            other => panic!("expected a method frame, got {other:?}"),
        }
    }

    /// Waits for `connection.close` and returns its reply code, class and method ids.
    pub async fn expect_connection_close(&mut self) -> (u16, u16, u16) {
        loop {
            match self.next().await {
                Next::Frame(frame) => {
                    if let AMQPFrame::Method(0, AMQPClass::Connection(connection::AMQPMethod::Close(close))) = *frame {
                        return (close.reply_code, close.class_id, close.method_id);
                    }
                }
                other => panic!("expected connection.close, got {other:?}"),
            }
        }
    }

    /// Waits for `channel.close` on `channel` and returns its reply code.
    pub async fn expect_channel_close(&mut self, id: u16) -> u16 {
        loop {
            match self.next().await {
                Next::Frame(frame) => {
                    if let AMQPFrame::Method(ch, AMQPClass::Channel(channel::AMQPMethod::Close(close))) = *frame {
                        if ch == id {
                            return close.reply_code;
                        }
                    }
                }
                other => panic!("expected channel.close on {id}, got {other:?}"),
            }
        }
    }

    /// Header, start-ok (PLAIN guest/guest), tune-ok with the broker's values, open "/".
    pub async fn handshake(addr: SocketAddr) -> Self {
        let mut client = Self::connect(addr).await;
        client.send(PROTOCOL_HEADER).await;
        client.expect_method().await;
        let start_ok = connection::StartOk {
            client_properties: FieldTable::default(),
            mechanism: "PLAIN".into(),
            response: LongString::from(&b"\0guest\0guest"[..]),
            locale: "en_US".into(),
        };
        client.send_method(0, AMQPClass::Connection(connection::AMQPMethod::StartOk(start_ok))).await;
        let (_, tune) = client.expect_method().await;
        let AMQPClass::Connection(connection::AMQPMethod::Tune(tune)) = tune else {
            panic!("expected tune, got {tune:?}")
        };
        let tune_ok = connection::TuneOk { channel_max: tune.channel_max, frame_max: tune.frame_max, heartbeat: 0 };
        client.send_method(0, AMQPClass::Connection(connection::AMQPMethod::TuneOk(tune_ok))).await;
        let open = connection::Open { virtual_host: "/".into() };
        client.send_method(0, AMQPClass::Connection(connection::AMQPMethod::Open(open))).await;
        let (_, open_ok) = client.expect_method().await;
        assert!(matches!(open_ok, AMQPClass::Connection(connection::AMQPMethod::OpenOk(_))), "{open_ok:?}");
        client
    }

    /// Opens a channel and waits for open-ok.
    pub async fn open_channel(&mut self, id: u16) {
        self.send_method(id, AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {}))).await;
        let (ch, ok) = self.expect_method().await;
        assert_eq!(ch, id);
        assert!(matches!(ok, AMQPClass::Channel(channel::AMQPMethod::OpenOk(_))), "{ok:?}");
    }

    /// Declares queue `name` (durable if `durable`, no arguments) on channel `id` and waits
    /// for declare-ok.
    pub async fn declare_queue(&mut self, id: u16, name: &str, durable: bool) {
        let declare = queue::Declare {
            queue: name.into(),
            passive: false,
            durable,
            exclusive: false,
            auto_delete: false,
            nowait: false,
            arguments: FieldTable::default(),
        };
        self.send_method(id, AMQPClass::Queue(queue::AMQPMethod::Declare(declare))).await;
        let (_, ok) = self.expect_method().await;
        assert!(matches!(ok, AMQPClass::Queue(queue::AMQPMethod::DeclareOk(_))), "{ok:?}");
    }
}
