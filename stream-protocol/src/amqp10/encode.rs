//! The AMQP 1.0 value encoder: the smallest encoding of each value, written straight into a
//! caller's buffer. Compounds are written with a wide header that is patched (and shrunk to
//! the one-byte form when it fits) once their elements are written, so nothing is measured
//! twice and nothing is allocated besides the buffer's own growth.

use super::types::{code, Value};

/// Bytes of a wide compound header after its format code: a 4-byte size and a 4-byte count.
const WIDE_HEADER_BYTES: usize = 8;
/// Bytes of a narrow compound header after its format code: a 1-byte size and count.
const NARROW_HEADER_BYTES: usize = 2;

/// A length as the wire's 32-bit fields carry it. Nothing the broker encodes comes near
/// 4 GiB (message sizes are limited far below it), so the saturation never happens.
fn wire_u32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

/// Writes `null`.
pub fn put_null(out: &mut Vec<u8>) {
    out.push(code::NULL);
}

/// Writes a boolean as `true` or `false` (one byte).
pub fn put_bool(out: &mut Vec<u8>, value: bool) {
    out.push(if value { code::TRUE } else { code::FALSE });
}

/// Writes a `ubyte`.
pub fn put_ubyte(out: &mut Vec<u8>, value: u8) {
    out.extend_from_slice(&[code::UBYTE, value]);
}

/// Writes a `uint` in its smallest form.
pub fn put_uint(out: &mut Vec<u8>, value: u32) {
    match value {
        0 => out.push(code::UINT0),
        1..=0xff => out.extend_from_slice(&[code::SMALL_UINT, value as u8]),
        _ => put_fixed(out, code::UINT, &value.to_be_bytes()),
    }
}

/// Writes a `ulong` in its smallest form.
pub fn put_ulong(out: &mut Vec<u8>, value: u64) {
    match value {
        0 => out.push(code::ULONG0),
        1..=0xff => out.extend_from_slice(&[code::SMALL_ULONG, value as u8]),
        _ => put_fixed(out, code::ULONG, &value.to_be_bytes()),
    }
}

/// Writes an `int` in its smallest form.
pub fn put_int(out: &mut Vec<u8>, value: i32) {
    match i8::try_from(value) {
        Ok(small) => put_fixed(out, code::SMALL_INT, &small.to_be_bytes()),
        Err(_) => put_fixed(out, code::INT, &value.to_be_bytes()),
    }
}

/// Writes a `long` in its smallest form.
pub fn put_long(out: &mut Vec<u8>, value: i64) {
    match i8::try_from(value) {
        Ok(small) => put_fixed(out, code::SMALL_LONG, &small.to_be_bytes()),
        Err(_) => put_fixed(out, code::LONG, &value.to_be_bytes()),
    }
}

/// Writes a `timestamp` (milliseconds since the epoch).
pub fn put_timestamp(out: &mut Vec<u8>, millis: i64) {
    put_fixed(out, code::TIMESTAMP, &millis.to_be_bytes());
}

/// Writes a `uuid`.
pub fn put_uuid(out: &mut Vec<u8>, uuid: &[u8; 16]) {
    put_fixed(out, code::UUID, uuid);
}

/// Writes a fixed-width value: its format code, then its bytes.
pub fn put_fixed(out: &mut Vec<u8>, format: u8, bytes: &[u8]) {
    out.push(format);
    out.extend_from_slice(bytes);
}

/// Writes a `binary`.
pub fn put_binary(out: &mut Vec<u8>, bytes: &[u8]) {
    put_variable(out, code::VBIN8, code::VBIN32, bytes);
}

/// Writes a `string`.
pub fn put_string(out: &mut Vec<u8>, text: &str) {
    put_variable(out, code::STR8, code::STR32, text.as_bytes());
}

/// Writes a `symbol`.
pub fn put_symbol(out: &mut Vec<u8>, text: &str) {
    put_variable(out, code::SYM8, code::SYM32, text.as_bytes());
}

fn put_variable(out: &mut Vec<u8>, narrow: u8, wide: u8, bytes: &[u8]) {
    match u8::try_from(bytes.len()) {
        Ok(len) => out.extend_from_slice(&[narrow, len]),
        Err(_) => put_fixed(out, wide, &wire_u32(bytes.len()).to_be_bytes()),
    }
    out.extend_from_slice(bytes);
}

/// Writes the start of a described value with a numeric descriptor (a message section).
pub fn put_descriptor(out: &mut Vec<u8>, descriptor: u64) {
    out.push(code::DESCRIBED);
    put_ulong(out, descriptor);
}

/// A list, map or array being written: its header is patched by [`Compound::finish`].
#[must_use = "a compound's header is only valid once finished"]
pub struct Compound {
    start: usize,
    narrow: u8,
    wide: u8,
}

impl Compound {
    /// Starts a list.
    pub fn list(out: &mut Vec<u8>) -> Compound {
        Compound::begin(out, code::LIST8, code::LIST32)
    }

