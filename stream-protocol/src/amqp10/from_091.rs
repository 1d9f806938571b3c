//! The AMQP 0-9-1 message Warren stores → the AMQP 1.0 message a stream-protocol consumer
//! receives, as RabbitMQ 3.13 writes a 0-9-1 publish into a stream
//! (`mc_amqpl:convert_to(mc_amqp, ..)`, then `mc_amqp:protocol_state/2`, v3.13.7):
//!
//! - header (if any of its fields is set): `durable` = (`delivery_mode` = 2), `priority`,
//!   `ttl` = `expiration`.
//! - message annotations (if any): `x-basic-type` = `type`; every `x-` header but the
//!   delivery's `x-stream-offset`, and the `CC` header (an array) as `x-cc`; then, for a
//!   message published through an exchange, `x-exchange` and `x-routing-key`.
//! - properties (if any): `message-id` and `correlation-id` (a `urn:uuid:` string as a
//!   uuid, else a string), `user-id` (binary), `reply-to`, `content-type` and
//!   `content-encoding` (symbols), `creation-time` = `timestamp` × 1000 (s → ms),
//!   `group-id` = `app_id`.
//! - application properties (if any): the other headers whose values are not tables or
//!   arrays.
//! - body: one data section; or, if `type` is `amqp-1.0` and the body is AMQP 1.0 body
//!   sections, those sections unchanged.
//!
//! Where RabbitMQ would fail Warren chooses: decimal header values are dropped, and ids or
//! strings that are not UTF-8 become binaries (ids) or are dropped (the others).
//!
//! Nothing is allocated here beyond the output buffer's growth: the 0-9-1 fields are read in
//! place from the raw property list, and every section is written straight into the buffer.

use super::encode::{
    put_binary, put_bool, put_descriptor, put_fixed, put_int, put_long, put_null, put_string, put_symbol,
    put_timestamp, put_ubyte, put_uint, put_uuid, Compound,
};
use super::message::{put_data_section, section, FieldList, Message};
use super::to_091::{AMQP10_BODY_TYPE, LONGSTR_UTF8_LIMIT_BYTES};
use super::types::code;
use amq_protocol::types::{AMQPValue, FieldTable};
use bytes::Bytes;
use warren_delivery::stream::OFFSET_HEADER;

/// Appends `message` to `out` as an AMQP 1.0 message.
pub fn amqp10_from_message(message: &warren_delivery::Message, out: &mut Vec<u8>) {
    let basic = Basic::scan(message.properties.raw());
    let headers = message.properties.headers();
    match message.properties.amqp10_head() {
        // Published over the Stream protocol: its sections as they came.
        Some(head) => out.extend_from_slice(head),
        None => {
            put_header(out, &message.properties);
            put_annotations(out, &basic, headers, message);
            put_properties(out, &basic);
            if let Some(headers) = headers {
                put_application_properties(out, headers);
            }
        }
    }
    if basic.kind == Some(AMQP10_BODY_TYPE.as_bytes()) && is_body_sections(&message.body) {
        out.extend_from_slice(&message.body);
    } else {
        put_data_section(out, &message.body);
    }
}

/// Whether `body` is AMQP 1.0 body sections and nothing else: only then is it passed on as
/// sections (a 0-9-1 publisher may set the type on any body).
fn is_body_sections(body: &Bytes) -> bool {
    match Message::decode(body) {
        // Any other section would leave the body sections shorter than the body.
        Ok(decoded) => decoded.body_sections.len() == body.len(),
        Err(_) => false,
    }
}

fn put_header(out: &mut Vec<u8>, properties: &warren_delivery::Properties) {
    // A TTL beyond the uint range (49 days) is kept as the longest one AMQP 1.0 can carry.
    let ttl = properties.expiration_ms().map(|ms| u32::try_from(ms).unwrap_or(u32::MAX));
    // Without any of its fields the header would only repeat AMQP 1.0's defaults (not
    // durable, priority 4): a message published without one comes back without one.
    if !properties.is_persistent() && properties.priority().is_none() && ttl.is_none() {
        return;
    }
    let mut list = FieldList::begin(out, section::HEADER);
    list.field(out, Some(properties.is_persistent()), put_bool);
    list.field(out, properties.priority(), put_ubyte);
    list.field(out, ttl, put_uint);
    list.finish(out);
}

