//! Named consumer-group offsets (Warren's extension, consumer argument `x-consumer-group`):
//! for each group, the offset below which the group has acked everything, kept durably.
//!
//! Commits are records of a small log beside the stream's (`offset u64 BE`, then the group
//! name); the newest record of a group wins. When the log grows, the current offsets of all
//! groups are written again and the segments before them are deleted, so it stays small
//! without ever rewriting a file in place.

use crate::clock::now_ms;
use crate::message_store::StoreError;
use std::collections::HashMap;
use std::path::Path;
use warren_storage::{FlushPolicy, Log, LogConfig, NewRecord};

/// Segment size of the offsets log: small, so that compaction frees whole segments soon.
const GROUP_SEGMENT_BYTES: u64 = 256 * 1024;
/// The log is compacted once it is this much larger than the offsets it holds.
const COMPACT_AFTER_BYTES: u64 = 1024 * 1024;
/// Longest group name (it is a consumer argument; RabbitMQ's names are short strings).
pub const MAX_GROUP_NAME_BYTES: usize = 255;

/// Where a stream's consumer groups keep their committed offsets: beside the stream's log
/// on this node ([`GroupOffsets`]), or in a replicated stream's Raft group
/// (`super::replica::ReplicatedOffsets`).
pub trait OffsetStore: Send {
    /// The group's committed offset, if it ever committed one.
    fn get(&self, group: &str) -> Option<u64>;

    /// Every group that committed, with its committed offset, by name.
    fn all(&self) -> Vec<(String, u64)>;

    /// Records that `group` has acked everything below `offset`. Offsets only move forward.
    fn commit(&mut self, group: &str, offset: u64) -> Result<(), StoreError>;

    /// Makes every commit durable (the broker is stopping).
    fn close(&self) -> Result<(), StoreError>;
}

/// The committed offsets of a stream's consumer groups, in a small log of their own.
pub struct GroupOffsets {
    log: Log,
    committed: HashMap<String, u64>,
    /// Size of the log right after the last compaction.
    compacted_bytes: u64,
    scratch: Vec<u8>,
}

impl std::fmt::Debug for GroupOffsets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupOffsets").field("committed", &self.committed).finish_non_exhaustive()
    }
}

impl GroupOffsets {
    /// Opens (or creates) the offsets log in `dir` and reads the committed offsets back.
    pub fn open(dir: &Path, flush_policy: FlushPolicy) -> Result<Self, StoreError> {
        let config = LogConfig {
            flush_policy,
            segment_bytes: GROUP_SEGMENT_BYTES,
            write_buffer_bytes: 16 * 1024,
            ..LogConfig::default()
        };
        let log = Log::open(dir, config).map_err(StoreError::from)?;
        let mut committed = HashMap::new();
        let mut next = log.first_offset();
        while next < log.next_offset() {
            let records = log.read(next, 4096, 4 * 1024 * 1024).map_err(StoreError::from)?;
            let Some(last) = records.last() else { break };
            next = last.offset + 1;
            for record in records {
                if let Some((name, offset)) = decode(&record.payload) {
                    committed.insert(name, offset);
                }
            }
        }
        let compacted_bytes = log.size_bytes();
        Ok(GroupOffsets { log, committed, compacted_bytes, scratch: Vec::new() })
    }

    fn append(&mut self, group: &str, offset: u64) -> Result<(), StoreError> {
        self.scratch.clear();
        self.scratch.extend_from_slice(&offset.to_be_bytes());
        self.scratch.extend_from_slice(group.as_bytes());
        self.log.append(NewRecord::new(now_ms() as i64, &self.scratch)).map_err(StoreError::from)?;
        Ok(())
    }

    /// Rewrites every group's offset at the end of the log, then drops the segments before.
    fn compact_if_large(&mut self) -> Result<(), StoreError> {
        if self.log.size_bytes() < self.compacted_bytes + COMPACT_AFTER_BYTES {
            return Ok(());
        }
        let start = self.log.next_offset();
        let groups: Vec<(String, u64)> = self.committed.iter().map(|(g, o)| (g.clone(), *o)).collect();
        for (group, offset) in &groups {
            self.append(group, *offset)?;
        }
        self.log.delete_below(start).map_err(StoreError::from)?;
        self.compacted_bytes = self.log.size_bytes();
        Ok(())
    }
}

impl OffsetStore for GroupOffsets {
    fn get(&self, group: &str) -> Option<u64> {
        self.committed.get(group).copied()
    }

    fn all(&self) -> Vec<(String, u64)> {
        let mut all: Vec<(String, u64)> = self.committed.iter().map(|(g, o)| (g.clone(), *o)).collect();
        all.sort();
        all
    }

    fn commit(&mut self, group: &str, offset: u64) -> Result<(), StoreError> {
        if self.committed.get(group).is_some_and(|c| *c >= offset) {
            return Ok(());
        }
        self.committed.insert(group.to_string(), offset);
        self.append(group, offset)?;
        self.compact_if_large()
    }

    fn close(&self) -> Result<(), StoreError> {
        self.log.close().map_err(StoreError::from)
    }
}

fn decode(payload: &[u8]) -> Option<(String, u64)> {
    let (offset, name) = payload.split_at_checked(8)?;
    let offset = u64::from_be_bytes(offset.try_into().ok()?);
    Some((String::from_utf8(name.to_vec()).ok()?, offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_group_is_listed_by_name_with_its_newest_offset() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut groups = GroupOffsets::open(dir.path(), FlushPolicy::Never).expect("opens");
        groups.commit("b", 3).expect("commit");
        groups.commit("a", 10).expect("commit");
        groups.commit("b", 7).expect("commit");
        assert_eq!(groups.all(), [("a".to_string(), 10), ("b".to_string(), 7)]);
    }

    #[test]
    fn offsets_survive_reopening_and_compaction() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut groups = GroupOffsets::open(dir.path(), FlushPolicy::Never).expect("opens");
        assert_eq!(groups.get("a"), None);
        groups.commit("a", 10).expect("commit");
        groups.commit("b", 3).expect("commit");
        groups.commit("a", 5).expect("an older offset is ignored");
        assert_eq!(groups.get("a"), Some(10));
        // Enough commits to compact several times.
        for offset in 11..200_000 {
            groups.commit("a", offset).expect("commit");
        }
        assert!(groups.log.size_bytes() < 4 * COMPACT_AFTER_BYTES, "compacted: {}", groups.log.size_bytes());
        groups.close().expect("close");
        drop(groups);
        let groups = GroupOffsets::open(dir.path(), FlushPolicy::Never).expect("reopens");
        assert_eq!((groups.get("a"), groups.get("b")), (Some(199_999), Some(3)));
    }
}
