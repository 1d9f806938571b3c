//! `RaftLog` beyond openraft's suite: what survives a crash, purging against segments,
//! continuing after a full purge, when appends are reported durable, and how entries
//! (message bodies) are stored and read back by index.

mod raft_common;

use std::sync::mpsc;
use std::time::Duration;

use bytes::Bytes;
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::{BasicNode, EntryPayload, LogId, Membership, RaftLogReader, Vote};
use raft_common::{blank, body, copy_dir, log_id, membership, normal, open, segment_bases, small_config, Log, Request};
use serde::Deserialize;
use warren_storage::raft::{decode_payload, LIMITED_READ_MAX_BYTES, META_FILE_NAME};
use warren_storage::{FlushPolicy, Flusher, LogConfig, RaftLogError, StorageError};

/// Appends normal entries `from..to` in `term`, one batch, waiting for durability.
async fn append_range(log: &mut Log, term: u64, from: u64, to: u64) {
    log.blocking_append((from..to).map(|i| normal(term, i))).await.unwrap();
}

/// The indexes of every entry readers see.
async fn indexes(log: &mut Log) -> Vec<u64> {
    log.try_get_log_entries(0..).await.unwrap().iter().map(|e| e.log_id.index).collect()
}

/// Checks that entries `from..to` read back whole, as appended in `term`.
async fn check_entries(log: &mut Log, term: u64, from: u64, to: u64) {
    let entries = log.try_get_log_entries(from..to).await.unwrap();
    assert_eq!(entries.len() as u64, to - from);
    for (entry, i) in entries.iter().zip(from..) {
        assert_eq!(entry.log_id, log_id(term, i));
        match &entry.payload {
            EntryPayload::Normal(Request::Set { key, body: b }) => {
                assert_eq!((key.as_str(), b), (format!("k{i}").as_str(), &body(i)));
            }
            other => panic!("entry {i}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn entries_of_every_kind_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), small_config(FlushPolicy::Batch));
    let state = log.get_log_state().await.unwrap();
    assert_eq!((state.last_purged_log_id, state.last_log_id), (None, None));
    log.blocking_append([blank(1, 0), membership(1, 1)]).await.unwrap();
    append_range(&mut log, 1, 2, 40).await;
    let state = log.get_log_state().await.unwrap();
    assert_eq!((state.last_purged_log_id, state.last_log_id), (None, Some(log_id(1, 39))));
    let all = log.try_get_log_entries(..).await.unwrap();
    assert_eq!(all.len(), 40);
    assert!(matches!(all[0].payload, EntryPayload::Blank));
    let EntryPayload::Membership(m) = &all[1].payload else { panic!("{:?}", all[1]) };
    assert_eq!(m.get_node(&2), Some(&BasicNode::new("127.0.0.1:2")));
    check_entries(&mut log, 1, 2, 40).await;
    assert!(log.segment_count() > 2, "small segments: the entries span several");
    // Ranges: empty, inclusive, past the end.
    assert!(log.try_get_log_entries(5..5).await.unwrap().is_empty());
    assert_eq!(log.try_get_log_entries(5..=7).await.unwrap().len(), 3);
    assert_eq!(log.try_get_log_entries(38..100).await.unwrap().len(), 2);
    assert_eq!(log.entry(39).unwrap().map(|e| e.log_id), Some(log_id(1, 39)));
    assert!(log.entry(40).unwrap().is_none());
}

#[tokio::test]
async fn limited_reads_stop_near_the_byte_limit() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), LogConfig { flush_policy: FlushPolicy::Never, ..LogConfig::default() });
    let big = Bytes::from(vec![7u8; 1024 * 1024]);
    let entries = (0..6).map(|i| openraft::Entry {
        log_id: log_id(1, i),
        payload: EntryPayload::Normal(Request::Set { key: format!("k{i}"), body: big.clone() }),
    });
    log.blocking_append(entries).await.unwrap();
    let limited = log.limited_get_log_entries(0, 6).await.unwrap();
    assert!(!limited.is_empty() && limited.len() < 6, "{} entries", limited.len());
    assert!((limited.len() - 1) * big.len() < LIMITED_READ_MAX_BYTES);
    assert_eq!(log.limited_get_log_entries(5, 6).await.unwrap().len(), 1, "always one entry");
    assert_eq!(log.try_get_log_entries(0..6).await.unwrap().len(), 6, "unlimited reads return all");
}

