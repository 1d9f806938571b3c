//! Hand encoding and decoding of the frames on the hot path, without amq-protocol's parser.
//!
//! A frame is `type (u8) | channel (u16) | size (u32) | payload (size bytes) | 0xCE`, all
//! big-endian. [`split`] cuts the first complete frame off a read buffer and borrows its
//! payload; [`method`], [`deliver`], [`confirm`] and [`content_header`] decode the payloads a
//! consumer or producer sees once per message. The `put_*` functions append the frames a
//! producer or consumer sends once per message (basic.publish with its content header and body,
//! basic.ack) to an output buffer. Malformed input gives an error, never a panic.
//!
//! The unit tests check both directions against amq-protocol's encoder and parser.

use anyhow::{bail, Context};
use lapin::types::ShortString;

pub const FRAME_METHOD: u8 = 1;
pub const FRAME_HEADER: u8 = 2;
pub const FRAME_BODY: u8 = 3;
pub const FRAME_HEARTBEAT: u8 = 8;
pub const FRAME_END: u8 = 0xCE;
/// Bytes of a frame besides its payload: type, channel and size before it, the end byte after.
pub const FRAME_OVERHEAD: usize = FRAME_HEADER_LEN + 1;
/// Type, channel and size.
const FRAME_HEADER_LEN: usize = 7;

pub const CLASS_CONNECTION: u16 = 10;
pub const CLASS_BASIC: u16 = 60;
pub const CONNECTION_CLOSE_OK: u16 = 51;
pub const BASIC_PUBLISH: u16 = 40;
pub const BASIC_DELIVER: u16 = 60;
pub const BASIC_ACK: u16 = 80;
pub const BASIC_NACK: u16 = 120;

/// Property flag bits of the basic class, in the order the values follow the flags.
const FLAG_CONTENT_TYPE: u16 = 1 << 15;
const FLAG_CONTENT_ENCODING: u16 = 1 << 14;
const FLAG_HEADERS: u16 = 1 << 13;
const FLAG_DELIVERY_MODE: u16 = 1 << 12;

/// One frame, its payload borrowed from the read buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawFrame<'a> {
    pub kind: u8,
    pub channel: u16,
    pub payload: &'a [u8],
}

/// The first complete frame of `buf` and how many bytes it takes, or `None` when `buf` does
/// not hold all of it yet. A frame larger than `frame_max` (the whole frame, as negotiated) or
/// without its end byte is an error.
pub fn split(buf: &[u8], frame_max: usize) -> anyhow::Result<Option<(RawFrame<'_>, usize)>> {
    let Some(header) = buf.get(..FRAME_HEADER_LEN) else { return Ok(None) };
    let size = u32::from_be_bytes([header[3], header[4], header[5], header[6]]) as usize;
    if size.saturating_add(FRAME_OVERHEAD) > frame_max {
        bail!("a frame of {} bytes, above the negotiated frame_max {frame_max}", size.saturating_add(FRAME_OVERHEAD));
    }
    let len = size + FRAME_OVERHEAD;
    let Some(frame) = buf.get(..len) else { return Ok(None) };
    if frame[len - 1] != FRAME_END {
        bail!("a frame (type {}) ending with {:#04x} instead of {FRAME_END:#04x}", header[0], frame[len - 1]);
    }
    let frame = RawFrame {
        kind: header[0],
        channel: u16::from_be_bytes([header[1], header[2]]),
        payload: &frame[FRAME_HEADER_LEN..len - 1],
    };
    Ok(Some((frame, len)))
}

/// A method frame's payload: class and method ids, then the arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Method<'a> {
    pub class: u16,
    pub method: u16,
    pub arguments: &'a [u8],
}

impl Method<'_> {
    pub fn is(&self, class: u16, method: u16) -> bool {
        self.class == class && self.method == method
    }
}

pub fn method(payload: &[u8]) -> anyhow::Result<Method<'_>> {
    let mut reader = Reader::new(payload, "method frame");
    Ok(Method { class: reader.u16()?, method: reader.u16()?, arguments: reader.rest() })
}

/// What a consumer needs of basic.deliver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deliver {
    pub delivery_tag: u64,
    pub redelivered: bool,
}

