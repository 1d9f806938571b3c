//! The real `warren` binary stops gracefully on SIGTERM and SIGINT: a connected client gets
//! `connection.close` with 320 CONNECTION_FORCED, and the process exits with status 0.

use amq_protocol::frame::{gen_frame, parse_frame, AMQPFrame, WriteContext};
use amq_protocol::protocol::{connection, AMQPClass};
use amq_protocol::types::{FieldTable, LongString};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("free port")
}

fn start_warren(port: u16, data_dir: &std::path::Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_warren"))
        .args(["--amqp-listen", &format!("127.0.0.1:{port}"), "--data-dir"])
        .arg(data_dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn warren")
}

fn connect_when_ready(addr: SocketAddr) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match TcpStream::connect(addr) {
            Ok(stream) => return stream,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Err(error) => panic!("warren did not listen on {addr}: {error}"),
        }
    }
}

struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    fn send(&mut self, channel: u16, method: connection::AMQPMethod) {
        let frame = AMQPFrame::Method(channel, AMQPClass::Connection(method));
        let bytes = gen_frame(&frame)(WriteContext::from(Vec::new())).expect("encode").write;
        self.stream.write_all(&bytes).expect("write");
    }

    fn recv(&mut self) -> connection::AMQPMethod {
        loop {
            if let Ok((rest, frame)) = parse_frame(&self.buf[..]) {
                let used = self.buf.len() - rest.len();
                self.buf.drain(..used);
                match frame {
                    AMQPFrame::Method(0, AMQPClass::Connection(method)) => return method,
                    _ => continue,
                }
            }
            let mut chunk = [0u8; 4096];
            let n = self.stream.read(&mut chunk).expect("read");
            assert!(n > 0, "warren closed the socket before replying");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    fn open(addr: SocketAddr) -> Client {
        let mut stream = connect_when_ready(addr);
        stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        stream.write_all(b"AMQP\x00\x00\x09\x01").expect("header");
        let mut client = Client { stream, buf: Vec::new() };
        assert!(matches!(client.recv(), connection::AMQPMethod::Start(_)));
        client.send(
            0,
            connection::AMQPMethod::StartOk(connection::StartOk {
                client_properties: FieldTable::default(),
                mechanism: "PLAIN".into(),
                response: LongString::from(&b"\0guest\0guest"[..]),
                locale: "en_US".into(),
            }),
        );
        let connection::AMQPMethod::Tune(tune) = client.recv() else { panic!("expected tune") };
        client.send(
            0,
            connection::AMQPMethod::TuneOk(connection::TuneOk {
                channel_max: tune.channel_max,
                frame_max: tune.frame_max,
                heartbeat: 0,
            }),
        );
        client.send(0, connection::AMQPMethod::Open(connection::Open { virtual_host: "/".into() }));
        assert!(matches!(client.recv(), connection::AMQPMethod::OpenOk(_)));
        client
    }
}

fn stops_gracefully_on(signal: &str) {
    let port = free_port();
    let data_dir = std::env::temp_dir().join(format!("warren-signal-{}-{signal}", std::process::id()));
    let mut warren = start_warren(port, &data_dir);
    let mut client = Client::open(SocketAddr::from(([127, 0, 0, 1], port)));
    let status = Command::new("kill").args(["-s", signal, &warren.id().to_string()]).status().expect("kill");
    assert!(status.success());
    let connection::AMQPMethod::Close(close) = client.recv() else { panic!("expected connection.close") };
    assert_eq!(close.reply_code, 320);
    client.send(0, connection::AMQPMethod::CloseOk(connection::CloseOk {}));
    let deadline = Instant::now() + Duration::from_secs(10);
    let exit = loop {
        if let Some(exit) = warren.try_wait().expect("wait") {
            break exit;
        }
        assert!(Instant::now() < deadline, "warren did not exit after {signal}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(exit.code(), Some(0), "exit status after {signal}");
    let _ = std::fs::remove_dir_all(&data_dir);
}

#[test]
fn sigterm_closes_clients_with_320_and_exits_0() {
    stops_gracefully_on("TERM");
}

#[test]
fn sigint_closes_clients_with_320_and_exits_0() {
    stops_gracefully_on("INT");
}
