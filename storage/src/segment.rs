//! One segment: a `{base_offset:020}.log` file of records with its sparse index and time
//! index. The segment owns its write buffer (appends reach the file in large chunks), the
//! index-entry cadence, sealing and truncation. Sealed segments load their files lazily,
//! so opening a log costs one directory listing, not a visit to every segment.

use std::fs::{File, OpenOptions};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tracing::debug;

use crate::config::LogConfig;
use crate::error::{IoContext, Result};
use crate::file_cache;
use crate::record::{self, NewRecord};
use crate::sparse_index::SparseIndex;
use crate::time_index::TimeIndex;
use crate::writeback;

/// A write-out that carries less than this fraction of the write buffer (1/4) releases it:
/// appends come slower than flushes, so the buffer would mostly sit idle.
const TRICKLE_FRACTION: usize = 4;

/// File-name extension of segment data.
pub(crate) const LOG_EXT: &str = "log";
/// File-name extension of the sparse offset index.
pub(crate) const INDEX_EXT: &str = "idx";
/// File-name extension of the time index.
pub(crate) const TIME_EXT: &str = "tix";

/// Path of a segment file with the given extension.
pub(crate) fn segment_path(dir: &Path, base: u64, ext: &str) -> PathBuf {
    dir.join(format!("{base:020}.{ext}"))
}

/// The data file of a segment, shared with readers outside the log's lock. Its descriptor
/// lives in the [`file_cache`]: opened on use, closed when others were used more recently.
#[derive(Debug)]
pub(crate) struct SegmentFile {
    pub path: PathBuf,
    key: u64,
}

impl SegmentFile {
    fn open(path: &Path, create: bool) -> Result<Arc<Self>> {
        let file = OpenOptions::new().read(true).write(true).create(create).truncate(false).open(path).at(path)?;
        let key = file_cache::new_key();
        file_cache::adopt(key, file);
        Ok(Arc::new(SegmentFile { path: path.to_path_buf(), key }))
    }

    /// The open file, reopened if it was closed; it stays open while the result is held.
    pub(crate) fn pin(&self) -> Result<Arc<File>> {
        file_cache::pin(self.key, &self.path)
    }

    /// Reads exactly `len` bytes at `pos`.
    pub(crate) fn read_exact_at(&self, pos: u64, len: usize) -> Result<Vec<u8>> {
        read_exact_at(&*self.pin()?, &self.path, pos, len)
    }

    /// Writes all of `buf` at `pos`.
    pub(crate) fn write_all_at(&self, buf: &[u8], pos: u64) -> Result<()> {
        self.pin()?.write_all_at(buf, pos).at(&self.path)
    }

    /// The file's size in bytes.
    pub(crate) fn len(&self) -> Result<u64> {
        Ok(self.pin()?.metadata().at(&self.path)?.len())
    }

    /// Cuts (or extends) the file to `len` bytes.
    pub(crate) fn set_len(&self, len: u64) -> Result<()> {
        self.pin()?.set_len(len).at(&self.path)
    }

    /// fsyncs the file's data (`fdatasync`: the size is the only metadata a log needs,
    /// and `fdatasync` covers it).
    pub(crate) fn sync(&self) -> Result<()> {
        let file = self.pin()?;
        let started = std::time::Instant::now();
        let synced = file.sync_data().at(&self.path);
        crate::latency::FSYNC_LATENCY.record(started.elapsed());
        synced
    }
}

impl Drop for SegmentFile {
    fn drop(&mut self) {
        file_cache::forget(self.key);
    }
}

/// Reads exactly `len` bytes at `pos` of `file` (at `path`, for the error).
pub(crate) fn read_exact_at(file: &File, path: &Path, pos: u64, len: usize) -> Result<Vec<u8>> {
    let mut buf = vec![0; len];
    file.read_exact_at(&mut buf, pos).at(path)?;
    Ok(buf)
}

/// A range of a data file, written out, whose writeback should start (see [`writeback`]).
pub(crate) struct Writeback {
    file: Arc<SegmentFile>,
    range: Range<u64>,
}

impl Writeback {
    /// Starts writing the range to disk without waiting. An error is only logged: the
    /// range is not durable until an fdatasync succeeds, and that reports any I/O error.
    pub(crate) fn start(self) {
        let Writeback { file, range } = self;
        let started =
            file.pin().and_then(|f| writeback::start(&f, range.start, range.end - range.start).at(&file.path));
        if let Err(e) = started {
            debug!(path = %file.path.display(), error = %e, "starting writeback failed");
        }
    }
}

/// A segment's files once loaded.
pub(crate) struct SegmentFiles {
    pub log: Arc<SegmentFile>,
    pub index: SparseIndex,
    pub time: TimeIndex,
}

