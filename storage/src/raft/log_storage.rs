//! [`RaftLog`]: openraft's `RaftLogStorage` and `RaftLogReader` over a warren-storage
//! [`Log`]. Owns the mapping of entries to records (one record per entry, record offset
//! == entry index), when an append is reported durable, how purging and truncation map
//! onto segments, and what reopening after a crash restores.
//!
//! A directory holds the segments and [`META_FILE_NAME`]. Purging first saves the new
//! purge point, then deletes whole segments below it, so after a crash the saved purge
//! point is at least as far as the deletions and reopening finishes the job.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{ErrorSubject, ErrorVerb, LogId, OptionalSend, RaftLogId, RaftLogReader, RaftTypeConfig, Vote};
use parking_lot::Mutex;
use tokio::sync::watch;
use tracing::{error, warn};

use crate::config::LogConfig;
use crate::error::StorageError;
use crate::flusher::Flusher;
use crate::log::Log;
use crate::raft::codec::{self, ENTRY_FORMAT_POSTCARD};
use crate::raft::error::RaftLogError;
use crate::raft::meta::{MetaFile, RaftMeta};
use crate::record::{NewRecord, Record};
use crate::retention::now_ms;

/// Name of the file, beside the segments, holding the vote, committed and purged log ids.
pub const META_FILE_NAME: &str = "raft-meta";
/// `save_committed` rewrites the state file (two fsyncs) at most this often; in between
/// the committed log id is only remembered, and saved with the next vote, purge, close or
/// drop. openraft calls `save_committed` on every commit, and a stale committed log id is
/// safe: it only means re-applying fewer entries at startup before the leader tells the
/// node the rest.
pub const COMMITTED_SAVE_INTERVAL_MS: u64 = 200;
/// Payload bytes `limited_get_log_entries` returns at most (but always one entry), so a
/// replication message to a lagging follower stays bounded when bodies are large.
pub const LIMITED_READ_MAX_BYTES: usize = 4 * 1024 * 1024;
/// Records asked of the segment log per read step.
const READ_BATCH_RECORDS: usize = 1024;
/// Payload bytes asked of the segment log per read step.
const READ_BATCH_BYTES: usize = 1024 * 1024;

/// A Raft group's log on warren-storage segments, for any openraft type config whose
/// entries serialize with serde (the crate's `serde` feature makes them so).
///
/// Cloning is cheap and shares the log: openraft's log reader is a clone. Writes (append,
/// truncate, purge, vote, committed) are serialized internally; reads run beside them.
pub struct RaftLog<C: RaftTypeConfig> {
    inner: Arc<Inner<C>>,
}

impl<C: RaftTypeConfig> Clone for RaftLog<C> {
    fn clone(&self) -> Self {
        RaftLog { inner: Arc::clone(&self.inner) }
    }
}

struct Inner<C: RaftTypeConfig> {
    log: Log,
    meta_file: MetaFile,
    /// Index of the first entry not purged, for readers (they never take `state`).
    purged_next: AtomicU64,
    /// Taken by every write, one at a time.
    state: Mutex<State<C>>,
}

struct State<C: RaftTypeConfig> {
    /// The current vote, committed and purged log ids (the file may hold an older
    /// committed log id, see [`COMMITTED_SAVE_INTERVAL_MS`]).
    meta: RaftMeta<C::NodeId>,
    /// Whether `meta.committed` is newer than the file's.
    committed_unsaved: bool,
    /// When the file was last written (or a committed log id last failed to be).
    meta_saved_at: Instant,
    /// Whether the last save of a committed log id failed (said once, not per commit).
    committed_save_failing: bool,
    /// Log id of the newest record in the log, purged or not; `None` if it has none.
    last_log_id: Option<LogId<C::NodeId>>,
}

impl<C: RaftTypeConfig> RaftLog<C> {
    /// Opens (creating if needed) the Raft log in `dir`, using the process-wide flusher.
    pub fn open(dir: impl AsRef<Path>, config: LogConfig) -> Result<Self, RaftLogError> {
        Self::open_with_flusher(dir, config, Flusher::shared()?)
    }

