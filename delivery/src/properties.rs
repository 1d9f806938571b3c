//! The content header's basic properties, kept as the raw bytes the publisher sent.
//!
//! Deliveries copy these bytes back out unchanged, which is what makes properties and headers
//! round-trip byte-exact (a decoded `FieldTable` would reorder keys). The broker reads the few
//! fields it acts on (delivery mode, priority, expiration, headers) in one scan at publish and
//! keeps where they are in the raw bytes, not copies of them.
//!
//! The headers table is decoded at publish to check it, and then dropped unless it is small:
//! decoded, a table takes a B-tree node per few entries and an allocation per key and string,
//! often more than its raw bytes (240 headers of 250 bytes: 62 KB raw, 90 KB more decoded), and
//! a queued message must not carry its headers twice for nothing. It is decoded again, and
//! kept, only when something asks for it ([`Properties::headers`]); memory budgets count it
//! either way ([`Properties::memory_bytes`]).

use crate::field_table::{self, FieldTableError};
use amq_protocol::types::{AMQPValue, FieldTable, ShortString};
use bytes::Bytes;
use std::mem::size_of;
use std::sync::OnceLock;

/// Property flag bits, in the order the fields appear on the wire (bit 15 first).
mod flag {
    pub const CONTENT_TYPE: u16 = 1 << 15;
    pub const CONTENT_ENCODING: u16 = 1 << 14;
    pub const HEADERS: u16 = 1 << 13;
    pub const DELIVERY_MODE: u16 = 1 << 12;
    pub const PRIORITY: u16 = 1 << 11;
    pub const CORRELATION_ID: u16 = 1 << 10;
    pub const REPLY_TO: u16 = 1 << 9;
    pub const EXPIRATION: u16 = 1 << 8;
    pub const MESSAGE_ID: u16 = 1 << 7;
    pub const TIMESTAMP: u16 = 1 << 6;
    pub const TYPE: u16 = 1 << 5;
    pub const USER_ID: u16 = 1 << 4;
    pub const APP_ID: u16 = 1 << 3;
    pub const CLUSTER_ID: u16 = 1 << 2;
    /// Bits 1 and 0 (reserved, and the continuation flag) must be clear in 0-9-1.
    pub const RESERVED: u16 = 0b11;
}

/// `delivery_mode` value of a persistent message.
pub const DELIVERY_MODE_PERSISTENT: u8 = 2;

/// What one heap allocation costs besides the bytes asked for (size-class rounding).
const HEAP_BLOCK_OVERHEAD_BYTES: usize = 16;
/// A decoded table entry's key and value, as a B-tree node holds them.
const TABLE_SLOT_BYTES: usize = size_of::<ShortString>() + size_of::<AMQPValue>();
/// Entries a B-tree node has room for (std's `BTreeMap`).
const BTREE_NODE_CAPACITY: usize = 11;
/// What a decoded table takes before its entries: its first node, allocated whole.
const TABLE_BASE_BYTES: usize = BTREE_NODE_CAPACITY * TABLE_SLOT_BYTES + HEAP_BLOCK_OVERHEAD_BYTES;
/// What each entry takes in the B-tree besides what its key and value allocate: nodes are at
/// least half full, so two slots.
const TABLE_ENTRY_BYTES: usize = 2 * TABLE_SLOT_BYTES;
/// Headers whose decoded table takes at most this stay decoded from publish on: the usual
/// handful of headers, which the headers exchange and other readers would otherwise decode
/// again for every message.
const KEEP_DECODED_HEADERS_MAX_BYTES: usize = 2048;

