//! The sections of an AMQP 1.0 message (part 3.2 of the specification) as stream clients
//! publish them: header, delivery annotations, message annotations, properties, application
//! properties, a body of data sections, amqp-sequence sections or one amqp-value, and a
//! footer. Each is optional; they come in that order, each at most once (body sections of
//! one kind may repeat).

use super::decode::Decoder;
use super::encode::{
    put_binary, put_bool, put_descriptor, put_string, put_symbol, put_timestamp, put_ubyte, put_uint, Compound,
};
use super::error::Amqp10Error;
use super::types::Value;
use bytes::Bytes;

/// Section descriptor codes, and the symbolic names the specification gives them.
#[allow(missing_docs)] // each is named as the specification names its section
pub mod section {
    pub const HEADER: u64 = 0x70;
    pub const DELIVERY_ANNOTATIONS: u64 = 0x71;
    pub const MESSAGE_ANNOTATIONS: u64 = 0x72;
    pub const PROPERTIES: u64 = 0x73;
    pub const APPLICATION_PROPERTIES: u64 = 0x74;
    pub const DATA: u64 = 0x75;
    pub const AMQP_SEQUENCE: u64 = 0x76;
    pub const AMQP_VALUE: u64 = 0x77;
    pub const FOOTER: u64 = 0x78;

    /// `(code, symbolic descriptor, name in errors)`, in the order sections must come.
    pub const ALL: [(u64, &str, &str); 9] = [
        (HEADER, "amqp:header:list", "header"),
        (DELIVERY_ANNOTATIONS, "amqp:delivery-annotations:map", "delivery-annotations"),
        (MESSAGE_ANNOTATIONS, "amqp:message-annotations:map", "message-annotations"),
        (PROPERTIES, "amqp:properties:list", "properties"),
        (APPLICATION_PROPERTIES, "amqp:application-properties:map", "application-properties"),
        (DATA, "amqp:data:binary", "data"),
        (AMQP_SEQUENCE, "amqp:amqp-sequence:list", "amqp-sequence"),
        (AMQP_VALUE, "amqp:amqp-value:*", "amqp-value"),
        (FOOTER, "amqp:footer:map", "footer"),
    ];
}

/// The header section. Absent fields are `None` (the specification's defaults are the
/// reader's business: RabbitMQ treats an absent field differently from a default one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Header {
    /// `durable`.
    pub durable: Option<bool>,
    /// `priority`.
    pub priority: Option<u8>,
    /// `ttl`, in milliseconds.
    pub ttl_ms: Option<u32>,
    /// `first-acquirer`.
    pub first_acquirer: Option<bool>,
    /// `delivery-count`.
    pub delivery_count: Option<u32>,
}

/// The properties section.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Properties {
    /// `message-id`: a ulong, uuid, binary or string (a long is accepted too).
    pub message_id: Option<Value>,
    /// `user-id`.
    pub user_id: Option<Bytes>,
    /// `to`.
    pub to: Option<String>,
    /// `subject`.
    pub subject: Option<String>,
    /// `reply-to`.
    pub reply_to: Option<String>,
    /// `correlation-id`: as `message_id`.
    pub correlation_id: Option<Value>,
    /// `content-type`.
    pub content_type: Option<String>,
    /// `content-encoding`.
    pub content_encoding: Option<String>,
    /// `absolute-expiry-time`, milliseconds since the epoch.
    pub absolute_expiry_time: Option<i64>,
    /// `creation-time`, milliseconds since the epoch.
    pub creation_time: Option<i64>,
    /// `group-id`.
    pub group_id: Option<String>,
    /// `group-sequence`.
    pub group_sequence: Option<u32>,
    /// `reply-to-group-id`.
    pub reply_to_group_id: Option<String>,
}

/// The body.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Body {
    /// No body section.
    #[default]
    None,
    /// One or more data sections.
    Data(Vec<Bytes>),
    /// One or more amqp-sequence sections.
    Sequence(Vec<Vec<Value>>),
    /// One amqp-value section.
    Value(Value),
}

/// A decoded or to-be-encoded message. Annotation and application-property maps keep their
/// entries in wire order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Message {
    /// The header section.
    pub header: Option<Header>,
    /// The delivery-annotations section.
    pub delivery_annotations: Option<Vec<(Value, Value)>>,
    /// The message-annotations section.
    pub message_annotations: Option<Vec<(Value, Value)>>,
    /// The properties section.
    pub properties: Option<Properties>,
    /// The application-properties section.
    pub application_properties: Option<Vec<(Value, Value)>>,
    /// The body.
    pub body: Body,
    /// The footer section.
    pub footer: Option<Vec<(Value, Value)>>,
}