    /// Starts a map.
    pub fn map(out: &mut Vec<u8>) -> Compound {
        Compound::begin(out, code::MAP8, code::MAP32)
    }

    fn begin(out: &mut Vec<u8>, narrow: u8, wide: u8) -> Compound {
        let start = out.len();
        out.push(wide);
        out.extend_from_slice(&[0; WIDE_HEADER_BYTES]);
        Compound { start, narrow, wide }
    }

    /// Patches the header for `count` elements (a map counts keys and values), in the
    /// smallest form that holds them: `list0` for an empty list, the one-byte size and count
    /// when both fit, the four-byte ones otherwise.
    pub fn finish(self, out: &mut Vec<u8>, count: usize) {
        let elements_at = self.start + 1 + WIDE_HEADER_BYTES;
        let element_bytes = out.len() - elements_at;
        if count == 0 && self.wide == code::LIST32 {
            out.truncate(self.start);
            out.push(code::LIST0);
            return;
        }
        match (u8::try_from(element_bytes + 1), u8::try_from(count)) {
            (Ok(size), Ok(count)) => {
                out[self.start..self.start + 1 + NARROW_HEADER_BYTES].copy_from_slice(&[self.narrow, size, count]);
                out.copy_within(elements_at.., self.start + 1 + NARROW_HEADER_BYTES);
                out.truncate(out.len() - (WIDE_HEADER_BYTES - NARROW_HEADER_BYTES));
            }
            _ => self.finish_wide(out, count),
        }
    }

    /// Patches the four-byte size and count, for elements the one-byte ones cannot hold.
    fn finish_wide(self, out: &mut [u8], count: usize) {
        let elements_at = self.start + 1 + WIDE_HEADER_BYTES;
        let size = wire_u32(out.len() - elements_at + 4);
        out[self.start + 1..self.start + 5].copy_from_slice(&size.to_be_bytes());
        out[self.start + 5..elements_at].copy_from_slice(&wire_u32(count).to_be_bytes());
    }
}

impl Value {
    /// Appends the value's encoding to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Value::Bool(value) => put_bool(out, *value),
            Value::Uint(value) => put_uint(out, *value),
            Value::Ulong(value) => put_ulong(out, *value),
            Value::Int(value) => put_int(out, *value),
            Value::Long(value) => put_long(out, *value),
            Value::Binary(bytes) => put_binary(out, bytes),
            Value::String(text) => put_string(out, text),
            Value::Symbol(text) => put_symbol(out, text),
            Value::List(items) => {
                let list = Compound::list(out);
                items.iter().for_each(|item| item.encode(out));
                list.finish(out, items.len());
            }
            Value::Map(entries) => {
                let map = Compound::map(out);
                for (key, value) in entries {
                    key.encode(out);
                    value.encode(out);
                }
                map.finish(out, entries.len() * 2);
            }
            Value::Array(array) => {
                let compound = Compound::begin(out, code::ARRAY8, code::ARRAY32);
                put_array_elements(out, array.items());
                compound.finish(out, array.items().len());
            }
            Value::Described(descriptor, value) => {
                out.push(code::DESCRIBED);
                descriptor.encode(out);
                value.encode(out);
            }
            _ => {
                let format = element_code(self, std::slice::from_ref(self));
                out.push(format);
                put_element(out, self, format);
            }
        }
    }
}

/// An array's constructor, then each element without one.
fn put_array_elements(out: &mut Vec<u8>, items: &[Value]) {
    let Some(first) = items.first() else {
        // An empty array still needs an element constructor; null is the smallest.
        out.push(code::NULL);
        return;
    };
    let format = element_code(innermost(first), items);
    put_constructor(out, first, format);
    for item in items {
        put_element(out, item, format);
    }
}

/// The constructor shared by an array's elements: described elements (which share their
/// descriptors) put the descriptors in it, then the format of the values they describe.
fn put_constructor(out: &mut Vec<u8>, first: &Value, format: u8) {
    match first {
        Value::Described(descriptor, value) => {
            out.push(code::DESCRIBED);
            descriptor.encode(out);
            put_constructor(out, value, format);
        }
        _ => out.push(format),
    }
}

/// The value under any descriptors.
fn innermost(value: &Value) -> &Value {
    match value {
        Value::Described(_, value) => innermost(value),
        _ => value,
    }
}