    /// Opens the Raft log in `dir`, scheduling group commits on `flusher`.
    ///
    /// Recovery is the segment log's (a torn tail is truncated), then: a purge a crash
    /// interrupted is finished, and whatever the tail holds is fsynced (a crashed process
    /// can leave records in the page cache that no fsync covered) before its last entry
    /// is reported in the log state. `config` may not set retention: a Raft log shrinks
    /// only by purge.
    pub fn open_with_flusher(dir: impl AsRef<Path>, config: LogConfig, flusher: Flusher) -> Result<Self, RaftLogError> {
        if config.retention_bytes.is_some() || config.retention_age.is_some() {
            let why = "a Raft log is trimmed by purging only: retention must be off";
            return Err(StorageError::BadConfig(why.into()).into());
        }
        let dir = dir.as_ref();
        let log = Log::open_with_flusher(dir, config, flusher)?;
        let meta_file = MetaFile::new(&dir.join(META_FILE_NAME));
        let meta: RaftMeta<C::NodeId> = meta_file.read()?;
        let purged_next = meta.purged_next();
        let (first, next) = (log.first_offset(), log.next_offset());
        if next <= purged_next && (first != purged_next || next != purged_next) {
            // Everything left is purged; continue just after the purge point.
            log.restart_at(purged_next)?;
        } else if first > purged_next {
            // An empty log may begin past the purge point (see `append_then`), so this is
            // only suspicious; openraft reports it if it ever needs the missing entries.
            warn!(dir = %dir.display(), first, purged_next, "the Raft log starts past its purge point");
        } else {
            log.delete_below(purged_next)?;
        }
        log.flush()?;
        let last_log_id = last_log_id::<C>(&log)?;
        let state = State {
            meta,
            committed_unsaved: false,
            meta_saved_at: Instant::now(),
            committed_save_failing: false,
            last_log_id,
        };
        Ok(RaftLog {
            inner: Arc::new(Inner {
                log,
                meta_file,
                purged_next: AtomicU64::new(purged_next),
                state: Mutex::new(state),
            }),
        })
    }

    /// Appends `entries` and calls `done` once they are durable under the log's flush
    /// policy: under `batch`, after the group commit whose fsync covers them (called on
    /// the flusher's thread: no task, and no waiting here); under `always`, before this
    /// returns, the append having fsynced; under `never`, at once (a crash of the machine
    /// may then lose entries this node has already acknowledged to its leader). `done`
    /// gets the error instead if the log fails or closes first. It runs with internal
    /// locks held: keep it quick (a channel send) and do not call into this log from it.
    ///
    /// The first entry must have the log's next index; an empty log may start at any
    /// index past the purge point, and entries at or below the purge point are dropped
    /// (their snapshot covers them). The entries are readable when this returns. If it
    /// returns an error, `done` is not called.
    pub fn append_then<I, F>(&self, entries: I, done: F) -> Result<(), RaftLogError>
    where
        I: IntoIterator<Item = C::Entry>,
        F: FnOnce(Result<(), StorageError>) + Send + 'static,
    {
        let log = &self.inner.log;
        let mut st = self.inner.state.lock();
        let mut start = log.next_offset();
        let mut encoded = Vec::new();
        let mut ends = Vec::new();
        let mut last = None;
        let purged_next = self.inner.purged_next.load(Ordering::Acquire);
        for entry in entries {
            let id = entry.get_log_id().clone();
            if id.index < purged_next {
                // Covered by the snapshot the purge followed: nothing to keep.
                continue;
            }
            if ends.is_empty() && id.index != start && self.may_start_at(id.index) {
                // An empty log may begin anywhere past the purge point.
                log.restart_at(id.index)?;
                start = id.index;
            }
            let expected = start + ends.len() as u64;
            if id.index != expected {
                return Err(RaftLogError::NotContiguous { index: id.index, expected });
            }
            encoded = codec::encode_into(&entry, encoded)
                .map_err(|source| RaftLogError::Encode { index: id.index, source })?;
            ends.push(encoded.len());
            last = Some(id);
        }
        let Some(last) = last else {
            drop(st);
            done(Ok(()));
            return Ok(());
        };
        let timestamp_ms = now_ms();
        let mut from = 0;
        let records: Vec<NewRecord<'_>> = ends
            .iter()
            .map(|&end| {
                let payload = &encoded[from..end];
                from = end;
                NewRecord { timestamp_ms, tag_hash: 0, flags: ENTRY_FORMAT_POSTCARD, payload }
            })
            .collect();
        let appended = log.append_batch(&records)?;
        st.last_log_id = Some(last);
        // Registered under the lock, so that a truncation cannot come in between.
        log.when_durable(appended.end, done);
        Ok(())
    }