/// Decodes basic.deliver's arguments: consumer tag, delivery tag, redelivered bit, exchange,
/// routing key (the strings are checked for length and skipped).
pub fn deliver(arguments: &[u8]) -> anyhow::Result<Deliver> {
    let mut reader = Reader::new(arguments, "basic.deliver");
    reader.short_string()?;
    let delivery_tag = reader.u64()?;
    let redelivered = reader.u8()? & 1 != 0;
    reader.short_string()?;
    reader.short_string()?;
    reader.end()?;
    Ok(Deliver { delivery_tag, redelivered })
}

/// A publisher confirm, basic.ack or basic.nack from the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Confirm {
    pub delivery_tag: u64,
    pub multiple: bool,
}

/// Decodes the arguments of basic.ack or basic.nack (`what`): delivery tag, then bits
/// (multiple; nack also has requeue, which means nothing to a publisher).
pub fn confirm(arguments: &[u8], what: &'static str) -> anyhow::Result<Confirm> {
    let mut reader = Reader::new(arguments, what);
    let delivery_tag = reader.u64()?;
    let multiple = reader.u8()? & 1 != 0;
    reader.end()?;
    Ok(Confirm { delivery_tag, multiple })
}

/// A content header frame's payload; the properties stay undecoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentHeader<'a> {
    pub class: u16,
    pub body_size: u64,
    /// Property flags and values.
    pub properties: &'a [u8],
}

pub fn content_header(payload: &[u8]) -> anyhow::Result<ContentHeader<'_>> {
    let mut reader = Reader::new(payload, "content header");
    let class = reader.u16()?;
    reader.u16()?; // weight
    let body_size = reader.u64()?;
    Ok(ContentHeader { class, body_size, properties: reader.rest() })
}

/// Whether the headers property among `properties` (flags and values of a content header) has
/// an entry named `key` at its top level. Walks only what precedes the headers and the table's
/// names, skipping the values; `false` for anything malformed.
pub fn has_header(properties: &[u8], key: &str) -> bool {
    find_header(properties, key).unwrap_or(false)
}

fn find_header(properties: &[u8], key: &str) -> anyhow::Result<bool> {
    let mut reader = Reader::new(properties, "properties");
    let flags = reader.u16()?;
    if flags & FLAG_HEADERS == 0 {
        return Ok(false);
    }
    if flags & FLAG_CONTENT_TYPE != 0 {
        reader.short_string()?;
    }
    if flags & FLAG_CONTENT_ENCODING != 0 {
        reader.short_string()?;
    }
    let length = reader.u32()? as usize;
    let mut table = Reader::new(reader.take(length)?, "headers");
    while !table.bytes.is_empty() {
        if table.short_string()? == key.as_bytes() {
            return Ok(true);
        }
        table.skip_field_value()?;
    }
    Ok(false)
}

/// Appends a frame header for a payload of `size` bytes.
fn put_frame_header(out: &mut Vec<u8>, kind: u8, channel: u16, size: usize) {
    out.push(kind);
    out.extend_from_slice(&channel.to_be_bytes());
    // Payloads here are bounded by frame_max (a u32) or are a few hundred bytes.
    out.extend_from_slice(&(size as u32).to_be_bytes());
}

fn put_short_string(out: &mut Vec<u8>, text: &ShortString) {
    // A ShortString holds at most 255 bytes.
    out.push(text.as_str().len() as u8);
    out.extend_from_slice(text.as_str().as_bytes());
}

/// Appends basic.publish (reserved ticket, exchange, routing key, mandatory and immediate off).
pub fn put_publish(out: &mut Vec<u8>, channel: u16, exchange: &ShortString, routing_key: &ShortString) {
    let size = 2 + 2 + 2 + 1 + exchange.as_str().len() + 1 + routing_key.as_str().len() + 1;
    put_frame_header(out, FRAME_METHOD, channel, size);
    out.extend_from_slice(&CLASS_BASIC.to_be_bytes());
    out.extend_from_slice(&BASIC_PUBLISH.to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes());
    put_short_string(out, exchange);
    put_short_string(out, routing_key);
    out.push(0);
    out.push(FRAME_END);
}