/// Why a property list was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PropertiesError {
    /// The list ends before the fields its flags announce.
    #[error("property list truncated in field {0}")]
    Truncated(&'static str),
    /// A reserved or continuation flag bit is set.
    #[error("reserved property flag bits set: {0:#06x}")]
    ReservedFlags(u16),
    /// The headers table does not decode, or nests too deep.
    #[error("headers: {0}")]
    BadHeaders(#[from] FieldTableError),
    /// The list is longer than its flags announce.
    #[error("{0} trailing bytes after the property list")]
    Trailing(usize),
    /// The list is longer than a content header can carry (4 GiB).
    #[error("property list of {0} bytes is too long")]
    TooLong(usize),
}

/// Where a field is in the raw property list (offsets fit: lists are shorter than 4 GiB).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    start: u32,
    end: u32,
}

impl Span {
    fn of(range: std::ops::Range<usize>) -> Self {
        // `Properties::scan` first refuses lists too long for these offsets.
        Span { start: range.start as u32, end: range.end as u32 }
    }

    fn range(self) -> std::ops::Range<usize> {
        self.start as usize..self.end as usize
    }
}

/// The headers table: where it is, what it takes decoded, and the decoded table once asked for.
#[derive(Debug, Clone, Default)]
struct Headers {
    /// The table, its 4-byte length first.
    span: Option<Span>,
    /// What the table takes decoded (see [`decoded_table_bytes`]).
    decoded_bytes: usize,
    decoded: OnceLock<FieldTable>,
}

/// Basic properties: the raw wire bytes, and where the fields the broker acts on are in them.
#[derive(Debug, Clone, Default)]
pub struct Properties {
    raw: Bytes,
    delivery_mode: Option<u8>,
    priority: Option<u8>,
    expiration: Option<Span>,
    reply_to: Option<Span>,
    user_id: Option<Span>,
    headers: Headers,
    /// For a message published over the Stream protocol: its AMQP 1.0 sections before the
    /// body, as encoded, which stream consumers get back byte for byte. Not part of the
    /// 0-9-1 property list: 0-9-1 consumers never see it.
    amqp10_head: Option<Bytes>,
}

impl Properties {
    /// Scans a property list (flags, then fields) as found after the content header's body
    /// size, and checks its headers table by decoding it.
    pub fn decode(raw: Bytes) -> Result<Self, PropertiesError> {
        let mut props = Self::scan(raw)?;
        if let Some(span) = props.headers.span {
            let raw_table = props.raw.get(span.range()).ok_or(PropertiesError::Truncated("headers"))?;
            let table = field_table::decode(raw_table)?;
            props.headers.decoded_bytes = decoded_table_bytes(&table);
            if props.headers.decoded_bytes <= KEEP_DECODED_HEADERS_MAX_BYTES {
                props.headers.decoded = OnceLock::from(table);
            }
        }
        Ok(props)
    }

    /// Finds the fields in a property list; the headers table's bounds, nesting and value
    /// types are checked, but it is not decoded.
    fn scan(raw: Bytes) -> Result<Self, PropertiesError> {
        if u32::try_from(raw.len()).is_err() {
            return Err(PropertiesError::TooLong(raw.len()));
        }
        let mut cursor = Cursor { buf: &raw, pos: 0 };
        let flags = u16::from_be_bytes(cursor.take::<2>("flags")?);
        if flags & flag::RESERVED != 0 {
            return Err(PropertiesError::ReservedFlags(flags));
        }
        let mut props = Properties::default();
        cursor.skip_short_string_if(flags & flag::CONTENT_TYPE, "content-type")?;
        cursor.skip_short_string_if(flags & flag::CONTENT_ENCODING, "content-encoding")?;
        if flags & flag::HEADERS != 0 {
            props.headers.span = Some(Span::of(cursor.field_table()?));
        }
        if flags & flag::DELIVERY_MODE != 0 {
            props.delivery_mode = Some(cursor.take::<1>("delivery-mode")?[0]);
        }
        if flags & flag::PRIORITY != 0 {
            props.priority = Some(cursor.take::<1>("priority")?[0]);
        }
        cursor.skip_short_string_if(flags & flag::CORRELATION_ID, "correlation-id")?;
        props.reply_to = cursor.short_string_if(flags & flag::REPLY_TO, "reply-to")?;
        props.expiration = cursor.short_string_if(flags & flag::EXPIRATION, "expiration")?;
        cursor.skip_short_string_if(flags & flag::MESSAGE_ID, "message-id")?;
        if flags & flag::TIMESTAMP != 0 {
            cursor.take::<8>("timestamp")?;
        }
        cursor.skip_short_string_if(flags & flag::TYPE, "type")?;
        props.user_id = cursor.short_string_if(flags & flag::USER_ID, "user-id")?;
        for (bit, name) in [(flag::APP_ID, "app-id"), (flag::CLUSTER_ID, "cluster-id")] {
            cursor.skip_short_string_if(flags & bit, name)?;
        }
        if cursor.pos != raw.len() {
            return Err(PropertiesError::Trailing(raw.len() - cursor.pos));
        }
        props.raw = raw;
        Ok(props)
    }

