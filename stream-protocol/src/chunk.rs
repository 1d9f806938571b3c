//! `Deliver` frames: a subscription's messages in the chunk format of RabbitMQ's stream log
//! (Osiris), which every stream client parses.
//!
//! A chunk is a 48-byte header (magic and version, type, entry and record counts, the first
//! message's timestamp, the epoch, the first offset, the CRC-32 and length of the data, the
//! trailer's length, the bloom filter's size) and then its entries. Warren writes simple
//! entries only (a 31-bit size with the top bit clear, then the AMQP 1.0 message), one record
//! each: the clients read sub-batches but need not receive them.

use crate::command::key;
use bytes::{BufMut, BytesMut};

/// Osiris' magic (5) and chunk format version (0), in one byte.
pub const MAGIC_VERSION: u8 = 0x50;
/// A chunk of user messages (1 and 2 are Osiris' tracking chunks, never sent).
const CHUNK_TYPE_USER: u8 = 0;
/// The chunk header's size.
pub const CHUNK_HEADER_BYTES: usize = 48;
/// A simple entry's size field.
const ENTRY_SIZE_BYTES: usize = 4;
/// The largest simple entry (its size field has 31 bits).
pub const MAX_ENTRY_BYTES: usize = (1 << 31) - 1;

/// Where the header's fields sit, from the chunk's first byte.
mod at {
    pub const NUM_ENTRIES: usize = 2;
    pub const NUM_RECORDS: usize = 4;
    pub const CRC: usize = 32;
    pub const DATA_LENGTH: usize = 36;
}

/// One `Deliver` frame being written: entries are appended, then [`ChunkWriter::finish`]
/// fills in the counts, the length and the CRC.
pub struct ChunkWriter<'a> {
    out: &'a mut BytesMut,
    frame_start: usize,
    chunk_start: usize,
    entries: u16,
}

impl<'a> ChunkWriter<'a> {
    /// Starts a Deliver at `version` (2 carries `committed_offset`, the newest offset safe on
    /// a majority) for `subscription_id`, whose first message has `first_offset` and was
    /// stored at `timestamp_ms`.
    pub fn new(
        out: &'a mut BytesMut,
        version: u16,
        subscription_id: u8,
        committed_offset: u64,
        first_offset: u64,
        timestamp_ms: i64,
    ) -> Self {
        let frame_start = out.len();
        out.put_u32(0); // the frame's size, filled in by finish
        out.put_u16(key::DELIVER);
        out.put_u16(version);
        out.put_u8(subscription_id);
        if version >= 2 {
            out.put_u64(committed_offset);
        }
        let chunk_start = out.len();
        out.put_u8(MAGIC_VERSION);
        out.put_u8(CHUNK_TYPE_USER);
        out.put_u16(0); // entries
        out.put_u32(0); // records
        out.put_i64(timestamp_ms);
        out.put_u64(0); // epoch: a single-writer log's first
        out.put_u64(first_offset);
        out.put_i32(0); // CRC
        out.put_u32(0); // data length
        out.put_u32(0); // trailer length: no trailer
        out.put_u32(0); // bloom filter size (none) and 3 reserved bytes
        debug_assert_eq!(out.len() - chunk_start, CHUNK_HEADER_BYTES);
        ChunkWriter { out, frame_start, chunk_start, entries: 0 }
    }

    /// Entries written so far.
    pub fn entries(&self) -> u16 {
        self.entries
    }

    /// The frame's size so far.
    pub fn frame_bytes(&self) -> usize {
        self.out.len() - self.frame_start
    }

    /// Appends one message, its AMQP 1.0 bytes written by `encode` straight into the frame.
    pub fn push(&mut self, encode: impl FnOnce(&mut BytesMut)) {
        let size_at = self.out.len();
        self.out.put_u32(0);
        encode(self.out);
        let size = (self.out.len() - size_at - ENTRY_SIZE_BYTES).min(MAX_ENTRY_BYTES) as u32;
        self.out[size_at..size_at + ENTRY_SIZE_BYTES].copy_from_slice(&size.to_be_bytes());
        self.entries += 1;
    }

    /// Fills in the header and the frame's size.
    pub fn finish(self) {
        let data_start = self.chunk_start + CHUNK_HEADER_BYTES;
        let data = &self.out[data_start..];
        let crc = crc32fast::hash(data);
        let data_length = data.len() as u32;
        let records = u32::from(self.entries);
        let chunk = &mut self.out[self.chunk_start..];
        chunk[at::NUM_ENTRIES..at::NUM_ENTRIES + 2].copy_from_slice(&self.entries.to_be_bytes());
        chunk[at::NUM_RECORDS..at::NUM_RECORDS + 4].copy_from_slice(&records.to_be_bytes());
        chunk[at::CRC..at::CRC + 4].copy_from_slice(&crc.to_be_bytes());
        chunk[at::DATA_LENGTH..at::DATA_LENGTH + 4].copy_from_slice(&data_length.to_be_bytes());
        let frame_size = (self.out.len() - self.frame_start - 4) as u32;
        self.out[self.frame_start..self.frame_start + 4].copy_from_slice(&frame_size.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_has_its_counts_length_and_crc() {
        let mut out = BytesMut::new();
        let mut chunk = ChunkWriter::new(&mut out, 2, 7, 41, 40, 1_700_000_000_000);
        chunk.push(|out| out.put_slice(b"first"));
        chunk.push(|out| out.put_slice(b"second!"));
        chunk.finish();
        let frame = &out[..];
        assert_eq!(u32::from_be_bytes(frame[0..4].try_into().unwrap()) as usize, frame.len() - 4);
        assert_eq!(&frame[4..9], &[0x00, 0x08, 0x00, 0x02, 7]);
        assert_eq!(u64::from_be_bytes(frame[9..17].try_into().unwrap()), 41);
        let chunk = &frame[17..];
        assert_eq!(chunk[0], MAGIC_VERSION);
        assert_eq!(u16::from_be_bytes([chunk[2], chunk[3]]), 2);
        assert_eq!(u32::from_be_bytes(chunk[4..8].try_into().unwrap()), 2);
        assert_eq!(u64::from_be_bytes(chunk[24..32].try_into().unwrap()), 40);
        let data = &chunk[CHUNK_HEADER_BYTES..];
        assert_eq!(data, b"\0\0\0\x05first\0\0\0\x07second!");
        assert_eq!(u32::from_be_bytes(chunk[32..36].try_into().unwrap()), crc32fast::hash(data));
        assert_eq!(u32::from_be_bytes(chunk[36..40].try_into().unwrap()) as usize, data.len());
    }
}