/// A decoded message, and its body sections as they were encoded (a slice of the input).
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedMessage {
    /// The message.
    pub message: Message,
    /// The body sections' bytes, empty if there are none.
    pub body_sections: Bytes,
    /// The sections before the body (header, annotations, properties, application
    /// properties) as they were encoded, empty if there are none.
    pub head: Bytes,
}

/// Which section a described value is, by its descriptor: its index in [`section::ALL`].
fn section_index(descriptor: &Value) -> Result<usize, Amqp10Error> {
    let found = section::ALL.iter().position(|(code, name, _)| match descriptor {
        Value::Ulong(value) => value == code,
        Value::Symbol(symbol) => symbol == name,
        _ => false,
    });
    found.ok_or_else(|| Amqp10Error::UnknownSection(format!("{descriptor:?}")))
}

const BODY_FIRST: usize = 5;
const FOOTER_INDEX: usize = 8;

impl Message {
    /// Decodes a whole message: every byte must belong to a section.
    pub fn decode(bytes: &Bytes) -> Result<DecodedMessage, Amqp10Error> {
        let mut decoder = Decoder::new(bytes);
        let mut message = Message::default();
        let mut last: Option<usize> = None;
        let mut body_span = 0..0;
        while !decoder.is_at_end() {
            let start = decoder.position();
            let format = decoder.peek().unwrap_or_default();
            let Value::Described(descriptor, value) = decoder.value()? else {
                return Err(Amqp10Error::NotASection(format));
            };
            let index = section_index(&descriptor)?;
            check_order(last, index)?;
            last = Some(index);
            if (BODY_FIRST..FOOTER_INDEX).contains(&index) {
                let first = if body_span.is_empty() { start } else { body_span.start };
                body_span = first..decoder.position();
            }
            message.set_section(index, *value)?;
        }
        let head_end = if body_span.is_empty() { decoder.position() } else { body_span.start };
        let head = if body_span.is_empty() && last.is_some_and(|index| index >= BODY_FIRST) {
            // No body, but a footer: the head ends where the footer starts.
            Bytes::new()
        } else {
            bytes.slice(0..head_end)
        };
        Ok(DecodedMessage { message, body_sections: bytes.slice(body_span), head })
    }

    fn set_section(&mut self, index: usize, value: Value) -> Result<(), Amqp10Error> {
        let name = section::ALL[index].2;
        match section::ALL[index].0 {
            section::HEADER => self.header = Some(Header::from_fields(list(name, value)?)?),
            section::DELIVERY_ANNOTATIONS => self.delivery_annotations = Some(map(name, value)?),
            section::MESSAGE_ANNOTATIONS => self.message_annotations = Some(map(name, value)?),
            section::PROPERTIES => self.properties = Some(Properties::from_fields(list(name, value)?)?),
            section::APPLICATION_PROPERTIES => self.application_properties = Some(map(name, value)?),
            section::DATA => match value {
                Value::Binary(bytes) => self.push_data(bytes),
                other => return Err(shape(name, "binary", &other)),
            },
            section::AMQP_SEQUENCE => self.push_sequence(list(name, value)?),
            section::AMQP_VALUE => self.body = Body::Value(value),
            _ => self.footer = Some(map(name, value)?),
        }
        Ok(())
    }

    fn push_data(&mut self, bytes: Bytes) {
        match &mut self.body {
            Body::Data(sections) => sections.push(bytes),
            body => *body = Body::Data(vec![bytes]),
        }
    }

    fn push_sequence(&mut self, items: Vec<Value>) {
        match &mut self.body {
            Body::Sequence(sections) => sections.push(items),
            body => *body = Body::Sequence(vec![items]),
        }
    }