/// Appends the content header of a basic message of `body_size` bytes whose only property is
/// `delivery_mode`.
pub fn put_content_header(out: &mut Vec<u8>, channel: u16, body_size: u64, delivery_mode: u8) {
    put_frame_header(out, FRAME_HEADER, channel, 2 + 2 + 8 + 2 + 1);
    out.extend_from_slice(&CLASS_BASIC.to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes());
    out.extend_from_slice(&body_size.to_be_bytes());
    out.extend_from_slice(&FLAG_DELIVERY_MODE.to_be_bytes());
    out.push(delivery_mode);
    out.push(FRAME_END);
}

/// Appends `body` as body frames of at most `frame_max` bytes each (none for an empty body).
pub fn put_body(out: &mut Vec<u8>, channel: u16, body: &[u8], frame_max: usize) {
    for chunk in body.chunks(frame_max.saturating_sub(FRAME_OVERHEAD).max(1)) {
        put_frame_header(out, FRAME_BODY, channel, chunk.len());
        out.extend_from_slice(chunk);
        out.push(FRAME_END);
    }
}

/// Appends basic.ack.
pub fn put_ack(out: &mut Vec<u8>, channel: u16, delivery_tag: u64, multiple: bool) {
    put_frame_header(out, FRAME_METHOD, channel, 2 + 2 + 8 + 1);
    out.extend_from_slice(&CLASS_BASIC.to_be_bytes());
    out.extend_from_slice(&BASIC_ACK.to_be_bytes());
    out.extend_from_slice(&delivery_tag.to_be_bytes());
    out.push(u8::from(multiple));
    out.push(FRAME_END);
}

