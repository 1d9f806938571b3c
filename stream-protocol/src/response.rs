//! What the server sends, encoded: the responses to requests and the commands it starts
//! (`Tune`, `Close`, `Heartbeat`, `PublishConfirm`, `PublishError`, `MetadataUpdate`,
//! `ConsumerUpdate`; `Deliver` is [`crate::chunk`]'s). Every function appends one whole frame,
//! its size first, to the connection's output buffer, so that many frames go out in one write.

use crate::command::{key, CommandSpec, ResponseCode, RESPONSE_BIT};
use crate::wire::{put_bytes, put_string, put_string_pairs};
use bytes::{BufMut, BytesMut};

/// The version every server frame but `Deliver` is written at.
const VERSION: u16 = 1;

/// A frame being written: its size is filled in when it is dropped.
pub struct FrameWriter<'a> {
    out: &'a mut BytesMut,
    start: usize,
}

impl<'a> FrameWriter<'a> {
    /// Starts a frame of `key` at `version` at the end of `out`.
    pub fn new(out: &'a mut BytesMut, key: u16, version: u16) -> Self {
        let start = out.len();
        out.put_u32(0);
        out.put_u16(key);
        out.put_u16(version);
        FrameWriter { out, start }
    }

    /// The frame's buffer, to write fields into.
    pub fn out(&mut self) -> &mut BytesMut {
        self.out
    }
}

impl Drop for FrameWriter<'_> {
    fn drop(&mut self) {
        let size = (self.out.len() - self.start - 4) as u32;
        self.out[self.start..self.start + 4].copy_from_slice(&size.to_be_bytes());
    }
}

/// A response: the request's key with the response bit, its correlation id and a code.
fn response<'a>(out: &'a mut BytesMut, request_key: u16, correlation_id: u32, code: ResponseCode) -> FrameWriter<'a> {
    let mut frame = FrameWriter::new(out, request_key | RESPONSE_BIT, VERSION);
    frame.out().put_u32(correlation_id);
    frame.out().put_u16(code.code());
    frame
}

/// A response that carries only its code (DeclarePublisher, DeletePublisher, Subscribe,
/// Unsubscribe, Create, Delete, CreateSuperStream, DeleteSuperStream, Close).
pub fn plain(out: &mut BytesMut, request_key: u16, correlation_id: u32, code: ResponseCode) {
    drop(response(out, request_key, correlation_id, code));
}

/// PeerProperties' answer: the server's properties.
pub fn peer_properties(out: &mut BytesMut, correlation_id: u32, properties: &[(&str, &str)]) {
    let mut frame = response(out, key::PEER_PROPERTIES, correlation_id, ResponseCode::Ok);
    put_string_pairs(frame.out(), properties.iter().copied());
}

/// SaslHandshake's answer: the mechanisms offered.
pub fn sasl_handshake(out: &mut BytesMut, correlation_id: u32, mechanisms: &[&str]) {
    let mut frame = response(out, key::SASL_HANDSHAKE, correlation_id, ResponseCode::Ok);
    frame.out().put_i32(mechanisms.len() as i32);
    for mechanism in mechanisms {
        put_string(frame.out(), mechanism);
    }
}

/// SaslAuthenticate's answer (no challenge data: PLAIN and EXTERNAL need none).
pub fn sasl_authenticate(out: &mut BytesMut, correlation_id: u32, code: ResponseCode) {
    let mut frame = response(out, key::SASL_AUTHENTICATE, correlation_id, code);
    // RabbitMQ sends the opaque data only with a challenge; the clients read it if present.
    if code == ResponseCode::SaslChallenge {
        put_bytes(frame.out(), &[]);
    }
}

/// The server's Tune: the largest frame it takes and the heartbeat it proposes.
pub fn tune(out: &mut BytesMut, frame_max: u32, heartbeat_secs: u32) {
    let mut frame = FrameWriter::new(out, key::TUNE, VERSION);
    frame.out().put_u32(frame_max);
    frame.out().put_u32(heartbeat_secs);
}

/// Open's answer: the connection's properties (`advertised_host`, `advertised_port`).
pub fn open(out: &mut BytesMut, correlation_id: u32, code: ResponseCode, properties: &[(&str, &str)]) {
    let mut frame = response(out, key::OPEN, correlation_id, code);
    if code == ResponseCode::Ok {
        put_string_pairs(frame.out(), properties.iter().copied());
    }
}

/// A Close the server starts, with its reason.
pub fn close(out: &mut BytesMut, correlation_id: u32, code: ResponseCode, reason: &str) {
    let mut frame = FrameWriter::new(out, key::CLOSE, VERSION);
    frame.out().put_u32(correlation_id);
    frame.out().put_u16(code.code());
    put_string(frame.out(), reason);
}

/// A heartbeat.
pub fn heartbeat(out: &mut BytesMut) {
    drop(FrameWriter::new(out, key::HEARTBEAT, VERSION));
}

/// PublishConfirm: the publishing ids now safe.
pub fn publish_confirm(out: &mut BytesMut, publisher_id: u8, publishing_ids: &[u64]) {
    let mut frame = FrameWriter::new(out, key::PUBLISH_CONFIRM, VERSION);
    frame.out().put_u8(publisher_id);
    frame.out().put_i32(publishing_ids.len() as i32);
    for id in publishing_ids {
        frame.out().put_u64(*id);
    }
}

