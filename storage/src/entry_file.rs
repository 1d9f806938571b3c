//! A memory-mapped file of fixed-size entries, shared by the sparse index and the time
//! index. It owns the mapping's lifecycle: preallocation, growth for an active segment,
//! trimming when the segment is sealed, and truncation.
//!
//! Files are preallocated by writing zeros rather than `set_len`, so that no page of the
//! mapping is a hole: storing into a hole on a full disk raises SIGBUS, and this crate
//! must report ENOSPC as an error instead. The file descriptor is closed once mapped;
//! thousands of logs may be open at once and the map alone keeps the data reachable.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use memmap2::MmapMut;

use crate::error::{IoContext, Result};

/// Zero-filled chunk used to preallocate files.
const ZERO_CHUNK_BYTES: usize = 64 * 1024;

/// A file of `N`-byte entries mapped read-write.
pub(crate) struct EntryFile<const N: usize> {
    path: PathBuf,
    map: Option<MmapMut>,
    /// Entries in use, a prefix of the map.
    len: usize,
    /// Entries the map can hold.
    capacity: usize,
}

impl<const N: usize> EntryFile<N> {
    /// Opens (creating if missing) with room for at least `capacity` entries when
    /// `grow` is set; otherwise maps the file as it is (a sealed segment's index).
    /// `len` starts at the number of whole entries in the file; callers validate them.
    pub(crate) fn open(path: &Path, capacity: usize, grow: bool) -> Result<Self> {
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).at(path)?;
        let file_bytes = file.metadata().at(path)?.len() as usize;
        if grow && file_bytes < capacity * N {
            zero_extend(&file, path, file_bytes, capacity * N)?;
        }
        let mut this = EntryFile { path: path.to_path_buf(), map: None, len: file_bytes / N, capacity: 0 };
        this.remap(&file)?;
        this.len = this.len.min(this.capacity);
        Ok(this)
    }

    fn remap(&mut self, file: &File) -> Result<()> {
        self.map = None;
        let bytes = file.metadata().at(&self.path)?.len() as usize;
        // SAFETY: the file is private to this log directory; it is only resized through
        // this type, which drops the map before shrinking the file.
        let map = unsafe { MmapMut::map_mut(file) }.at(&self.path)?;
        self.capacity = bytes / N;
        self.map = Some(map);
        Ok(())
    }

    fn reopen(&self) -> Result<File> {
        OpenOptions::new().read(true).write(true).open(&self.path).at(&self.path)
    }

    /// Entries in use.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Entry `i`; callers keep `i < len()` (or `< capacity` when validating).
    pub(crate) fn get(&self, i: usize) -> [u8; N] {
        let mut out = [0; N];
        if let Some(map) = &self.map {
            if let Some(src) = map.get(i * N..(i + 1) * N) {
                out.copy_from_slice(src);
            }
        }
        out
    }

    /// Entries the file could hold (used while validating an unknown prefix).
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Appends an entry; returns false (and stores nothing) when full.
    pub(crate) fn push(&mut self, entry: [u8; N]) -> bool {
        let at = self.len * N;
        match self.map.as_mut().and_then(|m| m.get_mut(at..at + N)) {
            Some(dst) => {
                dst.copy_from_slice(&entry);
                self.len += 1;
                true
            }
            None => false,
        }
    }

    /// Keeps the first `len` entries, zeroing the rest so a later open cannot mistake
    /// them for valid entries.
    pub(crate) fn truncate(&mut self, len: usize) {
        if len >= self.len {
            return;
        }
        if let Some(map) = self.map.as_mut() {
            let end = (self.len * N).min(map.len());
            map[len * N..end].fill(0);
        }
        self.len = len;
    }

    /// Keeps the first `valid` entries of the whole file and zeroes everything after
    /// them that is not already zero: stale entries past a torn tail must not come back
    /// to life once new entries reach them.
    pub(crate) fn retain(&mut self, valid: usize) {
        let valid = valid.min(self.capacity);
        if let Some(map) = self.map.as_mut() {
            let rest = &mut map[valid * N..];
            if rest.iter().any(|&b| b != 0) {
                rest.fill(0);
            }
        }
        self.len = valid;
    }

    /// Shrinks the file to the entries in use, for a sealed segment.
    pub(crate) fn seal(&mut self) -> Result<()> {
        if let Some(map) = &self.map {
            map.flush_async().at(&self.path)?;
        }
        self.map = None;
        let file = self.reopen()?;
        file.set_len((self.len * N) as u64).at(&self.path)?;
        self.remap(&file)
    }

    /// Grows a sealed file back to `capacity` entries so it can take appends again.
    pub(crate) fn unseal(&mut self, capacity: usize) -> Result<()> {
        let file = self.reopen()?;
        let bytes = file.metadata().at(&self.path)?.len() as usize;
        if bytes < capacity * N {
            self.map = None;
            zero_extend(&file, &self.path, bytes, capacity * N)?;
            self.remap(&file)?;
        }
        Ok(())
    }

    /// Asks the OS to write dirty pages back (not waiting).
    pub(crate) fn flush_async(&self) -> Result<()> {
        match &self.map {
            Some(map) => map.flush_async().at(&self.path),
            None => Ok(()),
        }
    }
}

/// Writes zeros from `from` to `to` so every page is allocated on disk.
fn zero_extend(file: &File, path: &Path, from: usize, to: usize) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let zeros = [0u8; ZERO_CHUNK_BYTES];
    let mut at = from;
    while at < to {
        let n = (to - at).min(ZERO_CHUNK_BYTES);
        file.write_all_at(&zeros[..n], at as u64).at(path)?;
        at += n;
    }
    Ok(())
}