#[tokio::test]
async fn crash_image_reopens_with_the_same_state() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), small_config(FlushPolicy::Batch));
    let vote = Vote::new_committed(3, 2);
    log.save_vote(&vote).await.unwrap();
    append_range(&mut log, 3, 0, 60).await;
    log.purge(log_id(3, 9)).await.unwrap();
    // Past the save interval, `save_committed` writes the file itself.
    tokio::time::sleep(Duration::from_millis(warren_storage::raft::COMMITTED_SAVE_INTERVAL_MS + 50)).await;
    log.save_committed(Some(log_id(3, 50))).await.unwrap();

    // The files as a crash would leave them, with `log` still open.
    let image = tempfile::tempdir().unwrap();
    copy_dir(dir.path(), image.path());
    let mut reopened = open(image.path(), small_config(FlushPolicy::Batch));
    assert_eq!(reopened.read_vote().await.unwrap(), Some(vote));
    assert_eq!(reopened.read_committed().await.unwrap(), Some(log_id(3, 50)));
    let state = reopened.get_log_state().await.unwrap();
    assert_eq!((state.last_purged_log_id, state.last_log_id), (Some(log_id(3, 9)), Some(log_id(3, 59))));
    assert_eq!(indexes(&mut reopened).await, (10..60).collect::<Vec<_>>());
    check_entries(&mut reopened, 3, 10, 60).await;
    assert!(reopened.entry(9).unwrap().is_none(), "purged entries stay gone");
    assert_eq!(reopened.durable_offset(), 60, "what recovery found is fsynced before it is vouched for");
    // It takes appends where it stopped.
    append_range(&mut reopened, 4, 60, 65).await;
    check_entries(&mut reopened, 4, 60, 65).await;
}

#[tokio::test]
async fn a_torn_tail_is_cut_and_the_log_continues() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), small_config(FlushPolicy::Batch));
    append_range(&mut log, 1, 0, 30).await;
    let image = tempfile::tempdir().unwrap();
    copy_dir(dir.path(), image.path());
    // The last entry's record loses its final bytes, as if the machine died mid-write.
    let last = *segment_bases(image.path()).last().unwrap();
    let path = image.path().join(format!("{last:020}.log"));
    let len = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(len - 3).unwrap();

    let mut reopened = open(image.path(), small_config(FlushPolicy::Batch));
    let state = reopened.get_log_state().await.unwrap();
    assert_eq!(state.last_log_id, Some(log_id(1, 28)), "the torn entry is gone");
    check_entries(&mut reopened, 1, 0, 29).await;
    append_range(&mut reopened, 2, 29, 35).await;
    check_entries(&mut reopened, 2, 29, 35).await;
    drop(reopened);
    let mut again = open(image.path(), small_config(FlushPolicy::Batch));
    check_entries(&mut again, 1, 0, 29).await;
    check_entries(&mut again, 2, 29, 35).await;
}

#[tokio::test]
async fn a_committed_log_id_not_yet_saved_is_saved_on_drop_and_close() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), small_config(FlushPolicy::Batch));
    append_range(&mut log, 1, 0, 5).await;
    // Right after opening, within the save interval: only remembered.
    log.save_committed(Some(log_id(1, 3))).await.unwrap();
    assert_eq!(log.read_committed().await.unwrap(), Some(log_id(1, 3)));
    drop(log);
    let mut log = open(dir.path(), small_config(FlushPolicy::Batch));
    assert_eq!(log.read_committed().await.unwrap(), Some(log_id(1, 3)));
    log.save_committed(Some(log_id(1, 4))).await.unwrap();
    log.close().unwrap();
    assert!(log.blocking_append([normal(1, 5)]).await.is_err(), "closed");
    drop(log);
    let mut log = open(dir.path(), small_config(FlushPolicy::Batch));
    assert_eq!(log.read_committed().await.unwrap(), Some(log_id(1, 4)));
}

