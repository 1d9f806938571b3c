//! Opening segments after a restart or crash: scanning the tail of the active segment
//! from its last trustworthy index entry (truncating a torn or CRC-failing tail),
//! verifying a sealed segment when it is first loaded, and rebuilding missing or
//! damaged indexes from segment data (stepping over damaged records). Damage that is not
//! at the log's tail is left in place: reads report it as [`StorageError::Corruption`]
//! naming the segment and byte position, and [`crate::damage`] steps past it.

use std::path::Path;

use tracing::warn;

use crate::config::LogConfig;
use crate::damage;
use crate::error::{Result, StorageError};
use crate::record::{self, DecodeError, HEADER_BYTES};
use crate::segment::{Segment, SegmentFile, SegmentFiles};

/// Bytes read per scan step.
const SCAN_CHUNK_BYTES: usize = 1024 * 1024;
/// Index entries tried, newest first, before recovery rescans the whole active segment.
const MAX_ENTRY_RETRIES: usize = 8;

/// Where and why a scan stopped early.
#[derive(Debug, Clone)]
pub(crate) struct ScanStop {
    pub pos: u64,
    pub reason: String,
}

/// Outcome of scanning records from a position.
#[derive(Debug, Clone)]
pub(crate) struct ScanEnd {
    /// Position just past the last good record.
    pub pos: u64,
    /// Offset the next record would have.
    pub next_offset: u64,
    /// Set if the scan stopped before `end` on a bad or torn record.
    pub stop: Option<ScanStop>,
}

/// Reads records in `[pos, end)` expecting consecutive offsets from `offset`, up to (not
/// including) offset `until`, calling `each(offset, pos, timestamp, len)` for every record
/// that checks out.
pub(crate) fn scan(
    file: &SegmentFile,
    mut pos: u64,
    end: u64,
    mut offset: u64,
    until: u64,
    config: &LogConfig,
    mut each: impl FnMut(u64, u64, i64, u64),
) -> Result<ScanEnd> {
    let mut chunk: Vec<u8> = Vec::new();
    let mut chunk_pos = pos;
    let stop = loop {
        if pos >= end || offset >= until {
            break None;
        }
        let at = (pos - chunk_pos) as usize;
        let view = chunk.get(at..).unwrap_or(&[]);
        let need = match record::decode_header(view, config.max_record_bytes) {
            Ok(h) if view.len() >= h.total_len => None,
            Ok(h) => Some(h.total_len),
            Err(DecodeError::Incomplete) => Some(HEADER_BYTES),
            Err(e) => break Some(stop_at(pos, e.describe())),
        };
        if let Some(need) = need {
            let avail = end - pos;
            if (need as u64) > avail || (view.len() >= need && need == HEADER_BYTES) {
                break Some(stop_at(pos, DecodeError::Incomplete.describe()));
            }
            let len = (avail as usize).min(SCAN_CHUNK_BYTES.max(need));
            chunk = file.read_exact_at(pos, len)?;
            chunk_pos = pos;
            continue;
        }
        let header = match record::decode(view, config.max_record_bytes) {
            Ok(h) => h,
            Err(e) => break Some(stop_at(pos, e.describe())),
        };
        if header.offset != offset {
            let why = format!("expected offset {offset}, found {}", header.offset);
            break Some(stop_at(pos, &why));
        }
        each(offset, pos, header.timestamp_ms, header.total_len as u64);
        pos += header.total_len as u64;
        offset += 1;
    };
    Ok(ScanEnd { pos, next_offset: offset, stop })
}

fn stop_at(pos: u64, reason: &str) -> ScanStop {
    ScanStop { pos, reason: reason.to_string() }
}

