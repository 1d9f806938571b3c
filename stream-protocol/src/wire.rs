//! The Stream protocol's primitive types, read and written: big-endian integers, `string`
//! (an `int16` length, -1 for null), `bytes` (an `int32` length, -1 for null) and arrays (an
//! `int32` count, then the elements).
//!
//! A [`WireReader`] reads one frame's content. Everything in it is announced by the client,
//! so every length is checked against the bytes the frame still holds before anything is
//! allocated, and an array's count against the least those elements can take: a frame of a
//! few bytes cannot make the broker reserve gigabytes.

use bytes::{BufMut, Bytes};
use thiserror::Error;

/// Why a frame's content could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WireError {
    /// The frame ended inside a field.
    #[error("the frame ends inside {what}: {needed} bytes needed, {left} left")]
    Truncated {
        /// The field being read.
        what: &'static str,
        /// Bytes it needs.
        needed: usize,
        /// Bytes the frame still holds.
        left: usize,
    },
    /// A length or count below -1.
    #[error("{what} has a negative length ({length})")]
    NegativeLength {
        /// The field being read.
        what: &'static str,
        /// The length announced.
        length: i64,
    },
    /// An array announces more elements than the frame has room for.
    #[error("an array of {what} announces {count} elements, the frame has room for {room}")]
    ArrayTooLong {
        /// The elements' kind.
        what: &'static str,
        /// The count announced.
        count: usize,
        /// The most the bytes left could hold.
        room: usize,
    },
    /// A string that is not UTF-8.
    #[error("{what} is not UTF-8")]
    NotUtf8 {
        /// The field being read.
        what: &'static str,
    },
    /// A null where the protocol needs a value.
    #[error("{what} is null")]
    Null {
        /// The field being read.
        what: &'static str,
    },
    /// Bytes after the last field of a command.
    #[error("{left} bytes after the end of the command")]
    TrailingBytes {
        /// How many.
        left: usize,
    },
    /// A value outside what the field allows.
    #[error("{what}: {reason}")]
    Invalid {
        /// The field being read.
        what: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

/// Reads the fields of one frame, in order. Slices of the frame (`bytes` fields) share its
/// buffer instead of being copied.
#[derive(Debug, Clone)]
pub struct WireReader {
    frame: Bytes,
    position: usize,
}

impl WireReader {
    /// A reader of `frame`'s content, from its first byte.
    pub fn new(frame: Bytes) -> Self {
        WireReader { frame, position: 0 }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.frame.len() - self.position
    }

    /// Fails unless every byte was read: a command with bytes after its end is malformed.
    pub fn finish(&self) -> Result<(), WireError> {
        match self.remaining() {
            0 => Ok(()),
            left => Err(WireError::TrailingBytes { left }),
        }
    }

    fn take(&mut self, what: &'static str, needed: usize) -> Result<&[u8], WireError> {
        let left = self.remaining();
        if needed > left {
            return Err(WireError::Truncated { what, needed, left });
        }
        let start = self.position;
        self.position += needed;
        Ok(&self.frame[start..start + needed])
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], WireError> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(what, N)?);
        Ok(out)
    }

    /// A `uint8`.
    pub fn u8(&mut self, what: &'static str) -> Result<u8, WireError> {
        Ok(self.array::<1>(what)?[0])
    }

    /// A `uint16`.
    pub fn u16(&mut self, what: &'static str) -> Result<u16, WireError> {
        Ok(u16::from_be_bytes(self.array(what)?))
    }

    /// An `int16`.
    pub fn i16(&mut self, what: &'static str) -> Result<i16, WireError> {
        Ok(i16::from_be_bytes(self.array(what)?))
    }

    /// A `uint32`.
    pub fn u32(&mut self, what: &'static str) -> Result<u32, WireError> {
        Ok(u32::from_be_bytes(self.array(what)?))
    }

    /// An `int32`.
    pub fn i32(&mut self, what: &'static str) -> Result<i32, WireError> {
        Ok(i32::from_be_bytes(self.array(what)?))
    }

    /// A `uint64`.
    pub fn u64(&mut self, what: &'static str) -> Result<u64, WireError> {
        Ok(u64::from_be_bytes(self.array(what)?))
    }

    /// An `int64`.
    pub fn i64(&mut self, what: &'static str) -> Result<i64, WireError> {
        Ok(i64::from_be_bytes(self.array(what)?))
    }

    /// A `string` that may be null.
    pub fn nullable_string(&mut self, what: &'static str) -> Result<Option<String>, WireError> {
        let length = self.i16(what)?;
        if length == -1 {
            return Ok(None);
        }
        let length = usize::try_from(length).map_err(|_| WireError::NegativeLength { what, length: length.into() })?;
        let text = self.take(what, length)?;
        std::str::from_utf8(text).map(|text| Some(text.to_string())).map_err(|_| WireError::NotUtf8 { what })
    }

    /// A `string` that must not be null.
    pub fn string(&mut self, what: &'static str) -> Result<String, WireError> {
        self.nullable_string(what)?.ok_or(WireError::Null { what })
    }

    /// A `bytes` field that may be null, sharing the frame's buffer.
    pub fn nullable_bytes(&mut self, what: &'static str) -> Result<Option<Bytes>, WireError> {
        let length = self.i32(what)?;
        if length == -1 {
            return Ok(None);
        }
        let length = usize::try_from(length).map_err(|_| WireError::NegativeLength { what, length: length.into() })?;
        self.slice(what, length).map(Some)
    }

    /// The next byte, not taken (0 at the end of the frame).
    pub fn peek_u8(&self) -> u8 {
        self.frame.get(self.position).copied().unwrap_or(0)
    }

    /// The next `length` bytes, sharing the frame's buffer.
    pub fn slice(&mut self, what: &'static str, length: usize) -> Result<Bytes, WireError> {
        let left = self.remaining();
        if length > left {
            return Err(WireError::Truncated { what, needed: length, left });
        }
        let bytes = self.frame.slice(self.position..self.position + length);
        self.position += length;
        Ok(bytes)
    }

    /// A `bytes` field that must not be null.
    pub fn bytes(&mut self, what: &'static str) -> Result<Bytes, WireError> {
        self.nullable_bytes(what)?.ok_or(WireError::Null { what })
    }

    /// An array's count, checked against the frame: each element takes at least
    /// `min_element_bytes`.
    pub fn count(&mut self, what: &'static str, min_element_bytes: usize) -> Result<usize, WireError> {
        let count = self.i32(what)?;
        let count = usize::try_from(count).map_err(|_| WireError::NegativeLength { what, length: count.into() })?;
        let room = self.remaining() / min_element_bytes.max(1);
        if count > room {
            return Err(WireError::ArrayTooLong { what, count, room });
        }
        Ok(count)
    }

    /// An array of `string` pairs (properties, arguments), in the order sent.
    pub fn string_pairs(&mut self, what: &'static str) -> Result<Vec<(String, String)>, WireError> {
        // Two empty strings take four bytes.
        let count = self.count(what, 4)?;
        (0..count).map(|_| Ok((self.string(what)?, self.string(what)?))).collect()
    }

    /// An array of `string`s.
    pub fn strings(&mut self, what: &'static str) -> Result<Vec<String>, WireError> {
        let count = self.count(what, 2)?;
        (0..count).map(|_| self.string(what)).collect()
    }
}

