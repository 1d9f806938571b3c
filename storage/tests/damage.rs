//! Damage before the tail: one flipped byte in a record of a sealed (or active) segment.
//! Reading forward with `Log::skip_damage` loses exactly the damaged record, returns every
//! other record intact, and reports the damage once, however often it is read past.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use proptest::prelude::*;
use warren_storage::{Log, LogConfig, StorageError};

const RECORDS: u64 = 200;

/// Byte offsets of the fields in a record's header.
const LENGTH_FIELD: usize = 0;
const OFFSET_FIELD: usize = 10;
const PAYLOAD: usize = 30;

fn segment(dir: &Path, base: u64) -> PathBuf {
    dir.join(format!("{base:020}.log"))
}

/// `(offset, position, length)` of every record in a segment file.
fn records_of(path: &Path, base: u64) -> Vec<(u64, usize, usize)> {
    let bytes = std::fs::read(path).unwrap();
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize + 4;
        out.push((base + out.len() as u64, at, len));
        at += len;
    }
    out
}

fn flip(path: &Path, at: usize, mask: u8) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at] ^= mask;
    std::fs::write(path, bytes).unwrap();
}

/// Writes `RECORDS` records with `config`, closes the log, and flips one byte of the
/// record of segment 0 chosen by `pick` (given the segment's records), at `field` within
/// it. Returns the damaged record's offset and position.
fn damage(dir: &Path, config: &LogConfig, pick: impl Fn(&[(u64, usize, usize)]) -> usize, field: usize) -> (u64, u64) {
    let log = open(dir, config.clone());
    append_n(&log, 0, RECORDS);
    log.close().unwrap();
    drop(log);
    let seg = segment(dir, 0);
    let records = records_of(&seg, 0);
    let (offset, pos, len) = records[pick(&records)];
    let at = if field == PAYLOAD { pos + PAYLOAD + (len - PAYLOAD) / 2 } else { pos + field };
    flip(&seg, at, 0x10);
    (offset, pos as u64)
}

/// A record in the middle of segment 0 with a payload of at least `min` bytes.
fn middle_with_payload(min: usize) -> impl Fn(&[(u64, usize, usize)]) -> usize {
    move |records| (records.len() / 2..records.len()).find(|&i| records[i].2 >= PAYLOAD + min).unwrap()
}

/// Reads every record from the first offset, stepping past damage: the records read, and
/// the damaged offsets stepped over.
fn read_skipping(log: &Log) -> (Vec<u64>, Vec<u64>) {
    let (mut read, mut skipped) = (Vec::new(), Vec::new());
    let mut next = log.first_offset();
    loop {
        match log.read(next, 7, 4096) {
            Ok(batch) if batch.is_empty() => return (read, skipped),
            Ok(batch) => {
                for r in &batch {
                    check_record(r, r.offset);
                    assert_eq!(r.offset, next, "records come in order, without gaps outside damage");
                    read.push(r.offset);
                    next += 1;
                }
            }
            Err(StorageError::Corruption { .. }) => match log.skip_damage(next).unwrap() {
                Some(range) => {
                    assert!(range.contains(next));
                    skipped.extend(next..range.next);
                    next = range.next;
                }
                None => panic!("a read at {next} failed, but skip_damage finds nothing there"),
            },
            Err(e) => panic!("unexpected error {e}"),
        }
    }
}

/// Reading forward twice loses exactly `damaged` and reports it once.
fn check_skips_exactly(log: &Log, damaged: u64) {
    for _ in 0..2 {
        let (read, skipped) = read_skipping(log);
        assert_eq!(skipped, vec![damaged]);
        assert_eq!(read, (0..RECORDS).filter(|&o| o != damaged).collect::<Vec<_>>());
        assert_eq!(log.damaged_records(), 1, "reported once");
    }
}

