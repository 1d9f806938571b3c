//! Crash tests: write records, then cut the last segment at a random byte and flip
//! random bits in its tail, reopen, and check that every record before the damage reads
//! back intact, nothing damaged is ever returned, and the log takes appends again.

mod common;

use common::*;
use proptest::prelude::*;
use warren_storage::{Log, StorageError};

const RECORDS: u64 = 120;

fn last_segment(dir: &std::path::Path) -> std::path::PathBuf {
    let mut logs: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs.pop().unwrap()
}

/// Reads forward from the first offset; every record returned must be exactly the one
/// written. Returns how many consecutive records were read before an error or the end.
fn read_checked(log: &Log) -> u64 {
    let mut next = log.first_offset();
    loop {
        match log.read(next, 7, 4096) {
            Ok(batch) if batch.is_empty() => return next,
            Ok(batch) => {
                for r in &batch {
                    check_record(r, next);
                    next += 1;
                }
            }
            Err(StorageError::Corruption { .. }) => return next,
            Err(e) => panic!("unexpected error {e}"),
        }
    }
}

fn run(cut_frac: f64, flips: Vec<(f64, u8)>, segment_bytes: u64) {
    let dir = tempfile::tempdir().unwrap();
    let config = warren_storage::LogConfig { segment_bytes, ..small_config() };
    let log = open(dir.path(), config.clone());
    append_n(&log, 0, RECORDS);
    log.close().unwrap();
    drop(log);

    let seg = last_segment(dir.path());
    let base: u64 = seg.file_stem().unwrap().to_str().unwrap().parse().unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    // Record boundaries, to know which records the damage leaves whole.
    let mut starts = vec![0usize];
    while *starts.last().unwrap() < bytes.len() {
        let at = *starts.last().unwrap();
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize + 4;
        starts.push(at + len);
    }
    let cut = (bytes.len() as f64 * cut_frac) as usize;
    bytes.truncate(cut);
    let mut damage = cut;
    let tail_from = bytes.len().saturating_sub(2048);
    for (frac, bit) in flips {
        if bytes.len() > tail_from {
            let at = tail_from + ((bytes.len() - tail_from) as f64 * frac) as usize;
            let at = at.min(bytes.len() - 1);
            bytes[at] ^= 1 << (bit % 8);
            damage = damage.min(at);
        }
    }
    std::fs::write(&seg, &bytes).unwrap();
    // Records wholly before the first damaged byte must survive.
    let intact = base + starts.iter().skip(1).take_while(|&&end| end <= damage).count() as u64;

    let log = open(dir.path(), config.clone());
    assert!(log.next_offset() >= intact, "lost intact records: next {} < {intact}", log.next_offset());
    let readable = read_checked(&log);
    assert!(readable >= intact, "read {readable} < intact {intact}");
    // The log takes appends at its new end and they read back.
    let next = log.next_offset();
    if readable == next {
        append_n(&log, next, 5);
        assert_eq!(read_checked(&log), next + 5);
    }
    drop(log);
    let log = open(dir.path(), config);
    assert!(read_checked(&log) >= intact);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]
    #[test]
    fn damaged_tail_is_recovered(
        cut_frac in 0.0f64..=1.0,
        flips in prop::collection::vec((0.0f64..1.0, any::<u8>()), 0..4),
        big in any::<bool>(),
    ) {
        // One segment holding everything, or many small ones.
        run(cut_frac, flips, if big { 1 << 20 } else { 4096 });
    }
}

#[test]
fn garbage_index_of_active_segment_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let config = warren_storage::LogConfig { segment_bytes: 1 << 20, ..small_config() };
    let log = open(dir.path(), config.clone());
    append_n(&log, 0, RECORDS);
    log.close().unwrap();
    drop(log);
    for ext in ["idx", "tix"] {
        let p = dir.path().join(format!("{:020}.{ext}", 0));
        let mut b = std::fs::read(&p).unwrap();
        for (i, x) in b.iter_mut().enumerate().skip(16).take(64) {
            *x = (i * 31) as u8;
        }
        std::fs::write(&p, b).unwrap();
    }
    let log = open(dir.path(), config);
    assert_eq!(log.next_offset(), RECORDS);
    assert_eq!(read_checked(&log), RECORDS);
    assert_eq!(log.offset_for_timestamp(ts(77)).unwrap(), Some(77));
}
