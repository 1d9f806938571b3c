//! Retention: deciding which whole segments, oldest first, may go (by total bytes, by
//! age, or because every record in them is below an offset the owner no longer needs)
//! and deleting their files. The active segment is never deleted.

use std::fs;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::debug;

use crate::error::{IoContext, Result};
use crate::log::{unlock_and_close_deleted, Log, Retention, State};
use crate::segment::Segment;

/// Milliseconds since the Unix epoch, now.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// What a retention pass removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetentionOutcome {
    /// Segments deleted.
    pub segments_deleted: usize,
    /// Bytes freed.
    pub bytes_deleted: u64,
    /// First retained offset afterwards.
    pub first_offset: u64,
}

impl Log {
    /// Applies the configured byte and age retention, using the current time. Also runs
    /// automatically whenever a segment rolls.
    pub fn enforce_retention(&self) -> Result<RetentionOutcome> {
        self.enforce_retention_at(now_ms())
    }

    /// Applies retention as if the time were `now_ms` (ms since the Unix epoch).
    pub fn enforce_retention_at(&self, now_ms: i64) -> Result<RetentionOutcome> {
        let mut st = self.shared.state.lock();
        let outcome = self.apply_retention_locked(&mut st, now_ms);
        unlock_and_close_deleted(st);
        outcome
    }

    /// Keeps what `retention` says from now on (a policy changed it), and applies it at once.
    pub fn set_retention(&self, retention: Retention) -> Result<RetentionOutcome> {
        let mut st = self.shared.state.lock();
        st.retention = retention;
        let outcome = self.apply_retention_locked(&mut st, now_ms());
        unlock_and_close_deleted(st);
        outcome
    }

    /// What retention keeps now.
    pub fn retention(&self) -> Retention {
        self.shared.state.lock().retention
    }

    /// Deletes every segment whose records are all below `offset` (for queues whose
    /// messages there are all settled, or a Raft purge). Whole segments only: the first
    /// retained offset may stay below `offset`.
    pub fn delete_below(&self, offset: u64) -> Result<RetentionOutcome> {
        let mut st = self.shared.state.lock();
        let mut outcome = RetentionOutcome::default();
        let mut result = Ok(());
        while result.is_ok() && st.segments.len() > 1 && st.segments[1].base <= offset {
            result = delete_oldest(&self.shared.dir, &mut st, &mut outcome).map(drop);
        }
        outcome.first_offset = st.first_offset();
        unlock_and_close_deleted(st);
        result.map(|()| outcome)
    }

    pub(crate) fn apply_retention_locked(&self, st: &mut State, now_ms: i64) -> Result<RetentionOutcome> {
        let retention = st.retention;
        let mut outcome = RetentionOutcome::default();
        if let Some(limit) = retention.bytes {
            let mut total: u64 = st.segments.iter().map(|s| s.size).sum();
            while st.segments.len() > 1 && total > limit {
                total -= delete_oldest(&self.shared.dir, st, &mut outcome)?;
            }
        }
        if let Some(age) = retention.age {
            let cutoff = now_ms.saturating_sub(age.as_millis() as i64);
            while st.segments.len() > 1 {
                self.ensure_loaded(st, 0)?;
                if !expired(&st.segments[0], cutoff) {
                    break;
                }
                delete_oldest(&self.shared.dir, st, &mut outcome)?;
            }
        }
        outcome.first_offset = st.first_offset();
        Ok(outcome)
    }
}

/// A segment expires once its newest record is older than `cutoff_ms`.
fn expired(seg: &Segment, cutoff_ms: i64) -> bool {
    seg.max_ts.is_none_or(|m| m < cutoff_ms)
}

/// Removes the oldest segment from the state and unlinks its files (closed later, see
/// [`crate::graveyard`]); returns its size.
fn delete_oldest(dir: &Path, st: &mut State, outcome: &mut RetentionOutcome) -> Result<u64> {
    let Some(seg) = st.segments.pop_front() else {
        return Ok(0);
    };
    debug!(base = seg.base, bytes = seg.size, "deleting segment");
    outcome.segments_deleted += 1;
    outcome.bytes_deleted += seg.size;
    let size = seg.size;
    // Readers holding the data file keep reading it after the unlink.
    st.graveyard.bury(dir, seg)?;
    Ok(size)
}

/// Deletes a segment's files, indexes first: a crash part-way leaves a data file whose
/// index is rebuilt, never an index without its data.
pub(crate) fn delete_segment_files(dir: &Path, base: u64) -> Result<()> {
    let [log, idx, tix] = Segment::paths(dir, base);
    for path in [idx, tix, log] {
        match fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e).at(&path),
            _ => {}
        }
    }
    Ok(())
}
