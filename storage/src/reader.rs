//! The read path: locating an offset (segment by binary search over bases, position by
//! the sparse index, or past damage the log already knows of, see [`crate::damage`]),
//! reading the file outside the log's lock with `pread`, and decoding records whose
//! payloads share one `Bytes` buffer. Also timestamp lookups.

use std::fs::File;
use std::sync::Arc;

use bytes::Bytes;

use crate::config::LogConfig;
use crate::damage::DamagedRange;
use crate::error::{Result, StorageError};
use crate::log::{Log, State};
use crate::record::{self, DecodeError, Record, HEADER_BYTES};
use crate::recovery;
use crate::segment::{self, SegmentFile};

/// Smallest read issued, so short reads still amortize the syscall.
const MIN_READ_BYTES: usize = 16 * 1024;
/// Largest read issued for a byte budget (a larger record is still read whole), so that a
/// generous budget does not pull a whole segment into memory at once.
const MAX_READ_BYTES: usize = 64 * 1024;
/// Records fetched per step while seeking by timestamp.
const TIME_SCAN_BATCH_RECORDS: usize = 4096;
/// Bytes fetched per step while seeking by timestamp.
const TIME_SCAN_BATCH_BYTES: usize = 4 * 1024 * 1024;

/// Where to read: found under the lock, used outside it.
pub(crate) struct ReadPlan {
    pub file: Arc<SegmentFile>,
    /// The data file, pinned open when the plan was made: a segment that retention
    /// deletes meanwhile stays readable through it, as through any open descriptor.
    pub pinned: Arc<File>,
    /// Position and offset of a record at or before the wanted offset: the index entry's,
    /// or the first good record after known damage if that is closer.
    pub pos: u64,
    pub offset: u64,
    /// End of the segment's readable bytes when the plan was made.
    pub end: u64,
    /// One past the segment's last offset.
    pub end_offset: u64,
}

/// What locating an offset found.
pub(crate) enum Located {
    /// The offset is the end of the log.
    End,
    /// The offset lies in a damaged range the log already knows of.
    Damaged(DamagedRange),
    /// Where to start reading.
    Plan(ReadPlan),
}

/// Which records a filtered read returns, judged from the header alone: `(flags, tag_hash)`.
pub type HeaderFilter<'a> = &'a dyn Fn(u8, u32) -> bool;

/// What a filtered read found: the wanted records, and where to continue.
#[derive(Debug, Clone, Default)]
pub struct FilteredRead {
    /// The records the filter accepted, in offset order.
    pub records: Vec<Record>,
    /// The offset after the last record examined (accepted or stepped over).
    pub next_offset: u64,
}

/// Limits on one read.
struct Budget<'a> {
    records: usize,
    bytes: usize,
    /// The first record of a read is returned even if larger than `bytes`.
    at_least_one: bool,
    /// Records the read may examine, wanted or not.
    scanned: usize,
    /// Records it refuses are stepped over by their header: no CRC, no copy.
    filter: Option<HeaderFilter<'a>>,
}

impl Budget<'_> {
    fn wants(&self, header: &record::Header) -> bool {
        self.filter.is_none_or(|f| f(header.flags, header.tag_hash))
    }

    fn exhausted(&self) -> bool {
        self.records == 0 || self.scanned == 0
    }
}

impl Log {
    /// Reads records from `from` onwards: at most `max_records`, and at most `max_bytes`
    /// of payload (but always at least one record if `from` holds one). Reading at
    /// [`Log::next_offset`] returns an empty vector; outside `[first, next]` is an error.
    /// Payloads are slices of shared buffers (no per-record copy). Damaged data is never
    /// returned: records before it are, and a read starting at it fails with
    /// [`StorageError::Corruption`]; [`Log::skip_damage`] then says where reading can go
    /// on.
    pub fn read(&self, from: u64, max_records: usize, max_bytes: usize) -> Result<Vec<Record>> {
        let budget =
            Budget { records: max_records, bytes: max_bytes, at_least_one: true, scanned: usize::MAX, filter: None };
        Ok(self.read_within(from, budget)?.records)
    }

    /// Reads the records from `from` onwards that `filter` accepts by their flags and tag
    /// hash, examining at most `max_scanned` records. Refused records are stepped over by
    /// their headers alone: their payloads are neither CRC-checked, copied nor decoded, and
    /// a refused payload that spans beyond the current read window is not read at all.
    /// Limits are as for [`Log::read`]; `next_offset` says where to continue.
    pub fn read_filtered(
        &self,
        from: u64,
        max_records: usize,
        max_bytes: usize,
        max_scanned: usize,
        filter: HeaderFilter<'_>,
    ) -> Result<FilteredRead> {
        let budget = Budget {
            records: max_records,
            bytes: max_bytes,
            at_least_one: true,
            scanned: max_scanned.max(1),
            filter: Some(filter),
        };
        self.read_within(from, budget)
    }