fn put_annotations(
    out: &mut Vec<u8>,
    basic: &Basic<'_>,
    headers: Option<&FieldTable>,
    message: &warren_delivery::Message,
) {
    let start = out.len();
    put_descriptor(out, section::MESSAGE_ANNOTATIONS);
    let map = Compound::map(out);
    let mut entries = 0;
    let kind = basic.kind.and_then(utf8);
    if let Some(kind) = kind {
        put_symbol(out, "x-basic-type");
        put_string(out, kind);
        entries += 1;
    }
    for (key, value) in headers.into_iter().flatten() {
        let key = key.as_str();
        let name = match (key, value) {
            ("CC", AMQPValue::FieldArray(_)) => "x-cc",
            // Written below from the message itself, as RabbitMQ overwrites them.
            ("x-exchange" | "x-routing-key", _) => continue,
            // Where the stream delivered it from: the chunk says so already.
            (OFFSET_HEADER, _) => continue,
            ("x-basic-type", _) if kind.is_some() => continue, // the type, written above
            (key, _) if key.starts_with("x-") => key,
            _ => continue,
        };
        if convertible(value) {
            put_symbol(out, name);
            put_value(out, value);
            entries += 1;
        }
    }
    // A message published to the stream itself (the Stream protocol, or 0-9-1's default
    // exchange) went through no exchange: its routing is the stream, which needs no saying.
    if !message.exchange.as_str().is_empty() {
        for (name, value) in
            [("x-exchange", message.exchange.as_str()), ("x-routing-key", message.routing_key.as_str())]
        {
            put_symbol(out, name);
            put_string(out, value);
            entries += 1;
        }
    }
    if entries == 0 {
        out.truncate(start);
        return;
    }
    map.finish(out, entries * 2);
}

fn put_properties(out: &mut Vec<u8>, basic: &Basic<'_>) {
    let texts = [
        basic.message_id,
        basic.user_id,
        basic.reply_to,
        basic.correlation_id,
        basic.content_type,
        basic.content_encoding,
        basic.app_id,
    ];
    if texts.iter().all(Option::is_none) && basic.timestamp.is_none() {
        return;
    }
    let mut list = FieldList::begin(out, section::PROPERTIES);
    list.field(out, basic.message_id, put_id);
    list.field(out, basic.user_id, put_binary);
    list.field(out, None::<&str>, put_string); // to
    list.field(out, None::<&str>, put_string); // subject
    list.field(out, basic.reply_to.and_then(utf8), put_string);
    list.field(out, basic.correlation_id, put_id);
    list.field(out, basic.content_type.and_then(utf8), put_symbol);
    list.field(out, basic.content_encoding.and_then(utf8), put_symbol);
    list.field(out, None::<i64>, put_timestamp); // absolute-expiry-time
    let creation_ms = basic.timestamp.and_then(|s| i64::try_from(s).ok()).and_then(|s| s.checked_mul(1000));
    list.field(out, creation_ms, put_timestamp);
    list.field(out, basic.app_id.and_then(utf8), put_string);
    list.finish(out);
}

/// Headers that are not `x-` and whose values are simple, as application properties.
fn put_application_properties(out: &mut Vec<u8>, headers: &FieldTable) {
    let simple =
        |value: &AMQPValue| !matches!(value, AMQPValue::FieldTable(_) | AMQPValue::FieldArray(_)) && convertible(value);
    let mut entries = headers.into_iter().filter(|(key, value)| !key.as_str().starts_with("x-") && simple(value));
    let Some(first) = entries.next() else { return };
    put_descriptor(out, section::APPLICATION_PROPERTIES);
    let map = Compound::map(out);
    let mut count = 0;
    for (key, value) in std::iter::once(first).chain(entries) {
        put_string(out, key.as_str());
        put_value(out, value);
        count += 2;
    }
    map.finish(out, count);
}

/// A message or correlation id: a `urn:uuid:` string as the uuid it names, else a string,
/// or a binary if the 0-9-1 client sent bytes that are not UTF-8.
fn put_id(out: &mut Vec<u8>, id: &[u8]) {
    if let Some(uuid) = parse_urn_uuid(id) {
        put_uuid(out, &uuid);
    } else if let Some(text) = utf8(id) {
        put_string(out, text);
    } else {
        put_binary(out, id);
    }
}

/// The UUID in `urn:uuid:xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (hex of either case).
pub fn parse_urn_uuid(id: &[u8]) -> Option<[u8; 16]> {
    const DASHES_AT: [usize; 4] = [8, 13, 18, 23];
    let text = id.strip_prefix(b"urn:uuid:").filter(|text| text.len() == 36)?;
    if DASHES_AT.iter().any(|&i| text[i] != b'-') {
        return None;
    }
    let mut uuid = [0u8; 16];
    let mut digits = text.iter().enumerate().filter(|(i, _)| !DASHES_AT.contains(i)).map(|(_, &c)| hex_digit(c));
    for byte in &mut uuid {
        *byte = (digits.next()?? << 4) | digits.next()??;
    }
    Some(uuid)
}

fn hex_digit(c: u8) -> Option<u8> {
    char::from(c).to_digit(16).map(|d| d as u8)
}

fn utf8(bytes: &[u8]) -> Option<&str> {
    std::str::from_utf8(bytes).ok()
}

/// Whether a header value has an AMQP 1.0 counterpart (RabbitMQ has none for decimals).
fn convertible(value: &AMQPValue) -> bool {
    !matches!(value, AMQPValue::DecimalValue(_))
}

