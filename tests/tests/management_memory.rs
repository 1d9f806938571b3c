//! The management API's largest answers, asked for by clients that never read them: the real
//! binary's resident memory must not grow with what it would send (issue #28, item 5). The
//! clients' sockets take almost nothing into their kernel buffers (a 4 KiB receive buffer),
//! so a broker that built each answer whole would hold every one of them. Small scale here;
//! the closing note of #28 gives the figures at the scale.

use futures_util::SinkExt;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::BasicProperties;
use serde_json::json;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use warren_tests::process::WarrenProcess;

const MIB: u64 = 1024 * 1024;
/// Clients that ask and never read, per route.
const SILENT_CLIENTS: usize = 40;
/// What the broker may grow by while they wait: one chunk or one bounded answer each, socket
/// buffers, allocator slack. Building the answers whole takes several times more.
const ALLOWED_GROWTH_BYTES: u64 = 120 * MIB;
/// Time for the broker to do whatever the requests make it do.
const SETTLE: Duration = Duration::from_secs(3);
/// Queues, so that `/metrics/per-object` is megabytes long.
const QUEUES: usize = 10_000;
/// Messages of a mebibyte of control bytes each (six times longer as JSON).
const BIG_MESSAGES: usize = 24;
/// The Basic credentials of guest.
const GUEST: &str = "Z3Vlc3Q6Z3Vlc3Q=";

/// A socket that takes almost nothing from the network until it is read.
async fn silent_socket(to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("small receive buffer");
    socket.connect(to).await.expect("connect")
}

/// Sends `request` from [`SILENT_CLIENTS`] sockets that never read; the sockets.
async fn ask_and_never_read(to: SocketAddr, request: &str) -> Vec<TcpStream> {
    let mut sockets = Vec::new();
    for _ in 0..SILENT_CLIENTS {
        let mut socket = silent_socket(to).await;
        socket.write_all(request.as_bytes()).await.expect("request");
        sockets.push(socket);
    }
    sockets
}

/// How much `broker` grew while `attack` held its sockets open.
async fn growth_under<T>(broker: &WarrenProcess, attack: impl std::future::Future<Output = T>) -> (u64, T) {
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = broker.rss_bytes();
    let held = attack.await;
    tokio::time::sleep(SETTLE).await;
    (broker.rss_bytes().saturating_sub(before), held)
}

async fn setup(broker: &WarrenProcess) -> lapin::Connection {
    let connection = lapin::Connection::connect(&broker.uri(), Default::default()).await.expect("connect");
    let channel = connection.create_channel().await.expect("channel");
    let nowait = QueueDeclareOptions { nowait: true, ..Default::default() };
    for i in 0..QUEUES {
        channel.queue_declare(format!("q{i}").into(), nowait, FieldTable::default()).await.expect("declare");
    }
    let mut stream = FieldTable::default();
    stream.insert("x-queue-type".into(), AMQPValue::LongString("stream".into()));
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    channel.queue_declare("big".into(), durable, stream).await.expect("stream");
    channel.confirm_select(ConfirmSelectOptions::default()).await.expect("confirms");
    let control_bytes = vec![1u8; MIB as usize];
    for _ in 0..BIG_MESSAGES {
        let options = BasicPublishOptions::default();
        let published =
            channel.basic_publish("".into(), "big".into(), options, &control_bytes, BasicProperties::default());
        assert!(published.await.expect("publish").await.expect("confirm").is_ack());
    }
    connection
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_never_read_the_largest_answers_do_not_grow_the_broker() {
    let data = tempfile::tempdir().expect("data directory");
    let broker = WarrenProcess::start(data.path(), &[]);
    let http = broker.http_addr.expect("the management API runs");
    let _connection = setup(&broker).await;

    let metrics = "GET /metrics/per-object HTTP/1.1\r\nHost: x\r\n\r\n";
    let (metrics_growth, _held) = growth_under(&broker, ask_and_never_read(http, metrics)).await;
    let replay = format!(
        "GET /api/queues/%2F/big/messages?count=1000&max_bytes=100000000&truncate=100000000 HTTP/1.1\r\n\
         Host: x\r\nAuthorization: Basic {GUEST}\r\n\r\n"
    );
    let (replay_growth, _held) = growth_under(&broker, ask_and_never_read(http, &replay)).await;
    let (feed_growth, _held) = growth_under(&broker, browse_and_never_read(http)).await;
    eprintln!(
        "growth with {SILENT_CLIENTS} clients that never read: /metrics/per-object ({QUEUES} queues) {} MiB, \
         replay of {BIG_MESSAGES} MiB of control bytes {} MiB, WebSocket browse {} MiB",
        metrics_growth / MIB,
        replay_growth / MIB,
        feed_growth / MIB
    );
    assert!(metrics_growth < ALLOWED_GROWTH_BYTES, "/metrics/per-object: {} MiB", metrics_growth / MIB);
    assert!(replay_growth < ALLOWED_GROWTH_BYTES, "replay: {} MiB", replay_growth / MIB);
    assert!(feed_growth < ALLOWED_GROWTH_BYTES, "browse over the feed: {} MiB", feed_growth / MIB);
}

/// Opens [`SILENT_CLIENTS`] live feeds that each ask to browse the big stream and never read.
async fn browse_and_never_read(http: SocketAddr) -> Vec<tokio_tungstenite::WebSocketStream<TcpStream>> {
    let mut feeds = Vec::new();
    for _ in 0..SILENT_CLIENTS {
        let mut request = format!("ws://{http}/ws").into_client_request().expect("request");
        request.headers_mut().insert("authorization", format!("Basic {GUEST}").parse().expect("header"));
        let socket = silent_socket(http).await;
        let (mut feed, _) = tokio_tungstenite::client_async(request, socket).await.expect("feed opens");
        let browse = json!({"type": "browse", "id": 1, "vhost": "/", "queue": "big", "offset": "first",
                            "count": 1000, "max_bytes": 100_000_000, "truncate": 100_000_000});
        feed.send(Message::Text(browse.to_string().into())).await.expect("browse");
        feeds.push(feed);
    }
    feeds
}
