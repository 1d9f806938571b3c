//! Behavioural tests of the log API: many segments, reopen, timestamps, truncation,
//! restarting at another offset, retention, group commit and its callbacks.

mod common;

use std::time::Duration;

use common::*;
use warren_storage::{FlushPolicy, LogConfig, NewRecord, Retention, StorageError};

#[test]
fn empty_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small_config());
    assert_eq!((log.first_offset(), log.next_offset(), log.last_offset()), (0, 0, None));
    assert!(log.read(0, 10, 1000).unwrap().is_empty());
    assert!(matches!(log.read(1, 10, 1000), Err(StorageError::OffsetOutOfRange { .. })));
    assert_eq!(log.offset_for_timestamp(0).unwrap(), None);
    drop(log);
    let log = open(dir.path(), small_config());
    assert_eq!(log.next_offset(), 0);
}

#[test]
fn many_segments_read_back_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small_config());
    append_n(&log, 0, 500);
    assert!(log.segment_count() > 10, "{} segments", log.segment_count());
    let all = read_all(&log, 0);
    assert_eq!(all.len(), 500);
    for (i, r) in all.iter().enumerate() {
        check_record(r, i as u64);
    }
    for i in [0, 1, 77, 250, 499] {
        check_record(&log.read_one(i).unwrap(), i);
    }
    log.close().unwrap();
    drop(log);
    let log = open(dir.path(), small_config());
    assert_eq!((log.first_offset(), log.next_offset(), log.last_offset()), (0, 500, Some(499)));
    for (i, r) in read_all(&log, 123).iter().enumerate() {
        check_record(r, 123 + i as u64);
    }
    append_n(&log, 500, 10);
    check_record(&log.read_one(509).unwrap(), 509);
}

#[test]
fn read_limits() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small_config());
    append_n(&log, 0, 100);
    assert_eq!(log.read(10, 5, usize::MAX).unwrap().len(), 5);
    // A byte budget of zero still returns one record.
    assert_eq!(log.read(10, 5, 0).unwrap().len(), 1);
    let got = log.read(0, 100, 1000).unwrap();
    let bytes: usize = got.iter().map(|r| r.payload.len()).sum();
    assert!(bytes <= 1000 || got.len() == 1);
}

#[test]
fn timestamp_lookup() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small_config());
    append_n(&log, 0, 300);
    assert_eq!(log.offset_for_timestamp(i64::MIN).unwrap(), Some(0));
    for i in [0u64, 1, 9, 150, 299] {
        assert_eq!(log.offset_for_timestamp(ts(i)).unwrap(), Some(i));
        assert_eq!(log.offset_for_timestamp(ts(i) - 5).unwrap(), Some(i));
    }
    assert_eq!(log.offset_for_timestamp(ts(299) + 1).unwrap(), None);
    drop(log);
    let log = open(dir.path(), small_config());
    assert_eq!(log.offset_for_timestamp(ts(200) - 3).unwrap(), Some(200));
}

#[test]
fn timestamp_lookup_non_monotonic() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small_config());
    let stamps = [50, 10, 40, 20, 60, 5, 70];
    for &t in stamps.iter().cycle().take(200) {
        log.append(NewRecord::new(t, &[7; 100])).unwrap();
    }
    for target in [0, 10, 45, 55, 65, 70, 71] {
        let expect = (0..200).find(|&i| stamps[i % stamps.len()] >= target).map(|i| i as u64);
        assert_eq!(log.offset_for_timestamp(target).unwrap(), expect, "target {target}");
    }
}

#[test]
fn truncate_then_append() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small_config());
    append_n(&log, 0, 300);
    log.truncate_from(250).unwrap();
    assert_eq!(log.next_offset(), 250);
    assert!(log.read(250, 1, 10).unwrap().is_empty());
    append_n(&log, 250, 20);
    log.truncate_from(100).unwrap();
    append_n(&log, 100, 5);
    drop(log);
    let log = open(dir.path(), small_config());
    let all = read_all(&log, 0);
    assert_eq!(all.len(), 105);
    for (i, r) in all.iter().enumerate() {
        check_record(r, i as u64);
    }
    log.truncate_from(0).unwrap();
    assert_eq!((log.first_offset(), log.next_offset()), (0, 0));
    append_n(&log, 0, 3);
    assert_eq!(read_all(&log, 0).len(), 3);
}