/// Big-endian reads from a payload; running short is an error naming `what` was read.
struct Reader<'a> {
    bytes: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8], what: &'static str) -> Self {
        Reader { bytes, what }
    }

    fn take(&mut self, n: usize) -> anyhow::Result<&'a [u8]> {
        if self.bytes.len() < n {
            bail!("{}: {} bytes where {n} more were expected", self.what, self.bytes.len());
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> anyhow::Result<[u8; N]> {
        let bytes = self.take(N)?;
        bytes.try_into().with_context(|| format!("{}: short read", self.what))
    }

    fn u8(&mut self) -> anyhow::Result<u8> {
        Ok(self.array::<1>()?[0])
    }

    fn u16(&mut self) -> anyhow::Result<u16> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    fn u32(&mut self) -> anyhow::Result<u32> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    fn u64(&mut self) -> anyhow::Result<u64> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    fn short_string(&mut self) -> anyhow::Result<&'a [u8]> {
        let len = self.u8()? as usize;
        self.take(len)
    }

    fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.bytes)
    }

    fn end(&self) -> anyhow::Result<()> {
        if !self.bytes.is_empty() {
            bail!("{}: {} bytes left over", self.what, self.bytes.len());
        }
        Ok(())
    }

    /// Skips one field-table value: its type letter, then the value (RabbitMQ's letters).
    fn skip_field_value(&mut self) -> anyhow::Result<()> {
        let fixed = match self.u8()? {
            b'V' => 0,
            b't' | b'b' | b'B' => 1,
            b's' | b'u' => 2,
            b'I' | b'i' | b'f' => 4,
            b'D' => 5,
            b'l' | b'L' | b'd' | b'T' => 8,
            b'S' | b'x' | b'A' | b'F' => self.u32()? as usize,
            other => bail!("{}: unknown field type {:?}", self.what, char::from(other)),
        };
        self.take(fixed)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use amq_protocol::frame::{gen_frame, parse_frame, AMQPContentHeader, AMQPFrame, WriteContext};
    use amq_protocol::protocol::{basic, AMQPClass, BasicProperties};
    use amq_protocol::types::{AMQPValue, FieldTable, LongString};

    const FRAME_MAX: usize = 4096;

    fn encode(frame: &AMQPFrame) -> Vec<u8> {
        gen_frame(frame)(WriteContext::from(Vec::new())).map(|context| context.write).expect("amq-protocol encodes")
    }

    fn parse_all(mut bytes: &[u8]) -> Vec<AMQPFrame> {
        let mut frames = Vec::new();
        while !bytes.is_empty() {
            let (rest, frame) = parse_frame(bytes).expect("amq-protocol parses");
            frames.push(frame);
            bytes = rest;
        }
        frames
    }

    /// The frames of one publish, encoded by amq-protocol.
    fn reference_publish(exchange: &str, key: &str, body: &[u8], delivery_mode: u8) -> Vec<u8> {
        let publish =
            basic::Publish { exchange: exchange.into(), routing_key: key.into(), mandatory: false, immediate: false };
        let header = AMQPContentHeader {
            class_id: CLASS_BASIC,
            body_size: body.len() as u64,
            properties: BasicProperties::default().with_delivery_mode(delivery_mode),
        };
        let mut bytes = encode(&AMQPFrame::Method(3, AMQPClass::Basic(basic::AMQPMethod::Publish(publish))));
        bytes.extend(encode(&AMQPFrame::Header(3, header)));
        for chunk in body.chunks(FRAME_MAX - FRAME_OVERHEAD) {
            bytes.extend(encode(&AMQPFrame::Body(3, chunk.to_vec())));
        }
        bytes
    }

    #[test]
    fn publishes_encode_as_amq_protocol_does() {
        let long_key = "k".repeat(255);
        let cases: [(&str, &str, usize, u8); 5] = [
            ("", "queue", 16, 1),
            ("perf.direct", "perf-0", 100, 2),
            ("x", long_key.as_str(), 0, 1),
            ("perf.fanout", "", FRAME_MAX - FRAME_OVERHEAD, 2),
            ("perf.topic", "perf.1.perf", 3 * FRAME_MAX + 5, 1),
        ];
        for (exchange, key, size, mode) in cases {
            let body: Vec<u8> = (0..size).map(|i| i as u8).collect();
            let mut out = Vec::new();
            put_publish(&mut out, 3, &exchange.into(), &key.into());
            put_content_header(&mut out, 3, body.len() as u64, mode);
            put_body(&mut out, 3, &body, FRAME_MAX);
            assert_eq!(out, reference_publish(exchange, key, &body, mode), "{exchange} {key} {size} {mode}");
            let frames = parse_all(&out);
            assert_eq!(frames.len(), 2 + size.div_ceil(FRAME_MAX - FRAME_OVERHEAD));
            let AMQPFrame::Header(_, header) = &frames[1] else { panic!("{:?}", frames[1]) };
            assert_eq!(header.properties.delivery_mode(), &Some(mode));
        }
    }

    #[test]
    fn acks_encode_as_amq_protocol_does() {
        for (delivery_tag, multiple) in [(1, false), (1000, true), (u64::MAX, false)] {
            let mut out = Vec::new();
            put_ack(&mut out, 1, delivery_tag, multiple);
            let ack = basic::Ack { delivery_tag, multiple };
            assert_eq!(out, encode(&AMQPFrame::Method(1, AMQPClass::Basic(basic::AMQPMethod::Ack(ack)))));
        }
    }

    /// Splits exactly one frame off `bytes`.
    fn only_frame(bytes: &[u8]) -> RawFrame<'_> {
        let (frame, len) = split(bytes, FRAME_MAX).expect("valid").expect("complete");
        assert_eq!(len, bytes.len());
        frame
    }

    #[test]
    fn deliveries_decode_as_amq_protocol_encodes_them() {
        let cases = [("warren-perf-0", 1, false, "perf.direct", "perf-0"), ("", u64::MAX, true, "", "")];
        for (tag, delivery_tag, redelivered, exchange, key) in cases {
            let deliver = basic::Deliver {
                consumer_tag: tag.into(),
                delivery_tag,
                redelivered,
                exchange: exchange.into(),
                routing_key: key.into(),
            };
            let bytes = encode(&AMQPFrame::Method(1, AMQPClass::Basic(basic::AMQPMethod::Deliver(deliver))));
            let frame = only_frame(&bytes);
            assert_eq!((frame.kind, frame.channel), (FRAME_METHOD, 1));
            let method = method(frame.payload).unwrap();
            assert!(method.is(CLASS_BASIC, BASIC_DELIVER));
            assert_eq!(super::deliver(method.arguments).unwrap(), Deliver { delivery_tag, redelivered });
            for cut in 0..method.arguments.len() {
                assert!(super::deliver(&method.arguments[..cut]).is_err(), "cut at {cut}");
            }
        }
    }

    #[test]
    fn confirms_decode_as_amq_protocol_encodes_them() {
        for (delivery_tag, multiple) in [(7, false), (1000, true)] {
            let ack = basic::AMQPMethod::Ack(basic::Ack { delivery_tag, multiple });
            let nack = basic::AMQPMethod::Nack(basic::Nack { delivery_tag, multiple, requeue: true });
            for (method_id, class) in [(BASIC_ACK, ack), (BASIC_NACK, nack)] {
                let bytes = encode(&AMQPFrame::Method(1, AMQPClass::Basic(class)));
                let method = method(only_frame(&bytes).payload).unwrap();
                assert!(method.is(CLASS_BASIC, method_id));
                assert_eq!(confirm(method.arguments, "confirm").unwrap(), Confirm { delivery_tag, multiple });
                assert!(confirm(&method.arguments[..8], "confirm").is_err());
            }
        }
    }

    fn header_frame(properties: BasicProperties, body_size: u64) -> Vec<u8> {
        encode(&AMQPFrame::Header(1, AMQPContentHeader { class_id: CLASS_BASIC, body_size, properties }))
    }

    #[test]
    fn content_headers_decode_and_find_headers() {
        let mut headers = FieldTable::default();
        headers.insert("a-table".into(), AMQPValue::FieldTable(FieldTable::default()));
        headers.insert("number".into(), AMQPValue::LongLongInt(-5));
        headers.insert("text".into(), AMQPValue::LongString(LongString::from("x-stream-offset")));
        headers.insert("x-stream-offset".into(), AMQPValue::LongLongInt(42));
        let with_offset = BasicProperties::default()
            .with_content_type("text/plain".into())
            .with_content_encoding("gzip".into())
            .with_headers(headers)
            .with_priority(3);
        let mut decoy = FieldTable::default();
        decoy.insert("text".into(), AMQPValue::LongString(LongString::from("\x0fx-stream-offset")));
        let cases = [
            (with_offset, 1 << 40, true),
            (BasicProperties::default().with_headers(decoy), 5, false),
            (BasicProperties::default().with_delivery_mode(2), 0, false),
            (BasicProperties::default(), 17, false),
        ];
        for (properties, body_size, found) in cases {
            let bytes = header_frame(properties, body_size);
            let frame = only_frame(&bytes);
            assert_eq!(frame.kind, FRAME_HEADER);
            let header = content_header(frame.payload).unwrap();
            assert_eq!((header.class, header.body_size), (CLASS_BASIC, body_size));
            assert_eq!(has_header(header.properties, "x-stream-offset"), found);
            assert!(!has_header(header.properties, "x-stream"));
            assert!(content_header(&frame.payload[..11]).is_err());
        }
    }

    #[test]
    fn split_waits_for_whole_frames_and_rejects_bad_ones() {
        let mut bytes = Vec::new();
        put_ack(&mut bytes, 1, 9, false);
        let first_len = bytes.len();
        put_body(&mut bytes, 1, b"body", FRAME_MAX);
        for cut in 0..first_len {
            assert_eq!(split(&bytes[..cut], FRAME_MAX).unwrap(), None, "cut at {cut}");
        }
        let (frame, len) = split(&bytes, FRAME_MAX).unwrap().unwrap();
        assert_eq!((frame.kind, len), (FRAME_METHOD, first_len));
        let (body, _) = split(&bytes[len..], FRAME_MAX).unwrap().unwrap();
        assert_eq!((body.kind, body.payload), (FRAME_BODY, &b"body"[..]));

        let mut bad_end = bytes[..first_len].to_vec();
        bad_end[first_len - 1] = 0;
        assert!(split(&bad_end, FRAME_MAX).is_err());
        let oversized = [FRAME_BODY, 0, 1, 0, 0, 0x10, 0];
        assert!(split(&oversized, FRAME_MAX).is_err());
        assert!(split(&[FRAME_BODY, 0, 1, 0xff, 0xff, 0xff, 0xff], usize::MAX).unwrap().is_none());
    }
}
