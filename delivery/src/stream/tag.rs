//! A message's tag as a stream stores it: a flag bit and a hash in the record header, so
//! that a filtered read can step over records without decoding them, and the filter that
//! checks those header fields.

use crate::tag_filter::TagFilter;

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

/// The tag hashes a filtering consumer wants, checked against record headers.
#[derive(Debug)]
pub(crate) struct HeaderFilter {
    hashes: Vec<u32>,
    match_unfiltered: bool,
}

impl HeaderFilter {
    pub(crate) fn new(filter: &TagFilter) -> Self {
        let hashes = filter.tags().iter().map(|t| tag_hash(t)).collect();
        HeaderFilter { hashes, match_unfiltered: filter.match_unfiltered() }
    }

    /// Whether a record with these header fields may match (the tag itself is compared
    /// after decoding, so that a hash collision never delivers a wrong message).
    pub(crate) fn admits(&self, flags: u8, tag_hash: u32) -> bool {
        if flags & TAGGED_FLAG == 0 {
            return self.match_unfiltered;
        }
        self.hashes.contains(&tag_hash)
    }
}
