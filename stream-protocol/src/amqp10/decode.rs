//! The bounded decoder of AMQP 1.0 values. What the input announces is never trusted: every
//! size is checked against the bytes actually left before anything is read or sliced,
//! nothing is allocated by an announced count, nesting is checked before recursing, and one
//! decoder decodes at most [`MAX_ELEMENTS`] values however they nest.

use super::error::Amqp10Error;
use super::types::{code, Array, Value};
use bytes::Bytes;

/// How deep compounds (lists, maps, arrays) and described types may nest. Message sections
/// are one level (a described list or map); application data rarely goes past three or four.
pub const MAX_DEPTH: usize = 32;

/// Values one decoder decodes at most (each element of a compound counts, and so does the
/// compound). Bounds the memory a message of zero-width elements (an array of nulls announcing
/// four billion of them) can make the broker allocate.
pub const MAX_ELEMENTS: usize = 65_536;

/// What an array's elements are built with: a format code, or a descriptor and the
/// constructor of the described values.
enum Constructor {
    Primitive(u8),
    Described(Value, Box<Constructor>),
}

/// Reads AMQP 1.0 values from a buffer; binaries are slices of it, not copies.
pub struct Decoder<'a> {
    buf: &'a Bytes,
    pos: usize,
    /// Where the innermost compound being read ends (the buffer's end at the top).
    end: usize,
    elements_left: usize,
}

impl<'a> Decoder<'a> {
    /// A decoder at the start of `buf`.
    pub fn new(buf: &'a Bytes) -> Self {
        Decoder { buf, pos: 0, end: buf.len(), elements_left: MAX_ELEMENTS }
    }

    /// Offset of the next byte to read.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Whether every byte has been read.
    pub fn is_at_end(&self) -> bool {
        self.pos >= self.end
    }

    /// The next byte, not consumed.
    pub fn peek(&self) -> Option<u8> {
        self.buf.get(self.pos).copied().filter(|_| self.pos < self.end)
    }

    /// Decodes the next value.
    pub fn value(&mut self) -> Result<Value, Amqp10Error> {
        self.value_at(0)
    }

    fn value_at(&mut self, depth: usize) -> Result<Value, Amqp10Error> {
        self.count_element()?;
        let format = self.u8("format code")?;
        if format == code::DESCRIBED {
            let depth = deeper(depth)?;
            let descriptor = self.value_at(depth)?;
            let value = self.value_at(depth)?;
            return Ok(Value::Described(Box::new(descriptor), Box::new(value)));
        }
        self.body(format, depth)
    }

    fn count_element(&mut self) -> Result<(), Amqp10Error> {
        self.elements_left = self.elements_left.checked_sub(1).ok_or(Amqp10Error::TooManyElements)?;
        Ok(())
    }

    /// The value after its format code.
    fn body(&mut self, format: u8, depth: usize) -> Result<Value, Amqp10Error> {
        match format {
            code::LIST8 | code::LIST32 | code::MAP8 | code::MAP32 | code::ARRAY8 | code::ARRAY32 => {
                self.compound(format, deeper(depth)?)
            }
            code::VBIN8 => Ok(Value::Binary(self.variable("vbin8", false)?)),
            code::VBIN32 => Ok(Value::Binary(self.variable("vbin32", true)?)),
            code::STR8 => Ok(Value::String(self.text("str8", false)?)),
            code::STR32 => Ok(Value::String(self.text("str32", true)?)),
            code::SYM8 => Ok(Value::Symbol(self.text("sym8", false)?)),
            code::SYM32 => Ok(Value::Symbol(self.text("sym32", true)?)),
            _ => self.fixed(format),
        }
    }