    fn read_within(&self, from: u64, mut budget: Budget<'_>) -> Result<FilteredRead> {
        let mut out = FilteredRead { records: Vec::new(), next_offset: from };
        while !budget.exhausted() {
            let start = out.next_offset;
            let plan = match self.plan_read(start) {
                Ok(Some(plan)) => plan,
                Ok(None) => break,
                Err(e) if start == from => return Err(e),
                // Hand back what came before; the next read reports it.
                Err(_) => break,
            };
            if let Err(e) = read_segment(&plan, &mut budget, &self.shared.config, &mut out) {
                // Hand back what came before the damage; the next read reports it.
                if out.next_offset == from {
                    return Err(e);
                }
                break;
            }
            if out.next_offset == start {
                break;
            }
        }
        Ok(out)
    }

    /// Reads the single record at `offset`.
    pub fn read_one(&self, offset: u64) -> Result<Record> {
        let (first, next) = self.bounds();
        match self.read(offset, 1, 0)?.pop() {
            Some(r) => Ok(r),
            None => Err(StorageError::OffsetOutOfRange { offset, first, next }),
        }
    }

    fn bounds(&self) -> (u64, u64) {
        let st = self.shared.state.lock();
        (st.first_offset(), st.next_offset())
    }

    /// Locates `offset`; `None` at the end of the log. An offset in known damage is
    /// [`StorageError::Corruption`] at once.
    fn plan_read(&self, offset: u64) -> Result<Option<ReadPlan>> {
        match self.locate(offset)? {
            Located::End => Ok(None),
            Located::Damaged(range) => Err(range.to_error()),
            Located::Plan(plan) => Ok(Some(plan)),
        }
    }

    /// Locates `offset`: the segment holding it (loaded, its buffer written out), then the
    /// index entry at or before it, or the first good record after known damage in that
    /// segment if that is closer.
    pub(crate) fn locate(&self, offset: u64) -> Result<Located> {
        let sh = &self.shared;
        let mut st = sh.state.lock();
        let (first, next) = (st.first_offset(), st.next_offset());
        if offset < first || offset > next {
            return Err(StorageError::OffsetOutOfRange { offset, first, next });
        }
        if offset == next {
            return Ok(Located::End);
        }
        if let Some(range) = st.damage.containing(offset) {
            return Ok(Located::Damaged(range.clone()));
        }
        let i = st.segment_index(offset);
        self.ensure_loaded(&mut st, i)?;
        let st = &mut *st;
        let seg = &mut st.segments[i];
        if seg.buffered_bytes() > 0 {
            if let Err(e) = seg.write_out() {
                sh.durability.fail(&e);
                return Err(e);
            }
        }
        let Some(files) = seg.files() else {
            return Err(StorageError::Failed("segment files not loaded".into()));
        };
        let entry = files.index.lookup((offset - seg.base) as u32);
        let (mut start, mut pos) = (seg.base + u64::from(entry.rel), u64::from(entry.pos));
        if let Some((after, after_pos)) = st.damage.resume_point(seg.base, start, offset) {
            (start, pos) = (after, after_pos);
        }
        Ok(Located::Plan(ReadPlan {
            pinned: files.log.pin()?,
            file: Arc::clone(&files.log),
            pos,
            offset: start,
            end: seg.size,
            end_offset: seg.next_offset,
        }))
    }

    /// Loads segment `i`'s files if it is a sealed segment not used since open.
    pub(crate) fn ensure_loaded(&self, st: &mut State, i: usize) -> Result<()> {
        let sh = &self.shared;
        match st.segments.get_mut(i) {
            Some(seg) if !seg.is_loaded() => recovery::load_sealed(&sh.dir, seg, &sh.config),
            _ => Ok(()),
        }
    }

    /// First offset whose record has a timestamp at or after `ts_ms`, or `None` if no
    /// retained record is that recent. Exact even when timestamps are not monotonic.
    /// Damaged records are stepped over (see [`Log::skip_damage`]).
    pub fn offset_for_timestamp(&self, ts_ms: i64) -> Result<Option<u64>> {
        let Some(start) = self.time_scan_start(ts_ms)? else {
            return Ok(None);
        };
        let mut from = start;
        loop {
            let batch = match self.read(from, TIME_SCAN_BATCH_RECORDS, TIME_SCAN_BATCH_BYTES) {
                Ok(b) => b,
                // Retention may delete the segment under the scan; start again.
                Err(StorageError::OffsetOutOfRange { first, .. }) if from < first => {
                    from = first;
                    continue;
                }
                // Damaged records have no timestamp to offer: step past them.
                Err(StorageError::Corruption { .. }) => match self.skip_damage(from)? {
                    Some(damaged) => {
                        from = damaged.next;
                        continue;
                    }
                    None => self.read(from, TIME_SCAN_BATCH_RECORDS, TIME_SCAN_BATCH_BYTES)?,
                },
                Err(e) => return Err(e),
            };
            let Some(last) = batch.last().map(|r| r.offset) else {
                return Ok(None);
            };
            if let Some(r) = batch.iter().find(|r| r.timestamp_ms >= ts_ms) {
                return Ok(Some(r.offset));
            }
            from = last + 1;
        }
    }