#[test]
fn restart_at_continues_anywhere() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig { flush_policy: FlushPolicy::Batch, ..small_config() };
    let log = open(dir.path(), config.clone());
    append_n(&log, 0, 300);
    assert!(log.segment_count() > 3);
    // Forward, past the end: every segment goes, the log is empty at 1000.
    log.restart_at(1000).unwrap();
    assert_eq!((log.first_offset(), log.next_offset(), log.segment_count()), (1000, 1000, 1));
    assert_eq!(log.durable_offset(), 1000);
    assert!(log.read(1000, 10, 1000).unwrap().is_empty());
    assert!(matches!(log.read(5, 1, 10), Err(StorageError::OffsetOutOfRange { .. })));
    append_n(&log, 1000, 50);
    drop(log);
    let log = open(dir.path(), config.clone());
    assert_eq!((log.first_offset(), log.next_offset()), (1000, 1050));
    for (i, r) in read_all(&log, 1000).iter().enumerate() {
        check_record(r, 1000 + i as u64);
    }
    // Inside the current range, at the active segment's own base, and backwards.
    log.restart_at(1020).unwrap();
    assert_eq!((log.first_offset(), log.next_offset()), (1020, 1020));
    log.restart_at(1020).unwrap();
    append_n(&log, 1020, 5);
    log.restart_at(1020).unwrap();
    assert_eq!((log.first_offset(), log.next_offset()), (1020, 1020));
    log.restart_at(10).unwrap();
    append_n(&log, 10, 3);
    drop(log);
    let log = open(dir.path(), config);
    assert_eq!((log.first_offset(), log.next_offset()), (10, 13));
    for (i, r) in read_all(&log, 10).iter().enumerate() {
        check_record(r, 10 + i as u64);
    }
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".log"))
        .collect();
    assert_eq!(names, vec![format!("{:020}.log", 10)], "nothing of the old segments is left");
}

#[test]
fn retention_by_bytes_and_below_offset() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig { retention_bytes: Some(20_000), ..small_config() };
    let log = open(dir.path(), config);
    append_n(&log, 0, 1000);
    assert!(log.size_bytes() <= 20_000 + 4096, "size {}", log.size_bytes());
    let first = log.first_offset();
    assert!(first > 0);
    check_record(&log.read_one(first).unwrap(), first);
    assert!(matches!(log.read(first - 1, 1, 1), Err(StorageError::OffsetOutOfRange { .. })));
    let out = log.delete_below(900).unwrap();
    assert!(out.first_offset <= 900 && out.first_offset > first);
    for (i, r) in read_all(&log, out.first_offset).iter().enumerate() {
        check_record(r, out.first_offset + i as u64);
    }
    drop(log);
    let log = open(dir.path(), small_config());
    assert_eq!(log.first_offset(), out.first_offset);
}

#[test]
fn retention_set_on_a_live_log_applies_at_once_and_at_each_roll() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small_config());
    append_n(&log, 0, 1000);
    assert_eq!(log.first_offset(), 0, "no retention configured");
    let size = log.size_bytes();
    let out = log.set_retention(Retention { bytes: Some(size / 2), age: None }).unwrap();
    assert!(out.segments_deleted > 0 && log.size_bytes() <= size / 2, "{out:?}");
    assert_eq!(log.retention(), Retention { bytes: Some(size / 2), age: None });
    let first = log.first_offset();
    append_n(&log, 1000, 1000);
    assert!(log.first_offset() > first, "each roll applies the new retention");
    // Loosened: nothing more goes.
    log.set_retention(Retention::default()).unwrap();
    let first = log.first_offset();
    append_n(&log, 2000, 1000);
    assert_eq!(log.first_offset(), first);
}

/// Under `batch`, segments deleted by retention on roll are unlinked at once (closed
/// later, outside the lock), and appends large enough to start early writeback read back
/// intact, durable after a flush and after a reopen.
#[tokio::test]
async fn batch_retention_on_roll_and_early_writeback() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes: 3 << 20,
        write_buffer_bytes: 64 << 10,
        flush_policy: FlushPolicy::Batch,
        retention_bytes: Some(6 << 20),
        ..LogConfig::default()
    };
    let log = open(dir.path(), config.clone());
    let payload = vec![0x5au8; 100_000];
    for i in 0..200 {
        assert_eq!(log.append(NewRecord::new(i, &payload)).unwrap(), i as u64);
    }
    log.wait_durable(199).await.unwrap();
    let first = log.first_offset();
    assert!(first > 0, "retention deleted nothing");
    let names = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(names, 3 * log.segment_count(), "deleted segments must be unlinked at once");
    drop(log);
    let log = open(dir.path(), config);
    assert_eq!((log.first_offset(), log.next_offset()), (first, 200));
    for r in read_all(&log, first) {
        assert_eq!(&r.payload[..], &payload[..]);
    }
}

