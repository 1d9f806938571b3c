//! What a client sends, decoded from one frame: a [`Request`] per command, with its fields.
//!
//! Decoding reads exactly the command's fields ([`WireReader`] bounds every length); bytes
//! after them, an unknown key or a version Warren does not speak make a [`DecodeError`] that
//! names the command, so that the connection can answer with the protocol's code.

use crate::command::{key, spec, RESPONSE_BIT};
use crate::wire::{WireError, WireReader};
use bytes::Bytes;
use thiserror::Error;

/// The most properties, arguments or streams one request may list (RabbitMQ's clients send a
/// handful; a list this long is an attack or a bug).
pub const MAX_LIST_ENTRIES: usize = 1024;

/// Where a subscription starts reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpecification {
    /// The oldest message the stream holds.
    First,
    /// The newest chunk: the last message and those published with it.
    Last,
    /// What is published from now on.
    Next,
    /// This offset (or the first held, if older).
    Offset(u64),
    /// The first message stored at or after this time, ms since the Unix epoch.
    Timestamp(i64),
}

impl OffsetSpecification {
    /// Reads a specification's type and value (`ConsumerUpdate`'s answer may say `None`: 0).
    fn read(wire: &mut WireReader) -> Result<Option<Self>, WireError> {
        Ok(Some(match wire.u16("offset type")? {
            0 => return Ok(None),
            1 => OffsetSpecification::First,
            2 => OffsetSpecification::Last,
            3 => OffsetSpecification::Next,
            4 => OffsetSpecification::Offset(wire.u64("offset")?),
            5 => OffsetSpecification::Timestamp(wire.i64("timestamp")?),
            other => return Err(WireError::Invalid { what: "offset type", reason: format!("{other} is not 1 to 5") }),
        }))
    }
}

/// One entry of a `Publish`: a message, or a batch of them under one publishing id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedMessage {
    /// The publisher's sequence number for it.
    pub publishing_id: u64,
    /// Its filter value (Publish v2).
    pub filter_value: Option<String>,
    /// What it carries.
    pub entry: PublishedEntry,
}

/// What a published entry carries (Osiris' two entry types, told apart by the top bit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishedEntry {
    /// One AMQP 1.0 encoded message, as sent (a slice of the frame).
    Message(Bytes),
    /// A sub-entry batch: `records` messages, each a `uint32` size and its bytes, in `data`
    /// compressed with `compression` (0 none, 1 gzip, ...) from `uncompressed_bytes`.
    Batch {
        /// The compression codec's number.
        compression: u8,
        /// Messages in the batch.
        records: u16,
        /// The data's size once decompressed.
        uncompressed_bytes: u32,
        /// The (compressed) data.
        data: Bytes,
    },
}

/// A sub-entry batch's first byte has this bit set (a message's size has it clear).
const BATCH_BIT: u8 = 0x80;