#[tokio::test]
async fn purge_deletes_only_segments_below_the_purge_point() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), small_config(FlushPolicy::Batch));
    append_range(&mut log, 1, 0, 200).await;
    let before = segment_bases(dir.path());
    assert!(before.len() > 10, "{} segments", before.len());
    for purge_at in [0, 5, 17, 41, 42, 90, 150, 198] {
        log.purge(log_id(1, purge_at)).await.unwrap();
        let bases = segment_bases(dir.path());
        // The segment holding the first live entry is kept, and every later one.
        let holding = *before.iter().rfind(|&&b| b <= purge_at + 1).unwrap();
        let kept: Vec<u64> = before.iter().copied().filter(|&b| b >= holding).collect();
        assert_eq!(bases, kept, "purge at {purge_at}");
        assert_eq!(log.first_stored_index(), holding);
        let state = log.get_log_state().await.unwrap();
        assert_eq!((state.last_purged_log_id, state.last_log_id), (Some(log_id(1, purge_at)), Some(log_id(1, 199))));
        assert_eq!(indexes(&mut log).await, (purge_at + 1..200).collect::<Vec<_>>(), "purge at {purge_at}");
        assert!(log.try_get_log_entries(0..=purge_at).await.unwrap().is_empty());
        assert!(log.entry(purge_at).unwrap().is_none() && log.entry_payload(purge_at).unwrap().is_none());
        check_entries(&mut log, 1, purge_at + 1, 200).await;
    }
    // A purge at or below the last one changes nothing.
    log.purge(log_id(1, 100)).await.unwrap();
    assert_eq!(log.get_log_state().await.unwrap().last_purged_log_id, Some(log_id(1, 198)));
    drop(log);
    let mut log = open(dir.path(), small_config(FlushPolicy::Batch));
    assert_eq!(indexes(&mut log).await, vec![199]);
}

#[tokio::test]
async fn a_fully_purged_log_continues_past_the_purge_point() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), small_config(FlushPolicy::Batch));
    append_range(&mut log, 1, 0, 30).await;
    // A follower installed a snapshot that ends at 100, past its last entry.
    log.purge(log_id(2, 100)).await.unwrap();
    let state = log.get_log_state().await.unwrap();
    assert_eq!((state.last_purged_log_id, state.last_log_id), (Some(log_id(2, 100)), Some(log_id(2, 100))));
    assert!(indexes(&mut log).await.is_empty());
    assert_eq!(segment_bases(dir.path()), vec![101], "old segments are gone");
    assert_eq!(log.next_index(), 101);
    append_range(&mut log, 2, 101, 140).await;
    check_entries(&mut log, 2, 101, 140).await;
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_log_id, Some(log_id(2, 139)));
    drop(log);
    let mut log = open(dir.path(), small_config(FlushPolicy::Batch));
    let state = log.get_log_state().await.unwrap();
    assert_eq!((state.last_purged_log_id, state.last_log_id), (Some(log_id(2, 100)), Some(log_id(2, 139))));
    check_entries(&mut log, 2, 101, 140).await;
    // Purging exactly to the last entry, then beyond it again.
    log.purge(log_id(2, 139)).await.unwrap();
    assert!(indexes(&mut log).await.is_empty());
    log.purge(log_id(3, 500)).await.unwrap();
    append_range(&mut log, 3, 501, 503).await;
    assert_eq!(indexes(&mut log).await, vec![501, 502]);
}

