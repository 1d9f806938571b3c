//! Attacks on the management plane, as issue #28 tried them, shared by the tests (at a small
//! scale) and `warren-siege` (at the issue's): clients that ask for the largest answers and
//! never read them, idle sockets held on the HTTP port, and the figures they are judged by
//! (a process's resident memory, AMQP connect times).

use futures_util::SinkExt;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::BasicProperties;
use serde_json::json;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

/// Bytes in a mebibyte.
pub const MIB: u64 = 1024 * 1024;
/// The Basic credentials of guest.
pub const GUEST_BASIC: &str = "Z3Vlc3Q6Z3Vlc3Q=";
/// The stream of big messages the replay attacks read.
pub const BIG_STREAM: &str = "big";
/// A client's receive buffer: small, so the kernel takes almost nothing of what is sent to a
/// client that does not read, and whatever the broker means to send stays in the broker.
const SILENT_RECEIVE_BUFFER_BYTES: u32 = 4096;

/// The resident memory of process `pid` (VmRSS), in bytes; 0 if it cannot be read.
pub fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
    kib.unwrap_or(0) * 1024
}

/// A socket to `to`, from loopback address `from` if given, with a tiny receive buffer.
pub async fn silent_socket(to: SocketAddr, from: Option<IpAddr>) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.set_recv_buffer_size(SILENT_RECEIVE_BUFFER_BYTES)?;
    if let Some(from) = from {
        socket.bind(SocketAddr::new(from, 0))?;
    }
    socket.connect(to).await
}

/// Sends `request` from `clients` sockets that never read; the sockets, to hold.
pub async fn ask_and_never_read(to: SocketAddr, request: &str, clients: usize) -> Vec<TcpStream> {
    let mut sockets = Vec::new();
    for _ in 0..clients {
        if let Ok(mut socket) = silent_socket(to, None).await {
            if socket.write_all(request.as_bytes()).await.is_ok() {
                sockets.push(socket);
            }
        }
    }
    sockets
}

/// `GET /metrics/per-object`, which has a series per queue.
pub fn per_object_metrics_request() -> String {
    "GET /metrics/per-object HTTP/1.1\r\nHost: x\r\n\r\n".to_string()
}

/// A replay of [`BIG_STREAM`] asking for as much as the query string allows.
pub fn greedy_replay_request() -> String {
    format!(
        "GET /api/queues/%2F/{BIG_STREAM}/messages?count=1000&max_bytes=100000000&truncate=100000000 HTTP/1.1\r\n\
         Host: x\r\nAuthorization: Basic {GUEST_BASIC}\r\n\r\n"
    )
}

/// A live feed, opened as guest.
pub type Feed = tokio_tungstenite::WebSocketStream<TcpStream>;

/// Opens `clients` live feeds that each ask to browse [`BIG_STREAM`] greedily and never read.
pub async fn browse_and_never_read(http: SocketAddr, clients: usize) -> Vec<Feed> {
    let mut feeds = Vec::new();
    for _ in 0..clients {
        let Ok(mut request) = format!("ws://{http}/ws").into_client_request() else { continue };
        if let Ok(value) = format!("Basic {GUEST_BASIC}").parse() {
            request.headers_mut().insert("authorization", value);
        }
        let Ok(socket) = silent_socket(http, None).await else { continue };
        let Ok((mut feed, _)) = tokio_tungstenite::client_async(request, socket).await else { continue };
        let browse = json!({"type": "browse", "id": 1, "vhost": "/", "queue": BIG_STREAM, "offset": "first",
                            "count": 1000, "max_bytes": 100_000_000, "truncate": 100_000_000});
        if feed.send(Message::Text(browse.to_string().into())).await.is_ok() {
            feeds.push(feed);
        }
    }
    feeds
}

/// Declares `queues` transient queues `q0`, `q1`, ... on `uri`'s vhost, without waiting for
/// each answer.
pub async fn declare_queues(connection: &lapin::Connection, queues: usize) -> lapin::Result<()> {
    let channel = connection.create_channel().await?;
    let nowait = QueueDeclareOptions { nowait: true, ..Default::default() };
    for i in 0..queues {
        channel.queue_declare(format!("q{i}").into(), nowait, FieldTable::default()).await?;
    }
    // A round trip, so that every declare before it has been made.
    channel.queue_declare("q0".into(), QueueDeclareOptions::default(), FieldTable::default()).await?;
    Ok(())
}

/// Declares [`BIG_STREAM`] and publishes `messages` of a mebibyte of control bytes each (six
/// times as long in JSON), confirmed.
pub async fn fill_big_stream(connection: &lapin::Connection, messages: usize) -> lapin::Result<()> {
    let channel = connection.create_channel().await?;
    let mut stream = FieldTable::default();
    stream.insert("x-queue-type".into(), AMQPValue::LongString("stream".into()));
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    channel.queue_declare(BIG_STREAM.into(), durable, stream).await?;
    channel.confirm_select(ConfirmSelectOptions::default()).await?;
    let control_bytes = vec![1u8; MIB as usize];
    for _ in 0..messages {
        let options = BasicPublishOptions::default();
        channel
            .basic_publish("".into(), BIG_STREAM.into(), options, &control_bytes, BasicProperties::default())
            .await?
            .await?;
    }
    Ok(())
}

/// How long an AMQP client takes to connect and open a channel at `uri`, or `None` if it does
/// not within `within`.
pub async fn amqp_connect_time(uri: &str, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    let connected = tokio::time::timeout(within, async {
        let connection = lapin::Connection::connect(uri, Default::default()).await.ok()?;
        connection.create_channel().await.ok()?;
        let _ = connection.close(200, "done".into()).await;
        Some(())
    })
    .await;
    matches!(connected, Ok(Some(()))).then(|| started.elapsed())
}