impl SegmentFiles {
    /// Opens the three files; `active` grows the indexes to full capacity.
    pub(crate) fn open(dir: &Path, base: u64, config: &LogConfig, active: bool) -> Result<Self> {
        let cap = config.index_capacity_entries();
        Ok(SegmentFiles {
            log: SegmentFile::open(&segment_path(dir, base, LOG_EXT), active)?,
            index: SparseIndex::open(&segment_path(dir, base, INDEX_EXT), cap, active)?,
            time: TimeIndex::open(&segment_path(dir, base, TIME_EXT), cap + 1, active)?,
        })
    }
}

/// One segment of a log.
pub(crate) struct Segment {
    /// Offset of the segment's first record (also its name).
    pub base: u64,
    /// One past the segment's last record.
    pub next_offset: u64,
    /// Logical size in bytes, including bytes still in the write buffer.
    pub size: u64,
    /// Bytes already handed to the OS.
    pub written: u64,
    /// Largest record timestamp, once known (always known for the active segment).
    pub max_ts: Option<i64>,
    /// Timestamp of the first record, for age-based rolling.
    pub first_ts: Option<i64>,
    /// Sealed segments take no appends.
    pub sealed: bool,
    /// Log bytes appended since the last index entry.
    pub bytes_since_index: u64,
    /// Start writeback of every chunk written out, because an fsync will follow.
    early_writeback: bool,
    /// Bytes below this were handed to writeback already, or need not be.
    writeback_from: u64,
    /// Appends not yet handed to the OS; allocated while appends come faster than flushes.
    buf: Vec<u8>,
    files: Option<SegmentFiles>,
}

impl Segment {
    /// A sealed segment known only by name and size; files load on first use.
    pub(crate) fn unloaded(base: u64, next_offset: u64, size: u64) -> Self {
        Segment {
            base,
            next_offset,
            size,
            written: size,
            max_ts: None,
            first_ts: None,
            sealed: true,
            bytes_since_index: 0,
            early_writeback: false,
            writeback_from: size,
            buf: Vec::new(),
            files: None,
        }
    }

    /// A segment around already-open files (used by recovery and creation).
    pub(crate) fn with_files(base: u64, files: SegmentFiles, size: u64) -> Self {
        let mut seg = Segment::unloaded(base, base, size);
        seg.files = Some(files);
        seg
    }

