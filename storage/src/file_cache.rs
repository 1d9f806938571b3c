//! The process-wide cache of open segment data files: at most
//! [`max_open_segment_files`] descriptors, the least recently used closed first.
//!
//! Every log keeps its active segment's data file in use, and a broker may hold tens of
//! thousands of logs (two per durable queue, one per stream and Raft group): one
//! descriptor each would exhaust the open-files limit long before memory or disk. So a
//! [`SegmentFile`](crate::segment::SegmentFile) names its file and opens it through this
//! cache on use; an idle log costs no descriptor. (Index files need none: they are closed
//! once memory-mapped.)
//!
//! A use *pins* the file: it holds an `Arc<File>`, so closing a file evicted mid-read or
//! mid-fsync waits for that use to end. An fsync through a reopened descriptor still
//! flushes everything written through the old one (the page cache belongs to the inode),
//! and since Linux 4.16 a writeback error no descriptor has seen is reported to the next
//! fsync whichever descriptor makes it.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};

use parking_lot::Mutex;

use crate::error::{IoContext, Result};

/// Open segment files allowed until [`set_max_open_segment_files`] says otherwise.
pub const DEFAULT_MAX_OPEN_SEGMENT_FILES: usize = 512;
/// Share of the limit an eviction frees at once, in percent, so that a process cycling
/// through more logs than the limit does not scan the cache on every open.
const EVICTION_BATCH_PERCENT: usize = 10;

static CACHE: LazyLock<FileCache> = LazyLock::new(FileCache::default);

/// Sets how many segment data files may be open at once (at least 1).
pub fn set_max_open_segment_files(limit: usize) {
    CACHE.limit.store(limit.max(1), Ordering::Relaxed);
}

/// How many segment data files may be open at once.
pub fn max_open_segment_files() -> usize {
    CACHE.limit.load(Ordering::Relaxed)
}

/// How many segment data files are open now (pinned files evicted but still in use are
/// not counted).
pub fn open_segment_files() -> usize {
    CACHE.open.lock().len()
}

/// A key for one file in the cache, unique for the process's lifetime.
pub(crate) fn new_key() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The file for `key`, opened (read-write, at `path`) if the cache holds it no longer.
pub(crate) fn pin(key: u64, path: &Path) -> Result<Arc<File>> {
    if let Some(file) = CACHE.touch(key) {
        return Ok(file);
    }
    // Opened outside the lock: an open is a syscall, the lock serves every log.
    let file = Arc::new(OpenOptions::new().read(true).write(true).open(path).at(path)?);
    Ok(CACHE.insert(key, file))
}

/// Hands a freshly opened (or created) file to the cache.
pub(crate) fn adopt(key: u64, file: File) -> Arc<File> {
    CACHE.insert(key, Arc::new(file))
}

/// Closes `key`'s file, if open (its log dropped it).
pub(crate) fn forget(key: u64) {
    let closed = CACHE.open.lock().remove(&key);
    drop(closed);
}

struct FileCache {
    limit: AtomicUsize,
    /// Ticks of a logical clock; a file's tick is its last use.
    clock: AtomicU64,
    open: Mutex<HashMap<u64, Entry>>,
}

struct Entry {
    file: Arc<File>,
    last_used: u64,
}

impl Default for FileCache {
    fn default() -> Self {
        FileCache {
            limit: AtomicUsize::new(DEFAULT_MAX_OPEN_SEGMENT_FILES),
            clock: AtomicU64::new(0),
            open: Mutex::new(HashMap::new()),
        }
    }
}

impl FileCache {
    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed)
    }

    fn touch(&self, key: u64) -> Option<Arc<File>> {
        let tick = self.tick();
        let mut open = self.open.lock();
        let entry = open.get_mut(&key)?;
        entry.last_used = tick;
        Some(Arc::clone(&entry.file))
    }

    /// Stores `file` for `key` unless another use opened it meanwhile (then that one is
    /// returned and `file` closes), evicting the least recently used files when full.
    fn insert(&self, key: u64, file: Arc<File>) -> Arc<File> {
        let tick = self.tick();
        let mut open = self.open.lock();
        let entry = open.entry(key).or_insert(Entry { file, last_used: tick });
        entry.last_used = tick;
        let pinned = Arc::clone(&entry.file);
        let evicted = self.evict(&mut open);
        drop(open);
        // Descriptors close here, outside the lock.
        drop(evicted);
        pinned
    }

    /// Removes the least recently used entries once over the limit, down to the limit less
    /// a batch; returns them so that they close after the lock is released.
    fn evict(&self, open: &mut HashMap<u64, Entry>) -> Vec<Entry> {
        let limit = self.limit.load(Ordering::Relaxed);
        if open.len() <= limit {
            return Vec::new();
        }
        let keep = limit - (limit * EVICTION_BATCH_PERCENT / 100).min(limit - 1);
        let mut ages: Vec<(u64, u64)> = open.iter().map(|(key, e)| (e.last_used, *key)).collect();
        let excess = ages.len() - keep;
        ages.select_nth_unstable(excess - 1);
        ages[..excess].iter().filter_map(|(_, key)| open.remove(key)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(limit: usize) -> FileCache {
        let cache = FileCache::default();
        cache.limit.store(limit, Ordering::Relaxed);
        cache
    }

    fn temp_file(dir: &Path, key: u64) -> Arc<File> {
        Arc::new(File::create(dir.join(key.to_string())).expect("create"))
    }

    #[test]
    fn the_least_recently_used_files_are_closed_first() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = cache(10);
        for key in 0..10 {
            cache.insert(key, temp_file(dir.path(), key));
        }
        // 0 and 1 are used again; the next open goes over the limit and evicts down to
        // the limit less a batch of one: the two oldest, 2 and 3.
        assert!(cache.touch(0).is_some() && cache.touch(1).is_some());
        cache.insert(10, temp_file(dir.path(), 10));
        let open = cache.open.lock();
        assert_eq!(open.len(), 9);
        assert!(!open.contains_key(&2) && !open.contains_key(&3));
        assert!(open.contains_key(&0) && open.contains_key(&1) && open.contains_key(&10));
    }

    #[test]
    fn eviction_frees_a_batch_so_opens_do_not_scan_each_time() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = cache(100);
        for key in 0..101 {
            cache.insert(key, temp_file(dir.path(), key));
        }
        assert_eq!(cache.open.lock().len(), 90);
        assert!(cache.touch(0).is_none() && cache.touch(11).is_some());
    }

    #[test]
    fn a_pinned_file_outlives_its_eviction() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = cache(1);
        let pinned = cache.insert(0, temp_file(dir.path(), 0));
        cache.insert(1, temp_file(dir.path(), 1));
        assert!(cache.touch(0).is_none());
        assert!(pinned.metadata().is_ok());
    }
}