    /// Appends the message's sections to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        if let Some(header) = &self.header {
            header.encode(out);
        }
        put_map_section(out, section::DELIVERY_ANNOTATIONS, self.delivery_annotations.as_deref());
        put_map_section(out, section::MESSAGE_ANNOTATIONS, self.message_annotations.as_deref());
        if let Some(properties) = &self.properties {
            properties.encode(out);
        }
        put_map_section(out, section::APPLICATION_PROPERTIES, self.application_properties.as_deref());
        match &self.body {
            Body::None => {}
            Body::Data(sections) => sections.iter().for_each(|data| put_data_section(out, data)),
            Body::Sequence(sections) => {
                for items in sections {
                    put_descriptor(out, section::AMQP_SEQUENCE);
                    let list = Compound::list(out);
                    items.iter().for_each(|item| item.encode(out));
                    list.finish(out, items.len());
                }
            }
            Body::Value(value) => {
                put_descriptor(out, section::AMQP_VALUE);
                value.encode(out);
            }
        }
        put_map_section(out, section::FOOTER, self.footer.as_deref());
    }
}

/// Sections come in the specification's order, each once; body sections of one kind repeat,
/// an amqp-value does not, and the kinds do not mix.
fn check_order(last: Option<usize>, index: usize) -> Result<(), Amqp10Error> {
    let Some(last) = last else { return Ok(()) };
    let repeatable_body =
        index == last && (section::ALL[index].0 == section::DATA || section::ALL[index].0 == section::AMQP_SEQUENCE);
    let mixed_body = (BODY_FIRST..FOOTER_INDEX).contains(&last) && (BODY_FIRST..FOOTER_INDEX).contains(&index);
    if repeatable_body || (index > last && !mixed_body) {
        return Ok(());
    }
    Err(Amqp10Error::SectionOrder { found: section::ALL[index].2, after: section::ALL[last].2 })
}

fn shape(section: &'static str, expected: &'static str, found: &Value) -> Amqp10Error {
    Amqp10Error::SectionShape { section, expected, found: found.kind() }
}

fn list(section: &'static str, value: Value) -> Result<Vec<Value>, Amqp10Error> {
    match value {
        Value::List(items) => Ok(items),
        other => Err(shape(section, "list", &other)),
    }
}

fn map(section: &'static str, value: Value) -> Result<Vec<(Value, Value)>, Amqp10Error> {
    match value {
        Value::Map(entries) => Ok(entries),
        other => Err(shape(section, "map", &other)),
    }
}

/// Writes a data section.
pub fn put_data_section(out: &mut Vec<u8>, data: &[u8]) {
    put_descriptor(out, section::DATA);
    put_binary(out, data);
}

fn put_map_section(out: &mut Vec<u8>, descriptor: u64, entries: Option<&[(Value, Value)]>) {
    let Some(entries) = entries else { return };
    put_descriptor(out, descriptor);
    let map = Compound::map(out);
    for (key, value) in entries {
        key.encode(out);
        value.encode(out);
    }
    map.finish(out, entries.len() * 2);
}

/// The fields of a list-shaped section (header, properties), read by position; a null or
/// missing field is absent.
struct Fields {
    section: &'static str,
    items: std::vec::IntoIter<Value>,
}

impl Fields {
    fn next(&mut self) -> Option<Value> {
        self.items.next().filter(|value| *value != Value::Null)
    }

    fn read<T>(
        &mut self,
        field: &'static str,
        expected: &'static str,
        convert: impl FnOnce(Value) -> Result<T, Value>,
    ) -> Result<Option<T>, Amqp10Error> {
        let Some(value) = self.next() else { return Ok(None) };
        convert(value).map(Some).map_err(|value| Amqp10Error::FieldType {
            section: self.section,
            field,
            expected,
            found: value.kind(),
        })
    }

    fn boolean(&mut self, field: &'static str) -> Result<Option<bool>, Amqp10Error> {
        self.read(field, "a boolean", |v| if let Value::Bool(b) = v { Ok(b) } else { Err(v) })
    }

    fn uint(&mut self, field: &'static str) -> Result<Option<u32>, Amqp10Error> {
        self.read(field, "a uint", |v| if let Value::Uint(n) = v { Ok(n) } else { Err(v) })
    }

    fn timestamp(&mut self, field: &'static str) -> Result<Option<i64>, Amqp10Error> {
        self.read(field, "a timestamp", |v| if let Value::Timestamp(t) = v { Ok(t) } else { Err(v) })
    }

    /// Strings, symbols and addresses alike: clients differ in which they send.
    fn text(&mut self, field: &'static str) -> Result<Option<String>, Amqp10Error> {
        self.read(field, "a string or symbol", |v| match v {
            Value::String(text) | Value::Symbol(text) => Ok(text),
            other => Err(other),
        })
    }

