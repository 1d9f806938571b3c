//! The AMQP 1.0 type system (part 1 of the specification): the values a message's sections
//! carry, and the format codes that encode them. Decoding is in [`super::decode`], encoding
//! in [`super::encode`].

use bytes::Bytes;

/// Format codes of the AMQP 1.0 type system.
#[allow(missing_docs)] // each is named as the specification names its encoding
pub mod code {
    pub const DESCRIBED: u8 = 0x00;
    pub const NULL: u8 = 0x40;
    pub const BOOLEAN: u8 = 0x56;
    pub const TRUE: u8 = 0x41;
    pub const FALSE: u8 = 0x42;
    pub const UBYTE: u8 = 0x50;
    pub const USHORT: u8 = 0x60;
    pub const UINT: u8 = 0x70;
    pub const SMALL_UINT: u8 = 0x52;
    pub const UINT0: u8 = 0x43;
    pub const ULONG: u8 = 0x80;
    pub const SMALL_ULONG: u8 = 0x53;
    pub const ULONG0: u8 = 0x44;
    pub const BYTE: u8 = 0x51;
    pub const SHORT: u8 = 0x61;
    pub const INT: u8 = 0x71;
    pub const SMALL_INT: u8 = 0x54;
    pub const LONG: u8 = 0x81;
    pub const SMALL_LONG: u8 = 0x55;
    pub const FLOAT: u8 = 0x72;
    pub const DOUBLE: u8 = 0x82;
    pub const DECIMAL32: u8 = 0x74;
    pub const DECIMAL64: u8 = 0x84;
    pub const DECIMAL128: u8 = 0x94;
    pub const CHAR: u8 = 0x73;
    pub const TIMESTAMP: u8 = 0x83;
    pub const UUID: u8 = 0x98;
    pub const VBIN8: u8 = 0xa0;
    pub const VBIN32: u8 = 0xb0;
    pub const STR8: u8 = 0xa1;
    pub const STR32: u8 = 0xb1;
    pub const SYM8: u8 = 0xa3;
    pub const SYM32: u8 = 0xb3;
    pub const LIST0: u8 = 0x45;
    pub const LIST8: u8 = 0xc0;
    pub const LIST32: u8 = 0xd0;
    pub const MAP8: u8 = 0xc1;
    pub const MAP32: u8 = 0xd1;
    pub const ARRAY8: u8 = 0xe0;
    pub const ARRAY32: u8 = 0xf0;
}

/// One AMQP 1.0 value. Decimals are kept as their IEEE 754 bytes: nothing here computes
/// with them, and they pass through unchanged.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `null`.
    Null,
    /// `boolean`.
    Bool(bool),
    /// `ubyte`.
    Ubyte(u8),
    /// `ushort`.
    Ushort(u16),
    /// `uint`.
    Uint(u32),
    /// `ulong`.
    Ulong(u64),
    /// `byte`.
    Byte(i8),
    /// `short`.
    Short(i16),
    /// `int`.
    Int(i32),
    /// `long`.
    Long(i64),
    /// `float`.
    Float(f32),
    /// `double`.
    Double(f64),
    /// `decimal32`, its 4 bytes.
    Decimal32([u8; 4]),
    /// `decimal64`, its 8 bytes.
    Decimal64([u8; 8]),
    /// `decimal128`, its 16 bytes.
    Decimal128([u8; 16]),
    /// `char`.
    Char(char),
    /// `timestamp`: milliseconds since the Unix epoch.
    Timestamp(i64),
    /// `uuid`.
    Uuid([u8; 16]),
    /// `binary`: a slice of the decoded buffer, not a copy.
    Binary(Bytes),
    /// `string`.
    String(String),
    /// `symbol`.
    Symbol(String),
    /// `list`.
    List(Vec<Value>),
    /// `map`, its entries in wire order (keys may repeat; nothing here looks them up often
    /// enough to need an index).
    Map(Vec<(Value, Value)>),
    /// `array`: elements of one type.
    Array(Array),
    /// A described type: descriptor, then value.
    Described(Box<Value>, Box<Value>),
}