/// The format code that encodes `value` as one of `siblings` (which share it): the fixed-width
/// forms, and the wide variable forms if any sibling needs them. Compounds in arrays take the
/// wide forms, whose header does not depend on their contents.
fn element_code(value: &Value, siblings: &[Value]) -> u8 {
    let any_long = |len: fn(&Value) -> usize| siblings.iter().any(|v| len(v) > usize::from(u8::MAX));
    match value {
        Value::Null => code::NULL,
        Value::Bool(_) => code::BOOLEAN,
        Value::Ubyte(_) => code::UBYTE,
        Value::Ushort(_) => code::USHORT,
        Value::Uint(_) => code::UINT,
        Value::Ulong(_) => code::ULONG,
        Value::Byte(_) => code::BYTE,
        Value::Short(_) => code::SHORT,
        Value::Int(_) => code::INT,
        Value::Long(_) => code::LONG,
        Value::Float(_) => code::FLOAT,
        Value::Double(_) => code::DOUBLE,
        Value::Decimal32(_) => code::DECIMAL32,
        Value::Decimal64(_) => code::DECIMAL64,
        Value::Decimal128(_) => code::DECIMAL128,
        Value::Char(_) => code::CHAR,
        Value::Timestamp(_) => code::TIMESTAMP,
        Value::Uuid(_) => code::UUID,
        Value::Binary(_) => pick(any_long(variable_len), code::VBIN8, code::VBIN32),
        Value::String(_) => pick(any_long(variable_len), code::STR8, code::STR32),
        Value::Symbol(_) => pick(any_long(variable_len), code::SYM8, code::SYM32),
        Value::List(_) => code::LIST32,
        Value::Map(_) => code::MAP32,
        Value::Array(_) => code::ARRAY32,
        Value::Described(..) => code::DESCRIBED,
    }
}

fn pick(wide: bool, narrow_code: u8, wide_code: u8) -> u8 {
    if wide {
        wide_code
    } else {
        narrow_code
    }
}

fn variable_len(value: &Value) -> usize {
    match value {
        Value::Binary(bytes) => bytes.len(),
        Value::String(text) | Value::Symbol(text) => text.len(),
        Value::Described(_, value) => variable_len(value),
        _ => 0,
    }
}

/// One value after its constructor, in the form `format` gives.
fn put_element(out: &mut Vec<u8>, value: &Value, format: u8) {
    match value {
        Value::Null => {}
        Value::Bool(value) => out.push(u8::from(*value)),
        Value::Ubyte(value) => out.push(*value),
        Value::Ushort(value) => out.extend_from_slice(&value.to_be_bytes()),
        Value::Uint(value) => out.extend_from_slice(&value.to_be_bytes()),
        Value::Ulong(value) => out.extend_from_slice(&value.to_be_bytes()),
        Value::Byte(value) => out.extend_from_slice(&value.to_be_bytes()),
        Value::Short(value) => out.extend_from_slice(&value.to_be_bytes()),
        Value::Int(value) => out.extend_from_slice(&value.to_be_bytes()),
        Value::Long(value) | Value::Timestamp(value) => out.extend_from_slice(&value.to_be_bytes()),
        Value::Float(value) => out.extend_from_slice(&value.to_be_bytes()),
        Value::Double(value) => out.extend_from_slice(&value.to_be_bytes()),
        Value::Decimal32(bytes) => out.extend_from_slice(bytes),
        Value::Decimal64(bytes) => out.extend_from_slice(bytes),
        Value::Decimal128(bytes) | Value::Uuid(bytes) => out.extend_from_slice(bytes),
        Value::Char(value) => out.extend_from_slice(&u32::from(*value).to_be_bytes()),
        Value::Binary(_) | Value::String(_) | Value::Symbol(_) => put_variable_element(out, value, format),
        Value::List(_) | Value::Map(_) | Value::Array(_) => put_compound_element(out, value),
        Value::Described(_, value) => put_element(out, value, format),
    }
}

fn put_variable_element(out: &mut Vec<u8>, value: &Value, format: u8) {
    let bytes: &[u8] = match value {
        Value::Binary(bytes) => bytes,
        Value::String(text) | Value::Symbol(text) => text.as_bytes(),
        _ => &[],
    };
    if matches!(format, code::VBIN8 | code::STR8 | code::SYM8) {
        out.push(bytes.len() as u8);
    } else {
        out.extend_from_slice(&wire_u32(bytes.len()).to_be_bytes());
    }
    out.extend_from_slice(bytes);
}

/// A list, map or array inside an array: the wide size and count, then the elements.
fn put_compound_element(out: &mut Vec<u8>, value: &Value) {
    let start = out.len();
    out.extend_from_slice(&[0; WIDE_HEADER_BYTES]);
    let count = match value {
        Value::List(items) => {
            items.iter().for_each(|item| item.encode(out));
            items.len()
        }
        Value::Map(entries) => {
            for (key, value) in entries {
                key.encode(out);
                value.encode(out);
            }
            entries.len() * 2
        }
        Value::Array(array) => {
            put_array_elements(out, array.items());
            array.items().len()
        }
        _ => 0,
    };
    let size = wire_u32(out.len() - start - 4);
    out[start..start + 4].copy_from_slice(&size.to_be_bytes());
    out[start + 4..start + WIDE_HEADER_BYTES].copy_from_slice(&wire_u32(count).to_be_bytes());
}
