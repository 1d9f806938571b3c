//! Storage recovery: a log directory whose first segment is made of the bytes (the first two
//! bytes, big-endian, say how many of the rest are its sparse index), opened as after a crash
//! and read from its first offset to its end.

use std::fs;
use warren_storage::{Log, LogConfig};

/// Records read at most per call.
const READ_RECORDS: usize = 64;
/// Bytes read at most per call.
const READ_BYTES: usize = 1 << 20;

/// Recovers and reads the segment `data` describes.
pub fn run(data: &[u8]) {
    let Ok(dir) = tempfile::tempdir() else { return };
    let (index_len, rest) = match data {
        [high, low, rest @ ..] => (usize::from(u16::from_be_bytes([*high, *low])).min(rest.len()), rest),
        _ => (0, data),
    };
    let (index, log) = rest.split_at(index_len);
    let base = format!("{:020}", 0);
    if fs::write(dir.path().join(format!("{base}.log")), log).is_err()
        || fs::write(dir.path().join(format!("{base}.idx")), index).is_err()
    {
        return;
    }
    let Ok(log) = Log::open(dir.path(), LogConfig::default()) else { return };
    let mut from = log.first_offset();
    while from < log.next_offset() {
        match log.read(from, READ_RECORDS, READ_BYTES) {
            Ok(records) if !records.is_empty() => from = records.iter().map(|r| r.offset).max().unwrap_or(from) + 1,
            _ => break,
        }
    }
    let _ = log.close();
}
