//! The sparse offset index (`.idx`) of one segment: an entry (relative offset u32, file
//! position u32, both little-endian) for the first record and then roughly every
//! `index_interval_bytes` of log. A lookup is a binary search for the last entry at or
//! below the wanted offset; the caller scans forward from its position.

use std::path::Path;

use crate::entry_file::EntryFile;
use crate::error::Result;

/// Bytes per entry.
pub(crate) const ENTRY_BYTES: usize = 8;

/// One index entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IndexEntry {
    /// Offset minus the segment's base offset.
    pub rel: u32,
    /// Byte position of that record in the segment file.
    pub pos: u32,
}

/// The memory-mapped sparse index.
pub(crate) struct SparseIndex {
    file: EntryFile<ENTRY_BYTES>,
}

fn encode(e: IndexEntry) -> [u8; ENTRY_BYTES] {
    let mut b = [0; ENTRY_BYTES];
    b[..4].copy_from_slice(&e.rel.to_le_bytes());
    b[4..].copy_from_slice(&e.pos.to_le_bytes());
    b
}

fn decode(b: [u8; ENTRY_BYTES]) -> IndexEntry {
    let [a0, a1, a2, a3, b0, b1, b2, b3] = b;
    IndexEntry { rel: u32::from_le_bytes([a0, a1, a2, a3]), pos: u32::from_le_bytes([b0, b1, b2, b3]) }
}

impl SparseIndex {
    /// Opens the index; see [`EntryFile::open`]. Entries are unvalidated until
    /// [`SparseIndex::keep_valid_prefix`] runs.
    pub(crate) fn open(path: &Path, capacity: usize, grow: bool) -> Result<Self> {
        Ok(SparseIndex { file: EntryFile::open(path, capacity, grow)? })
    }

    pub(crate) fn len(&self) -> usize {
        self.file.len()
    }

    pub(crate) fn entry(&self, i: usize) -> IndexEntry {
        decode(self.file.get(i))
    }

    pub(crate) fn last(&self) -> Option<IndexEntry> {
        self.len().checked_sub(1).map(|i| self.entry(i))
    }

    /// Appends an entry; a full index just stops growing (reads scan further).
    pub(crate) fn append(&mut self, rel: u32, pos: u32) {
        self.file.push(encode(IndexEntry { rel, pos }));
    }

    /// The last entry with `rel <= target`, or the segment start.
    pub(crate) fn lookup(&self, target: u32) -> IndexEntry {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.entry(mid).rel <= target {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        match lo {
            0 => IndexEntry { rel: 0, pos: 0 },
            i => self.entry(i - 1),
        }
    }

    /// Drops entries for records at or after `rel`.
    pub(crate) fn truncate_from_rel(&mut self, rel: u32) {
        let keep = (0..self.len()).position(|i| self.entry(i).rel >= rel).unwrap_or(self.len());
        self.file.truncate(keep);
    }

    /// Keeps the longest prefix of entries that can be right: the first at (0, 0), then
    /// strictly increasing offsets and positions, all before `log_bytes`. Returns true if
    /// every entry in the file was kept (meaningful for a sealed, trimmed index). A
    /// preallocated tail of zeros ends the prefix naturally.
    pub(crate) fn keep_valid_prefix(&mut self, log_bytes: u64) -> bool {
        let scan = self.file.capacity();
        let mut prev: Option<IndexEntry> = None;
        let mut valid = 0;
        for i in 0..scan {
            let e = self.entry(i);
            let ordered = match prev {
                None => e.rel == 0 && e.pos == 0,
                Some(p) => e.rel > p.rel && e.pos > p.pos,
            };
            if !ordered || u64::from(e.pos) >= log_bytes {
                break;
            }
            prev = Some(e);
            valid = i + 1;
        }
        let intact = valid == self.file.len();
        self.file.retain(valid);
        intact
    }

    pub(crate) fn seal(&mut self) -> Result<()> {
        self.file.seal()
    }

    pub(crate) fn unseal(&mut self, capacity: usize) -> Result<()> {
        self.file.unseal(capacity)
    }

    pub(crate) fn flush_async(&self) -> Result<()> {
        self.file.flush_async()
    }
}