/// A command a client sent.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)] // the fields are the protocol reference's, named as there
pub enum Request {
    DeclarePublisher {
        correlation_id: u32,
        publisher_id: u8,
        reference: Option<String>,
        stream: String,
    },
    Publish {
        publisher_id: u8,
        messages: Vec<PublishedMessage>,
    },
    QueryPublisherSequence {
        correlation_id: u32,
        reference: String,
        stream: String,
    },
    DeletePublisher {
        correlation_id: u32,
        publisher_id: u8,
    },
    Subscribe {
        correlation_id: u32,
        subscription_id: u8,
        stream: String,
        offset: OffsetSpecification,
        credit: u16,
        properties: Vec<(String, String)>,
    },
    Credit {
        subscription_id: u8,
        credit: u16,
    },
    StoreOffset {
        reference: String,
        stream: String,
        offset: u64,
    },
    QueryOffset {
        correlation_id: u32,
        reference: String,
        stream: String,
    },
    Unsubscribe {
        correlation_id: u32,
        subscription_id: u8,
    },
    Create {
        correlation_id: u32,
        stream: String,
        arguments: Vec<(String, String)>,
    },
    Delete {
        correlation_id: u32,
        stream: String,
    },
    Metadata {
        correlation_id: u32,
        streams: Vec<String>,
    },
    PeerProperties {
        correlation_id: u32,
        properties: Vec<(String, String)>,
    },
    SaslHandshake {
        correlation_id: u32,
    },
    SaslAuthenticate {
        correlation_id: u32,
        mechanism: String,
        data: Option<Bytes>,
    },
    Tune {
        frame_max: u32,
        heartbeat_secs: u32,
    },
    Open {
        correlation_id: u32,
        vhost: String,
    },
    Close {
        correlation_id: u32,
        code: u16,
        reason: String,
    },
    /// The client's answer to a `Close` the server sent.
    CloseResponse {
        correlation_id: u32,
        code: u16,
    },
    Heartbeat,
    Route {
        correlation_id: u32,
        routing_key: String,
        super_stream: String,
    },
    Partitions {
        correlation_id: u32,
        super_stream: String,
    },
    /// The client's answer to a `ConsumerUpdate`: where the consumer resumes (None: as it was).
    ConsumerUpdateResponse {
        correlation_id: u32,
        code: u16,
        offset: Option<OffsetSpecification>,
    },
    ExchangeCommandVersions {
        correlation_id: u32,
        commands: Vec<(u16, u16, u16)>,
    },
    StreamStats {
        correlation_id: u32,
        stream: String,
    },
    CreateSuperStream {
        correlation_id: u32,
        name: String,
        partitions: Vec<String>,
        binding_keys: Vec<String>,
        arguments: Vec<(String, String)>,
    },
    DeleteSuperStream {
        correlation_id: u32,
        name: String,
    },
}

/// Why a frame is not a request Warren serves.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// The frame is shorter than a key and a version.
    #[error("a frame of {0} bytes has no key and version")]
    NoHeader(usize),
    /// No command has this key, or the client may not send it.
    #[error("unknown command key {key:#06x}")]
    UnknownKey {
        /// The key sent.
        key: u16,
    },
    /// The command exists, at other versions.
    #[error("{name} version {version} is not spoken (versions {min} to {max})")]
    UnsupportedVersion {
        /// The command's name.
        name: &'static str,
        /// The version sent.
        version: u16,
        /// The versions Warren speaks.
        min: u16,
        /// The versions Warren speaks.
        max: u16,
    },
    /// The fields do not read.
    #[error("malformed {name}: {error}")]
    Malformed {
        /// The command's name.
        name: &'static str,
        /// What is wrong.
        error: WireError,
    },
}

impl Request {
    /// Decodes one frame's content (the bytes after its size).
    pub fn decode(frame: Bytes) -> Result<Request, DecodeError> {
        let length = frame.len();
        let mut wire = WireReader::new(frame);
        let (Ok(raw_key), Ok(version)) = (wire.u16("key"), wire.u16("version")) else {
            return Err(DecodeError::NoHeader(length));
        };
        let is_response = raw_key & RESPONSE_BIT != 0;
        let command_key = raw_key & !RESPONSE_BIT;
        let spec = spec(command_key).ok_or(DecodeError::UnknownKey { key: raw_key })?;
        if !(spec.min_version..=spec.max_version).contains(&version) {
            let (min, max) = (spec.min_version, spec.max_version);
            return Err(DecodeError::UnsupportedVersion { name: spec.name, version, min, max });
        }
        let malformed = |error| DecodeError::Malformed { name: spec.name, error };
        let request = read(&mut wire, raw_key, version, is_response).map_err(malformed)?;
        let request = request.ok_or(DecodeError::UnknownKey { key: raw_key })?;
        wire.finish().map_err(malformed)?;
        Ok(request)
    }
}

fn checked_pairs(wire: &mut WireReader, what: &'static str) -> Result<Vec<(String, String)>, WireError> {
    let pairs = wire.string_pairs(what)?;
    if pairs.len() > MAX_LIST_ENTRIES {
        return Err(WireError::Invalid {
            what,
            reason: format!("{} entries, at most {MAX_LIST_ENTRIES}", pairs.len()),
        });
    }
    Ok(pairs)
}