    /// An empty property list (no flags set).
    pub fn empty() -> Self {
        Properties { raw: Bytes::from_static(&[0, 0]), ..Default::default() }
    }

    /// The property list exactly as received.
    pub fn raw(&self) -> &Bytes {
        &self.raw
    }

    /// Memory these properties take with a message held in memory: the raw list, and what its
    /// headers take decoded. The decoded table is counted whether or not it is decoded yet:
    /// anything may ask for it while the message is queued (a consumer's filter, `x-delay`, a
    /// dead-letter cycle check), and a store that counted a message one way at append and
    /// another at removal would drift.
    pub fn memory_bytes(&self) -> usize {
        self.raw.len() + self.headers.decoded_bytes + self.amqp10_head.as_ref().map_or(0, Bytes::len)
    }

    /// A copy whose raw bytes are its own, not a slice of a larger buffer it would keep alive.
    pub fn compacted(&self) -> Properties {
        let amqp10_head = self.amqp10_head.as_deref().map(Bytes::copy_from_slice);
        Properties { raw: Bytes::copy_from_slice(&self.raw), amqp10_head, ..self.clone() }
    }

    /// These properties with the AMQP 1.0 sections a Stream-protocol publisher sent before
    /// the body (see [`Properties::amqp10_head`]).
    pub fn with_amqp10_head(mut self, head: Bytes) -> Properties {
        self.amqp10_head = Some(head).filter(|head| !head.is_empty());
        self
    }

    /// The AMQP 1.0 sections before the body of a message published over the Stream
    /// protocol, as they were encoded.
    pub fn amqp10_head(&self) -> Option<&Bytes> {
        self.amqp10_head.as_ref()
    }

    fn field(&self, span: Option<Span>) -> Option<&[u8]> {
        span.and_then(|span| self.raw.get(span.range()))
    }

    /// True for `delivery_mode = 2`.
    pub fn is_persistent(&self) -> bool {
        self.delivery_mode == Some(DELIVERY_MODE_PERSISTENT)
    }

    /// The `priority` property, if set.
    pub fn priority(&self) -> Option<u8> {
        self.priority
    }

    /// The `expiration` property's raw bytes, if set.
    pub fn expiration(&self) -> Option<&[u8]> {
        self.field(self.expiration)
    }

    /// The `expiration` property as milliseconds: `None` if absent or not a whole number.
    pub fn expiration_ms(&self) -> Option<u64> {
        let text = std::str::from_utf8(self.expiration()?).ok()?;
        text.bytes().all(|b| b.is_ascii_digit()).then(|| text.parse().ok()).flatten()
    }

    /// The `reply-to` property's bytes, if set.
    pub fn reply_to(&self) -> Option<&[u8]> {
        self.field(self.reply_to)
    }

    /// The `user-id` property: the publisher's claim of who it is, which the broker checks
    /// against the connection's user.
    pub fn user_id(&self) -> Option<&[u8]> {
        self.field(self.user_id)
    }

