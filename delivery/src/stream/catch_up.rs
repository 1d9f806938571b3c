//! How a replica of a replicated stream gets the records a snapshot says it should hold and
//! it does not: from another replica, a chunk of about [`CATCH_UP_CHUNK_BYTES`] at a time,
//! appended to its log with their offsets and timestamps as they are. Records are the same
//! on every replica (only committed entries reach a log), so any replica that has them will
//! do; one that lacks them (it lags too) answers with none, and the next is asked.

use crate::quorum::{ClusterFuture, QuorumError};
use crate::raft_adapter::typ::SnapshotMeta;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use warren_storage::{Log, NewRecord, StorageError};

/// Payload bytes asked for per request, about (one record larger than that comes alone).
pub(super) const CATCH_UP_CHUNK_BYTES: u32 = 1 << 20;
/// Records one answer carries at most.
const CHUNK_RECORDS: usize = 4096;
/// Times every replica is asked in turn before the catch-up fails (and the group with it).
const CATCH_UP_ROUNDS: u32 = 10;
/// The pause between two rounds: the replicas asked may be restarting or catching up too.
const CATCH_UP_ROUND_PAUSE_MS: u64 = 1_000;

/// One record as it is in a replica's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamRecord {
    /// When it was appended (the proposing leader's clock), ms since the Unix epoch.
    pub timestamp_ms: i64,
    /// Its tag's hash, for filters.
    pub tag_hash: u32,
    /// Its flag bits.
    pub flags: u8,
    /// The encoded message.
    pub payload: Bytes,
}

/// Consecutive records of a replica's log.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamChunk {
    /// The offset of the first record.
    pub first: u64,
    /// The records, from `first` on.
    pub records: Vec<StreamRecord>,
}

/// What `log` gives a replica that asked for records from `from` on (from its oldest record,
/// if retention removed `from`).
pub(super) fn read_chunk(log: &Log, from: u64, max_bytes: u32) -> Result<StreamChunk, StorageError> {
    let first = from.max(log.first_offset());
    if first >= log.next_offset() {
        return Ok(StreamChunk { first, records: Vec::new() });
    }
    let records = log.read(first, CHUNK_RECORDS, max_bytes as usize)?;
    let records = records
        .into_iter()
        .map(|r| StreamRecord {
            timestamp_ms: r.timestamp_ms,
            tag_hash: r.tag_hash,
            flags: r.flags,
            payload: r.payload,
        })
        .collect();
    Ok(StreamChunk { first, records })
}

/// The replicas to ask, in order: the snapshot's voters but this node.
pub(super) fn sources(meta: &SnapshotMeta, me: u64) -> Vec<u64> {
    meta.last_membership.membership().voter_ids().filter(|id| *id != me).collect()
}

/// Fills `log` up to `next_offset` (exclusive), asking `sources` through `fetch`. A log that
/// ends before `first_offset`, the oldest record the snapshot's replica kept, starts again
/// there: what it held is older than anything the others keep.
pub(super) async fn fill<F>(
    log: &Log,
    first_offset: u64,
    next_offset: u64,
    sources: &[u64],
    fetch: F,
) -> Result<(), QuorumError>
where
    F: Fn(u64, u64, u32) -> ClusterFuture<Result<StreamChunk, String>>,
{
    if log.next_offset() < first_offset {
        log.restart_at(first_offset)?;
    }
    let (mut source, mut round) = (0, 1);
    while log.next_offset() < next_offset {
        let Some(&node) = sources.get(source) else {
            if round >= CATCH_UP_ROUNDS || sources.is_empty() {
                return Err(QuorumError::Storage(StorageError::Failed(format!(
                    "no replica could give records {}..{next_offset}",
                    log.next_offset()
                ))));
            }
            tokio::time::sleep(std::time::Duration::from_millis(CATCH_UP_ROUND_PAUSE_MS)).await;
            (source, round) = (0, round + 1);
            continue;
        };
        match fetch(node, log.next_offset(), CATCH_UP_CHUNK_BYTES).await {
            Ok(chunk) if !chunk.records.is_empty() => append_chunk(log, chunk, next_offset)?,
            Ok(_) => source += 1,
            Err(error) => {
                tracing::debug!(node, %error, "a replica could not give records; asking another");
                source += 1;
            }
        }
    }
    Ok(())
}

