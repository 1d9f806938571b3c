//! A message's tag as a stream stores it: a flag bit and a hash in the record header, so
//! that a filtered read can step over records without decoding them.

/// Record flag: the message has a tag (`x-stream-filter-value`).
pub const TAGGED_FLAG: u8 = 1;

/// The record-header hash of a tag.
pub fn tag_hash(tag: &[u8]) -> u32 {
    crc32fast::hash(tag)
}

/// The record flags and tag hash of a message with this tag (or none).
pub fn header_fields(tag: Option<&[u8]>) -> (u8, u32) {
    match tag {
        Some(tag) => (TAGGED_FLAG, tag_hash(tag)),
        None => (0, 0),
    }
}