/// PublishError: the publishing ids refused, each with why.
pub fn publish_error(out: &mut BytesMut, publisher_id: u8, errors: &[(u64, ResponseCode)]) {
    let mut frame = FrameWriter::new(out, key::PUBLISH_ERROR, VERSION);
    frame.out().put_u8(publisher_id);
    frame.out().put_i32(errors.len() as i32);
    for (id, code) in errors {
        frame.out().put_u64(*id);
        frame.out().put_u16(code.code());
    }
}

/// QueryPublisherSequence's answer: the highest publishing id stored for the reference (0 if
/// none).
pub fn query_publisher_sequence(out: &mut BytesMut, correlation_id: u32, code: ResponseCode, sequence: u64) {
    let mut frame = response(out, key::QUERY_PUBLISHER_SEQUENCE, correlation_id, code);
    frame.out().put_u64(sequence);
}

/// QueryOffset's answer.
pub fn query_offset(out: &mut BytesMut, correlation_id: u32, code: ResponseCode, offset: u64) {
    let mut frame = response(out, key::QUERY_OFFSET, correlation_id, code);
    frame.out().put_u64(offset);
}

/// Credit's answer, sent only when it fails (an unknown subscription).
pub fn credit_failed(out: &mut BytesMut, code: ResponseCode, subscription_id: u8) {
    let mut frame = FrameWriter::new(out, key::CREDIT | RESPONSE_BIT, VERSION);
    frame.out().put_u16(code.code());
    frame.out().put_u8(subscription_id);
}

/// A node in Metadata's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broker {
    /// Its number, which streams' leader and replicas name.
    pub reference: u16,
    /// Where clients reach its stream listener.
    pub host: String,
    /// The same.
    pub port: u32,
}

/// A stream in Metadata's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamMetadata {
    /// Its name.
    pub stream: String,
    /// Ok, or why it has no metadata (does not exist, not available).
    pub code: ResponseCode,
    /// The node that leads it (a [`Broker::reference`]).
    pub leader: u16,
    /// The nodes that hold replicas of it.
    pub replicas: Vec<u16>,
}

/// Metadata's answer.
pub fn metadata(out: &mut BytesMut, correlation_id: u32, brokers: &[Broker], streams: &[StreamMetadata]) {
    let mut frame = FrameWriter::new(out, key::METADATA | RESPONSE_BIT, VERSION);
    let out = frame.out();
    out.put_u32(correlation_id);
    out.put_i32(brokers.len() as i32);
    for broker in brokers {
        out.put_u16(broker.reference);
        put_string(out, &broker.host);
        out.put_u32(broker.port);
    }
    out.put_i32(streams.len() as i32);
    for stream in streams {
        put_string(out, &stream.stream);
        out.put_u16(stream.code.code());
        out.put_u16(stream.leader);
        out.put_i32(stream.replicas.len() as i32);
        for replica in &stream.replicas {
            out.put_u16(*replica);
        }
    }
}

/// MetadataUpdate: a stream the client uses changed (deleted, or moved leader).
pub fn metadata_update(out: &mut BytesMut, code: ResponseCode, stream: &str) {
    let mut frame = FrameWriter::new(out, key::METADATA_UPDATE, VERSION);
    frame.out().put_u16(code.code());
    put_string(frame.out(), stream);
}

/// Route's and Partitions' answers: streams.
pub fn streams(out: &mut BytesMut, request_key: u16, correlation_id: u32, code: ResponseCode, streams: &[String]) {
    let mut frame = response(out, request_key, correlation_id, code);
    frame.out().put_i32(streams.len() as i32);
    for stream in streams {
        put_string(frame.out(), stream);
    }
}

/// ConsumerUpdate: a single active consumer became active, or stopped being.
pub fn consumer_update(out: &mut BytesMut, correlation_id: u32, subscription_id: u8, active: bool) {
    let mut frame = FrameWriter::new(out, key::CONSUMER_UPDATE, VERSION);
    frame.out().put_u32(correlation_id);
    frame.out().put_u8(subscription_id);
    frame.out().put_u8(u8::from(active));
}

/// ExchangeCommandVersions' answer: every command Warren speaks, with its versions.
pub fn exchange_command_versions(out: &mut BytesMut, correlation_id: u32, commands: &[CommandSpec]) {
    let mut frame = response(out, key::EXCHANGE_COMMAND_VERSIONS, correlation_id, ResponseCode::Ok);
    frame.out().put_i32(commands.len() as i32);
    for command in commands {
        frame.out().put_u16(command.key);
        frame.out().put_u16(command.min_version);
        frame.out().put_u16(command.max_version);
    }
}

/// StreamStats' answer: named figures.
pub fn stream_stats(out: &mut BytesMut, correlation_id: u32, code: ResponseCode, stats: &[(&str, i64)]) {
    let mut frame = response(out, key::STREAM_STATS, correlation_id, code);
    frame.out().put_i32(stats.len() as i32);
    for (name, value) in stats {
        put_string(frame.out(), name);
        frame.out().put_i64(*value);
    }
}
