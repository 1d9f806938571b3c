//! Offsets a stream keeps for its Stream-protocol clients, beside its consumer groups' and in
//! the same store (so that a replicated stream replicates them too): the offset a consumer
//! stored under its reference (`StoreOffset` / `QueryOffset`), and the highest publishing id
//! a named producer had confirmed (`QueryPublisherSequence`, deduplication).
//!
//! They are kept under keys no consumer group can have, a NUL byte and their kind before the
//! reference, and listed apart from the groups.

use super::{OffsetStore, Stream};
use crate::message_store::StoreError;

/// What a named offset counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamedOffset {
    /// The offset a consumer stored under its reference.
    Consumer,
    /// The highest publishing id confirmed to a producer of that reference.
    Publisher,
}

impl NamedOffset {
    fn key(self, reference: &str) -> String {
        let kind = match self {
            NamedOffset::Consumer => "consumer",
            NamedOffset::Publisher => "publisher",
        };
        format!("\0{kind}\0{reference}")
    }
}

/// Whether a key of the offset store is a named offset's rather than a consumer group's.
pub(super) fn is_named(key: &str) -> bool {
    key.starts_with('\0')
}

impl Stream {
    /// The offset stored under `reference`, if one was.
    pub fn named_offset(&self, kind: NamedOffset, reference: &str) -> Option<u64> {
        self.state.lock().groups.get(&kind.key(reference))
    }

    /// Stores `offset` under `reference` (offsets only move forward: an older one is kept).
    pub fn store_named_offset(&self, kind: NamedOffset, reference: &str, offset: u64) -> Result<(), StoreError> {
        let mut state = self.state.lock();
        let groups: &mut dyn OffsetStore = state.groups.as_mut();
        groups.commit(&kind.key(reference), offset)
    }
}