fn checked_strings(wire: &mut WireReader, what: &'static str) -> Result<Vec<String>, WireError> {
    let strings = wire.strings(what)?;
    if strings.len() > MAX_LIST_ENTRIES {
        return Err(WireError::Invalid {
            what,
            reason: format!("{} entries, at most {MAX_LIST_ENTRIES}", strings.len()),
        });
    }
    Ok(strings)
}

/// The fields of the command `raw_key` (None: a key the client may not send this way).
fn read(wire: &mut WireReader, raw_key: u16, version: u16, is_response: bool) -> Result<Option<Request>, WireError> {
    if is_response {
        return read_response(wire, raw_key & !RESPONSE_BIT);
    }
    Ok(Some(match raw_key {
        key::DECLARE_PUBLISHER => Request::DeclarePublisher {
            correlation_id: wire.u32("correlation id")?,
            publisher_id: wire.u8("publisher id")?,
            reference: wire.nullable_string("publisher reference")?,
            stream: wire.string("stream")?,
        },
        key::PUBLISH => read_publish(wire, version)?,
        key::QUERY_PUBLISHER_SEQUENCE => Request::QueryPublisherSequence {
            correlation_id: wire.u32("correlation id")?,
            reference: wire.string("publisher reference")?,
            stream: wire.string("stream")?,
        },
        key::DELETE_PUBLISHER => Request::DeletePublisher {
            correlation_id: wire.u32("correlation id")?,
            publisher_id: wire.u8("publisher id")?,
        },
        key::SUBSCRIBE => read_subscribe(wire)?,
        key::CREDIT => Request::Credit { subscription_id: wire.u8("subscription id")?, credit: wire.u16("credit")? },
        key::STORE_OFFSET => Request::StoreOffset {
            reference: wire.string("reference")?,
            stream: wire.string("stream")?,
            offset: wire.u64("offset")?,
        },
        key::QUERY_OFFSET => Request::QueryOffset {
            correlation_id: wire.u32("correlation id")?,
            reference: wire.string("reference")?,
            stream: wire.string("stream")?,
        },
        key::UNSUBSCRIBE => Request::Unsubscribe {
            correlation_id: wire.u32("correlation id")?,
            subscription_id: wire.u8("subscription id")?,
        },
        key::CREATE => Request::Create {
            correlation_id: wire.u32("correlation id")?,
            stream: wire.string("stream")?,
            arguments: checked_pairs(wire, "arguments")?,
        },
        key::DELETE => Request::Delete { correlation_id: wire.u32("correlation id")?, stream: wire.string("stream")? },
        key::METADATA => Request::Metadata {
            correlation_id: wire.u32("correlation id")?,
            streams: checked_strings(wire, "streams")?,
        },
        key::PEER_PROPERTIES => Request::PeerProperties {
            correlation_id: wire.u32("correlation id")?,
            properties: checked_pairs(wire, "peer properties")?,
        },
        key::SASL_HANDSHAKE => Request::SaslHandshake { correlation_id: wire.u32("correlation id")? },
        key::SASL_AUTHENTICATE => Request::SaslAuthenticate {
            correlation_id: wire.u32("correlation id")?,
            mechanism: wire.string("mechanism")?,
            data: wire.nullable_bytes("SASL data")?,
        },
        key::TUNE => Request::Tune { frame_max: wire.u32("frame max")?, heartbeat_secs: wire.u32("heartbeat")? },
        key::OPEN => Request::Open { correlation_id: wire.u32("correlation id")?, vhost: wire.string("virtual host")? },
        key::CLOSE => Request::Close {
            correlation_id: wire.u32("correlation id")?,
            code: wire.u16("closing code")?,
            reason: wire.nullable_string("closing reason")?.unwrap_or_default(),
        },
        key::HEARTBEAT => Request::Heartbeat,
        key::ROUTE => Request::Route {
            correlation_id: wire.u32("correlation id")?,
            routing_key: wire.string("routing key")?,
            super_stream: wire.string("super stream")?,
        },
        key::PARTITIONS => Request::Partitions {
            correlation_id: wire.u32("correlation id")?,
            super_stream: wire.string("super stream")?,
        },
        key::EXCHANGE_COMMAND_VERSIONS => {
            let correlation_id = wire.u32("correlation id")?;
            let count = wire.count("command versions", 6)?;
            let commands = (0..count)
                .map(|_| Ok((wire.u16("key")?, wire.u16("min version")?, wire.u16("max version")?)))
                .collect::<Result<_, WireError>>()?;
            Request::ExchangeCommandVersions { correlation_id, commands }
        }
        key::STREAM_STATS => {
            Request::StreamStats { correlation_id: wire.u32("correlation id")?, stream: wire.string("stream")? }
        }
        key::CREATE_SUPER_STREAM => Request::CreateSuperStream {
            correlation_id: wire.u32("correlation id")?,
            name: wire.string("super stream")?,
            partitions: checked_strings(wire, "partitions")?,
            binding_keys: checked_strings(wire, "binding keys")?,
            arguments: checked_pairs(wire, "arguments")?,
        },
        key::DELETE_SUPER_STREAM => Request::DeleteSuperStream {
            correlation_id: wire.u32("correlation id")?,
            name: wire.string("super stream")?,
        },
        _ => return Ok(None),
    }))
}