/// Timestamp of the record at `pos`, if one decodes there with offset `offset`.
fn record_ts_at(file: &SegmentFile, pos: u64, offset: u64, size: u64, config: &LogConfig) -> Option<i64> {
    let len = (size.saturating_sub(pos) as usize).min(HEADER_BYTES + config.max_record_bytes);
    let head = file.read_exact_at(pos, len.min(HEADER_BYTES)).ok()?;
    let header = record::decode_header(&head, config.max_record_bytes).ok()?;
    if header.offset != offset || header.total_len > len {
        return None;
    }
    let whole = file.read_exact_at(pos, header.total_len).ok()?;
    record::decode(&whole, config.max_record_bytes).ok().map(|h| h.timestamp_ms)
}

/// Opens the last segment for appending: validates its indexes, scans from the newest
/// index entry that checks out, and truncates whatever does not decode after it.
pub(crate) fn recover_active(dir: &Path, base: u64, config: &LogConfig) -> Result<Segment> {
    let mut files = SegmentFiles::open(dir, base, config, true)?;
    let size = files.log.len()?;
    files.index.keep_valid_prefix(size);
    files.time.keep_valid_prefix(u64::from(u32::MAX));
    let first_ts = if size > 0 { record_ts_at(&files.log, 0, base, size, config) } else { None };
    let start = trusted_entries(&files, base, size, first_ts, config);
    let (start_rel, start_pos, max_ts) = match start {
        0 => (0, 0, None),
        k => {
            let e = files.index.entry(k - 1);
            (e.rel, u64::from(e.pos), Some(files.time.entry(k - 1).max_ts))
        }
    };
    files.index.truncate_from_rel(start_rel);
    files.time.truncate_from_rel(start_rel);
    let log = std::sync::Arc::clone(&files.log);
    let mut seg = Segment::with_files(base, files, start_pos);
    seg.sealed = false;
    seg.max_ts = max_ts;
    seg.first_ts = first_ts;
    seg.bytes_since_index = u64::from(config.index_interval_bytes);
    seg.next_offset = base + u64::from(start_rel);
    let end = scan(&log, start_pos, size, seg.next_offset, u64::MAX, config, |off, pos, ts, len| {
        seg.note_record(off, pos, ts, len, config)
    })?;
    if let Some(stop) = &end.stop {
        warn!(segment = %log.path.display(), position = stop.pos, reason = %stop.reason,
            dropped_bytes = size - end.pos, "truncating damaged tail of the active segment");
        log.set_len(end.pos)?;
        log.sync()?;
    }
    seg.size = end.pos;
    seg.written = end.pos;
    seg.next_offset = end.next_offset;
    seg.unseal(config)?;
    Ok(seg)
}

/// How many leading index entries (paired sparse + time entries) can be trusted: the
/// time index must start at the first record's timestamp, and the newest kept entry
/// must point at a record that decodes with the right offset.
fn trusted_entries(files: &SegmentFiles, base: u64, size: u64, first_ts: Option<i64>, config: &LogConfig) -> usize {
    let paired = (0..files.index.len().min(files.time.len()))
        .take_while(|&i| files.index.entry(i).rel == files.time.entry(i).rel)
        .count();
    if paired == 0 || Some(files.time.entry(0).max_ts) != first_ts {
        return 0;
    }
    let mut k = paired;
    for _ in 0..MAX_ENTRY_RETRIES {
        let e = files.index.entry(k - 1);
        let off = base + u64::from(e.rel);
        if record_ts_at(&files.log, u64::from(e.pos), off, size, config).is_some() {
            return k;
        }
        k -= 1;
        if k == 0 {
            break;
        }
    }
    0
}

