//! Storage benchmarks: append throughput (100 B and 4 KiB records, fsync `never` and
//! `batch`), sequential read, random offset lookup, and opening a 1 GB log.
//! Measurement times are short so `cargo bench -p warren-storage` takes minutes.

use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use warren_storage::{FlushPolicy, Flusher, Log, LogConfig, NewRecord};

const MEASURE: Duration = Duration::from_secs(3);
const WARM_UP: Duration = Duration::from_millis(500);
/// Keep disk use bounded while append benchmarks run for a while.
const BENCH_RETENTION_BYTES: u64 = 2 << 30;

fn config(policy: FlushPolicy) -> LogConfig {
    LogConfig { flush_policy: policy, retention_bytes: Some(BENCH_RETENTION_BYTES), ..LogConfig::default() }
}

fn open(dir: &Path, policy: FlushPolicy) -> Log {
    Log::open_with_flusher(dir, config(policy), Flusher::new(1).unwrap()).unwrap()
}

/// Appends `iters` records of `payload`; under `batch` the time includes the final
/// fsync, so the figure is durable throughput.
fn timed_appends(log: &Log, payload: &[u8], iters: u64) -> Duration {
    let start = Instant::now();
    for i in 0..iters {
        log.append(NewRecord::new(i as i64, payload)).unwrap();
    }
    log.flush().unwrap();
    start.elapsed()
}

fn appends(c: &mut Criterion) {
    let mut group = c.benchmark_group("append");
    group.sample_size(10).measurement_time(MEASURE).warm_up_time(WARM_UP);
    for (name, size) in [("100B", 100usize), ("4KiB", 4096)] {
        for policy in [FlushPolicy::Never, FlushPolicy::Batch] {
            let dir = tempfile::tempdir_in(bench_dir()).unwrap();
            let log = open(dir.path(), policy);
            let payload = vec![0xa5u8; size];
            group.throughput(Throughput::Bytes((size + warren_storage::HEADER_BYTES) as u64));
            group.bench_function(format!("{name}/{policy:?}"), |b| {
                b.iter_custom(|iters| timed_appends(&log, &payload, iters))
            });
        }
    }
    group.finish();
}

/// Where benchmark logs live: the target directory, on the same disk as `dd` measured.
fn bench_dir() -> std::path::PathBuf {
    let dir = std::env::var_os("WARREN_BENCH_DIR").map(Into::into).unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A log of `bytes` of 4 KiB records.
fn filled_log(dir: &Path, bytes: u64) -> u64 {
    let log = open(dir, FlushPolicy::Never);
    let payload = vec![7u8; 4096];
    let n = bytes / (4096 + warren_storage::HEADER_BYTES as u64);
    let batch: Vec<NewRecord> = (0..64).map(|i| NewRecord::new(i, &payload)).collect();
    for _ in 0..n / 64 {
        log.append_batch(&batch).unwrap();
    }
    log.close().unwrap();
    n / 64 * 64
}

fn reads(c: &mut Criterion) {
    let dir = tempfile::tempdir_in(bench_dir()).unwrap();
    let records = filled_log(dir.path(), 256 << 20);
    let log = open(dir.path(), FlushPolicy::Never);
    let mut group = c.benchmark_group("read");
    group.sample_size(10).measurement_time(MEASURE).warm_up_time(WARM_UP);
    group.throughput(Throughput::Bytes(records * 4096));
    group.bench_function("sequential_256MiB", |b| {
        b.iter(|| {
            let mut next = 0;
            while next < records {
                let batch = log.read(next, 256, 1 << 20).unwrap();
                next = batch.last().map_or(records, |r| r.offset + 1);
            }
        })
    });
    group.throughput(Throughput::Elements(1));
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    group.bench_function("random_lookup", |b| {
        b.iter(|| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            log.read_one(x % records).unwrap()
        })
    });
    group.finish();
}

fn open_time(c: &mut Criterion) {
    let dir = tempfile::tempdir_in(bench_dir()).unwrap();
    filled_log(dir.path(), 1 << 30);
    let mut group = c.benchmark_group("open");
    group.sample_size(10).measurement_time(MEASURE).warm_up_time(WARM_UP);
    group.bench_function("1GB_log", |b| {
        b.iter_batched(|| (), |()| open(dir.path(), FlushPolicy::Batch), BatchSize::PerIteration)
    });
    group.finish();
}

criterion_group!(benches, appends, reads, open_time);
criterion_main!(benches);