#[test]
fn payload_flip_in_a_sealed_segment_loses_only_that_record() {
    let dir = tempfile::tempdir().unwrap();
    let (damaged, pos) = damage(dir.path(), &small_config(), middle_with_payload(8), PAYLOAD);
    let log = open(dir.path(), small_config());
    assert!(log.segment_count() > 2, "the damage is in a sealed segment");
    // The read contract holds: a read starting at the damage fails, naming file and byte.
    match log.read(damaged, 10, 10_000) {
        Err(StorageError::Corruption { path, position, .. }) => {
            assert_eq!((path, position), (segment(dir.path(), 0), pos));
        }
        other => panic!("expected corruption, got {other:?}"),
    }
    assert_eq!(log.damaged_records(), 0, "nothing is reported before skip_damage locates it");
    check_skips_exactly(&log, damaged);
    let ranges = log.damaged_ranges();
    assert_eq!(ranges.len(), 1);
    assert_eq!((ranges[0].first, ranges[0].next, ranges[0].position), (damaged, damaged + 1, pos));
    assert_eq!(ranges[0].path, segment(dir.path(), 0));
    // Reads past the damage still work, and one at it still fails at once.
    check_record(&log.read_one(damaged + 1).unwrap(), damaged + 1);
    assert!(matches!(log.read(damaged, 1, 0), Err(StorageError::Corruption { .. })));
    assert_eq!(log.damaged_records(), 1);
}

#[test]
fn offset_field_flip_in_a_sealed_segment_loses_only_that_record() {
    let dir = tempfile::tempdir().unwrap();
    let (damaged, _) = damage(dir.path(), &small_config(), middle_with_payload(0), OFFSET_FIELD);
    let log = open(dir.path(), small_config());
    check_skips_exactly(&log, damaged);
}

#[test]
fn length_field_flip_is_searched_past_byte_by_byte() {
    let dir = tempfile::tempdir().unwrap();
    // Bit 4 of the length's low byte: the record now claims 16 bytes more or fewer.
    let (damaged, _) = damage(dir.path(), &small_config(), middle_with_payload(20), LENGTH_FIELD);
    let log = open(dir.path(), small_config());
    check_skips_exactly(&log, damaged);
}

#[test]
fn damage_in_the_last_record_of_a_sealed_segment_keeps_the_segment_readable() {
    let dir = tempfile::tempdir().unwrap();
    // Loading the segment checks its tail, finds the damage and rebuilds the index around it.
    let (damaged, _) = damage(dir.path(), &small_config(), |records| records.len() - 1, OFFSET_FIELD);
    let log = open(dir.path(), small_config());
    check_skips_exactly(&log, damaged);
    // Also without indexes: the rebuild steps over the damage.
    drop(log);
    for ext in ["idx", "tix"] {
        std::fs::remove_file(dir.path().join(format!("{:020}.{ext}", 0))).unwrap();
    }
    let log = open(dir.path(), small_config());
    check_skips_exactly(&log, damaged);
}

#[test]
fn a_read_past_damage_in_the_same_index_interval_finds_its_record() {
    let dir = tempfile::tempdir().unwrap();
    // Sparse-index entries about 4 KiB apart in 16 KiB segments: the damaged record, at
    // byte 5000 or so, shares its index entry (near byte 4096) with the records after it.
    let config = LogConfig { segment_bytes: 16 * 1024, index_interval_bytes: 4096, ..small_config() };
    let pick = |records: &[(u64, usize, usize)]| {
        records.iter().position(|&(_, pos, len)| pos >= 5000 && len >= PAYLOAD + 8).unwrap()
    };
    // (A damaged payload before the offset read would not matter: records before it are
    // stepped over by their headers. A damaged offset field does.)
    let (damaged, _) = damage(dir.path(), &config, pick, OFFSET_FIELD);
    let log = open(dir.path(), config);
    assert!(log.segment_count() > 1, "the damage is in a sealed segment");
    let after = damaged + 2;
    // The read steps from the index entry through the damage, so it fails.
    assert!(matches!(log.read(after, 1, 0), Err(StorageError::Corruption { .. })));
    // The record asked for is intact: skip_damage remembers the damage before it and says so.
    assert_eq!(log.skip_damage(after).unwrap(), None);
    assert_eq!(log.damaged_records(), 1);
    check_record(&log.read_one(after).unwrap(), after);
    check_record(&log.read_one(damaged + 1).unwrap(), damaged + 1);
    let range = log.skip_damage(damaged).unwrap().unwrap();
    assert_eq!(range.offsets(), damaged..damaged + 1);
    check_skips_exactly(&log, damaged);
}