    /// Values of a fixed width (zero to sixteen bytes).
    fn fixed(&mut self, format: u8) -> Result<Value, Amqp10Error> {
        Ok(match format {
            code::NULL => Value::Null,
            code::TRUE => Value::Bool(true),
            code::FALSE => Value::Bool(false),
            code::BOOLEAN => match self.u8("boolean")? {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                other => return Err(Amqp10Error::InvalidBoolean(other)),
            },
            code::UBYTE => Value::Ubyte(self.u8("ubyte")?),
            code::USHORT => Value::Ushort(u16::from_be_bytes(self.bytes("ushort")?)),
            code::UINT => Value::Uint(u32::from_be_bytes(self.bytes("uint")?)),
            code::SMALL_UINT => Value::Uint(u32::from(self.u8("smalluint")?)),
            code::UINT0 => Value::Uint(0),
            code::ULONG => Value::Ulong(u64::from_be_bytes(self.bytes("ulong")?)),
            code::SMALL_ULONG => Value::Ulong(u64::from(self.u8("smallulong")?)),
            code::ULONG0 => Value::Ulong(0),
            code::BYTE => Value::Byte(i8::from_be_bytes(self.bytes("byte")?)),
            code::SHORT => Value::Short(i16::from_be_bytes(self.bytes("short")?)),
            code::INT => Value::Int(i32::from_be_bytes(self.bytes("int")?)),
            code::SMALL_INT => Value::Int(i32::from(i8::from_be_bytes(self.bytes("smallint")?))),
            code::LONG => Value::Long(i64::from_be_bytes(self.bytes("long")?)),
            code::SMALL_LONG => Value::Long(i64::from(i8::from_be_bytes(self.bytes("smalllong")?))),
            code::FLOAT => Value::Float(f32::from_be_bytes(self.bytes("float")?)),
            code::DOUBLE => Value::Double(f64::from_be_bytes(self.bytes("double")?)),
            code::DECIMAL32 => Value::Decimal32(self.bytes("decimal32")?),
            code::DECIMAL64 => Value::Decimal64(self.bytes("decimal64")?),
            code::DECIMAL128 => Value::Decimal128(self.bytes("decimal128")?),
            code::CHAR => {
                let raw = u32::from_be_bytes(self.bytes("char")?);
                Value::Char(char::from_u32(raw).ok_or(Amqp10Error::InvalidChar(raw))?)
            }
            code::TIMESTAMP => Value::Timestamp(i64::from_be_bytes(self.bytes("timestamp")?)),
            code::UUID => Value::Uuid(self.bytes("uuid")?),
            code::LIST0 => Value::List(Vec::new()),
            other => return Err(Amqp10Error::UnknownFormatCode(other)),
        })
    }

    /// A list, map or array: its size and count, then its elements, which must lie within
    /// the size. Elements that end before it are accepted, and reading goes on after them:
    /// RabbitMQ's Rust stream client (0.11) counts a small `long` as three bytes and writes
    /// two, so its maps announce more than they hold, and its own decoder, which goes by the
    /// count, reads them back. `depth` is already the elements' depth.
    fn compound(&mut self, format: u8, depth: usize) -> Result<Value, Amqp10Error> {
        let (what, wide) = compound_name(format);
        let outer_end = self.enter(what, wide)?;
        let count = self.length(what, wide)?;
        let value = match format {
            code::LIST8 | code::LIST32 => Value::List(self.list_items(what, count, depth)?),
            code::MAP8 | code::MAP32 => Value::Map(self.map_entries(what, count, depth)?),
            _ => Value::Array(Array::decoded(self.array_items(count, depth)?)),
        };
        self.end = outer_end;
        Ok(value)
    }

    /// Reads a compound's size and narrows the readable bytes to it; returns the end to
    /// restore once the compound is read.
    fn enter(&mut self, what: &'static str, wide: bool) -> Result<usize, Amqp10Error> {
        let size = self.length(what, wide)?;
        let left = self.end - self.pos;
        if size > left {
            return Err(Amqp10Error::Oversized { what, announced: size as u64, left });
        }
        let outer_end = self.end;
        self.end = self.pos + size;
        Ok(outer_end)
    }

    /// Checks that `count` elements with constructors (a byte at least each) can fit in what
    /// is left of the compound.
    fn check_count(&self, what: &'static str, count: usize) -> Result<(), Amqp10Error> {
        let bytes = self.end - self.pos;
        if count > bytes {
            return Err(Amqp10Error::TooManyAnnounced { what, count: count as u32, bytes });
        }
        Ok(())
    }

    fn list_items(&mut self, what: &'static str, count: usize, depth: usize) -> Result<Vec<Value>, Amqp10Error> {
        self.check_count(what, count)?;
        let mut items = Vec::new();
        for _ in 0..count {
            items.push(self.value_at(depth)?);
        }
        Ok(items)
    }

    fn map_entries(
        &mut self,
        what: &'static str,
        count: usize,
        depth: usize,
    ) -> Result<Vec<(Value, Value)>, Amqp10Error> {
        if !count.is_multiple_of(2) {
            return Err(Amqp10Error::OddMapCount { what, count: count as u32 });
        }
        self.check_count(what, count)?;
        let mut entries = Vec::new();
        for _ in 0..count / 2 {
            let key = self.value_at(depth)?;
            entries.push((key, self.value_at(depth)?));
        }
        Ok(entries)
    }