/// A crash after the purge point was saved but before segments were deleted (or the log
/// restarted): reopening finishes the purge.
#[tokio::test]
async fn an_interrupted_purge_is_finished_on_reopen() {
    for (purge_at, expect) in [(57, (58..80).collect::<Vec<u64>>()), (200, vec![])] {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), small_config(FlushPolicy::Batch));
        append_range(&mut log, 1, 0, 80).await;
        let before_purge = tempfile::tempdir().unwrap();
        copy_dir(dir.path(), before_purge.path());
        log.purge(log_id(1, purge_at)).await.unwrap();
        // The saved purge point with every segment still there.
        std::fs::copy(dir.path().join(META_FILE_NAME), before_purge.path().join(META_FILE_NAME)).unwrap();
        let mut reopened = open(before_purge.path(), small_config(FlushPolicy::Batch));
        assert_eq!(indexes(&mut reopened).await, expect, "purge at {purge_at}");
        assert_eq!(segment_bases(before_purge.path()), segment_bases(dir.path()), "purge at {purge_at}");
        let state = reopened.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id, Some(log_id(1, purge_at)));
        let next = purge_at.max(79) + 1;
        append_range(&mut reopened, 2, next, next + 3).await;
        check_entries(&mut reopened, 2, next, next + 3).await;
    }
}

#[tokio::test]
async fn truncation_removes_the_tail_durably() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), small_config(FlushPolicy::Batch));
    append_range(&mut log, 1, 0, 50).await;
    log.truncate(log_id(1, 31)).await.unwrap();
    assert_eq!(log.get_log_state().await.unwrap().last_log_id, Some(log_id(1, 30)));
    assert_eq!(log.durable_offset(), 31);
    append_range(&mut log, 2, 31, 40).await;
    log.truncate(log_id(2, 60)).await.unwrap(); // past the end: nothing to do
    drop(log);
    let mut log = open(dir.path(), small_config(FlushPolicy::Batch));
    check_entries(&mut log, 1, 0, 31).await;
    check_entries(&mut log, 2, 31, 40).await;
    // Everything, then a new start.
    log.truncate(log_id(1, 0)).await.unwrap();
    assert_eq!(log.get_log_state().await.unwrap().last_log_id, None);
    append_range(&mut log, 3, 0, 2).await;
    check_entries(&mut log, 3, 0, 2).await;
    // Not below the purge point.
    log.purge(log_id(3, 0)).await.unwrap();
    assert!(log.truncate(log_id(3, 0)).await.is_err());
}

#[tokio::test]
async fn appends_must_continue_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), small_config(FlushPolicy::Batch));
    append_range(&mut log, 1, 0, 3).await;
    let hole = log.blocking_append([normal(1, 4)]).await.unwrap_err();
    assert!(hole.to_string().contains("does not continue the log"), "{hole}");
    let gap = log.append_then([normal(1, 3), normal(1, 5)], |_| {}).unwrap_err();
    assert!(matches!(gap, RaftLogError::NotContiguous { index: 5, expected: 4 }), "{gap}");
    // An empty log may start anywhere (openraft's suite appends a first entry at 1).
    let other = tempfile::tempdir().unwrap();
    let mut fresh = open(other.path(), small_config(FlushPolicy::Batch));
    append_range(&mut fresh, 1, 7, 9).await;
    assert_eq!(indexes(&mut fresh).await, vec![7, 8]);
    drop(fresh);
    let mut fresh = open(other.path(), small_config(FlushPolicy::Batch));
    assert_eq!(indexes(&mut fresh).await, vec![7, 8]);
}

#[test]
fn retention_is_refused_and_a_damaged_state_file_stops_the_open() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig { retention_bytes: Some(1 << 20), ..LogConfig::default() };
    let refused = Log::open(dir.path(), config).err().unwrap();
    assert!(matches!(refused, RaftLogError::Storage(StorageError::BadConfig(_))), "{refused}");

    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let mut log = open(dir.path(), small_config(FlushPolicy::Batch));
    runtime.block_on(log.save_vote(&Vote::new(5, 1))).unwrap();
    drop(log);
    let path = dir.path().join(META_FILE_NAME);
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x10;
    std::fs::write(&path, bytes).unwrap();
    let damaged = Log::open_with_flusher(dir.path(), small_config(FlushPolicy::Batch), Flusher::new(1).unwrap());
    assert!(matches!(damaged, Err(RaftLogError::BadMeta { .. })), "a damaged vote is never taken as no vote");
}

