//! Settlement state of a durable queue's `LogStore` across restarts, against a model.
//!
//! The model is the set of appended offsets minus the removed (settled) ones, plus the
//! highest offset ever delivered. Operations follow what a queue does with its store: append
//! messages, deliver the next ready one (`read`, `delivered`, `sync`), ack some delivered ones
//! (`remove`), requeue the delivered ones (the store does not hear of it), and restart (drop
//! the store, or `close` it, and open it again on the same directory). After every operation
//! the store's backlog must match the model; after a restart, also the delivered mark and
//! every remaining body.
//!
//! A second test drives the ack log past its compaction threshold (8 MiB) and restarts.

use bytes::Bytes;
use proptest::prelude::*;
use std::collections::{BTreeSet, VecDeque};
use std::path::Path;
use std::sync::Arc;
use warren_delivery::message_store::{LogStore, LogStoreConfig, MessageStore};
use warren_delivery::{Message, Properties};
use warren_storage::FlushPolicy;

/// Small segments, so that rolling and the deletion of settled segments happen often.
fn config(flush_policy: FlushPolicy) -> LogStoreConfig {
    LogStoreConfig { segment_bytes: 1024, flush_policy, ..LogStoreConfig::default() }
}

/// A body that says which offset it was appended at, of varying length.
fn body(offset: u64) -> Bytes {
    let mut body = format!("m{offset}-").into_bytes();
    body.resize(body.len() + (offset as usize * 37) % 300, b'a' + (offset % 26) as u8);
    Bytes::from(body)
}

fn message(offset: u64) -> Arc<Message> {
    Arc::new(Message {
        exchange: "".into(),
        routing_key: "q".into(),
        properties: Properties::empty(),
        body: body(offset),
    })
}

fn open(dir: &Path, config: &LogStoreConfig) -> LogStore {
    match LogStore::open(dir, config) {
        Ok(store) => store,
        Err(error) => panic!("open {}: {error}", dir.display()),
    }
}

#[derive(Debug, Clone)]
enum Op {
    /// Append this many messages.
    Append(usize),
    /// Deliver up to this many ready messages, in queue order.
    Deliver(usize),
    /// Ack the outstanding deliveries whose index (mod 64) has its bit set.
    Ack(u64),
    /// Every outstanding delivery goes back to the ready list.
    Requeue,
    /// Drop the store (after `close` if true) and open it again.
    Restart { close: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1usize..=20).prop_map(Op::Append),
        3 => (1usize..=10).prop_map(Op::Deliver),
        3 => any::<u64>().prop_map(Op::Ack),
        1 => Just(Op::Requeue),
        2 => any::<bool>().prop_map(|close| Op::Restart { close }),
    ]
}

/// What the store must hold, and the queue around it.
#[derive(Debug, Default)]
struct Model {
    /// Appended and not removed.
    remaining: BTreeSet<u64>,
    next_offset: u64,
    /// The highest offset ever delivered (each delivery is synced at once).
    delivered_up_to: Option<u64>,
    /// Every offset ever delivered.
    ever_delivered: BTreeSet<u64>,
    /// The queue's ready list (since the last restart).
    ready: VecDeque<u64>,
    /// Delivered, not yet acked (since the last restart).
    outstanding: Vec<u64>,
}

impl Model {
    fn restart(&mut self) {
        self.ready = self.remaining.iter().copied().collect();
        self.outstanding.clear();
    }

    fn requeue(&mut self) {
        let mut ready: BTreeSet<u64> = self.ready.drain(..).collect();
        ready.extend(self.outstanding.drain(..));
        self.ready = ready.into_iter().collect();
    }
}

fn check_backlog(store: &LogStore, model: &Model, after: &str) -> Result<(), TestCaseError> {
    let unsettled: Vec<u64> = store.unsettled().collect();
    let expected: Vec<u64> = model.remaining.iter().copied().collect();
    prop_assert_eq!(unsettled, expected, "unsettled offsets after {}", after);
    prop_assert_eq!(store.next_offset(), model.next_offset, "next offset after {}", after);
    Ok(())
}

