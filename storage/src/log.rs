//! The log: a directory of segments with one active segment taking appends. `Log` owns
//! the shared state (segment list, write path, rolling, flush policy) and the public
//! API; reading, stepping past damage, retention, truncation and recovery live in their own
//! modules as further `impl Log` blocks and helpers.

use std::collections::VecDeque;
use std::fs;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

use parking_lot::{Mutex, MutexGuard};
use tokio::sync::watch;
use tracing::error;

use crate::config::{FlushPolicy, LogConfig};
use crate::damage::DamageMap;
use crate::error::{IoContext, Result, StorageError};
use crate::flusher::{FlushTarget, Flusher};
use crate::graveyard::Graveyard;
use crate::group_commit::Durability;
use crate::record::NewRecord;
use crate::recovery;
use crate::segment::{Segment, SegmentFile, LOG_EXT};

/// A segmented, append-only log of records with dense u64 offsets.
///
/// All methods take `&self`; share a `Log` between tasks with `Arc<Log>`. Appends are
/// serialized internally; reads hold the internal lock only to locate data and read the
/// file outside it, so readers do not stall the appender.
pub struct Log {
    pub(crate) shared: Arc<Shared>,
}

pub(crate) struct Shared {
    pub dir: PathBuf,
    pub config: LogConfig,
    pub state: Mutex<State>,
    pub durability: Durability,
    flusher: Flusher,
    flush_scheduled: AtomicBool,
    urgent_scheduled: AtomicBool,
    /// When the last flush began: the next one starts `flush_interval` after it at the
    /// earliest, and at once if that time has passed.
    last_flush_start: Mutex<Option<Instant>>,
}

pub(crate) struct State {
    /// Oldest first; the last one is active. Never empty.
    pub segments: VecDeque<Segment>,
    /// Bumped by truncation, so a flush that started before it publishes nothing.
    pub epoch: u64,
    /// Sealed segments whose data has not been fsynced yet.
    pub unsynced: Vec<Arc<SegmentFile>>,
    /// Bytes appended since the last flush began.
    pub pending_bytes: u64,
    /// Segments deleted by retention, unlinked but not yet closed.
    pub graveyard: Graveyard,
    /// Damaged ranges found by reads (see [`crate::damage`]).
    pub damage: DamageMap,
    /// What retention keeps: the configuration's until [`Log::set_retention`] changes it.
    pub retention: Retention,
}

/// How much of a log retention keeps (see [`crate::retention`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Retention {
    /// Delete oldest whole segments while the log is larger than this.
    pub bytes: Option<u64>,
    /// Delete whole segments whose newest record is older than this.
    pub age: Option<std::time::Duration>,
}

impl State {
    pub(crate) fn active(&self) -> &Segment {
        &self.segments[self.segments.len() - 1]
    }

    pub(crate) fn active_mut(&mut self) -> &mut Segment {
        let last = self.segments.len() - 1;
        &mut self.segments[last]
    }

    pub(crate) fn first_offset(&self) -> u64 {
        self.segments[0].base
    }

    pub(crate) fn next_offset(&self) -> u64 {
        self.active().next_offset
    }

    /// Index of the segment holding `offset` (which must be in range).
    pub(crate) fn segment_index(&self, offset: u64) -> usize {
        self.segments.partition_point(|s| s.base <= offset).saturating_sub(1)
    }
}

impl Log {
    /// Opens (creating if needed) the log in `dir`, using the process-wide flusher.
    pub fn open(dir: impl AsRef<Path>, config: LogConfig) -> Result<Log> {
        Log::open_with_flusher(dir, config, Flusher::shared()?)
    }

