//! Deferred release of deleted segments.
//!
//! Unlinking a file that is still open only removes its name; its blocks are freed when
//! the last descriptor closes, and on a filesystem mounted with `discard` that close
//! waits for the device to discard them: milliseconds per 64 MiB segment. Retention runs
//! whenever a segment rolls, on the append path under the log's lock, where such a wait
//! stalls the appender and the flusher alike. So a deleted segment is unlinked at once
//! (its name is gone, a reopen never sees it) but kept open here, and closed later
//! outside the lock: by the flusher, or by the caller of an explicit retention call.

use std::fs::File;
use std::io::ErrorKind;
use std::path::Path;

use crate::error::{IoContext, Result};
use crate::retention::delete_segment_files;
use crate::segment::{segment_path, Segment, LOG_EXT};

/// Unlinked segments whose files are still open.
#[derive(Default)]
pub(crate) struct Graveyard {
    /// Loaded segments hold all three files (descriptor and index mmaps).
    segments: Vec<Segment>,
    /// Data files of segments that were never loaded, opened just to defer the close.
    files: Vec<File>,
}

impl Graveyard {
    /// Unlinks `seg`'s files now and keeps them open until the graveyard is dropped.
    pub(crate) fn bury(&mut self, dir: &Path, seg: Segment) -> Result<()> {
        let base = seg.base;
        if seg.is_loaded() {
            self.segments.push(seg);
        } else {
            let path = segment_path(dir, base, LOG_EXT);
            match File::open(&path) {
                Ok(file) => self.files.push(file),
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(e).at(&path),
            }
        }
        delete_segment_files(dir, base)
    }

    /// Takes every buried segment, leaving the graveyard empty; drop the result outside
    /// the log's lock.
    pub(crate) fn take(&mut self) -> Graveyard {
        std::mem::take(self)
    }
}
