//! Damage before a log's tail: a record that fails its checks (length, magic, CRC, offset)
//! somewhere a crash cannot have torn it, such as a flipped bit in a sealed segment.
//!
//! Opening a log scans only the active segment's tail, so such damage is found when a read
//! first reaches it. A read starting at it fails with [`StorageError::Corruption`]; the
//! owner then calls [`Log::skip_damage`], which locates the damaged record (scanning from
//! the sparse-index entry at or before it), and searches forward, byte by byte, for the
//! next record that decodes with a valid length, magic and CRC and an offset above the
//! damaged one and below the segment's end offset. The offsets in between form a
//! [`DamagedRange`]; without such a record the range runs to the segment's end.
//!
//! The log remembers the ranges it found (until retention or truncation removes their
//! segment): each is reported once, as an `error` log line naming the segment file and
//! byte position, and counted ([`Log::damaged_records`]); reads at an offset inside one
//! fail at once, and reads past one start from the remembered position of the next good
//! record instead of scanning through the bad bytes again. Damaged bytes are never
//! returned: every record handed out still passes its CRC and offset checks.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::PathBuf;

use tracing::error;

use crate::config::LogConfig;
use crate::error::{Result, StorageError};
use crate::log::Log;
use crate::reader::{Located, ReadPlan};
use crate::record::{self, HEADER_BYTES};
use crate::recovery;
use crate::segment::SegmentFile;

/// Bytes read per step while searching for the next good record.
const SEARCH_CHUNK_BYTES: usize = 1024 * 1024;

/// Consecutive offsets of one segment whose records cannot be read, found by
/// [`Log::skip_damage`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedRange {
    /// The first damaged offset.
    pub first: u64,
    /// The first offset after the damage that reads back: the next good record, or the
    /// segment's end offset if none follows the damage in that segment.
    pub next: u64,
    /// The segment (`.log`) file holding the damage.
    pub path: PathBuf,
    /// Byte position of the damaged record in that file.
    pub position: u64,
    /// Byte position of the record at `next` (the file's end if the range runs to it).
    pub next_position: u64,
    /// What check the damaged record failed.
    pub reason: String,
}

impl DamagedRange {
    /// The damaged offsets.
    pub fn offsets(&self) -> Range<u64> {
        self.first..self.next
    }

    /// Whether `offset` is one of the damaged offsets.
    pub fn contains(&self, offset: u64) -> bool {
        self.offsets().contains(&offset)
    }

    /// How many records the range lost.
    pub fn records(&self) -> u64 {
        self.next - self.first
    }

    /// The error a read starting inside the range fails with.
    pub(crate) fn to_error(&self) -> StorageError {
        StorageError::Corruption { path: self.path.clone(), position: self.position, reason: self.reason.clone() }
    }
}

/// The damaged ranges a log knows of, by first offset (they never overlap), and how many
/// records they have cost since the log was opened.
#[derive(Debug, Default)]
pub(crate) struct DamageMap {
    ranges: BTreeMap<u64, DamagedRange>,
    records: u64,
}

impl DamageMap {
    /// The known range holding `offset`.
    pub(crate) fn containing(&self, offset: u64) -> Option<&DamagedRange> {
        self.ranges.range(..=offset).next_back().map(|(_, r)| r).filter(|r| r.contains(offset))
    }

    /// Where a read of `offset` in the segment starting at `base` can start, past known
    /// damage: the offset and position after the last known range of that segment that
    /// ends at or before `offset` and after `from_offset` (where the index would start it).
    pub(crate) fn resume_point(&self, base: u64, from_offset: u64, offset: u64) -> Option<(u64, u64)> {
        let (_, range) = self.ranges.range(base..=offset).next_back()?;
        (range.next <= offset && range.next > from_offset).then_some((range.next, range.next_position))
    }

    /// Adds a range found by a scan; returns the range now known there, and whether it is
    /// new (two readers may find the same damage at once: only one reports it). Ranges
    /// below `first_offset` (their segment was deleted) are forgotten.
    fn insert(&mut self, found: DamagedRange, first_offset: u64) -> (DamagedRange, bool) {
        self.forget_below(first_offset);
        let overlapping = self.ranges.range(..found.next).next_back().map(|(_, r)| r).filter(|r| r.next > found.first);
        if let Some(known) = overlapping {
            return (known.clone(), false);
        }
        self.records += found.records();
        self.ranges.insert(found.first, found.clone());
        (found, true)
    }

    /// Forgets ranges of deleted segments.
    pub(crate) fn forget_below(&mut self, first_offset: u64) {
        if self.ranges.first_key_value().is_some_and(|(first, _)| *first < first_offset) {
            self.ranges = self.ranges.split_off(&first_offset);
        }
    }

    /// Forgets ranges reaching `offset` or beyond (the log was truncated there: those
    /// offsets will be taken by new records).
    pub(crate) fn truncate_from(&mut self, offset: u64) {
        self.ranges.retain(|_, r| r.next <= offset);
    }
}