#[test]
fn damage_in_the_middle_of_the_active_segment_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig { segment_bytes: 1 << 20, ..small_config() };
    let (damaged, _) = damage(dir.path(), &config, middle_with_payload(8), PAYLOAD);
    let log = open(dir.path(), config.clone());
    assert_eq!(log.segment_count(), 1);
    assert_eq!(log.next_offset(), RECORDS, "recovery scans only the tail: nothing truncated");
    check_skips_exactly(&log, damaged);
    // Appends go on, and the damage stays skipped.
    append_n(&log, RECORDS, 5);
    let (read, skipped) = read_skipping(&log);
    assert_eq!((read.len() as u64, skipped), (RECORDS + 4, vec![damaged]));
    assert_eq!(log.damaged_records(), 1);
    // A reopened log finds it again, when read, and reports it once more.
    drop(log);
    let log = open(dir.path(), config);
    assert_eq!(log.damaged_records(), 0);
    let (read, skipped) = read_skipping(&log);
    assert_eq!((read.len() as u64, skipped), (RECORDS + 4, vec![damaged]));
    assert_eq!(log.damaged_records(), 1);
}

#[test]
fn filtered_reads_step_past_damage_too() {
    let dir = tempfile::tempdir().unwrap();
    let (damaged, _) = damage(dir.path(), &small_config(), middle_with_payload(0), OFFSET_FIELD);
    let log = open(dir.path(), small_config());
    let even = |flags: u8, _: u32| flags.is_multiple_of(2);
    let (mut next, mut got) = (0, Vec::new());
    while next < log.next_offset() {
        match log.read_filtered(next, 10, 4096, 100, &even) {
            Ok(read) => {
                got.extend(read.records.iter().map(|r| r.offset));
                next = read.next_offset;
            }
            Err(StorageError::Corruption { .. }) => next = log.skip_damage(next).unwrap().unwrap().next,
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    let expected: Vec<u64> = (0..RECORDS).filter(|&o| o != damaged && (o % 7).is_multiple_of(2)).collect();
    assert_eq!(got, expected);
    assert_eq!(log.damaged_records(), 1);
}

#[test]
fn retention_forgets_the_damage_of_deleted_segments() {
    let dir = tempfile::tempdir().unwrap();
    let (damaged, _) = damage(dir.path(), &small_config(), middle_with_payload(0), PAYLOAD);
    let log = open(dir.path(), small_config());
    check_skips_exactly(&log, damaged);
    let in_first_segment = records_of(&segment(dir.path(), 0), 0).len() as u64;
    log.delete_below(in_first_segment).unwrap();
    assert!(log.first_offset() > damaged);
    assert!(log.damaged_ranges().is_empty());
    assert_eq!(log.damaged_records(), 1, "the counter only grows");
    assert_eq!(log.skip_damage(log.first_offset()).unwrap(), None);
}

#[test]
fn timestamp_lookups_step_past_damage() {
    let dir = tempfile::tempdir().unwrap();
    let (damaged, _) = damage(dir.path(), &small_config(), middle_with_payload(8), PAYLOAD);
    let log = open(dir.path(), small_config());
    assert_eq!(log.offset_for_timestamp(ts(damaged)).unwrap(), Some(damaged + 1));
    assert_eq!(log.offset_for_timestamp(ts(damaged + 5)).unwrap(), Some(damaged + 5));
    assert_eq!(log.damaged_records(), 1);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    /// Any one flipped bit anywhere in a sealed segment costs exactly the record holding it.
    #[test]
    fn any_flipped_bit_in_a_sealed_segment_costs_one_record(
        segment_pick in any::<prop::sample::Index>(),
        byte in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), small_config());
        append_n(&log, 0, RECORDS);
        let sealed_bases: Vec<u64> = {
            let mut bases: Vec<u64> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|e| e == "log"))
                .map(|p| p.file_stem().unwrap().to_str().unwrap().parse().unwrap())
                .collect();
            bases.sort();
            bases.pop();
            bases
        };
        log.close().unwrap();
        drop(log);
        let base = sealed_bases[segment_pick.index(sealed_bases.len())];
        let seg = segment(dir.path(), base);
        let records = records_of(&seg, base);
        let size = records.last().map(|&(_, pos, len)| pos + len).unwrap();
        let at = byte.index(size);
        let damaged = records.iter().find(|&&(_, pos, len)| (pos..pos + len).contains(&at)).unwrap().0;
        flip(&seg, at, 1 << bit);
        let log = open(dir.path(), small_config());
        check_skips_exactly(&log, damaged);
    }
}
