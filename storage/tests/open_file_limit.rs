//! Many logs under a small limit of open segment files: every log stays writable, durable
//! and readable, and the process never holds more data-file descriptors than the limit
//! (plus the ones a use pins for its duration). Its own test binary, because the limit is
//! process-wide.

mod common;

use std::path::Path;

use common::*;
use warren_storage::{open_segment_files, set_max_open_segment_files, Log};

const LOGS: u64 = 60;
const LIMIT_FILES: usize = 8;

/// Descriptors of this process open on `.log` files under `root`.
fn open_data_files(root: &Path) -> usize {
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else { return 0 };
    fds.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter(|target| target.starts_with(root) && target.extension().is_some_and(|e| e == "log"))
        .count()
}

#[test]
fn logs_beyond_the_open_file_limit_work_and_stay_within_it() {
    set_max_open_segment_files(LIMIT_FILES);
    let root = tempfile::tempdir().unwrap();
    let dirs: Vec<_> = (0..LOGS).map(|i| root.path().join(i.to_string())).collect();
    let logs: Vec<Log> = dirs.iter().map(|d| open(d, small_config())).collect();
    // Rounds of appends (which roll segments), group commits and reads across every log,
    // so that each log's file is closed and reopened many times.
    for round in 0..5 {
        for log in &logs {
            append_n(log, round * 40, 40);
            log.flush().unwrap();
            assert_eq!(log.durable_offset(), (round + 1) * 40);
            check_record(&log.read_one(round * 40 + 7).unwrap(), round * 40 + 7);
        }
        assert!(open_segment_files() <= LIMIT_FILES, "{} open", open_segment_files());
        assert!(open_data_files(root.path()) <= LIMIT_FILES, "{} descriptors", open_data_files(root.path()));
    }
    for log in &logs {
        let all = read_all(log, 0);
        assert_eq!(all.len(), 200);
        all.iter().enumerate().for_each(|(i, r)| check_record(r, i as u64));
        log.close().unwrap();
    }
    drop(logs);
    assert_eq!(open_data_files(root.path()), 0);
    for dir in &dirs {
        let log = open(dir, small_config());
        assert_eq!(log.next_offset(), 200);
        check_record(&log.read_one(199).unwrap(), 199);
    }
}
