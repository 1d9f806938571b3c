//! Truncation: removing every record at or after an offset, as Raft needs when a
//! follower's log diverges from the leader's. Whole newer segments are deleted, the
//! segment holding the cut is shortened and reopened as the active segment through the
//! same tail recovery used at startup, and the durable watermark is set to the cut.
//! Also restarting: removing every record and continuing at any offset, as Raft needs
//! when a follower installs a snapshot past the end of its log.

use crate::error::{Result, StorageError};
use crate::log::{sync_dir, unlock_and_close_deleted, Log, State};
use crate::recovery;
use crate::retention::delete_segment_files;
use crate::segment::Segment;

impl Log {
    /// Removes every record with offset `>= offset`; the next append gets `offset`.
    /// A no-op at or past [`Log::next_offset`]; an error below [`Log::first_offset`].
    pub fn truncate_from(&self, offset: u64) -> Result<()> {
        let mut st = self.shared.state.lock();
        self.shared.durability.check()?;
        let (first, next) = (st.first_offset(), st.next_offset());
        if offset >= next {
            return Ok(());
        }
        if offset < first {
            return Err(StorageError::OffsetOutOfRange { offset, first, next });
        }
        let result = self.truncate_locked(&mut st, offset);
        if let Err(e) = &result {
            self.shared.durability.fail(e);
        }
        result
    }

    fn truncate_locked(&self, st: &mut State, offset: u64) -> Result<()> {
        let sh = &self.shared;
        st.damage.truncate_from(offset);
        st.active_mut().write_out()?;
        while st.segments.len() > 1 && st.active().base >= offset {
            if let Some(seg) = st.segments.pop_back() {
                delete_segment_files(&sh.dir, seg.base)?;
            }
        }
        let i = st.segments.len() - 1;
        self.ensure_loaded(st, i)?;
        let pos = self.position_of(st, offset)?;
        let Some(seg) = st.segments.pop_back() else {
            return Err(StorageError::Failed("log has no segments".into()));
        };
        let base = seg.base;
        if let Some(files) = seg.files() {
            files.log.set_len(pos)?;
            if sh.config.flush_policy.fsyncs_structure() {
                files.log.sync()?;
            }
        }
        cut_indexes(seg, offset)?;
        st.segments.push_back(recovery::recover_active(&sh.dir, base, &sh.config)?);
        st.unsynced.clear();
        st.pending_bytes = 0;
        st.epoch += 1;
        if sh.config.flush_policy.fsyncs_structure() {
            sync_dir(&sh.dir)?;
        }
        // Everything below the cut is durable: its segment was just fsynced, and older
        // segments were when they rolled (under `never` the watermark is not a promise).
        sh.durability.reset_to(offset);
        Ok(())
    }

    /// Removes every record and makes the next append get `offset`, which may lie
    /// anywhere, past [`Log::next_offset`] included: a Raft follower that installed a
    /// snapshot ending past its last entry continues its log just after the snapshot.
    /// Afterwards `first_offset() == next_offset() == offset`.
    ///
    /// Segments are deleted oldest first and the new empty segment is created last, so a
    /// crash part-way leaves a suffix of the old records (possibly none) or the new empty
    /// log, never a mix: an owner that must not see the old records records `offset`
    /// durably first and, on reopen, calls this again if the log does not start there.
    pub fn restart_at(&self, offset: u64) -> Result<()> {
        let mut st = self.shared.state.lock();
        self.shared.durability.check()?;
        let result = self.restart_locked(&mut st, offset);
        if let Err(e) = &result {
            self.shared.durability.fail(e);
        }
        unlock_and_close_deleted(st);
        result
    }

    fn restart_locked(&self, st: &mut State, offset: u64) -> Result<()> {
        let sh = &self.shared;
        st.damage.truncate_from(0);
        while st.segments.len() > 1 {
            if let Some(seg) = st.segments.pop_front() {
                st.graveyard.bury(&sh.dir, seg)?;
            }
        }
        if st.active().base == offset {
            // The segment already starts there: empty it in place.
            if st.next_offset() > offset {
                return self.truncate_locked(st, offset);
            }
            if sh.config.flush_policy.fsyncs_structure() {
                sync_dir(&sh.dir)?;
            }
            sh.durability.reset_to(offset);
            return Ok(());
        }
        // The active segment goes last, its files unlinked before the new one exists
        // (which its own open descriptors survive until the graveyard closes them).
        delete_segment_files(&sh.dir, st.active().base)?;
        let fresh = Segment::create(&sh.dir, offset, &sh.config)?;
        let old = std::mem::replace(st.active_mut(), fresh);
        st.graveyard.bury(&sh.dir, old)?;
        st.pending_bytes = 0;
        st.epoch += 1;
        if sh.config.flush_policy.fsyncs_structure() {
            sync_dir(&sh.dir)?;
        }
        sh.durability.reset_to(offset);
        Ok(())
    }

    /// Byte position of record `offset` in the last segment.
    fn position_of(&self, st: &State, offset: u64) -> Result<u64> {
        let seg = st.active();
        let Some(files) = seg.files() else {
            return Err(StorageError::Failed("segment files not loaded".into()));
        };
        let entry = files.index.lookup((offset - seg.base) as u32);
        let mut found = None;
        let from = seg.base + u64::from(entry.rel);
        let config = &self.shared.config;
        let end =
            recovery::scan(&files.log, u64::from(entry.pos), seg.size, from, offset + 1, config, |off, pos, _, _| {
                if off == offset && found.is_none() {
                    found = Some(pos);
                }
            })?;
        match (found, end.stop) {
            (Some(pos), _) => Ok(pos),
            (None, Some(stop)) => Err(StorageError::corruption(&files.log.path, stop.pos, stop.reason)),
            (None, None) => Ok(end.pos),
        }
    }
}

/// Drops index entries at or after the cut so recovery sees only valid ones.
fn cut_indexes(mut seg: crate::segment::Segment, offset: u64) -> Result<()> {
    let rel = (offset - seg.base) as u32;
    if let Some(files) = seg.files_mut() {
        files.index.truncate_from_rel(rel);
        files.time.truncate_from_rel(rel);
    }
    Ok(())
}
