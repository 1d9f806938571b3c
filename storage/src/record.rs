//! The on-disk record format (version 1), byte by byte as specified in
//! `storage/README.md`: encoding, header decoding and CRC verification.
//!
//! ```text
//! 0   u32 LE  length: bytes after this field (26 + payload length)
//! 4   u32 LE  CRC-32 (IEEE) of bytes [8, 4 + length)
//! 8   u8      magic (format version) = 1
//! 9   u8      flags (caller-defined)
//! 10  u64 LE  offset
//! 18  i64 LE  timestamp, ms since the Unix epoch
//! 26  u32 LE  tag hash
//! 30  ..      payload
//! ```

use bytes::Bytes;

/// Current format version.
pub const MAGIC_V1: u8 = 1;
/// Bytes before the payload.
pub const HEADER_BYTES: usize = 30;
/// Bytes covered by `length` that are not payload (CRC .. tag hash).
const LENGTH_OVERHEAD_BYTES: usize = HEADER_BYTES - 4;
/// Where the CRC-covered region starts.
const CRC_START: usize = 8;

/// A record to append. The payload is opaque to the storage engine.
#[derive(Debug, Clone, Copy)]
pub struct NewRecord<'a> {
    /// Milliseconds since the Unix epoch; drives time lookups, age rolling and retention.
    pub timestamp_ms: i64,
    /// Hash of the message's tag, for filtering without reading the payload.
    pub tag_hash: u32,
    /// Caller-defined flag bits, stored verbatim.
    pub flags: u8,
    /// Opaque payload bytes.
    pub payload: &'a [u8],
}

impl<'a> NewRecord<'a> {
    /// A record with no tag and no flags.
    pub fn new(timestamp_ms: i64, payload: &'a [u8]) -> Self {
        NewRecord { timestamp_ms, tag_hash: 0, flags: 0, payload }
    }

    /// Size of the encoded record on disk.
    pub fn encoded_len(&self) -> usize {
        HEADER_BYTES + self.payload.len()
    }
}

/// A record read back from the log. `payload` shares the read buffer (no copy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Position in the log.
    pub offset: u64,
    /// Milliseconds since the Unix epoch, as appended.
    pub timestamp_ms: i64,
    /// Tag hash, as appended.
    pub tag_hash: u32,
    /// Flag bits, as appended.
    pub flags: u8,
    /// Payload bytes.
    pub payload: Bytes,
}

/// The fixed-size part of a record, decoded without checking the CRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    /// Total encoded size of the record, header included.
    pub total_len: usize,
    pub crc: u32,
    pub magic: u8,
    pub flags: u8,
    pub offset: u64,
    pub timestamp_ms: i64,
    pub tag_hash: u32,
}

/// Why bytes failed to decode as a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DecodeError {
    /// Fewer bytes than the header or the declared length; may be a torn write.
    Incomplete,
    /// Length field out of range.
    BadLength,
    /// Unknown format version.
    BadMagic,
    /// CRC mismatch.
    BadCrc,
}

impl DecodeError {
    pub(crate) fn describe(self) -> &'static str {
        match self {
            DecodeError::Incomplete => "record cut short",
            DecodeError::BadLength => "record length out of range",
            DecodeError::BadMagic => "unknown record format (magic byte)",
            DecodeError::BadCrc => "CRC mismatch",
        }
    }
}

/// Appends the encoding of `rec` at `offset` to `out`.
pub(crate) fn encode(out: &mut Vec<u8>, offset: u64, rec: &NewRecord<'_>) {
    let start = out.len();
    let length = (LENGTH_OVERHEAD_BYTES + rec.payload.len()) as u32;
    out.reserve(rec.encoded_len());
    out.extend_from_slice(&length.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.push(MAGIC_V1);
    out.push(rec.flags);
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(&rec.timestamp_ms.to_le_bytes());
    out.extend_from_slice(&rec.tag_hash.to_le_bytes());
    out.extend_from_slice(rec.payload);
    let crc = crc32fast::hash(&out[start + CRC_START..]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Decodes the header at the start of `buf`. `max_len` bounds the declared length so a
/// damaged length field cannot ask for gigabytes.
pub(crate) fn decode_header(buf: &[u8], max_len: usize) -> Result<Header, DecodeError> {
    if buf.len() < HEADER_BYTES {
        return Err(DecodeError::Incomplete);
    }
    let length = u32_at(buf, 0) as usize;
    if length < LENGTH_OVERHEAD_BYTES || length > max_len + LENGTH_OVERHEAD_BYTES {
        return Err(DecodeError::BadLength);
    }
    if buf[8] != MAGIC_V1 {
        return Err(DecodeError::BadMagic);
    }
    Ok(Header {
        total_len: length + 4,
        crc: u32_at(buf, 4),
        magic: buf[8],
        flags: buf[9],
        offset: u64_at(buf, 10),
        timestamp_ms: u64_at(buf, 18) as i64,
        tag_hash: u32_at(buf, 26),
    })
}

/// Decodes and CRC-checks the whole record at the start of `buf`.
pub(crate) fn decode(buf: &[u8], max_len: usize) -> Result<Header, DecodeError> {
    let header = decode_header(buf, max_len)?;
    if buf.len() < header.total_len {
        return Err(DecodeError::Incomplete);
    }
    if crc32fast::hash(&buf[CRC_START..header.total_len]) != header.crc {
        return Err(DecodeError::BadCrc);
    }
    Ok(header)
}

/// Builds a [`Record`] from a verified header at `at` within `buf`, sharing `buf`.
pub(crate) fn to_record(buf: &Bytes, at: usize, header: &Header) -> Record {
    Record {
        offset: header.offset,
        timestamp_ms: header.timestamp_ms,
        tag_hash: header.tag_hash,
        flags: header.flags,
        payload: buf.slice(at + HEADER_BYTES..at + header.total_len),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_layout() {
        let mut out = Vec::new();
        let rec = NewRecord { timestamp_ms: -5, tag_hash: 0xdead_beef, flags: 3, payload: b"hello" };
        encode(&mut out, 42, &rec);
        assert_eq!(out.len(), HEADER_BYTES + 5);
        assert_eq!(u32_at(&out, 0), 26 + 5);
        assert_eq!(out[8], MAGIC_V1);
        let h = decode(&out, 1 << 20).unwrap();
        assert_eq!((h.offset, h.timestamp_ms, h.tag_hash, h.flags), (42, -5, 0xdead_beef, 3));
        let bytes = Bytes::from(out);
        assert_eq!(&to_record(&bytes, 0, &h).payload[..], b"hello");
    }

    #[test]
    fn every_bit_flip_is_detected() {
        let mut out = Vec::new();
        encode(&mut out, 7, &NewRecord::new(1, b"payload"));
        for bit in 0..out.len() * 8 {
            let mut damaged = out.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            match decode(&damaged, 1 << 20) {
                Err(_) => {}
                Ok(h) => panic!("flip of bit {bit} undetected: {h:?}"),
            }
        }
    }

    #[test]
    fn short_input_is_incomplete() {
        let mut out = Vec::new();
        encode(&mut out, 7, &NewRecord::new(1, b"payload"));
        for cut in 0..out.len() {
            assert_eq!(decode(&out[..cut], 1 << 20), Err(DecodeError::Incomplete));
        }
    }
}