    /// These properties with `reply-to` set to `reply_to`, every other byte as it was; `None`
    /// if they have no reply-to to replace. Direct reply-to rewrites a request's
    /// `amq.rabbitmq.reply-to` to the requester's own reply address this way.
    pub fn with_reply_to(&self, reply_to: &str) -> Option<Properties> {
        let new_len = u8::try_from(reply_to.len()).ok()?;
        let raw = &self.raw;
        let at = reply_to_position(raw).ok()??;
        let old_len = usize::from(*raw.get(at)?);
        let mut out = Vec::with_capacity(raw.len() + reply_to.len());
        out.extend_from_slice(&raw[..at]);
        out.push(new_len);
        out.extend_from_slice(reply_to.as_bytes());
        out.extend_from_slice(raw.get(at + 1 + old_len..)?);
        Properties::decode(Bytes::from(out)).ok().map(|p| Properties { amqp10_head: self.amqp10_head.clone(), ..p })
    }

    /// The `headers` table, if set: decoded on the first call (unless small enough to have
    /// been kept from publish) and kept with the message from then on.
    pub fn headers(&self) -> Option<&FieldTable> {
        let span = self.headers.span?;
        // Checked at publish; an empty table if it somehow does not decode now.
        let decode =
            || self.raw.get(span.range()).and_then(|table| field_table::decode(table).ok()).unwrap_or_default();
        Some(self.headers.decoded.get_or_init(decode))
    }

    /// These properties with a long-long header `name: value` added at the end of the
    /// headers table (created if absent); every other byte stays as it was. This is how a
    /// stream stamps each delivery with its offset without re-encoding the property list.
    pub fn with_long_long_header(&self, name: &str, value: i64) -> Result<Properties, PropertiesError> {
        let name_len = u8::try_from(name.len()).map_err(|_| PropertiesError::BadHeaders(FieldTableError::Malformed))?;
        let raw = &self.raw;
        let mut cursor = Cursor { buf: raw, pos: 0 };
        let flags = u16::from_be_bytes(cursor.take::<2>("flags")?);
        cursor.skip_short_string_if(flags & flag::CONTENT_TYPE, "content-type")?;
        cursor.skip_short_string_if(flags & flag::CONTENT_ENCODING, "content-encoding")?;
        let table_at = cursor.pos;
        let entry_len = 1 + name.len() + 1 + 8;
        let put_entry = |out: &mut Vec<u8>| {
            out.push(name_len);
            out.extend_from_slice(name.as_bytes());
            out.push(b'l');
            out.extend_from_slice(&value.to_be_bytes());
        };
        let mut out = Vec::with_capacity(raw.len() + entry_len + 4);
        if flags & flag::HEADERS != 0 {
            let table_len = u32::from_be_bytes(cursor.take::<4>("headers")?) as usize;
            let table_end = table_at + 4 + table_len;
            if table_end > raw.len() {
                return Err(PropertiesError::Truncated("headers"));
            }
            out.extend_from_slice(&raw[..table_at]);
            out.extend_from_slice(&((table_len + entry_len) as u32).to_be_bytes());
            out.extend_from_slice(&raw[table_at + 4..table_end]);
            put_entry(&mut out);
            out.extend_from_slice(&raw[table_end..]);
        } else {
            out.extend_from_slice(&(flags | flag::HEADERS).to_be_bytes());
            out.extend_from_slice(&raw[2..table_at]);
            out.extend_from_slice(&(entry_len as u32).to_be_bytes());
            put_entry(&mut out);
            out.extend_from_slice(&raw[table_at..]);
        }
        let mut stamped = Self::scan(Bytes::from(out))?;
        stamped.headers = self.headers.plus(name, AMQPValue::LongLongInt(value), stamped.headers.span);
        stamped.amqp10_head = self.amqp10_head.clone();
        Ok(stamped)
    }
}

