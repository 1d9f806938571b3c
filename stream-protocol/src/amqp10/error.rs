//! Why an AMQP 1.0 message was refused: one error type for the value decoder, the section
//! decoder and the mapping to 0-9-1, each variant naming what was wrong and where.

use super::decode::{MAX_DEPTH, MAX_ELEMENTS};
use warren_delivery::PropertiesError;

/// Why AMQP 1.0 bytes could not be decoded, or mapped to an AMQP 0-9-1 message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Amqp10Error {
    /// The input ends inside a value.
    #[error("{what} needs {needed} bytes, {left} left")]
    Truncated {
        /// The value being read.
        what: &'static str,
        /// Bytes it needs.
        needed: usize,
        /// Bytes there are.
        left: usize,
    },
    /// A variable-width value or compound announces more bytes than there are.
    #[error("{what} announces {announced} bytes, {left} left")]
    Oversized {
        /// The encoding (`map8`, `str32`, ...).
        what: &'static str,
        /// The size it announces.
        announced: u64,
        /// Bytes there are.
        left: usize,
    },
    /// A list, map or array announces more elements than its bytes can hold.
    #[error("{what} announces {count} elements in {bytes} bytes")]
    TooManyAnnounced {
        /// The encoding.
        what: &'static str,
        /// Elements announced.
        count: u32,
        /// Bytes left for them.
        bytes: usize,
    },
    /// A map with an odd number of elements (keys and values alternate).
    #[error("{what} announces an odd element count {count}")]
    OddMapCount {
        /// The encoding.
        what: &'static str,
        /// Elements announced.
        count: u32,
    },
    /// A format code the type system does not define.
    #[error("unknown format code {0:#04x}")]
    UnknownFormatCode(u8),
    /// A boolean byte other than 0 or 1.
    #[error("boolean byte {0:#04x} is neither 0 nor 1")]
    InvalidBoolean(u8),
    /// A char that is not a Unicode scalar value.
    #[error("char {0:#x} is not a Unicode scalar value")]
    InvalidChar(u32),
    /// A string or symbol that is not UTF-8.
    #[error("{0} is not valid UTF-8")]
    InvalidUtf8(&'static str),
    /// Compounds or described types nested deeper than [`MAX_DEPTH`].
    #[error("values nested deeper than {MAX_DEPTH} levels")]
    TooDeep,
    /// More values than [`MAX_ELEMENTS`] in one decode.
    #[error("more than {MAX_ELEMENTS} values in one message")]
    TooManyElements,
    /// A section is not a described value.
    #[error("expected a message section (a described value), found format code {0:#04x}")]
    NotASection(u8),
    /// A described value whose descriptor names no message section.
    #[error("unknown section descriptor {0}")]
    UnknownSection(String),
    /// A section where the message format does not allow it.
    #[error("section {found} after {after}: sections out of order or repeated")]
    SectionOrder {
        /// The section found.
        found: &'static str,
        /// The section before it.
        after: &'static str,
    },
    /// A section's value has the wrong type (a header that is not a list, ...).
    #[error("{section} must be a {expected}, found {found}")]
    SectionShape {
        /// The section.
        section: &'static str,
        /// The type it must have.
        expected: &'static str,
        /// The type it has.
        found: &'static str,
    },
    /// A header or properties field has the wrong type.
    #[error("{section} field {field} must be {expected}, found {found}")]
    FieldType {
        /// The section.
        section: &'static str,
        /// The field.
        field: &'static str,
        /// The types it may have.
        expected: &'static str,
        /// The type it has.
        found: &'static str,
    },
    /// A name the 0-9-1 message needs in a short string (exchange, routing key) is longer.
    #[error("{what} of {len} bytes does not fit a 0-9-1 short string")]
    ShortStringTooLong {
        /// Which name.
        what: &'static str,
        /// Its length in bytes.
        len: usize,
    },
    /// The 0-9-1 properties built from the message were refused (headers nested too deep).
    #[error("0-9-1 properties: {0}")]
    Properties(#[from] PropertiesError),
    /// amq-protocol could not encode the 0-9-1 properties.
    #[error("cannot encode 0-9-1 properties: {0}")]
    PropertiesEncoding(String),
}