    /// Opens the log in `dir`, scheduling group commits on `flusher`.
    ///
    /// Only the tail of the last segment is read; older segments are checked when first
    /// used. A torn or corrupt tail is truncated (and logged).
    pub fn open_with_flusher(dir: impl AsRef<Path>, config: LogConfig, flusher: Flusher) -> Result<Log> {
        config.validate()?;
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir).at(&dir)?;
        let segments = open_segments(&dir, &config)?;
        let next = segments.back().map_or(0, |s| s.next_offset);
        let retention = Retention { bytes: config.retention_bytes, age: config.retention_age };
        let shared = Arc::new(Shared {
            durability: Durability::new(next),
            dir,
            config,
            state: Mutex::new(State {
                segments,
                epoch: 0,
                unsynced: Vec::new(),
                pending_bytes: 0,
                graveyard: Graveyard::default(),
                damage: DamageMap::default(),
                retention,
            }),
            flusher,
            flush_scheduled: AtomicBool::new(false),
            urgent_scheduled: AtomicBool::new(false),
            last_flush_start: Mutex::new(None),
        });
        Ok(Log { shared })
    }

    /// Appends one record and returns its offset.
    pub fn append(&self, rec: NewRecord<'_>) -> Result<u64> {
        self.append_batch(std::slice::from_ref(&rec)).map(|r| r.start)
    }

    /// Appends records in order and returns their offsets. The batch takes the log's
    /// lock once. If a write fails the log becomes failed (see [`StorageError::Failed`])
    /// and must be reopened; recovery then keeps whatever reached the disk intact.
    pub fn append_batch(&self, recs: &[NewRecord<'_>]) -> Result<Range<u64>> {
        let sh = &self.shared;
        let max = sh.config.max_record_bytes;
        if let Some(r) = recs.iter().find(|r| r.payload.len() > max) {
            return Err(StorageError::RecordTooLarge { len: r.payload.len(), max });
        }
        let mut st = sh.state.lock();
        sh.durability.check()?;
        let start = st.next_offset();
        let mut bytes = 0;
        for rec in recs {
            if let Err(e) = self.append_locked(&mut st, rec) {
                sh.durability.fail(&e);
                return Err(e);
            }
            bytes += rec.encoded_len() as u64;
        }
        st.pending_bytes += bytes;
        let (end, pending) = (st.next_offset(), st.pending_bytes);
        let writeback = st.active_mut().take_writeback();
        drop(st);
        if let Some(w) = writeback {
            w.start();
        }
        self.after_append(end, pending)?;
        Ok(start..end)
    }

    fn append_locked(&self, st: &mut State, rec: &NewRecord<'_>) -> Result<()> {
        let config = &self.shared.config;
        if st.active().should_roll(rec, config) {
            self.roll_locked(st)?;
        }
        st.active_mut().append(rec, config)?;
        Ok(())
    }

    /// Applies the flush policy once records are in the log.
    fn after_append(&self, end: u64, pending_bytes: u64) -> Result<()> {
        let sh = &self.shared;
        match sh.config.flush_policy {
            FlushPolicy::Always => return sh.flush_now(true),
            FlushPolicy::Never | FlushPolicy::OnFlush => sh.durability.publish_if_watched(end),
            FlushPolicy::Batch => {}
        }
        let urgent = pending_bytes >= sh.config.flush_bytes;
        if urgent && !sh.urgent_scheduled.swap(true, Ordering::AcqRel) {
            sh.flusher.schedule(self.weak_target(), Instant::now());
        } else if !sh.flush_scheduled.swap(true, Ordering::AcqRel) {
            let now = Instant::now();
            let due = sh.last_flush_start.lock().map_or(now, |last| now.max(last + sh.config.flush_interval));
            sh.flusher.schedule(self.weak_target(), due);
        }
        Ok(())
    }

    fn weak_target(&self) -> Weak<dyn FlushTarget> {
        let weak: Weak<Shared> = Arc::downgrade(&self.shared);
        weak
    }

    /// Seals the active segment and starts a new one at the next offset.
    pub fn roll(&self) -> Result<()> {
        let mut st = self.shared.state.lock();
        self.shared.durability.check()?;
        if st.active().record_count() == 0 {
            return Ok(());
        }
        let result = self.roll_locked(&mut st).inspect_err(|e| self.shared.durability.fail(e));
        unlock_and_close_deleted(st);
        result
    }

    pub(crate) fn roll_locked(&self, st: &mut State) -> Result<()> {
        let sh = &self.shared;
        let active = st.active_mut();
        active.seal()?;
        let base = active.next_offset;
        let file = active.log_file();
        if sh.config.flush_policy.fsyncs_structure() {
            // The sealed segment must be whole on disk before a newer one exists, or a
            // crash would leave a torn segment in the middle of the log.
            if let Some(f) = &file {
                f.sync()?;
            }
        }
        st.segments.push_back(Segment::create(&sh.dir, base, &sh.config)?);
        if sh.config.flush_policy.fsyncs_structure() {
            sync_dir(&sh.dir)?;
        }
        self.apply_retention_locked(st, crate::retention::now_ms())?;
        Ok(())
    }

    /// Writes out buffered appends and fsyncs them now (unless the policy is `never`),
    /// then publishes the durable offset.
    pub fn flush(&self) -> Result<()> {
        let fsync = self.shared.config.flush_policy.fsyncs_structure();
        self.shared.flush_now(fsync)
    }

    /// Offset of the oldest retained record (equals `next_offset` when empty).
    pub fn first_offset(&self) -> u64 {
        self.shared.state.lock().first_offset()
    }

    /// Offset the next appended record will get.
    pub fn next_offset(&self) -> u64 {
        self.shared.state.lock().next_offset()
    }

    /// Offset of the newest record, if any.
    pub fn last_offset(&self) -> Option<u64> {
        let st = self.shared.state.lock();
        let next = st.next_offset();
        (next > st.first_offset()).then(|| next - 1)
    }

    /// Exclusive end of the durable prefix: every offset below it is durable.
    pub fn durable_offset(&self) -> u64 {
        if !self.shared.config.flush_policy.fsyncs_appends() {
            return self.next_offset();
        }
        self.shared.durability.current()
    }

    /// A watch of [`Log::durable_offset`], updated by every group commit.
    pub fn subscribe_durable(&self) -> watch::Receiver<u64> {
        let rx = self.shared.durability.subscribe();
        if !self.shared.config.flush_policy.fsyncs_appends() {
            // Appends publish only while watched; catch up now that someone is.
            self.shared.durability.publish(self.next_offset());
        }
        rx
    }

    /// Resolves once the record at `offset` is durable; errors if the log fails or
    /// closes first.
    pub async fn wait_durable(&self, offset: u64) -> Result<()> {
        if !self.shared.config.flush_policy.fsyncs_appends() && offset < self.next_offset() {
            return Ok(());
        }
        self.shared.durability.wait(offset).await
    }

    /// Calls `callback` once every record below `end` is durable (at once if they are:
    /// always under the `never` policy), or with the error if the log fails or closes
    /// first. No task or runtime is involved: the callback runs on the thread that made
    /// the records durable (a flusher thread after its group commit, the appender under
    /// `always`, or this caller), in registration order, with an internal lock held, so
    /// it must be quick (a channel send, say) and must not call into this log.
    ///
    /// `end` should be at most [`Log::next_offset`]. If the log is truncated or restarted
    /// below `end` before then, the callback is due once the records below the cut are.
    pub fn when_durable(&self, end: u64, callback: impl FnOnce(Result<()>) + Send + 'static) {
        if !self.shared.config.flush_policy.fsyncs_appends() {
            callback(self.shared.durability.check());
            return;
        }
        self.shared.durability.when_durable(end, Box::new(callback));
    }

    /// Total bytes of all segments.
    pub fn size_bytes(&self) -> u64 {
        self.shared.state.lock().segments.iter().map(|s| s.size).sum()
    }

    /// Number of segments (including the active one).
    pub fn segment_count(&self) -> usize {
        self.shared.state.lock().segments.len()
    }

    /// The log's directory.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// The configuration the log was opened with.
    pub fn config(&self) -> &LogConfig {
        &self.shared.config
    }

    /// Flushes and fsyncs (per policy) everything, then refuses further use. Waiters on
    /// offsets that did not become durable get [`StorageError::Closed`].
    pub fn close(&self) -> Result<()> {
        let result = self.flush();
        let st = self.shared.state.lock();
        for seg in &st.segments {
            if let Some(files) = seg.files() {
                files.index.flush_async()?;
                files.time.flush_async()?;
            }
        }
        self.shared.durability.close();
        result
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        // Hand buffered bytes to the OS so a clean drop loses nothing on process exit.
        let mut st = self.shared.state.lock();
        if let Err(e) = st.active_mut().write_out() {
            error!(dir = %self.shared.dir.display(), error = %e, "write-out on drop failed");
        }
        self.shared.durability.close();
    }
}

