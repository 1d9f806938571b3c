//! The time index (`.tix`) of one segment: entries (max timestamp so far i64, relative
//! offset u32, little-endian) written beside the sparse-index entries, plus one final
//! entry when the segment is sealed. Each entry promises that every record up to and
//! including its offset has a timestamp at or below its timestamp, so entries are
//! monotonic even when record timestamps are not, and a lookup is a binary search.

use std::path::Path;

use crate::entry_file::EntryFile;
use crate::error::Result;

/// Bytes per entry.
pub(crate) const ENTRY_BYTES: usize = 12;

/// One time-index entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimeEntry {
    /// Largest timestamp among records up to and including `rel`.
    pub max_ts: i64,
    /// Offset minus the segment's base offset.
    pub rel: u32,
}

/// The memory-mapped time index.
pub(crate) struct TimeIndex {
    file: EntryFile<ENTRY_BYTES>,
}

fn encode(e: TimeEntry) -> [u8; ENTRY_BYTES] {
    let mut b = [0; ENTRY_BYTES];
    b[..8].copy_from_slice(&e.max_ts.to_le_bytes());
    b[8..].copy_from_slice(&e.rel.to_le_bytes());
    b
}

fn decode(b: [u8; ENTRY_BYTES]) -> TimeEntry {
    let mut ts = [0; 8];
    ts.copy_from_slice(&b[..8]);
    let mut rel = [0; 4];
    rel.copy_from_slice(&b[8..]);
    TimeEntry { max_ts: i64::from_le_bytes(ts), rel: u32::from_le_bytes(rel) }
}

impl TimeIndex {
    /// Opens the index; see [`EntryFile::open`].
    pub(crate) fn open(path: &Path, capacity: usize, grow: bool) -> Result<Self> {
        Ok(TimeIndex { file: EntryFile::open(path, capacity, grow)? })
    }

    pub(crate) fn len(&self) -> usize {
        self.file.len()
    }

    pub(crate) fn entry(&self, i: usize) -> TimeEntry {
        decode(self.file.get(i))
    }

    pub(crate) fn last(&self) -> Option<TimeEntry> {
        self.len().checked_sub(1).map(|i| self.entry(i))
    }

    /// Appends an entry unless it would add nothing over the last one.
    pub(crate) fn append(&mut self, max_ts: i64, rel: u32) {
        if let Some(last) = self.last() {
            if last.rel >= rel {
                return;
            }
        }
        self.file.push(encode(TimeEntry { max_ts, rel }));
    }

    /// Relative offset from which to scan for the first record with a timestamp at or
    /// after `ts`: just past the last entry whose max is still below `ts`.
    pub(crate) fn scan_start(&self, ts: i64) -> u32 {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.entry(mid).max_ts < ts {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        match lo {
            0 => 0,
            i => self.entry(i - 1).rel.saturating_add(1),
        }
    }

    /// Drops entries for records at or after `rel`.
    pub(crate) fn truncate_from_rel(&mut self, rel: u32) {
        let keep = (0..self.len()).position(|i| self.entry(i).rel >= rel).unwrap_or(self.len());
        self.file.truncate(keep);
    }

    /// Keeps the longest prefix with strictly increasing offsets (from 0) below
    /// `next_rel` and non-decreasing timestamps. Returns true if every entry was kept.
    pub(crate) fn keep_valid_prefix(&mut self, next_rel: u64) -> bool {
        let mut prev: Option<TimeEntry> = None;
        let mut valid = 0;
        for i in 0..self.file.capacity() {
            let e = self.entry(i);
            let ordered = match prev {
                None => e.rel == 0,
                Some(p) => e.rel > p.rel && e.max_ts >= p.max_ts,
            };
            if !ordered || u64::from(e.rel) >= next_rel {
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