    /// Creates a new, empty active segment.
    pub(crate) fn create(dir: &Path, base: u64, config: &LogConfig) -> Result<Self> {
        // Leftovers of a segment deleted at this base (a crash mid-deletion, or a
        // truncation) must not be mistaken for the new segment's contents.
        for path in Segment::paths(dir, base) {
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e).at(&path),
                _ => {}
            }
        }
        let files = SegmentFiles::open(dir, base, config, true)?;
        let mut seg = Segment::with_files(base, files, 0);
        seg.activate(config);
        Ok(seg)
    }

    pub(crate) fn is_loaded(&self) -> bool {
        self.files.is_some()
    }

    pub(crate) fn files(&self) -> Option<&SegmentFiles> {
        self.files.as_ref()
    }

    pub(crate) fn files_mut(&mut self) -> Option<&mut SegmentFiles> {
        self.files.as_mut()
    }

    pub(crate) fn set_files(&mut self, files: SegmentFiles) {
        self.files = Some(files);
    }

    /// Number of records.
    pub(crate) fn record_count(&self) -> u64 {
        self.next_offset - self.base
    }

    /// Bytes buffered but not yet written to the file.
    pub(crate) fn buffered_bytes(&self) -> usize {
        self.buf.len()
    }

    /// Whether `rec` must go to a new segment instead of this one.
    pub(crate) fn should_roll(&self, rec: &NewRecord<'_>, config: &LogConfig) -> bool {
        if self.record_count() == 0 {
            return false;
        }
        let too_big = self.size + rec.encoded_len() as u64 > config.segment_bytes;
        let too_many = self.record_count() >= u64::from(u32::MAX);
        let too_old = match (config.segment_age, self.first_ts) {
            (Some(age), Some(first)) => rec.timestamp_ms.saturating_sub(first) >= age.as_millis() as i64,
            _ => false,
        };
        too_big || too_many || too_old
    }

    /// Appends `rec` (the caller checked `should_roll`), writing the buffer out when full.
    pub(crate) fn append(&mut self, rec: &NewRecord<'_>, config: &LogConfig) -> Result<u64> {
        let offset = self.next_offset;
        let pos = self.size;
        if self.buf.capacity() == 0 {
            self.buf.reserve_exact(config.write_buffer_bytes);
        }
        record::encode(&mut self.buf, offset, rec);
        self.note_record(offset, pos, rec.timestamp_ms, rec.encoded_len() as u64, config);
        if self.buf.len() >= config.write_buffer_bytes {
            self.write_out()?;
        }
        Ok(offset)
    }

    /// Accounts for a record at `pos` (appended or found by recovery): sizes, the
    /// timestamp bounds, and an index entry once enough bytes have passed.
    pub(crate) fn note_record(&mut self, offset: u64, pos: u64, ts: i64, len: u64, config: &LogConfig) {
        let max_ts = self.max_ts.map_or(ts, |m| m.max(ts));
        self.max_ts = Some(max_ts);
        self.first_ts.get_or_insert(ts);
        let first_in_index = self.files.as_ref().is_some_and(|f| f.index.len() == 0);
        if first_in_index || self.bytes_since_index >= u64::from(config.index_interval_bytes) {
            if let Some(files) = self.files.as_mut() {
                let rel = (offset - self.base) as u32;
                files.index.append(rel, pos as u32);
                files.time.append(max_ts, rel);
            }
            self.bytes_since_index = 0;
        }
        self.bytes_since_index += len;
        self.next_offset = offset + 1;
        self.size = pos + len;
    }

    /// Hands buffered bytes to the OS (one pwrite).
    pub(crate) fn write_out(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        if let Some(files) = &self.files {
            files.log.write_all_at(&self.buf, self.written)?;
        }
        self.written += self.buf.len() as u64;
        if self.buf.len() < self.buf.capacity() / TRICKLE_FRACTION {
            // A trickle: release the buffer rather than keep it for appends that may not
            // come (thousands of idle queues would each hold one).
            self.buf = Vec::new();
        } else {
            self.buf.clear();
        }
        Ok(())
    }

    /// Stops appends: writes the buffer out, adds the final time-index entry, trims the
    /// indexes to their entries and releases the buffer.
    pub(crate) fn seal(&mut self) -> Result<()> {
        self.write_out()?;
        if let Some(files) = self.files.as_mut() {
            if let (Some(max_ts), Some(last)) = (self.max_ts, self.next_offset.checked_sub(1)) {
                if last >= self.base {
                    files.time.append(max_ts, (last - self.base) as u32);
                }
            }
            files.index.seal()?;
            files.time.seal()?;
        }
        self.sealed = true;
        self.buf = Vec::new();
        Ok(())
    }

    /// Makes a sealed segment writable again (for truncation).
    pub(crate) fn unseal(&mut self, config: &LogConfig) -> Result<()> {
        if let Some(files) = self.files.as_mut() {
            let cap = config.index_capacity_entries();
            files.index.unseal(cap)?;
            files.time.unseal(cap + 1)?;
        }
        self.activate(config);
        Ok(())
    }

    /// Readies the segment to take appends.
    fn activate(&mut self, config: &LogConfig) {
        self.sealed = false;
        self.early_writeback = config.flush_policy.fsyncs_appends();
        self.writeback_from = self.written;
    }

    /// The bytes written out since the last call, once they make a whole writeback chunk
    /// and if an fsync will follow. The caller starts their writeback after releasing the
    /// log's lock, because starting I/O can block (on the block layer's queue, on pages
    /// still being written back) and the flusher needs that lock.
    pub(crate) fn take_writeback(&mut self) -> Option<Writeback> {
        if !self.early_writeback || self.written - self.writeback_from < writeback::CHUNK_BYTES {
            return None;
        }
        let range = std::mem::replace(&mut self.writeback_from, self.written)..self.written;
        let file = self.files.as_ref().map(|f| Arc::clone(&f.log))?;
        Some(Writeback { file, range })
    }

    /// Notes that everything written out is being fsynced, so needs no early writeback.
    pub(crate) fn writeback_done(&mut self) {
        self.writeback_from = self.written;
    }

    /// The data file, for readers and the flusher.
    pub(crate) fn log_file(&self) -> Option<Arc<SegmentFile>> {
        self.files.as_ref().map(|f| Arc::clone(&f.log))
    }

    /// Paths of the segment's three files.
    pub(crate) fn paths(dir: &Path, base: u64) -> [PathBuf; 3] {
        [LOG_EXT, INDEX_EXT, TIME_EXT].map(|ext| segment_path(dir, base, ext))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> LogConfig {
        LogConfig { write_buffer_bytes: 4096, ..LogConfig::default() }
    }

    fn append(seg: &mut Segment, payload_bytes: usize, config: &LogConfig) {
        let payload = vec![7u8; payload_bytes];
        seg.append(&NewRecord::new(0, &payload), config).expect("append");
    }

    #[test]
    fn a_trickle_releases_the_write_buffer_and_a_burst_keeps_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = config();
        let mut seg = Segment::create(dir.path(), 0, &config).expect("create");
        assert_eq!(seg.buf.capacity(), 0, "no buffer before the first append");

        append(&mut seg, 100, &config);
        assert!(seg.buf.capacity() >= config.write_buffer_bytes);
        seg.write_out().expect("write out");
        assert_eq!(seg.buf.capacity(), 0, "a write-out of 100 bytes releases the buffer");

        for _ in 0..20 {
            append(&mut seg, 100, &config);
        }
        seg.write_out().expect("write out");
        assert!(seg.buf.capacity() >= config.write_buffer_bytes, "a write-out of a busy buffer keeps it");

        let read = seg.files().map(|f| f.log.len().expect("len")).expect("files");
        assert_eq!(read, seg.size, "every appended byte reached the file");
    }
}