    /// An array's elements share one constructor and carry none of their own, so they may
    /// take no bytes at all (nulls, `true`, `uint0`): the element budget alone bounds them.
    fn array_items(&mut self, count: usize, depth: usize) -> Result<Vec<Value>, Amqp10Error> {
        let constructor = self.constructor(depth)?;
        let mut items = Vec::new();
        for _ in 0..count {
            self.count_element()?;
            items.push(self.construct(&constructor, depth)?);
        }
        Ok(items)
    }

    fn constructor(&mut self, depth: usize) -> Result<Constructor, Amqp10Error> {
        let format = self.u8("array constructor")?;
        if format != code::DESCRIBED {
            return if is_format_code(format) {
                Ok(Constructor::Primitive(format))
            } else {
                Err(Amqp10Error::UnknownFormatCode(format))
            };
        }
        let depth = deeper(depth)?;
        let descriptor = self.value_at(depth)?;
        Ok(Constructor::Described(descriptor, Box::new(self.constructor(depth)?)))
    }

    fn construct(&mut self, constructor: &Constructor, depth: usize) -> Result<Value, Amqp10Error> {
        match constructor {
            Constructor::Primitive(format) => self.body(*format, depth),
            Constructor::Described(descriptor, inner) => {
                let value = self.construct(inner, depth)?;
                Ok(Value::Described(Box::new(descriptor.clone()), Box::new(value)))
            }
        }
    }

    /// A binary, string or symbol's bytes, after their length.
    fn variable(&mut self, what: &'static str, wide: bool) -> Result<Bytes, Amqp10Error> {
        let len = self.length(what, wide)?;
        let left = self.end - self.pos;
        if len > left {
            return Err(Amqp10Error::Oversized { what, announced: len as u64, left });
        }
        let slice = self.buf.slice(self.pos..self.pos + len);
        self.pos += len;
        Ok(slice)
    }

    fn text(&mut self, what: &'static str, wide: bool) -> Result<String, Amqp10Error> {
        let raw = self.variable(what, wide)?;
        std::str::from_utf8(&raw).map(str::to_owned).map_err(|_| Amqp10Error::InvalidUtf8(what))
    }

    /// A size or count: one byte in the narrow encodings, four in the wide ones.
    fn length(&mut self, what: &'static str, wide: bool) -> Result<usize, Amqp10Error> {
        if wide {
            Ok(u32::from_be_bytes(self.bytes(what)?) as usize)
        } else {
            Ok(usize::from(self.u8(what)?))
        }
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, Amqp10Error> {
        Ok(self.bytes::<1>(what)?[0])
    }

    fn bytes<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], Amqp10Error> {
        let left = self.end.saturating_sub(self.pos);
        let taken = self
            .buf
            .get(self.pos..self.pos + N)
            .filter(|_| N <= left)
            .and_then(|slice| <[u8; N]>::try_from(slice).ok())
            .ok_or(Amqp10Error::Truncated { what, needed: N, left })?;
        self.pos += N;
        Ok(taken)
    }
}

/// The depth of the elements of a compound at `depth`, checked before anything recurses.
fn deeper(depth: usize) -> Result<usize, Amqp10Error> {
    if depth >= MAX_DEPTH {
        return Err(Amqp10Error::TooDeep);
    }
    Ok(depth + 1)
}

fn compound_name(format: u8) -> (&'static str, bool) {
    match format {
        code::LIST8 => ("list8", false),
        code::LIST32 => ("list32", true),
        code::MAP8 => ("map8", false),
        code::MAP32 => ("map32", true),
        code::ARRAY8 => ("array8", false),
        _ => ("array32", true),
    }
}

/// Whether `format` is a primitive format code of the type system.
fn is_format_code(format: u8) -> bool {
    matches!(
        format,
        code::NULL
            | code::BOOLEAN
            | code::TRUE
            | code::FALSE
            | code::UBYTE
            | code::USHORT
            | code::UINT
            | code::SMALL_UINT
            | code::UINT0
            | code::ULONG
            | code::SMALL_ULONG
            | code::ULONG0
            | code::BYTE
            | code::SHORT
            | code::INT
            | code::SMALL_INT
            | code::LONG
            | code::SMALL_LONG
            | code::FLOAT
            | code::DOUBLE
            | code::DECIMAL32
            | code::DECIMAL64
            | code::DECIMAL128
            | code::CHAR
            | code::TIMESTAMP
            | code::UUID
            | code::VBIN8
            | code::VBIN32
            | code::STR8
            | code::STR32
            | code::SYM8
            | code::SYM32
            | code::LIST0
            | code::LIST8
            | code::LIST32
            | code::MAP8
            | code::MAP32
            | code::ARRAY8
            | code::ARRAY32
    )
}