    /// The offset to scan from: inside the oldest segment whose newest timestamp reaches
    /// `ts_ms`, just past the last time-index entry that is still older.
    fn time_scan_start(&self, ts_ms: i64) -> Result<Option<u64>> {
        let mut st = self.shared.state.lock();
        for i in 0..st.segments.len() {
            self.ensure_loaded(&mut st, i)?;
            let seg = &st.segments[i];
            if seg.max_ts.is_some_and(|m| m >= ts_ms) {
                let rel = seg.files().map_or(0, |f| f.time.scan_start(ts_ms));
                return Ok(Some((seg.base + u64::from(rel)).min(seg.next_offset - 1)));
            }
        }
        Ok(None)
    }
}

/// Reads records of one segment from `out.next_offset` into `out`, within `budget`,
/// advancing `out.next_offset` past every record examined.
fn read_segment(plan: &ReadPlan, budget: &mut Budget<'_>, config: &LogConfig, out: &mut FilteredRead) -> Result<()> {
    let from = out.next_offset;
    let window = budget
        .bytes
        .min(MAX_READ_BYTES)
        .saturating_add(config.index_interval_bytes as usize + HEADER_BYTES)
        .max(MIN_READ_BYTES);
    let (mut pos, mut offset) = (plan.pos, plan.offset);
    let mut want = window;
    while pos < plan.end && !budget.exhausted() {
        let chunk = read_chunk(plan, pos, want)?;
        want = window;
        let mut at = 0;
        while !budget.exhausted() && pos + (at as u64) < plan.end && at < chunk.len() {
            let rec_pos = pos + at as u64;
            let header = match record::decode_header(&chunk[at..], config.max_record_bytes) {
                Ok(h) => h,
                Err(DecodeError::Incomplete) => {
                    want = fetch_whole(plan, rec_pos, HEADER_BYTES, at, want)?;
                    break;
                }
                Err(e) => return Err(corrupt(plan, rec_pos, e.describe())),
            };
            if header.offset != offset {
                let why = format!("expected offset {offset}, found {}", header.offset);
                return Err(corrupt(plan, rec_pos, &why));
            }
            let wanted = offset >= from && budget.wants(&header);
            if !wanted {
                // Stepped over by its header; a payload past this chunk is never read.
                if rec_pos + header.total_len as u64 > plan.end {
                    return Err(corrupt(plan, rec_pos, DecodeError::Incomplete.describe()));
                }
                if offset >= from {
                    budget.scanned -= 1;
                    out.next_offset = offset + 1;
                }
                at += header.total_len;
                offset += 1;
                continue;
            }
            let header = match record::decode(&chunk[at..], config.max_record_bytes) {
                Ok(h) => h,
                Err(DecodeError::Incomplete) => {
                    want = fetch_whole(plan, rec_pos, header.total_len, at, want)?;
                    break;
                }
                Err(e) => return Err(corrupt(plan, rec_pos, e.describe())),
            };
            if !take(budget, header.total_len - HEADER_BYTES) {
                break;
            }
            budget.scanned -= 1;
            out.records.push(record::to_record(&chunk, at, &header));
            out.next_offset = offset + 1;
            at += header.total_len;
            offset += 1;
        }
        pos += at as u64;
    }
    Ok(())
}

/// A record of `need` bytes at `rec_pos` did not fit the chunk: checks that the segment
/// holds it, and returns the size of the next read (exactly the record when it starts
/// the chunk and is larger than the window).
fn fetch_whole(plan: &ReadPlan, rec_pos: u64, need: usize, at: usize, want: usize) -> Result<usize> {
    if rec_pos + need as u64 > plan.end {
        return Err(corrupt(plan, rec_pos, DecodeError::Incomplete.describe()));
    }
    Ok(if at == 0 { need.max(want) } else { want })
}

/// Charges one record of `payload_len` bytes to the budget; false if it does not fit.
fn take(budget: &mut Budget, payload_len: usize) -> bool {
    if payload_len > budget.bytes && !budget.at_least_one {
        budget.records = 0;
        return false;
    }
    budget.records -= 1;
    budget.bytes = budget.bytes.saturating_sub(payload_len);
    budget.at_least_one = false;
    true
}

/// `pread`s up to `len` bytes at `pos`, bounded by the plan's end.
fn read_chunk(plan: &ReadPlan, pos: u64, len: usize) -> Result<Bytes> {
    let len = len.min((plan.end - pos) as usize);
    Ok(Bytes::from(segment::read_exact_at(&plan.pinned, &plan.file.path, pos, len)?))
}

fn corrupt(plan: &ReadPlan, pos: u64, why: &str) -> StorageError {
    StorageError::corruption(&plan.file.path, pos, why)
}