/// Under `batch`, an append's callback runs only after the group commit that covers it:
/// the durable watermark already includes its entries when it is called.
#[tokio::test]
async fn batch_appends_are_reported_after_their_group_commit() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig { flush_interval: Duration::from_millis(400), ..small_config(FlushPolicy::Batch) };
    let log = open(dir.path(), config);
    let durable = log.subscribe_durable();
    let (tx, rx) = mpsc::channel();
    let append = |from: u64, to: u64| {
        let (tx, durable) = (tx.clone(), durable.clone());
        log.append_then((from..to).map(|i| normal(1, i)), move |result| {
            tx.send((to, result.is_ok(), *durable.borrow())).unwrap();
        })
        .unwrap();
    };
    append(0, 10);
    let (end, ok, watermark) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(ok && end == 10 && watermark >= 10, "called at {watermark} for entries below {end}");
    // The next group commit is due 400 ms after that one began.
    append(10, 20);
    append(20, 25);
    assert!(rx.recv_timeout(Duration::from_millis(100)).is_err(), "called before its group commit");
    assert!(log.durable_offset() < 20);
    for expected_end in [20, 25] {
        let (end, ok, watermark) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(ok && end == expected_end && watermark >= end, "called at {watermark} for entries below {end}");
    }
}

#[tokio::test]
async fn always_reports_before_the_append_returns_and_never_at_once() {
    for policy in [FlushPolicy::Always, FlushPolicy::Never] {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), small_config(policy));
        let durable = log.subscribe_durable();
        let (tx, rx) = mpsc::channel();
        log.append_then((0..10).map(|i| normal(1, i)), move |result| {
            tx.send((result.is_ok(), *durable.borrow())).unwrap();
        })
        .unwrap();
        let (ok, watermark) = rx.try_recv().expect("called before append_then returned");
        assert!(ok, "{policy:?}");
        if policy == FlushPolicy::Always {
            assert_eq!(watermark, 10, "fsynced first");
        }
    }
}

/// Through openraft's own callback (`LogFlushed`): `blocking_append` returns once the
/// callback ran, and by then the entries are under the durable watermark.
#[tokio::test]
async fn openraft_is_told_only_of_durable_entries() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig { flush_interval: Duration::from_millis(50), ..small_config(FlushPolicy::Batch) };
    let mut log = open(dir.path(), config);
    for batch in 0..20u64 {
        let (from, to) = (batch * 7, batch * 7 + 7);
        log.blocking_append((from..to).map(|i| normal(1, i))).await.unwrap();
        assert!(log.durable_offset() >= to, "batch {batch}: durable {} < {to}", log.durable_offset());
    }
}

/// A callback still waiting for its group commit when the log goes away is told so;
/// it is never left hanging, nor told the entries are durable.
#[tokio::test]
async fn pending_callbacks_get_an_error_when_the_log_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig { flush_interval: Duration::from_secs(30), ..small_config(FlushPolicy::Batch) };
    let log = open(dir.path(), config);
    let (tx, rx) = mpsc::channel();
    // Opening flushed, so this group commit is due 30 s from then.
    log.append_then([normal(1, 0)], move |r| tx.send(r).unwrap()).unwrap();
    assert!(rx.try_recv().is_err());
    drop(log);
    let result = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(matches!(result, Err(StorageError::Closed)), "{result:?}");
    // After `close`, appends are refused.
    let log = open(dir.path(), small_config(FlushPolicy::Batch));
    log.close().unwrap();
    assert!(log.append_then([normal(1, 1)], |_| {}).is_err());
}