/// A 0-9-1 field value in AMQP 1.0, as RabbitMQ converts it.
fn put_value(out: &mut Vec<u8>, value: &AMQPValue) {
    match value {
        AMQPValue::Boolean(b) => put_bool(out, *b),
        AMQPValue::ShortShortInt(n) => put_fixed(out, code::BYTE, &n.to_be_bytes()),
        AMQPValue::ShortShortUInt(n) => put_ubyte(out, *n),
        AMQPValue::ShortInt(n) => put_fixed(out, code::SHORT, &n.to_be_bytes()),
        AMQPValue::ShortUInt(n) => put_fixed(out, code::USHORT, &n.to_be_bytes()),
        AMQPValue::LongInt(n) => put_int(out, *n),
        AMQPValue::LongUInt(n) => put_uint(out, *n),
        AMQPValue::LongLongInt(n) => put_long(out, *n),
        AMQPValue::Float(f) => put_fixed(out, code::FLOAT, &f.to_be_bytes()),
        AMQPValue::Double(f) => put_fixed(out, code::DOUBLE, &f.to_be_bytes()),
        AMQPValue::ShortString(s) => put_string(out, s.as_str()),
        AMQPValue::LongString(s) => put_long_string(out, s.as_bytes()),
        AMQPValue::ByteArray(bytes) => put_binary(out, bytes.as_slice()),
        // 0-9-1 timestamps are seconds, AMQP 1.0 ones milliseconds.
        AMQPValue::Timestamp(s) => put_timestamp(out, i64::try_from(*s).unwrap_or(i64::MAX).saturating_mul(1000)),
        AMQPValue::FieldArray(items) => {
            let list = Compound::list(out);
            let mut count = 0;
            for item in items.as_slice().iter().filter(|item| convertible(item)) {
                put_value(out, item);
                count += 1;
            }
            list.finish(out, count);
        }
        AMQPValue::FieldTable(table) => {
            let map = Compound::map(out);
            let mut count = 0;
            for (key, value) in table.into_iter().filter(|(_, value)| convertible(value)) {
                put_symbol(out, key.as_str());
                put_value(out, value);
                count += 2;
            }
            map.finish(out, count);
        }
        AMQPValue::Void | AMQPValue::DecimalValue(_) => put_null(out),
    }
}

/// A long string: a string if it is short enough to check and UTF-8 with no NUL, else a
/// binary (RabbitMQ does not scan long ones, for speed).
fn put_long_string(out: &mut Vec<u8>, bytes: &[u8]) {
    let text = utf8(bytes).filter(|text| bytes.len() <= LONGSTR_UTF8_LIMIT_BYTES && !text.contains('\0'));
    match text {
        Some(text) => put_string(out, text),
        None => put_binary(out, bytes),
    }
}

/// The 0-9-1 basic properties, borrowed from the raw property list.
#[derive(Debug, Default)]
struct Basic<'a> {
    content_type: Option<&'a [u8]>,
    content_encoding: Option<&'a [u8]>,
    correlation_id: Option<&'a [u8]>,
    reply_to: Option<&'a [u8]>,
    message_id: Option<&'a [u8]>,
    timestamp: Option<u64>,
    kind: Option<&'a [u8]>,
    user_id: Option<&'a [u8]>,
    app_id: Option<&'a [u8]>,
}

impl<'a> Basic<'a> {
    /// Reads the fields of a property list that [`warren_delivery::Properties::decode`]
    /// has already checked; a field it could not read would be left absent.
    fn scan(raw: &'a [u8]) -> Basic<'a> {
        let mut basic = Basic::default();
        let _complete = basic.scan_into(raw);
        basic
    }

    fn scan_into(&mut self, raw: &'a [u8]) -> Option<()> {
        let mut reader = Reader { raw, pos: 0 };
        let flags = u16::from_be_bytes(reader.take(2)?.try_into().ok()?);
        let has = |field: u16| flags & (1 << (15 - field)) != 0;
        self.content_type = reader.short_if(has(0))?;
        self.content_encoding = reader.short_if(has(1))?;
        if has(2) {
            let len = u32::from_be_bytes(reader.take(4)?.try_into().ok()?);
            reader.take(len as usize)?;
        }
        for present in [has(3), has(4)] {
            reader.take(usize::from(present))?; // delivery mode, priority: read from Properties
        }
        self.correlation_id = reader.short_if(has(5))?;
        self.reply_to = reader.short_if(has(6))?;
        reader.short_if(has(7))?; // expiration: read from Properties
        self.message_id = reader.short_if(has(8))?;
        if has(9) {
            self.timestamp = Some(u64::from_be_bytes(reader.take(8)?.try_into().ok()?));
        }
        self.kind = reader.short_if(has(10))?;
        self.user_id = reader.short_if(has(11))?;
        self.app_id = reader.short_if(has(12))?;
        Some(())
    }
}

struct Reader<'a> {
    raw: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Option<&'a [u8]> {
        let taken = self.raw.get(self.pos..self.pos.checked_add(len)?)?;
        self.pos += len;
        Some(taken)
    }

    /// A short string if `present`; `None` only if the list is truncated.
    fn short_if(&mut self, present: bool) -> Option<Option<&'a [u8]>> {
        if !present {
            return Some(None);
        }
        let len = self.take(1)?[0];
        self.take(usize::from(len)).map(Some)
    }
}
