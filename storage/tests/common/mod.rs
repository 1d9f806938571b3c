//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::Path;

use warren_storage::{FlushPolicy, Flusher, Log, LogConfig, NewRecord, Record};

/// A config with tiny segments so tests cross many segment boundaries.
pub fn small_config() -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
        index_interval_bytes: 256,
        write_buffer_bytes: 1024,
        flush_policy: FlushPolicy::Never,
        ..LogConfig::default()
    }
}

pub fn open(dir: &Path, config: LogConfig) -> Log {
    Log::open_with_flusher(dir, config, Flusher::new(1).unwrap()).unwrap()
}

/// Deterministic payload for offset `i`, of varying length.
pub fn payload(i: u64) -> Vec<u8> {
    let len = (i * 37 % 300) as usize;
    (0..len).map(|j| (i as usize + j) as u8).collect()
}

pub fn ts(i: u64) -> i64 {
    1_000 + i as i64 * 10
}

pub fn append_n(log: &Log, from: u64, n: u64) {
    for i in from..from + n {
        let p = payload(i);
        let rec = NewRecord { timestamp_ms: ts(i), tag_hash: i as u32, flags: (i % 7) as u8, payload: &p };
        assert_eq!(log.append(rec).unwrap(), i);
    }
}

pub fn check_record(r: &Record, i: u64) {
    assert_eq!(r.offset, i);
    assert_eq!(r.timestamp_ms, ts(i));
    assert_eq!(r.tag_hash, i as u32);
    assert_eq!(r.flags, (i % 7) as u8);
    assert_eq!(&r.payload[..], &payload(i)[..], "payload of {i}");
}

/// Reads everything from `from` to the end, in modest batches.
pub fn read_all(log: &Log, from: u64) -> Vec<Record> {
    let mut out = Vec::new();
    let mut next = from;
    loop {
        let batch = log.read(next, 50, 8192).unwrap();
        match batch.last() {
            None => return out,
            Some(r) => next = r.offset + 1,
        }
        out.extend(batch);
    }
}