fn check_after_restart(store: &mut LogStore, model: &Model) -> Result<(), TestCaseError> {
    check_backlog(store, model, "restart")?;
    let mark = store.delivered_up_to();
    // Each delivery was synced, so the mark is exactly the highest offset delivered: nothing
    // delivered comes back unflagged, and nothing above it was delivered.
    prop_assert_eq!(mark, model.delivered_up_to, "delivered_up_to after restart");
    for &offset in &model.remaining {
        if model.ever_delivered.contains(&offset) {
            prop_assert!(mark.is_some_and(|m| offset <= m), "delivered offset {} above the mark {:?}", offset, mark);
        }
        if mark.is_none_or(|m| offset > m) {
            prop_assert!(!model.ever_delivered.contains(&offset), "offset {} above the mark was delivered", offset);
        }
        let read = store.read(offset).map(|m| m.body.clone());
        prop_assert_eq!(read, Ok(body(offset)), "body of offset {} after restart", offset);
    }
    Ok(())
}

fn run(ops: &[Op], config: &LogStoreConfig) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
    let mut store = open(dir.path(), config);
    let mut model = Model::default();
    for (step, op) in ops.iter().enumerate() {
        let after = format!("step {step} ({op:?})");
        match *op {
            Op::Append(count) => {
                for _ in 0..count {
                    let offset = model.next_offset;
                    let appended = store.append(&message(offset)).map_err(|e| TestCaseError::fail(e.to_string()))?;
                    prop_assert_eq!(appended.offset, offset, "append offset at {}", after);
                    model.remaining.insert(offset);
                    model.ready.push_back(offset);
                    model.next_offset += 1;
                }
            }
            Op::Deliver(count) => {
                for _ in 0..count {
                    let Some(offset) = model.ready.pop_front() else { break };
                    let read = store.read(offset).map(|m| m.body.clone());
                    prop_assert_eq!(read, Ok(body(offset)), "body of offset {} at {}", offset, after);
                    store.delivered(offset);
                    store.sync().map_err(|e| TestCaseError::fail(e.to_string()))?;
                    model.delivered_up_to = model.delivered_up_to.max(Some(offset));
                    model.ever_delivered.insert(offset);
                    model.outstanding.push(offset);
                }
            }
            Op::Ack(mask) => {
                let (mut acked, mut kept) = (Vec::new(), Vec::new());
                for (i, &offset) in model.outstanding.iter().enumerate() {
                    if mask & (1 << (i % 64)) != 0 {
                        acked.push(offset);
                    } else {
                        kept.push(offset);
                    }
                }
                store.remove(&acked).map_err(|e| TestCaseError::fail(e.to_string()))?;
                for offset in &acked {
                    model.remaining.remove(offset);
                }
                model.outstanding = kept;
            }
            Op::Requeue => model.requeue(),
            Op::Restart { close } => {
                if close {
                    store.close().map_err(|e| TestCaseError::fail(e.to_string()))?;
                }
                drop(store);
                store = open(dir.path(), config);
                model.restart();
                check_after_restart(&mut store, &model)?;
            }
        }
        check_backlog(&store, &model, &after)?;
    }
    // Every case ends with a restart, so the last operations are checked after one too.
    drop(store);
    let mut store = open(dir.path(), config);
    model.restart();
    check_after_restart(&mut store, &model)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    /// Without fsyncs, to keep 64 cases fast: a restart here drops the store in-process, so
    /// nothing written is lost either way, and the settlement logic is the same.
    fn settlement_survives_restarts(ops in prop::collection::vec(op(), 1..60)) {
        run(&ops, &config(FlushPolicy::Never))?;
    }
}