/// Appends the part of `chunk` that is past the log's end and below `next_offset`. A chunk
/// starting past the end (retention removed the records between on the replica asked)
/// restarts the log at its first record.
fn append_chunk(log: &Log, chunk: StreamChunk, next_offset: u64) -> Result<(), QuorumError> {
    if chunk.first >= next_offset {
        // Retention on the replica asked went past everything wanted: none of it is kept.
        log.restart_at(next_offset)?;
        return Ok(());
    }
    if chunk.first > log.next_offset() {
        log.restart_at(chunk.first)?;
    }
    let skip = usize::try_from(log.next_offset().saturating_sub(chunk.first)).unwrap_or(usize::MAX);
    let wanted = usize::try_from(next_offset.saturating_sub(log.next_offset())).unwrap_or(usize::MAX);
    let records: Vec<NewRecord<'_>> = chunk
        .records
        .iter()
        .skip(skip)
        .take(wanted)
        .map(|r| NewRecord { timestamp_ms: r.timestamp_ms, tag_hash: r.tag_hash, flags: r.flags, payload: &r.payload })
        .collect();
    log.append_batch(&records)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use warren_storage::LogConfig;

    fn log_with(dir: &std::path::Path, records: u64) -> Log {
        let log = Log::open(dir, LogConfig::default()).expect("log opens");
        for n in 0..records {
            let payload = n.to_be_bytes();
            log.append(NewRecord { timestamp_ms: n as i64, tag_hash: n as u32, flags: 1, payload: &payload })
                .expect("append");
        }
        log
    }

    #[tokio::test]
    async fn a_replica_fills_its_log_from_others_chunk_by_chunk_with_offsets_and_headers_kept() {
        let dirs = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir"));
        let source = Arc::new(log_with(dirs.0.path(), 10_000));
        let lagging = log_with(dirs.1.path(), 1_200);
        let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let fetch = |node: u64, from: u64, _max: u32| -> ClusterFuture<Result<StreamChunk, String>> {
            asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            // Node 2 lags as well and has nothing; node 3 answers in small chunks.
            let answer = match node {
                3 => read_chunk(&source, from, 256).map_err(|e| e.to_string()),
                _ => Ok(StreamChunk { first: from, records: Vec::new() }),
            };
            Box::pin(async move { answer })
        };
        fill(&lagging, 0, 9_000, &[2, 3], fetch).await.expect("filled");
        assert_eq!(lagging.next_offset(), 9_000, "filled up to the snapshot's next offset, not past it");
        assert!(asked.load(std::sync::atomic::Ordering::Relaxed) > 10, "in many chunks");
        let (mine, theirs) = (lagging.read(0, 9_000, usize::MAX).expect("read"), source.read(0, 9_000, usize::MAX));
        let theirs = theirs.expect("read");
        assert_eq!(mine.len(), 9_000);
        for (a, b) in mine.iter().zip(&theirs) {
            assert_eq!(
                (a.offset, a.timestamp_ms, a.tag_hash, a.flags, &a.payload),
                (b.offset, b.timestamp_ms, b.tag_hash, b.flags, &b.payload)
            );
        }
    }

    #[tokio::test]
    async fn a_log_behind_the_oldest_kept_record_starts_again_there() {
        let dirs = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir"));
        let source = Arc::new(log_with(dirs.0.path(), 5_000));
        let lagging = log_with(dirs.1.path(), 10);
        let fetch = |_node: u64, from: u64, max: u32| -> ClusterFuture<Result<StreamChunk, String>> {
            // The source kept 3,000.. only (retention).
            let answer = read_chunk(&source, from.max(3_000), max).map_err(|e| e.to_string());
            Box::pin(async move { answer })
        };
        fill(&lagging, 3_000, 5_000, &[2], fetch).await.expect("filled");
        assert_eq!((lagging.first_offset(), lagging.next_offset()), (3_000, 5_000));
        let record = lagging.read_one(4_321).expect("read");
        assert_eq!(&record.payload[..], &4_321u64.to_be_bytes());
    }

    #[tokio::test(start_paused = true)]
    async fn no_replica_with_the_records_is_an_error_not_a_hole() {
        let dir = tempfile::tempdir().expect("dir");
        let lagging = log_with(dir.path(), 10);
        let asked = std::sync::atomic::AtomicU32::new(0);
        let fetch = |_node: u64, _from: u64, _max: u32| -> ClusterFuture<Result<StreamChunk, String>> {
            asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Box::pin(async { Err("down".to_string()) })
        };
        assert!(fill(&lagging, 0, 20, &[2, 3], fetch).await.is_err());
        assert_eq!(lagging.next_offset(), 10);
        assert_eq!(asked.load(std::sync::atomic::Ordering::Relaxed), 2 * CATCH_UP_ROUNDS, "each, every round");
    }

    #[tokio::test(start_paused = true)]
    async fn a_replica_that_fails_at_first_is_asked_again_in_the_next_round() {
        let dirs = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir"));
        let source = Arc::new(log_with(dirs.0.path(), 100));
        let lagging = log_with(dirs.1.path(), 0);
        let asked = std::sync::atomic::AtomicU32::new(0);
        let fetch = |_node: u64, from: u64, max: u32| -> ClusterFuture<Result<StreamChunk, String>> {
            // The only other replica restarts: its first two answers are errors.
            let answer = match asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed) {
                0 | 1 => Err("restarting".to_string()),
                _ => read_chunk(&source, from, max).map_err(|e| e.to_string()),
            };
            Box::pin(async move { answer })
        };
        fill(&lagging, 0, 100, &[2], fetch).await.expect("filled in the third round");
        assert_eq!(lagging.next_offset(), 100);
    }

    #[tokio::test]
    async fn retention_past_every_wanted_record_starts_the_log_at_the_snapshots_end() {
        let dirs = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir"));
        let source = Arc::new(log_with(dirs.0.path(), 500));
        let lagging = log_with(dirs.1.path(), 10);
        let fetch = |_node: u64, from: u64, max: u32| -> ClusterFuture<Result<StreamChunk, String>> {
            // The source kept 400.. only, past the snapshot's next offset (300).
            let answer = read_chunk(&source, from.max(400), max).map_err(|e| e.to_string());
            Box::pin(async move { answer })
        };
        fill(&lagging, 200, 300, &[2], fetch).await.expect("filled");
        assert_eq!((lagging.first_offset(), lagging.next_offset()), (300, 300), "nothing kept, offsets go on");
    }
}