impl Headers {
    /// These headers with `name: value` added at `span` (spliced into the raw table, which
    /// needs no decoding to be checked again); a table already decoded is kept so.
    fn plus(&self, name: &str, value: AMQPValue, span: Option<Span>) -> Headers {
        let base = if self.span.is_none() { TABLE_BASE_BYTES } else { 0 };
        let added = base + TABLE_ENTRY_BYTES + heap_block_bytes(name.len()) + value_heap_bytes(&value);
        let decoded = match self.decoded.get() {
            Some(table) => {
                let mut table = table.clone();
                table.insert(name.into(), value);
                OnceLock::from(table)
            }
            None => OnceLock::new(),
        };
        Headers { span, decoded_bytes: self.decoded_bytes + added, decoded }
    }
}

/// What `table` takes on the heap, decoded: its B-tree and what its keys and values allocate.
/// An estimate on the high side (nodes are taken as half full).
fn decoded_table_bytes(table: &FieldTable) -> usize {
    if table.inner().is_empty() {
        return 0;
    }
    let entries = table
        .inner()
        .iter()
        .map(|(key, value)| TABLE_ENTRY_BYTES + heap_block_bytes(key.as_str().len()) + value_heap_bytes(value));
    TABLE_BASE_BYTES + entries.sum::<usize>()
}

/// What a decoded value allocates (its own size is in its table's or array's slot). Tables
/// are checked to nest at most [`field_table::MAX_NESTING_DEPTH`] levels before decoding.
fn value_heap_bytes(value: &AMQPValue) -> usize {
    match value {
        AMQPValue::ShortString(text) => heap_block_bytes(text.as_str().len()),
        AMQPValue::LongString(text) => heap_block_bytes(text.as_bytes().len()),
        AMQPValue::ByteArray(bytes) => heap_block_bytes(bytes.as_slice().len()),
        AMQPValue::FieldTable(table) => decoded_table_bytes(table),
        AMQPValue::FieldArray(items) => {
            let items = items.as_slice();
            heap_block_bytes(std::mem::size_of_val(items)) + items.iter().map(value_heap_bytes).sum::<usize>()
        }
        _ => 0,
    }
}

/// What an allocation of `len` bytes takes (nothing for none).
fn heap_block_bytes(len: usize) -> usize {
    if len == 0 {
        0
    } else {
        len + HEAP_BLOCK_OVERHEAD_BYTES
    }
}