impl Log {
    /// Steps past damage at `from`, after a read starting there failed with
    /// [`StorageError::Corruption`].
    ///
    /// Locates the damage the read ran into (the record at `from`, or one between the
    /// index entry the read started from and `from`), finds the next good record after it,
    /// remembers the damaged range, and reports it once (an `error` log line with the
    /// segment file and byte position; counted by [`Log::damaged_records`]). Returns the
    /// range holding `from`, whose records are lost: continue at its `next`. Returns `None`
    /// if the record at `from` reads back (a read at `from` now starts past any damage found
    /// before it) or `from` is the end of the log. Outside the log's range it is
    /// [`StorageError::OffsetOutOfRange`]. [`Log::read`] keeps failing at damaged offsets.
    pub fn skip_damage(&self, from: u64) -> Result<Option<DamagedRange>> {
        let mut last_start = None;
        loop {
            let plan = match self.locate(from)? {
                Located::End => return Ok(None),
                Located::Damaged(range) => return Ok(Some(range)),
                Located::Plan(plan) => plan,
            };
            // Every pass remembers a range ending past where the previous one started.
            if last_start.is_some_and(|start| plan.offset <= start) {
                let why = "damage scan made no progress";
                return Err(StorageError::corruption(&plan.file.path, plan.pos, why));
            }
            last_start = Some(plan.offset);
            let Some(found) = find_damage(&plan, from, &self.shared.config)? else {
                return Ok(None);
            };
            let range = self.remember(found);
            if range.contains(from) {
                return Ok(Some(range));
            }
        }
    }

    /// Records lost to damage found since the log was opened (each range counted once).
    pub fn damaged_records(&self) -> u64 {
        self.shared.state.lock().damage.records
    }

    /// The damaged ranges found since the log was opened, oldest first, except those whose
    /// segments retention or truncation has removed since.
    pub fn damaged_ranges(&self) -> Vec<DamagedRange> {
        let st = self.shared.state.lock();
        let first = st.first_offset();
        st.damage.ranges.values().filter(|r| r.first >= first).cloned().collect()
    }

    /// Adds a found range to the log's memory, reporting it if it is new.
    fn remember(&self, found: DamagedRange) -> DamagedRange {
        let (range, new) = {
            let mut st = self.shared.state.lock();
            let first = st.first_offset();
            st.damage.insert(found, first)
        };
        if new {
            error!(
                segment = %range.path.display(),
                position = range.position,
                first_offset = range.first,
                next_offset = range.next,
                records = range.records(),
                next_position = range.next_position,
                reason = %range.reason,
                "damaged records in the log skipped: they cannot be read back"
            );
        }
        range
    }
}

/// Scans from the plan's start to the record at `from`: `None` if that record checks out,
/// otherwise the damaged range the scan ran into (which may end before `from`).
fn find_damage(plan: &ReadPlan, from: u64, config: &LogConfig) -> Result<Option<DamagedRange>> {
    let end =
        recovery::scan(&plan.file, plan.pos, plan.end, plan.offset, from.saturating_add(1), config, |_, _, _, _| {})?;
    if end.next_offset > from {
        return Ok(None);
    }
    let first = end.next_offset;
    let (position, reason, next) = match end.stop {
        Some(stop) => {
            let next = find_next_record(&plan.file, stop.pos, plan.end, first, plan.end_offset, config)?;
            (stop.pos, stop.reason, next)
        }
        // The file ends before the segment's last offset (its name or the next one's says
        // how many records it holds).
        None => (end.pos, format!("segment data ends at offset {first}, before offset {}", plan.end_offset), None),
    };
    let (next, next_position) = next.unwrap_or((plan.end_offset, plan.end));
    Ok(Some(DamagedRange { first, next, path: plan.file.path.clone(), position, next_position, reason }))
}

/// The first record after the damaged one at `damaged_pos` (offset `damaged`) that decodes
/// with a valid length, magic and CRC and an offset in `(damaged, end_offset)`, searching
/// byte by byte up to `end`: its offset and position.
pub(crate) fn find_next_record(
    file: &SegmentFile,
    damaged_pos: u64,
    end: u64,
    damaged: u64,
    end_offset: u64,
    config: &LogConfig,
) -> Result<Option<(u64, u64)>> {
    let max = config.max_record_bytes;
    let mut chunk_pos = damaged_pos + 1;
    while chunk_pos + HEADER_BYTES as u64 <= end {
        let len = ((end - chunk_pos) as usize).min(SEARCH_CHUNK_BYTES);
        let chunk = file.read_exact_at(chunk_pos, len)?;
        for at in 0..=chunk.len() - HEADER_BYTES {
            let Ok(header) = record::decode_header(&chunk[at..], max) else { continue };
            let pos = chunk_pos + at as u64;
            if header.offset <= damaged || header.offset >= end_offset || pos + header.total_len as u64 > end {
                continue;
            }
            let valid = match chunk.get(at..at + header.total_len) {
                Some(whole) => record::decode(whole, max).is_ok(),
                None => record::decode(&file.read_exact_at(pos, header.total_len)?, max).is_ok(),
            };
            if valid {
                return Ok(Some((header.offset, pos)));
            }
        }
        chunk_pos += (chunk.len() - HEADER_BYTES + 1) as u64;
    }
    Ok(None)
}