/// The element types of an array: values of one kind (and, for described elements, one
/// descriptor), so that one constructor encodes them all.
#[derive(Debug, Clone, PartialEq)]
pub struct Array(Vec<Value>);

impl Array {
    /// An array of `items`, or `None` if they are not all of one kind (an array's elements
    /// share a single constructor). Described items must share their descriptor.
    pub fn new(items: Vec<Value>) -> Option<Array> {
        let uniform = match items.split_first() {
            None => true,
            Some((first, rest)) => rest.iter().all(|item| same_element_type(first, item)),
        };
        uniform.then_some(Array(items))
    }

    /// Wraps decoded items, which share a constructor by construction.
    pub(super) fn decoded(items: Vec<Value>) -> Array {
        Array(items)
    }

    /// The elements.
    pub fn items(&self) -> &[Value] {
        &self.0
    }
}

/// Whether `b` can share `a`'s array constructor. Nested arrays, lists and maps can: each
/// element carries its own element constructors.
fn same_element_type(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Described(da, va), Value::Described(db, vb)) => da == db && same_element_type(va, vb),
        _ => a.kind() == b.kind(),
    }
}

impl Value {
    /// The type's name, as the specification spells it (for error messages).
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Ubyte(_) => "ubyte",
            Value::Ushort(_) => "ushort",
            Value::Uint(_) => "uint",
            Value::Ulong(_) => "ulong",
            Value::Byte(_) => "byte",
            Value::Short(_) => "short",
            Value::Int(_) => "int",
            Value::Long(_) => "long",
            Value::Float(_) => "float",
            Value::Double(_) => "double",
            Value::Decimal32(_) => "decimal32",
            Value::Decimal64(_) => "decimal64",
            Value::Decimal128(_) => "decimal128",
            Value::Char(_) => "char",
            Value::Timestamp(_) => "timestamp",
            Value::Uuid(_) => "uuid",
            Value::Binary(_) => "binary",
            Value::String(_) => "string",
            Value::Symbol(_) => "symbol",
            Value::List(_) => "list",
            Value::Map(_) => "map",
            Value::Array(_) => "array",
            Value::Described(..) => "described",
        }
    }

    /// The text of a string or symbol.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Value::String(text) | Value::Symbol(text) => Some(text),
            _ => None,
        }
    }

    /// The value of a described type whose descriptor is `code` or `name`.
    pub fn described_as(&self, code: u64, name: &str) -> Option<&Value> {
        match self {
            Value::Described(descriptor, value) => match &**descriptor {
                Value::Ulong(found) if *found == code => Some(value),
                Value::Symbol(found) if found == name => Some(value),
                _ => None,
            },
            _ => None,
        }
    }
}

/// Looks `key` up among symbol-keyed map entries (message annotations).
pub fn symbol_entry<'a>(entries: &'a [(Value, Value)], key: &str) -> Option<&'a Value> {
    entries.iter().find_map(|(k, v)| matches!(k, Value::Symbol(s) if s == key).then_some(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_hold_one_kind() {
        assert!(Array::new(vec![Value::Int(1), Value::Int(2)]).is_some());
        assert!(Array::new(vec![Value::Int(1), Value::Long(2)]).is_none());
        assert!(Array::new(Vec::new()).is_some());
        let described = |d: u64, v: Value| Value::Described(Box::new(Value::Ulong(d)), Box::new(v));
        assert!(Array::new(vec![described(1, Value::Null), described(1, Value::Null)]).is_some());
        assert!(Array::new(vec![described(1, Value::Null), described(2, Value::Null)]).is_none());
    }

    #[test]
    fn described_matches_code_or_name() {
        let by_code = Value::Described(Box::new(Value::Ulong(0x70)), Box::new(Value::Null));
        let by_name = Value::Described(Box::new(Value::Symbol("amqp:header:list".into())), Box::new(Value::Null));
        assert_eq!(by_code.described_as(0x70, "amqp:header:list"), Some(&Value::Null));
        assert_eq!(by_name.described_as(0x70, "amqp:header:list"), Some(&Value::Null));
        assert_eq!(by_code.described_as(0x71, "amqp:delivery-annotations:map"), None);
    }
}