impl Shared {
    /// Writes out the buffer, fsyncs if asked, and publishes the durable offset.
    pub(crate) fn flush_now(&self, fsync: bool) -> Result<()> {
        *self.last_flush_start.lock() = Some(Instant::now());
        self.flush_scheduled.store(false, Ordering::Release);
        self.urgent_scheduled.store(false, Ordering::Release);
        let result = self.flush_inner(fsync);
        match &result {
            // A flush the flusher had scheduled before the log was closed: nothing to do.
            Err(StorageError::Closed) => {}
            Err(e) => {
                error!(dir = %self.dir.display(), error = %e, "flush failed; log is now failed");
                self.durability.fail(e);
            }
            Ok(()) => {}
        }
        result
    }

    fn flush_inner(&self, fsync: bool) -> Result<()> {
        let (files, end, epoch, _deleted) = {
            let mut st = self.state.lock();
            self.durability.check()?;
            st.active_mut().write_out()?;
            st.active_mut().writeback_done();
            st.pending_bytes = 0;
            let mut files = std::mem::take(&mut st.unsynced);
            files.extend(st.active().log_file());
            // Closed when this returns, after the durable offset is published.
            (files, st.next_offset(), st.epoch, st.graveyard.take())
        };
        if fsync {
            for f in &files {
                f.sync()?;
            }
        }
        let st = self.state.lock();
        if st.epoch == epoch {
            self.durability.publish(end);
        }
        Ok(())
    }
}