/// Where the `reply-to` short string (its length octet) starts in a property list, if set.
fn reply_to_position(raw: &[u8]) -> Result<Option<usize>, PropertiesError> {
    let mut cursor = Cursor { buf: raw, pos: 0 };
    let flags = u16::from_be_bytes(cursor.take::<2>("flags")?);
    if flags & flag::REPLY_TO == 0 {
        return Ok(None);
    }
    cursor.skip_short_string_if(flags & flag::CONTENT_TYPE, "content-type")?;
    cursor.skip_short_string_if(flags & flag::CONTENT_ENCODING, "content-encoding")?;
    if flags & flag::HEADERS != 0 {
        let len = u32::from_be_bytes(cursor.take::<4>("headers")?) as usize;
        cursor.pos += len;
    }
    if flags & flag::DELIVERY_MODE != 0 {
        cursor.take::<1>("delivery-mode")?;
    }
    if flags & flag::PRIORITY != 0 {
        cursor.take::<1>("priority")?;
    }
    cursor.skip_short_string_if(flags & flag::CORRELATION_ID, "correlation-id")?;
    Ok(Some(cursor.pos))
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn take<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], PropertiesError> {
        let bytes = self.buf.get(self.pos..self.pos + N).ok_or(PropertiesError::Truncated(field))?;
        self.pos += N;
        let mut out = [0; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    fn short_string(&mut self, field: &'static str) -> Result<std::ops::Range<usize>, PropertiesError> {
        let len = self.take::<1>(field)?[0] as usize;
        let start = self.pos;
        if self.buf.len() < start + len {
            return Err(PropertiesError::Truncated(field));
        }
        self.pos += len;
        Ok(start..start + len)
    }

    fn short_string_if(&mut self, present: u16, field: &'static str) -> Result<Option<Span>, PropertiesError> {
        if present == 0 {
            return Ok(None);
        }
        Ok(Some(Span::of(self.short_string(field)?)))
    }

    fn skip_short_string_if(&mut self, present: u16, field: &'static str) -> Result<(), PropertiesError> {
        self.short_string_if(present, field).map(drop)
    }

    /// The headers table's bytes (its length first). Its bounds, nesting and value types are
    /// checked here, in order with the other fields; decoding it is left to the caller.
    fn field_table(&mut self) -> Result<std::ops::Range<usize>, PropertiesError> {
        let len = u32::from_be_bytes(self.take::<4>("headers")?) as usize;
        let start = self.pos - 4;
        let end = self.pos.checked_add(len).filter(|end| *end <= self.buf.len());
        self.pos = end.ok_or(PropertiesError::Truncated("headers"))?;
        field_table::check_wire_table(&self.buf[start..self.pos])?;
        Ok(start..self.pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use amq_protocol::protocol::basic::{gen_properties, AMQPProperties};
    use amq_protocol::types::{AMQPValue, ShortString};

    fn encode(props: &AMQPProperties) -> Bytes {
        let ctx = gen_properties(props)(amq_protocol::frame::WriteContext::from(Vec::new()));
        Bytes::from(ctx.map(|c| c.write).unwrap_or_default())
    }

    #[test]
    fn reads_the_fields_the_broker_acts_on() {
        let mut headers = FieldTable::default();
        headers.insert(ShortString::from("k"), AMQPValue::LongInt(7));
        let props = AMQPProperties::default()
            .with_content_type("text/plain".into())
            .with_headers(headers.clone())
            .with_delivery_mode(2)
            .with_priority(5)
            .with_expiration("60000".into())
            .with_timestamp(12)
            .with_app_id("app".into());
        let decoded = Properties::decode(encode(&props)).expect("valid list");
        assert!(decoded.is_persistent());
        assert_eq!(decoded.priority(), Some(5));
        assert_eq!(decoded.expiration(), Some(&b"60000"[..]));
        assert_eq!(decoded.headers(), Some(&headers));
    }

    #[test]
    fn a_header_is_spliced_in_with_every_other_byte_kept() {
        let mut headers = FieldTable::default();
        headers.insert(ShortString::from("k"), AMQPValue::LongInt(7));
        let with_headers = AMQPProperties::default()
            .with_content_type("text/plain".into())
            .with_headers(headers)
            .with_delivery_mode(2)
            .with_app_id("app".into());
        let without = AMQPProperties::default().with_content_type("a".into()).with_correlation_id("c".into());
        for props in [with_headers, without, AMQPProperties::default()] {
            let original = Properties::decode(encode(&props)).expect("valid list");
            let stamped = original.with_long_long_header("x-stream-offset", 42).expect("splices");
            // The spliced bytes decode (as a client would) to the original plus the header.
            let (_, decoded) = amq_protocol::protocol::basic::parse_properties(&stamped.raw()[..]).expect("decodes");
            let mut expected_headers = props.headers().clone().unwrap_or_default();
            expected_headers.insert(ShortString::from("x-stream-offset"), AMQPValue::LongLongInt(42));
            assert_eq!(decoded, props.clone().with_headers(expected_headers.clone()));
            assert_eq!(Properties::decode(stamped.raw().clone()).expect("valid").headers(), Some(&expected_headers));
            assert_eq!(stamped.headers(), Some(&expected_headers));
            assert_eq!(stamped.is_persistent(), original.is_persistent());
        }
    }

    #[test]
    fn reply_to_is_replaced_with_every_other_byte_kept() {
        let mut headers = FieldTable::default();
        headers.insert(ShortString::from("k"), AMQPValue::LongInt(7));
        let props = AMQPProperties::default()
            .with_content_type("application/json".into())
            .with_headers(headers)
            .with_delivery_mode(2)
            .with_priority(3)
            .with_correlation_id("c-1".into())
            .with_reply_to("amq.rabbitmq.reply-to".into())
            .with_expiration("1000".into())
            .with_app_id("app".into());
        let original = Properties::decode(encode(&props)).expect("valid list");
        assert_eq!(original.reply_to(), Some(&b"amq.rabbitmq.reply-to"[..]));
        let rewritten = original.with_reply_to("amq.rabbitmq.reply-to.abc.1.2.ff").expect("rewrites");
        let (_, decoded) = amq_protocol::protocol::basic::parse_properties(&rewritten.raw()[..]).expect("decodes");
        assert_eq!(decoded, props.with_reply_to("amq.rabbitmq.reply-to.abc.1.2.ff".into()));
        assert_eq!(rewritten.reply_to(), Some(&b"amq.rabbitmq.reply-to.abc.1.2.ff"[..]));
        assert_eq!(rewritten.expiration(), Some(&b"1000"[..]));
        let without = Properties::decode(encode(&AMQPProperties::default())).expect("valid list");
        assert!(without.with_reply_to("x").is_none(), "only an existing reply-to is replaced");
    }

    #[test]
    fn big_headers_are_kept_raw_and_counted_as_decoded() {
        let mut headers = FieldTable::default();
        for entry in 0..100 {
            headers.insert(ShortString::from(format!("k{entry}")), AMQPValue::LongString(vec![b'v'; 100].into()));
        }
        let props = AMQPProperties::default().with_headers(headers.clone()).with_user_id("u".into());
        let decoded = Properties::decode(encode(&props)).expect("valid list");
        assert!(decoded.headers.decoded.get().is_none(), "a big table is not kept decoded from publish");
        let counted = decoded.memory_bytes();
        assert!(counted > 2 * decoded.raw().len(), "decoded, a table of small values takes more than its bytes");
        assert_eq!(decoded.headers(), Some(&headers));
        assert_eq!(decoded.memory_bytes(), counted, "decoding on demand changes nothing counted");
        assert_eq!(decoded.user_id(), Some(&b"u"[..]));

        let small = AMQPProperties::default().with_headers(FieldTable::from(
            [(ShortString::from("k"), AMQPValue::LongInt(7))].into_iter().collect::<std::collections::BTreeMap<_, _>>(),
        ));
        let small = Properties::decode(encode(&small)).expect("valid list");
        assert!(small.headers.decoded.get().is_some(), "a small table stays decoded");
        assert!(small.memory_bytes() >= small.raw().len() + TABLE_BASE_BYTES);
        let stamped = small.with_long_long_header("x-stream-offset", 1).expect("splices");
        assert!(stamped.memory_bytes() > small.memory_bytes() + TABLE_ENTRY_BYTES);
        assert_eq!(Properties::empty().memory_bytes(), 2);
    }

    #[test]
    fn refuses_truncated_and_trailing_lists() {
        let props = AMQPProperties::default().with_correlation_id("abc".into());
        let raw = encode(&props);
        let cut = raw.slice(..raw.len() - 1);
        assert_eq!(Properties::decode(cut).err(), Some(PropertiesError::Truncated("correlation-id")));
        let mut long = raw.to_vec();
        long.push(0);
        assert_eq!(Properties::decode(Bytes::from(long)).err(), Some(PropertiesError::Trailing(1)));
        assert!(matches!(Properties::decode(Bytes::from_static(&[0, 1])), Err(PropertiesError::ReservedFlags(_))));
    }
}