/// Writes a `string` (callers keep it under `i16::MAX` bytes; longer is cut at a character
/// boundary rather than sent with a wrong length).
pub fn put_string(out: &mut impl BufMut, text: &str) {
    let mut end = text.len().min(i16::MAX as usize);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    out.put_i16(end as i16);
    out.put_slice(&text.as_bytes()[..end]);
}

/// Writes a `bytes` field.
pub fn put_bytes(out: &mut impl BufMut, bytes: &[u8]) {
    out.put_i32(i32::try_from(bytes.len()).unwrap_or(i32::MAX));
    out.put_slice(&bytes[..bytes.len().min(i32::MAX as usize)]);
}

/// Writes an array of `string` pairs.
pub fn put_string_pairs<'a>(out: &mut impl BufMut, pairs: impl ExactSizeIterator<Item = (&'a str, &'a str)>) {
    out.put_i32(i32::try_from(pairs.len()).unwrap_or(i32::MAX));
    for (key, value) in pairs {
        put_string(out, key);
        put_string(out, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(bytes: &[u8]) -> WireReader {
        WireReader::new(Bytes::copy_from_slice(bytes))
    }

    #[test]
    fn strings_and_bytes_read_back_what_was_written() {
        let mut out = Vec::new();
        put_string(&mut out, "stream-é");
        put_bytes(&mut out, b"body");
        out.extend_from_slice(&(-1i16).to_be_bytes());
        put_string_pairs(&mut out, [("a", "1"), ("b", "")].into_iter());
        let mut wire = reader(&out);
        assert_eq!(wire.string("name").unwrap(), "stream-é");
        assert_eq!(&wire.bytes("body").unwrap()[..], b"body");
        assert_eq!(wire.nullable_string("reference").unwrap(), None);
        assert_eq!(wire.string_pairs("arguments").unwrap(), [("a".into(), "1".into()), ("b".into(), String::new())]);
        wire.finish().unwrap();
    }

    #[test]
    fn announced_lengths_are_checked_against_the_frame() {
        let error = reader(&[0, 10, b'a']).string("stream").unwrap_err();
        assert_eq!(error, WireError::Truncated { what: "stream", needed: 10, left: 1 });
        let error = reader(&[0xff, 0xfe]).string("stream").unwrap_err();
        assert_eq!(error, WireError::NegativeLength { what: "stream", length: -2 });
        let error = reader(&[0x7f, 0xff, 0xff, 0xff, 0, 0]).count("streams", 2).unwrap_err();
        assert_eq!(error, WireError::ArrayTooLong { what: "streams", count: i32::MAX as usize, room: 1 });
        assert_eq!(reader(&[0xff, 0xff]).string("stream").unwrap_err(), WireError::Null { what: "stream" });
        assert_eq!(reader(&[0, 1, 0xff]).string("stream").unwrap_err(), WireError::NotUtf8 { what: "stream" });
        assert_eq!(reader(&[1]).finish().unwrap_err(), WireError::TrailingBytes { left: 1 });
    }

    #[test]
    fn a_long_string_is_cut_at_a_character_boundary() {
        let text = "é".repeat(20_000);
        let mut out = Vec::new();
        put_string(&mut out, &text);
        let read = reader(&out).string("reason").unwrap();
        assert!(read.len() <= i16::MAX as usize && text.starts_with(&read));
    }
}