impl FlushTarget for Shared {
    fn flush_due(&self) {
        let fsync = self.config.flush_policy.fsyncs_appends();
        // Errors are recorded in `durability` and reported to writers and waiters.
        let _ = self.flush_now(fsync);
    }
}

/// Releases the log's lock, then closes the segments retention deleted under it (see
/// [`crate::graveyard`]): for calls whose caller wants the space back at once.
pub(crate) fn unlock_and_close_deleted(mut st: MutexGuard<'_, State>) {
    let deleted = st.graveyard.take();
    drop(st);
    drop(deleted);
}

/// fsyncs a directory so created or removed entries survive a crash.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    fs::File::open(dir).and_then(|d| d.sync_all()).at(dir)
}

/// Lists segment bases in `dir`, recovers the last and registers the rest unloaded.
fn open_segments(dir: &Path, config: &LogConfig) -> Result<VecDeque<Segment>> {
    let mut found: Vec<(u64, u64)> = Vec::new();
    for entry in fs::read_dir(dir).at(dir)? {
        let entry = entry.at(dir)?;
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some(LOG_EXT) {
            continue;
        }
        let Some(base) = path.file_stem().and_then(|s| s.to_str()).and_then(|s| s.parse().ok()) else {
            continue;
        };
        found.push((base, entry.metadata().at(&path)?.len()));
    }
    found.sort_unstable();
    let mut segments = VecDeque::with_capacity(found.len().max(1));
    for pair in found.windows(2) {
        let ((base, size), (next_base, _)) = (pair[0], pair[1]);
        segments.push_back(Segment::unloaded(base, next_base, size));
    }
    let active = match found.last() {
        Some(&(base, _)) => recovery::recover_active(dir, base, config)?,
        None => Segment::create(dir, 0, config)?,
    };
    segments.push_back(active);
    Ok(segments)
}