/// Loads a sealed segment's files on first use, checking that its indexes agree with
/// its data and that its last records end exactly where the next segment begins.
/// Damaged indexes are rebuilt; damaged data is an error.
pub(crate) fn load_sealed(dir: &Path, seg: &mut Segment, config: &LogConfig) -> Result<()> {
    let mut files = SegmentFiles::open(dir, seg.base, config, false)?;
    let size = files.log.len()?;
    seg.size = size;
    seg.written = size;
    let next_rel = seg.next_offset - seg.base;
    let idx_ok = files.index.keep_valid_prefix(size) && (files.index.len() > 0 || size == 0);
    let tix_ok = files.time.keep_valid_prefix(next_rel) && sealed_time_pairs(&files);
    if idx_ok && tix_ok && verify_sealed_tail(&files, seg, config).is_ok() {
        seg.max_ts = files.time.last().map(|e| e.max_ts);
        seg.first_ts = Some(files.time.entry(0).max_ts).filter(|_| size > 0);
        seg.set_files(files);
        return Ok(());
    }
    warn!(segment = %files.log.path.display(), "index missing or damaged; rebuilding from the segment");
    rebuild_sealed(seg, files, config)
}

/// A sealed time index has one entry per sparse-index entry plus the final one.
fn sealed_time_pairs(files: &SegmentFiles) -> bool {
    let (n, m) = (files.index.len(), files.time.len());
    (m == n || m == n + 1) && (0..n).all(|i| files.index.entry(i).rel == files.time.entry(i).rel)
}

/// Scans from the last index entry to the end of the file.
fn verify_sealed_tail(files: &SegmentFiles, seg: &Segment, config: &LogConfig) -> Result<()> {
    let e = files.index.last().unwrap_or(crate::sparse_index::IndexEntry { rel: 0, pos: 0 });
    let from = seg.base + u64::from(e.rel);
    let end = scan(&files.log, u64::from(e.pos), seg.size, from, u64::MAX, config, |_, _, _, _| {})?;
    check_complete(&files.log, seg, &end)
}

fn check_complete(log: &SegmentFile, seg: &Segment, end: &ScanEnd) -> Result<()> {
    if let Some(stop) = &end.stop {
        return Err(StorageError::corruption(&log.path, stop.pos, stop.reason.clone()));
    }
    if end.next_offset != seg.next_offset {
        let why =
            format!("segment ends at offset {} but the next segment starts at {}", end.next_offset, seg.next_offset);
        return Err(StorageError::corruption(&log.path, end.pos, why));
    }
    Ok(())
}

/// Rebuilds both indexes of a sealed segment by scanning all of it. Damaged records are
/// stepped over (the next good record is found as [`crate::damage`] does and indexed), so
/// the records around them stay reachable; reads report the damage when they reach it.
fn rebuild_sealed(seg: &mut Segment, mut files: SegmentFiles, config: &LogConfig) -> Result<()> {
    let cap = config.index_capacity_entries();
    files.index.unseal(cap)?;
    files.time.unseal(cap + 1)?;
    files.index.truncate_from_rel(0);
    files.time.truncate_from_rel(0);
    let log = std::sync::Arc::clone(&files.log);
    let expected_next = seg.next_offset;
    let size = seg.size;
    seg.set_files(files);
    seg.next_offset = seg.base;
    seg.max_ts = None;
    seg.first_ts = None;
    seg.bytes_since_index = 0;
    let (mut pos, mut offset) = (0, seg.base);
    let end = loop {
        let end = scan(&log, pos, size, offset, u64::MAX, config, |off, pos, ts, len| {
            seg.note_record(off, pos, ts, len, config)
        })?;
        let Some(stop) = &end.stop else { break end };
        match damage::find_next_record(&log, stop.pos, size, end.next_offset, expected_next, config)? {
            Some((next_offset, next_pos)) => {
                (offset, pos) = (next_offset, next_pos);
                // Index the first record after the damage, so reads past it start there.
                seg.bytes_since_index = u64::from(config.index_interval_bytes);
            }
            // The damage runs to the end of the segment.
            None => break ScanEnd { pos: size, next_offset: expected_next, stop: None },
        }
    };
    seg.next_offset = expected_next;
    // A file that ends early lost its last records: reads report that too.
    if end.next_offset > expected_next {
        check_complete(&log, seg, &end)?;
    }
    seg.size = size;
    seg.written = size;
    seg.seal()
}