    fn message_id(&mut self, field: &'static str) -> Result<Option<Value>, Amqp10Error> {
        self.read(field, "a ulong, uuid, binary or string", |v| match v {
            Value::Ulong(_) | Value::Long(_) | Value::Uuid(_) | Value::Binary(_) | Value::String(_) => Ok(v),
            other => Err(other),
        })
    }
}

impl Header {
    fn from_fields(items: Vec<Value>) -> Result<Header, Amqp10Error> {
        let mut fields = Fields { section: "header", items: items.into_iter() };
        Ok(Header {
            durable: fields.boolean("durable")?,
            priority: fields.read("priority", "a ubyte", |v| if let Value::Ubyte(p) = v { Ok(p) } else { Err(v) })?,
            ttl_ms: fields.uint("ttl")?,
            first_acquirer: fields.boolean("first-acquirer")?,
            delivery_count: fields.uint("delivery-count")?,
        })
    }

    /// Appends the header section to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut list = FieldList::begin(out, section::HEADER);
        list.field(out, self.durable, put_bool);
        list.field(out, self.priority, put_ubyte);
        list.field(out, self.ttl_ms, put_uint);
        list.field(out, self.first_acquirer, put_bool);
        list.field(out, self.delivery_count, put_uint);
        list.finish(out);
    }
}

impl Properties {
    fn from_fields(items: Vec<Value>) -> Result<Properties, Amqp10Error> {
        let mut fields = Fields { section: "properties", items: items.into_iter() };
        Ok(Properties {
            message_id: fields.message_id("message-id")?,
            user_id: fields.read("user-id", "a binary", |v| if let Value::Binary(b) = v { Ok(b) } else { Err(v) })?,
            to: fields.text("to")?,
            subject: fields.text("subject")?,
            reply_to: fields.text("reply-to")?,
            correlation_id: fields.message_id("correlation-id")?,
            content_type: fields.text("content-type")?,
            content_encoding: fields.text("content-encoding")?,
            absolute_expiry_time: fields.timestamp("absolute-expiry-time")?,
            creation_time: fields.timestamp("creation-time")?,
            group_id: fields.text("group-id")?,
            group_sequence: fields.uint("group-sequence")?,
            reply_to_group_id: fields.text("reply-to-group-id")?,
        })
    }

    /// Appends the properties section to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut list = FieldList::begin(out, section::PROPERTIES);
        list.field(out, self.message_id.as_ref(), |out, id| id.encode(out));
        list.field(out, self.user_id.as_deref(), put_binary);
        for text in [&self.to, &self.subject, &self.reply_to] {
            list.field(out, text.as_deref(), put_string);
        }
        list.field(out, self.correlation_id.as_ref(), |out, id| id.encode(out));
        list.field(out, self.content_type.as_deref(), put_symbol);
        list.field(out, self.content_encoding.as_deref(), put_symbol);
        list.field(out, self.absolute_expiry_time, put_timestamp);
        list.field(out, self.creation_time, put_timestamp);
        list.field(out, self.group_id.as_deref(), put_string);
        list.field(out, self.group_sequence, put_uint);
        list.field(out, self.reply_to_group_id.as_deref(), put_string);
        list.finish(out);
    }
}

/// A list-shaped section being written field by field. Absent fields become nulls, except
/// trailing ones, which are left out (the list is shorter).
pub struct FieldList {
    list: Compound,
    written: usize,
    pending_nulls: usize,
}

impl FieldList {
    /// Starts the section with descriptor `descriptor`.
    pub fn begin(out: &mut Vec<u8>, descriptor: u64) -> FieldList {
        put_descriptor(out, descriptor);
        FieldList { list: Compound::list(out), written: 0, pending_nulls: 0 }
    }

    /// Writes the next field with `put`, or notes it absent.
    pub fn field<T>(&mut self, out: &mut Vec<u8>, value: Option<T>, put: impl FnOnce(&mut Vec<u8>, T)) {
        let Some(value) = value else {
            self.pending_nulls += 1;
            return;
        };
        out.extend(std::iter::repeat_n(super::types::code::NULL, self.pending_nulls));
        self.written += self.pending_nulls + 1;
        self.pending_nulls = 0;
        put(out, value);
    }

    /// Finishes the section.
    pub fn finish(self, out: &mut Vec<u8>) {
        self.list.finish(out, self.written);
    }
}