/// The responses a client sends: to the server's `Close` and `ConsumerUpdate`.
fn read_response(wire: &mut WireReader, command_key: u16) -> Result<Option<Request>, WireError> {
    Ok(Some(match command_key {
        key::CLOSE => Request::CloseResponse { correlation_id: wire.u32("correlation id")?, code: wire.u16("code")? },
        key::CONSUMER_UPDATE => Request::ConsumerUpdateResponse {
            correlation_id: wire.u32("correlation id")?,
            code: wire.u16("code")?,
            offset: OffsetSpecification::read(wire)?,
        },
        _ => return Ok(None),
    }))
}

fn read_publish(wire: &mut WireReader, version: u16) -> Result<Request, WireError> {
    let publisher_id = wire.u8("publisher id")?;
    // A message takes at least its publishing id and a length (and a filter's length in v2).
    let min_message_bytes = if version >= 2 { 14 } else { 12 };
    let count = wire.count("published messages", min_message_bytes)?;
    let mut messages = Vec::with_capacity(count);
    for _ in 0..count {
        let publishing_id = wire.u64("publishing id")?;
        let filter_value = if version >= 2 { wire.nullable_string("filter value")? } else { None };
        messages.push(PublishedMessage { publishing_id, filter_value, entry: read_entry(wire)? });
    }
    Ok(Request::Publish { publisher_id, messages })
}

fn read_entry(wire: &mut WireReader) -> Result<PublishedEntry, WireError> {
    if wire.peek_u8() & BATCH_BIT == 0 {
        return Ok(PublishedEntry::Message(wire.bytes("message")?));
    }
    let compression = (wire.u8("entry type")? & 0x70) >> 4;
    let records = wire.u16("records in batch")?;
    let uncompressed_bytes = wire.u32("uncompressed size")?;
    let size = wire.u32("batch size")?;
    let data = wire.slice("batch", size as usize)?;
    Ok(PublishedEntry::Batch { compression, records, uncompressed_bytes, data })
}

fn read_subscribe(wire: &mut WireReader) -> Result<Request, WireError> {
    let correlation_id = wire.u32("correlation id")?;
    let subscription_id = wire.u8("subscription id")?;
    let stream = wire.string("stream")?;
    let offset = OffsetSpecification::read(wire)?
        .ok_or_else(|| WireError::Invalid { what: "offset type", reason: "0 (none) is not a start".into() })?;
    let credit = wire.u16("credit")?;
    // The properties are optional: old clients end the frame after the credit.
    let properties = if wire.remaining() == 0 { Vec::new() } else { checked_pairs(wire, "properties")? };
    Ok(Request::Subscribe { correlation_id, subscription_id, stream, offset, credit, properties })
}