    /// Whether the log holds no entries and `index` is not purged: an entry there may
    /// start the log even if it is not the next index.
    fn may_start_at(&self, index: u64) -> bool {
        let log = &self.inner.log;
        log.first_offset() == log.next_offset() && index >= self.inner.purged_next.load(Ordering::Acquire)
    }

    /// The entry at `index`, or `None` if it is purged or not in the log.
    pub fn entry(&self, index: u64) -> Result<Option<C::Entry>, RaftLogError> {
        Ok(self.read_entries(index..=index, usize::MAX)?.pop())
    }

    /// The encoded entry at `index` (a slice of the read buffer, no copy), or `None` if it
    /// is purged or not in the log: for readers that decode a view of the entry
    /// borrowing from it with [`decode_payload`](crate::raft::decode_payload), such as a queue delivering a
    /// message body straight from its Raft log.
    pub fn entry_payload(&self, index: u64) -> Result<Option<Bytes>, RaftLogError> {
        let log = &self.inner.log;
        if index < self.inner.purged_next.load(Ordering::Acquire) || index < log.first_offset() {
            return Ok(None);
        }
        let record = match log.read(index, 1, 0) {
            Ok(mut records) => match records.pop() {
                Some(record) => record,
                None => return Ok(None),
            },
            // Purged or truncated since the check above.
            Err(StorageError::OffsetOutOfRange { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        check_format(&record)?;
        Ok(Some(record.payload))
    }

    /// Entries in `range` that are in the log and not purged, in order, stopping once
    /// `max_bytes` of payload are read (but returning at least one entry if there is one).
    fn read_entries(&self, range: impl RangeBounds<u64>, max_bytes: usize) -> Result<Vec<C::Entry>, RaftLogError> {
        let log = &self.inner.log;
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e.saturating_add(1),
            Bound::Excluded(&e) => e,
            Bound::Unbounded => u64::MAX,
        };
        let mut from = start.max(self.inner.purged_next.load(Ordering::Acquire)).max(log.first_offset());
        let end = end.min(log.next_offset());
        let mut out = Vec::new();
        let mut bytes = 0usize;
        while from < end && bytes < max_bytes {
            let want = usize::try_from(end - from).unwrap_or(usize::MAX).min(READ_BATCH_RECORDS);
            let records = match log.read(from, want, (max_bytes - bytes).min(READ_BATCH_BYTES)) {
                Ok(records) => records,
                // A purge deleted the segment under the read: start after it, unless
                // entries were returned already (the result would have a hole).
                Err(StorageError::OffsetOutOfRange { first, .. }) if from < first && out.is_empty() => {
                    from = first.max(self.inner.purged_next.load(Ordering::Acquire));
                    continue;
                }
                // A truncation removed the rest.
                Err(StorageError::OffsetOutOfRange { next, .. }) if from >= next => break,
                Err(e) => return Err(e.into()),
            };
            let Some(last) = records.last().map(|r| r.offset) else {
                break;
            };
            for record in &records {
                bytes = bytes.saturating_add(record.payload.len());
                out.push(decode_entry::<C>(record)?);
            }
            from = last + 1;
        }
        Ok(out)
    }

    /// Saves `meta` durably and makes it current.
    fn save_meta(&self, st: &mut State<C>, meta: RaftMeta<C::NodeId>) -> Result<(), RaftLogError> {
        // Two fsyncs: a thousand groups voting at once must not take turns on the workers.
        crate::blocking_io::run(|| self.inner.meta_file.write(&meta))?;
        st.meta = meta;
        st.committed_unsaved = false;
        st.meta_saved_at = Instant::now();
        Ok(())
    }

    /// Every entry below this index is durable.
    pub fn durable_offset(&self) -> u64 {
        self.inner.log.durable_offset()
    }

    /// A watch of [`RaftLog::durable_offset`], raised by every group commit.
    pub fn subscribe_durable(&self) -> watch::Receiver<u64> {
        self.inner.log.subscribe_durable()
    }

    /// Index of the oldest entry still stored, purged or not (segments are deleted
    /// whole, so entries at and a little below the purge point may remain on disk).
    pub fn first_stored_index(&self) -> u64 {
        self.inner.log.first_offset()
    }

    /// Index the next appended entry must have.
    pub fn next_index(&self) -> u64 {
        self.inner.log.next_offset()
    }

    /// Number of segments.
    pub fn segment_count(&self) -> usize {
        self.inner.log.segment_count()
    }

    /// Bytes on disk in segments.
    pub fn size_bytes(&self) -> u64 {
        self.inner.log.size_bytes()
    }

    /// Saves a committed log id not saved yet, then flushes and closes the segment log;
    /// later writes fail, and pending append callbacks get [`StorageError::Closed`].
    pub fn close(&self) -> Result<(), RaftLogError> {
        let mut st = self.inner.state.lock();
        if st.committed_unsaved {
            let meta = st.meta.clone();
            self.save_meta(&mut st, meta)?;
        }
        self.inner.log.close()?;
        Ok(())
    }
}

impl<C: RaftTypeConfig> Drop for Inner<C> {
    fn drop(&mut self) {
        let st = self.state.get_mut();
        // Not into a directory removed under the log (a deleted queue): writing would
        // create it again.
        let dir_exists = self.meta_file.path().parent().is_some_and(Path::exists);
        if st.committed_unsaved && dir_exists {
            if let Err(e) = self.meta_file.write(&st.meta) {
                error!(path = %self.meta_file.path().display(), error = %e, "saving the committed log id on drop failed");
            }
        }
    }
}

impl<C: RaftTypeConfig> RaftLogReader<C> for RaftLog<C> {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<C::Entry>, openraft::StorageError<C::NodeId>> {
        self.read_entries(range, usize::MAX).map_err(|e| e.into_raft(ErrorSubject::Logs, ErrorVerb::Read))
    }

    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<C::Entry>, openraft::StorageError<C::NodeId>> {
        self.read_entries(start..end, LIMITED_READ_MAX_BYTES)
            .map_err(|e| e.into_raft(ErrorSubject::Logs, ErrorVerb::Read))
    }
}

impl<C: RaftTypeConfig> RaftLogStorage<C> for RaftLog<C> {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<C>, openraft::StorageError<C::NodeId>> {
        let st = self.inner.state.lock();
        let last_purged_log_id = st.meta.last_purged.clone();
        let last_log_id = match (&st.last_log_id, &last_purged_log_id) {
            (Some(last), Some(purged)) if last.index <= purged.index => last_purged_log_id.clone(),
            (None, _) => last_purged_log_id.clone(),
            (Some(last), _) => Some(last.clone()),
        };
        Ok(LogState { last_purged_log_id, last_log_id })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    /// Saves the vote durably (fsync) before returning.
    async fn save_vote(&mut self, vote: &Vote<C::NodeId>) -> Result<(), openraft::StorageError<C::NodeId>> {
        let mut st = self.inner.state.lock();
        let meta = RaftMeta { vote: Some(vote.clone()), ..st.meta.clone() };
        self.save_meta(&mut st, meta).map_err(|e| e.into_raft(ErrorSubject::Vote, ErrorVerb::Write))
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<C::NodeId>>, openraft::StorageError<C::NodeId>> {
        Ok(self.inner.state.lock().meta.vote.clone())
    }

    /// Remembers `committed`; saves it durably at most every
    /// [`COMMITTED_SAVE_INTERVAL_MS`] (and with the next vote, purge or close).
    async fn save_committed(
        &mut self,
        committed: Option<LogId<C::NodeId>>,
    ) -> Result<(), openraft::StorageError<C::NodeId>> {
        let mut st = self.inner.state.lock();
        let meta = RaftMeta { committed, ..st.meta.clone() };
        if st.meta_saved_at.elapsed() < Duration::from_millis(COMMITTED_SAVE_INTERVAL_MS) {
            st.meta = meta;
            st.committed_unsaved = true;
            return Ok(());
        }
        // A committed log id that could not be saved (a full disk) is not an error: the file's
        // older one is safe (see COMMITTED_SAVE_INTERVAL_MS), and failing here would stop the
        // whole group, which a vote or an append that cannot be saved must do but this need
        // not. The next save tries again.
        if let Err(error) = self.save_meta(&mut st, meta.clone()) {
            if !st.committed_save_failing {
                tracing::warn!(path = %self.inner.meta_file.path().display(), %error, "cannot save the committed log id; keeping the older one until a save succeeds");
            }
            st.committed_save_failing = true;
            st.meta = meta;
            st.committed_unsaved = true;
            st.meta_saved_at = Instant::now();
        } else {
            st.committed_save_failing = false;
        }
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<C::NodeId>>, openraft::StorageError<C::NodeId>> {
        Ok(self.inner.state.lock().meta.committed.clone())
    }

    /// Appends and calls `callback` once the entries are durable (see
    /// [`RaftLog::append_then`]).
    async fn append<I>(&mut self, entries: I, callback: LogFlushed<C>) -> Result<(), openraft::StorageError<C::NodeId>>
    where
        I: IntoIterator<Item = C::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        self.append_then(entries, move |result| {
            callback.log_io_completed(result.map_err(|e| RaftLogError::from(e).into_io()));
        })
        .map_err(|e| e.into_raft(ErrorSubject::Logs, ErrorVerb::Write))
    }

    /// Removes entries from `log_id.index` on (durably, before returning).
    async fn truncate(&mut self, log_id: LogId<C::NodeId>) -> Result<(), openraft::StorageError<C::NodeId>> {
        let mut st = self.inner.state.lock();
        let index = log_id.index;
        self.truncate_locked(&mut st, index).map_err(|e| e.into_raft(ErrorSubject::Log(log_id), ErrorVerb::Delete))
    }

    /// Purges entries up to `log_id.index`: they are gone for readers and the log state
    /// at once, and every segment holding only purged entries is deleted. A segment
    /// holding any entry above the purge point stays whole. Purging past the last entry
    /// empties the log, which then continues at `log_id.index + 1`.
    async fn purge(&mut self, log_id: LogId<C::NodeId>) -> Result<(), openraft::StorageError<C::NodeId>> {
        let mut st = self.inner.state.lock();
        self.purge_locked(&mut st, log_id.clone())
            .map_err(|e| e.into_raft(ErrorSubject::Log(log_id), ErrorVerb::Delete))
    }
}

impl<C: RaftTypeConfig> RaftLog<C> {
    fn truncate_locked(&self, st: &mut State<C>, index: u64) -> Result<(), RaftLogError> {
        let log = &self.inner.log;
        if index >= log.next_offset() {
            return Ok(());
        }
        if let Some(purged) = st.meta.last_purged.as_ref().filter(|p| index <= p.index) {
            return Err(RaftLogError::TruncatePurged { index, last_purged: purged.index });
        }
        log.truncate_from(index)?;
        st.last_log_id = last_log_id::<C>(log)?;
        Ok(())
    }

    fn purge_locked(&self, st: &mut State<C>, log_id: LogId<C::NodeId>) -> Result<(), RaftLogError> {
        if st.meta.last_purged.as_ref().is_some_and(|p| p.index >= log_id.index) {
            return Ok(());
        }
        let keep_from = log_id.index + 1;
        let meta = RaftMeta { last_purged: Some(log_id), ..st.meta.clone() };
        self.save_meta(st, meta)?;
        self.inner.purged_next.store(keep_from, Ordering::Release);
        let log = &self.inner.log;
        if keep_from > log.next_offset() {
            log.restart_at(keep_from)?;
            st.last_log_id = None;
        } else {
            log.delete_below(keep_from)?;
        }
        Ok(())
    }
}

/// The log id of the newest record in `log`, if it has any.
fn last_log_id<C: RaftTypeConfig>(log: &Log) -> Result<Option<LogId<C::NodeId>>, RaftLogError> {
    let Some(last) = log.last_offset() else {
        return Ok(None);
    };
    let record = log.read_one(last)?;
    Ok(Some(decode_entry::<C>(&record)?.get_log_id().clone()))
}

/// Checks that `record` holds an entry in a known encoding.
fn check_format(record: &Record) -> Result<(), RaftLogError> {
    if record.flags != ENTRY_FORMAT_POSTCARD {
        let reason = format!("unknown entry encoding (record flags {})", record.flags);
        return Err(RaftLogError::Decode { index: record.offset, reason });
    }
    Ok(())
}

/// The entry in `record`, which must be the one with the record's offset as its index.
fn decode_entry<C: RaftTypeConfig>(record: &Record) -> Result<C::Entry, RaftLogError> {
    check_format(record)?;
    let entry: C::Entry = codec::decode_payload(record.offset, &record.payload)?;
    let index = entry.get_log_id().index;
    if index != record.offset {
        return Err(RaftLogError::Decode { index: record.offset, reason: format!("it holds entry {index}") });
    }
    Ok(entry)
}