/// A view of an entry that borrows the body from the stored payload: the same serde
/// shape as `Entry<TypeConfig>`.
#[derive(Deserialize)]
struct EntryView<'a> {
    log_id: LogId<u64>,
    #[serde(borrow)]
    payload: PayloadView<'a>,
}

#[derive(Deserialize)]
enum PayloadView<'a> {
    Blank,
    Normal(#[serde(borrow)] RequestView<'a>),
    Membership(Membership<u64, BasicNode>),
}

#[derive(Deserialize)]
enum RequestView<'a> {
    Set { key: &'a str, body: &'a [u8] },
}

#[tokio::test]
async fn bodies_are_stored_verbatim_and_read_by_index_without_a_copy() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), LogConfig::default());
    let body: Bytes = (0..5000u32).map(|i| (i * 31 % 251) as u8).collect::<Vec<u8>>().into();
    let entry = openraft::Entry {
        log_id: log_id(1, 0),
        payload: EntryPayload::Normal(Request::Set { key: "q".into(), body: body.clone() }),
    };
    log.blocking_append([entry, blank(1, 1), membership(1, 2)]).await.unwrap();

    let payload = log.entry_payload(0).unwrap().unwrap();
    let at = payload.windows(body.len()).position(|w| w == &body[..]).expect("the body is stored as is");
    assert!(payload.len() - body.len() < 16, "{} bytes of framing", payload.len() - body.len());

    let view: EntryView<'_> = decode_payload(0, &payload).unwrap();
    assert_eq!(view.log_id, log_id(1, 0));
    let PayloadView::Normal(RequestView::Set { key, body: borrowed }) = view.payload else { panic!("not normal") };
    assert_eq!(key, "q");
    let delivered = payload.slice_ref(borrowed);
    assert_eq!(delivered, body);
    assert_eq!(delivered.as_ptr(), payload[at..].as_ptr(), "the body is a slice of the read buffer");
    let blank_payload = log.entry_payload(1).unwrap().unwrap();
    let blank_view: EntryView<'_> = decode_payload(1, &blank_payload).unwrap();
    assert!(matches!(blank_view.payload, PayloadView::Blank));
    let membership_payload = log.entry_payload(2).unwrap().unwrap();
    let membership_view: EntryView<'_> = decode_payload(2, &membership_payload).unwrap();
    assert!(matches!(membership_view.payload, PayloadView::Membership(m) if m.get_node(&1).is_some()));
    assert!(log.entry_payload(3).unwrap().is_none());
}

#[tokio::test]
async fn a_committed_log_id_that_cannot_be_saved_keeps_the_group_going_and_a_vote_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), small_config(FlushPolicy::Batch));
    append_range(&mut log, 1, 0, 5).await;
    // The meta file cannot be replaced (as on a full disk): its temporary file cannot be made.
    let blocker = dir.path().join(format!("{META_FILE_NAME}.tmp"));
    std::fs::create_dir(&blocker).unwrap();
    let past_interval = Duration::from_millis(warren_storage::raft::COMMITTED_SAVE_INTERVAL_MS + 50);
    tokio::time::sleep(past_interval).await;
    log.save_committed(Some(log_id(1, 3))).await.expect("a committed log id that cannot be saved is no error");
    assert_eq!(log.read_committed().await.unwrap(), Some(log_id(1, 3)), "it is remembered");
    assert!(log.save_vote(&Vote::new_committed(2, 1)).await.is_err(), "a vote that cannot be saved is one");

    std::fs::remove_dir(&blocker).unwrap();
    tokio::time::sleep(past_interval).await;
    log.save_committed(Some(log_id(1, 4))).await.unwrap();
    drop(log);
    let mut log = open(dir.path(), small_config(FlushPolicy::Batch));
    assert_eq!(log.read_committed().await.unwrap(), Some(log_id(1, 4)), "saved once the disk takes it");
}
