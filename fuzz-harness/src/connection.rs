//! The I/O-free `Connection`: a valid handshake (guest from loopback, vhost `/`), then the
//! bytes as the client's next frames, on an in-memory broker of its own.

use amq_protocol::frame::{gen_frame, AMQPFrame, WriteContext};
use amq_protocol::protocol::{connection, AMQPClass};
use amq_protocol::types::{FieldTable, LongString};
use bytes::BytesMut;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Duration;
use warren_amqp::connection::{Client, Connection};
use warren_amqp::outbox::Outbox;
use warren_amqp::ProtocolConfig;
use warren_delivery::Broker;

/// How long a pending reply may take before the input is given up on.
const PENDING_WAIT_MS: u64 = 50;

fn encoded(method: connection::AMQPMethod) -> Vec<u8> {
    let frame = AMQPFrame::Method(0, AMQPClass::Connection(method));
    let written = gen_frame(&frame)(WriteContext::from(Vec::new()));
    written.map(|context| context.write).unwrap_or_default()
}

/// start-ok, tune-ok and open, as a client sends them.
pub fn handshake() -> Vec<u8> {
    let start_ok = connection::StartOk {
        client_properties: FieldTable::default(),
        mechanism: "PLAIN".into(),
        response: LongString::from(&b"\0guest\0guest"[..]),
        locale: "en_US".into(),
    };
    let tune_ok = connection::TuneOk { channel_max: 2047, frame_max: 131_072, heartbeat: 0 };
    let open = connection::Open { virtual_host: "/".into() };
    let methods = [
        connection::AMQPMethod::StartOk(start_ok),
        connection::AMQPMethod::TuneOk(tune_ok),
        connection::AMQPMethod::Open(open),
    ];
    methods.into_iter().flat_map(encoded).collect()
}

/// Feeds the handshake, then `data`.
pub fn run(data: &[u8]) {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
    let _entered = runtime.enter();
    let broker = Broker::in_memory();
    // Nothing reads what the broker answers: dropping the receiver drops it (and never fills
    // the outbox, which would stop processing).
    let (outbox, answers) = Outbox::new();
    drop(answers);
    let client = Client {
        peer: ([127, 0, 0, 1], 40_000).into(),
        local: ([127, 0, 0, 1], 5672).into(),
        tls: false,
        certificate_login: None,
    };
    let config = Arc::new(ProtocolConfig::default());
    let mut connection = Connection::new(broker, config, client, outbox, Arc::new(AtomicU32::new(0)));
    let mut buf = BytesMut::from(&handshake()[..]);
    buf.extend_from_slice(data);
    connection.process(&mut buf);
    // A method whose reply waits (a transaction's commit, say) holds the frames behind it:
    // let it complete, as the read loop would, and go on.
    while let Some(mut pending) = connection.take_pending() {
        let waited = Duration::from_millis(PENDING_WAIT_MS);
        let Ok(outcome) = runtime.block_on(async { tokio::time::timeout(waited, pending.outcome()).await }) else {
            break;
        };
        connection.complete_pending(pending.channel(), outcome);
        connection.process(&mut buf);
    }
    connection.release();
}