#[test]
fn retention_by_age() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig { retention_age: Some(Duration::from_millis(5_000)), ..small_config() };
    let log = open(dir.path(), config);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let stamp = |i: u64| now - 10_000 + i as i64 * 10;
    let started = std::time::Instant::now();
    for i in 0..1000u64 {
        log.append(NewRecord::new(stamp(i), &[1; 100])).unwrap();
    }
    // Rolling applied retention with the real clock: records older than 5 s are gone. Record i
    // is 5 s old once 10 * (i - 500) ms have passed, so on a busy machine, where the appends
    // take a while, retention has reached further.
    let passed_ms = started.elapsed().as_millis() as u64;
    let first = log.first_offset();
    assert!(first > 400 && first <= 500 + passed_ms / 10, "first {first} after {passed_ms} ms");
    let out = log.enforce_retention_at(now + 3_000).unwrap();
    assert!(out.segments_deleted > 0);
    assert!(out.first_offset > 700 && out.first_offset <= 800, "{out:?}");
    assert_eq!(log.read_one(out.first_offset).unwrap().timestamp_ms, stamp(out.first_offset));
}

#[test]
fn age_rolls_segments() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig { segment_bytes: 1 << 20, segment_age: Some(Duration::from_millis(100)), ..small_config() };
    let log = open(dir.path(), config);
    append_n(&log, 0, 100); // 10 ms apart: a new segment every 10 records
    assert_eq!(log.segment_count(), 10);
}

#[test]
fn damaged_sealed_segment_is_reported_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small_config());
    append_n(&log, 0, 200);
    log.close().unwrap();
    drop(log);
    let seg = dir.path().join(format!("{:020}.log", 0));
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[100] ^= 0x40;
    std::fs::write(&seg, &bytes).unwrap();
    let log = open(dir.path(), small_config());
    let err = read_all_result(&log);
    match err {
        Err(StorageError::Corruption { path, .. }) => assert_eq!(path, seg),
        other => panic!("expected corruption, got {other:?}"),
    }
    // With the index gone, the rebuild steps over the damage (byte 100 is in record 2's
    // length field); reads return the records before it and fail at it, naming the file.
    drop(log);
    std::fs::remove_file(dir.path().join(format!("{:020}.idx", 0))).unwrap();
    let log = open(dir.path(), small_config());
    assert_eq!(log.read(0, 10, 10_000).unwrap().len(), 2);
    match log.read(2, 10, 10_000) {
        Err(StorageError::Corruption { path, position, .. }) => assert_eq!((path, position), (seg, 97)),
        other => panic!("expected corruption, got {other:?}"),
    }
}

fn read_all_result(log: &warren_storage::Log) -> Result<usize, StorageError> {
    let mut n = 0;
    let mut next = log.first_offset();
    while next < log.next_offset() {
        let b = log.read(next, 50, 8192)?;
        n += b.len();
        next = b.last().map_or(next, |r| r.offset + 1);
    }
    Ok(n)
}

#[test]
fn missing_indexes_are_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small_config());
    append_n(&log, 0, 300);
    log.close().unwrap();
    drop(log);
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let p = entry.unwrap().path();
        let ext = p.extension().unwrap().to_str().unwrap().to_string();
        if ext == "idx" || ext == "tix" {
            std::fs::remove_file(&p).unwrap();
        }
    }
    let log = open(dir.path(), small_config());
    let all = read_all(&log, 0);
    assert_eq!(all.len(), 300);
    assert_eq!(log.offset_for_timestamp(ts(123)).unwrap(), Some(123));
}

#[tokio::test]
async fn group_commit_publishes_durable_offset() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        flush_policy: FlushPolicy::Batch,
        flush_interval: Duration::from_millis(2),
        ..LogConfig::default()
    };
    let log = open(dir.path(), config);
    append_n(&log, 0, 100);
    tokio::time::timeout(Duration::from_secs(5), log.wait_durable(99)).await.unwrap().unwrap();
    assert_eq!(log.durable_offset(), 100);
    let mut rx = log.subscribe_durable();
    append_n(&log, 100, 1);
    tokio::time::timeout(Duration::from_secs(5), rx.wait_for(|&d| d > 100)).await.unwrap().unwrap();
}