/// Regression cases written out by hand: the shapes most likely to go wrong.
#[test]
fn settled_head_and_gaps_survive_restarts() {
    let ops = [
        Op::Append(20),
        Op::Deliver(10),
        Op::Ack(0b10_1111_0111),
        Op::Restart { close: false },
        Op::Deliver(5),
        Op::Ack(u64::MAX),
        Op::Append(3),
        Op::Restart { close: true },
        Op::Deliver(100),
        Op::Ack(u64::MAX),
        Op::Restart { close: false },
        Op::Append(1),
    ];
    for policy in [FlushPolicy::Batch, FlushPolicy::Always] {
        if let Err(error) = run(&ops, &config(policy)) {
            panic!("{policy:?}: {error}");
        }
    }
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(Result::ok).filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum())
        .unwrap_or(0)
}

/// Delivers and acks one message at a time until the ack log has passed its 8 MiB
/// compaction threshold (each delivered mark and each single-offset settlement is a 39-byte
/// record, so about 108,000 messages), leaving unacked the messages `keep` picks and the last
/// few; then restarts and checks the backlog, the delivered mark and the bodies.
fn compaction_case(keep: impl Fn(u64) -> bool) {
    const MESSAGES: u64 = 112_000;
    const TAIL_UNACKED: u64 = 5;
    let dir = tempfile::tempdir().expect("tempdir");
    // Segments big enough to hold every message: only compaction may forget settlements.
    let config = LogStoreConfig { segment_bytes: 64 * 1024 * 1024, ..LogStoreConfig::default() };
    let mut store = open(dir.path(), &config);
    let mut remaining = BTreeSet::new();
    let mut ack_log_written = 0u64;
    let mut ack_log_shrank = false;
    let mut last_size = 0;
    for offset in 0..MESSAGES {
        let appended = store.append(&message(offset)).expect("append");
        assert_eq!(appended.offset, offset);
        store.delivered(offset);
        store.sync().expect("sync");
        ack_log_written += 39;
        if keep(offset) || offset >= MESSAGES - TAIL_UNACKED {
            remaining.insert(offset);
        } else {
            store.remove(&[offset]).expect("remove");
            ack_log_written += 39;
        }
        if offset.is_multiple_of(1000) {
            let size = dir_bytes(&dir.path().join("acks"));
            ack_log_shrank |= size < last_size;
            last_size = size;
        }
    }
    assert!(ack_log_written > 8 * 1024 * 1024, "wrote {ack_log_written} bytes of ack records");
    let on_disk = dir_bytes(&dir.path().join("acks"));
    assert!(ack_log_shrank && on_disk < ack_log_written / 2, "the ack log was compacted ({on_disk} bytes on disk)");
    let expected: Vec<u64> = remaining.iter().copied().collect();
    assert_eq!(store.unsettled().collect::<Vec<_>>(), expected, "backlog before the restart");
    drop(store);

    let mut store = open(dir.path(), &config);
    let unsettled: Vec<u64> = store.unsettled().collect();
    if unsettled != expected {
        let extra: Vec<u64> = unsettled.iter().copied().filter(|o| !remaining.contains(o)).collect();
        let missing: Vec<&u64> = expected.iter().filter(|o| !unsettled.contains(o)).collect();
        panic!(
            "after ack-log compaction and a restart: {} unsettled offsets, expected {} {:?}; {} settled offsets \
             came back (first {:?}, last {:?}); missing {:?}",
            unsettled.len(),
            expected.len(),
            expected,
            extra.len(),
            extra.first(),
            extra.last(),
            missing,
        );
    }
    assert_eq!(store.delivered_up_to(), Some(MESSAGES - 1));
    for &offset in &remaining {
        assert_eq!(store.read(offset).map(|m| m.body.clone()), Ok(body(offset)), "body of {offset}");
    }
}

/// A consumer that keeps up: everything is acked but the last few messages.
#[test]
fn compaction_keeps_settlements_when_everything_is_acked() {
    compaction_case(|_| false);
}

/// A few messages left unacked here and there, the oldest at offset 10,006.
#[test]
fn compaction_keeps_settlements_with_unacked_gaps() {
    compaction_case(|offset| offset % 10_007 == 10_006);
}