/// `when_durable` calls back, in order, once the group commit covering each offset is
/// done; a truncation below a waiting offset makes it due at the cut.
#[test]
fn when_durable_calls_back_after_the_group_commit() {
    let dir = tempfile::tempdir().unwrap();
    let config =
        LogConfig { flush_policy: FlushPolicy::Batch, flush_interval: Duration::from_millis(2), ..small_config() };
    let log = open(dir.path(), config);
    let durable = log.subscribe_durable();
    let (tx, rx) = std::sync::mpsc::channel();
    for end in [10, 20, 30] {
        append_n(&log, end - 10, 10);
        let (tx, durable) = (tx.clone(), durable.clone());
        log.when_durable(end, move |r| tx.send((end, r.is_ok(), *durable.borrow())).unwrap());
    }
    for expected in [10, 20, 30] {
        let (end, ok, watermark) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(ok && end == expected && watermark >= end, "{end} called at {watermark}");
    }
    // Already durable: called at once.
    let tx2 = tx.clone();
    log.when_durable(30, move |r| tx2.send((30, r.is_ok(), 0)).unwrap());
    assert!(rx.try_recv().is_ok());

    let dir = tempfile::tempdir().unwrap();
    let config =
        LogConfig { flush_policy: FlushPolicy::Batch, flush_interval: Duration::from_secs(60), ..small_config() };
    let log = open(dir.path(), config);
    log.flush().unwrap();
    append_n(&log, 0, 10);
    log.when_durable(10, move |r| tx.send((10, r.is_ok(), 0)).unwrap());
    assert!(rx.recv_timeout(Duration::from_millis(50)).is_err(), "the next group commit is a minute away");
    log.truncate_from(5).unwrap();
    let (_, ok, _) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(ok);
    assert_eq!(log.durable_offset(), 5, "the truncation fsynced what is left");
}

#[tokio::test]
async fn always_never_and_on_flush_policies() {
    // Under `on-flush` nothing waits for an fsync: the log's records are durable elsewhere.
    for policy in [FlushPolicy::Always, FlushPolicy::Never, FlushPolicy::OnFlush] {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig { flush_policy: policy, ..LogConfig::default() };
        let log = open(dir.path(), config);
        append_n(&log, 0, 10);
        assert_eq!(log.durable_offset(), 10, "{policy:?}");
        log.wait_durable(9).await.unwrap();
    }
}

#[tokio::test]
async fn close_fails_waiters() {
    let dir = tempfile::tempdir().unwrap();
    let config =
        LogConfig { flush_policy: FlushPolicy::Batch, flush_interval: Duration::from_secs(60), ..LogConfig::default() };
    let log = open(dir.path(), config);
    append_n(&log, 0, 10);
    log.close().unwrap();
    log.wait_durable(9).await.unwrap();
    assert!(matches!(log.wait_durable(10).await, Err(StorageError::Closed)));
    assert!(matches!(log.append(NewRecord::new(0, b"x")), Err(StorageError::Closed)));
}

#[test]
fn bad_config_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig { segment_bytes: 10, ..LogConfig::default() };
    assert!(matches!(warren_storage::Log::open(dir.path(), config), Err(StorageError::BadConfig(_))));
}

#[test]
fn concurrent_reader_sees_appends() {
    let dir = tempfile::tempdir().unwrap();
    let log = std::sync::Arc::new(open(dir.path(), small_config()));
    let reader = {
        let log = log.clone();
        std::thread::spawn(move || {
            let mut next = 0;
            while next < 2000 {
                for r in log.read(next, 100, 1 << 20).unwrap() {
                    check_record(&r, next);
                    next += 1;
                }
            }
        })
    };
    append_n(&log, 0, 2000);
    reader.join().unwrap();
}

#[test]
fn an_on_flush_log_rolls_flushes_and_reopens_whole() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig { flush_policy: FlushPolicy::OnFlush, segment_bytes: 4096, ..LogConfig::default() };
    let log = open(dir.path(), config.clone());
    append_n(&log, 0, 500);
    log.flush().unwrap();
    assert!(log.segment_count() > 1, "rolled (each sealed segment is fsynced)");
    log.close().unwrap();
    drop(log);
    let log = open(dir.path(), config);
    assert_eq!((log.first_offset(), log.next_offset()), (0, 500));
    assert_eq!(log.read(0, 500, usize::MAX).unwrap().len(), 500);
}
