//! A one-node openraft group over `warren_storage::raft::RaftLog`: commands go through
//! `client_write`, effects come out of the channel, snapshots are taken at the release
//! cursor, the log is purged only up to it, and a restart brings the same state back.

use super::*;
use crate::quorum::{
    quorum_raft_config, AppliedEffects, CommandBatch, NoPeers, PolicySettings, QuorumRaft, QuorumStateMachine,
    StateSnapshot,
};
use openraft::storage::RaftLogStorage;
use openraft::{BasicNode, Config, Raft, SnapshotPolicy};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use warren_storage::raft::RaftLog;
use warren_storage::LogConfig;

const NODE: u64 = 1;
/// How long the test waits for an election, a snapshot or a replay.
const WAIT: Duration = Duration::from_secs(10);
const CHECKPOINT_INTERVAL_ENTRIES: u64 = 4;

struct Node {
    raft: Raft<QuorumRaft>,
    log: RaftLog<QuorumRaft>,
    machine: QuorumStateMachine,
    effects: UnboundedReceiver<AppliedEffects>,
}

async fn start(dir: &Path) -> Node {
    // Snapshots when the test asks; otherwise the queue's configuration.
    let config = Config { snapshot_policy: SnapshotPolicy::Never, ..quorum_raft_config("quorum-test").expect("valid") };
    let log = RaftLog::<QuorumRaft>::open(dir.join("log"), LogConfig::default()).expect("log opens");
    let (tx, effects) = unbounded_channel();
    let settings =
        Settings { policy: PolicySettings { dead_letter: true, ..PolicySettings::default() }, ..Settings::default() };
    let machine = QuorumStateMachine::open("test", dir.join("snapshot"), settings, CHECKPOINT_INTERVAL_ENTRIES, tx)
        .expect("state machine opens");
    let mut reader = log.clone();
    if let Some(last) = reader.get_log_state().await.expect("log state").last_log_id {
        machine.skip_effects_through(last.index);
    }
    let raft =
        Raft::new(NODE, Arc::new(config), NoPeers, log.clone(), crate::raft_adapter::Adapter::new(machine.clone()))
            .await
            .expect("raft starts");
    Node { raft, log, machine, effects }
}

impl Node {
    async fn write(&self, op: Op) -> (u64, Response) {
        let written = self.raft.client_write(Command::new(1_000, op).into()).await.expect("committed");
        let response = written.data.into_iter().next().expect("one response per op");
        (written.log_id.index, response)
    }

    async fn wait_leader(&self) {
        self.raft.wait(Some(WAIT)).current_leader(NODE, "leader").await.expect("elected");
    }

    /// Every effect applied so far, by entry.
    fn drain(&mut self) -> Vec<AppliedEffects> {
        std::iter::from_fn(|| self.effects.try_recv().ok()).collect()
    }
}

fn flatten(applied: &[AppliedEffects]) -> Vec<Effect> {
    applied.iter().flat_map(|a| a.effects.iter().cloned()).collect()
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits for the log's first purge; returns the last purged index.
async fn last_purged(log: &RaftLog<QuorumRaft>) -> u64 {
    let mut log = log.clone();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(purged) = log.get_log_state().await.expect("log state").last_purged_log_id {
            return purged.index;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for the purge");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_node_group_applies_snapshots_at_the_release_cursor_and_restarts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut node = start(dir.path()).await;
    node.raft.initialize(BTreeMap::from([(NODE, BasicNode::new("127.0.0.1:0"))])).await.expect("initialized");
    node.wait_leader().await;

    let mut ids = Vec::new();
    for i in 0..10 {
        let (index, response) = node.write(enqueue(&format!("body {i}"), None, None)).await;
        assert_eq!(response, Response::Enqueued(message_id(index, 0)), "a message's id says where it is in the log");
        ids.push(message_id(index, 0));
    }
    let c = consumer(1, "c");
    node.write(checkout(&c, 3, 0)).await;
    assert_eq!(delivered_ids(&flatten(&node.drain())), ids[..3].to_vec());
    node.write(Op::Settle { consumer: c.clone(), ids: ids[..2].to_vec() }).await;
    assert_eq!(delivered_ids(&flatten(&node.drain())), ids[3..5].to_vec());
    node.write(Op::Return { consumer: c.clone(), ids: vec![ids[2]] }).await;
    let returned = flatten(&node.drain());
    assert_eq!(delivered_to(&returned, &c), vec![(ids[2], 1, true)], "back at the head, redelivered");
    node.write(Op::Settle { consumer: c.clone(), ids: vec![ids[2], ids[3], ids[4]] }).await;
    node.write(Op::Discard { consumer: c.clone(), ids: vec![ids[5]] }).await;
    let (_, purged) = node.write(Op::Purge).await;
    assert_eq!(purged, Response::Purged(1), "the discard freed credit for 8: only 9 was ready");
    let applied = node.drain();
    assert!(flatten(&applied).contains(&Effect::DeadLetter {
        id: ids[5],
        reason: crate::dead_letter::DeathReason::Rejected,
        confirm: false
    }));
    let leader = node.raft.metrics().borrow().current_leader;
    assert!(applied.iter().all(|a| Some(a.log_id.leader_id.node_id) == leader), "this leader's entries");
    assert_eq!(node.machine.read(|s| (s.ready_count(), s.unacked_count(), s.consumer_count())), (0, 3, 1));
    let held = node.machine.read(|s| s.held_by(&c));
    assert_eq!(held, ids[6..9].to_vec());

    // Snapshot: at the newest checkpoint at or below the release cursor, never above.
    let cursor = node.machine.release_cursor().expect("applied");
    assert_eq!(cursor, entry_of(ids[6]).0 - 1);
    node.raft.trigger().snapshot().await.expect("triggered");
    eventually("a snapshot", || node.machine.snapshot_index().is_some()).await;
    let snapshot_index = node.machine.snapshot_index().expect("taken");
    assert!(
        snapshot_index <= cursor && snapshot_index > entry_of(ids[0]).0,
        "snapshot at {snapshot_index}, cursor {cursor}"
    );
    let purged_to = last_purged(&node.log).await;
    assert!(purged_to <= snapshot_index, "purged to {purged_to}, snapshot at {snapshot_index}");
    for id in &held {
        let entry = node.log.entry(entry_of(*id).0).expect("readable").expect("a live body stays in the log");
        let openraft::EntryPayload::Normal(CommandBatch { ops, .. }) = &entry.payload else {
            panic!("not commands: {entry:?}")
        };
        let [Op::Enqueue(message)] = ops.as_slice() else { panic!("not an enqueue: {entry:?}") };
        let number = ids.iter().position(|i| i == id).expect("one of them");
        assert_eq!(message.body, Bytes::from(format!("body {number}")));
    }
    let first = entry_of(ids[0]).0;
    assert!(node.log.entry(first).expect("readable").is_none(), "settled bodies below the cursor are purged");

    // Restart on the same directory: the snapshot then the log after it rebuild the state.
    let before = node.machine.read(StateSnapshot::of);
    let last_applied = node.machine.last_applied().expect("applied");
    node.raft.shutdown().await.expect("shut down");
    drop(node);
    let mut node = start(dir.path()).await;
    node.wait_leader().await;
    eventually("the replay", || node.machine.last_applied().is_some_and(|a| a.index >= last_applied.index)).await;
    assert_eq!(node.machine.read(StateSnapshot::of), before);
    let replayed = node.drain();
    assert!(replayed.iter().all(|a| a.log_id.index > last_applied.index), "replayed entries' effects: {replayed:?}");

    // It goes on: settling the rest empties the queue.
    node.write(Op::Settle { consumer: c.clone(), ids: held }).await;
    assert_eq!(node.machine.read(|s| (s.ready_count(), s.unacked_count())), (0, 0));
    node.raft.shutdown().await.expect("shut down");
}

fn entry(index: u64, op: Op) -> openraft::Entry<QuorumRaft> {
    let log_id = openraft::LogId::new(openraft::CommittedLeaderId::new(1, NODE), index);
    openraft::Entry { log_id, payload: openraft::EntryPayload::Normal(Command::new(1_000 + index, op).into()) }
}

#[tokio::test]
async fn a_snapshot_installed_on_another_replica_plus_the_rest_of_the_log_gives_the_same_state() {
    use crate::raft_adapter::StateMachine;
    let dir = tempfile::tempdir().expect("tempdir");
    let (tx, _effects) = unbounded_channel();
    let open = |name: &str| QuorumStateMachine::open(name, dir.path().join(name), Settings::default(), 2, tx.clone());
    let a = open("a").expect("opens");
    let c = consumer(1, "c");
    let mut ops: Vec<Op> = (0..6).map(|i| enqueue(&format!("m{i}"), Some(i), None)).collect();
    ops.push(checkout(&c, 2, 0));
    let id = |index| message_id(index, 0);
    ops.push(Op::Settle { consumer: c.clone(), ids: vec![id(1), id(2)] });
    ops.push(Op::Return { consumer: c.clone(), ids: vec![id(3)] });
    ops.push(Op::Settle { consumer: c.clone(), ids: vec![id(3), id(4)] });
    ops.extend((0..6).map(|_| Op::Expire));
    ops.push(Op::Settle { consumer: c.clone(), ids: vec![id(5)] });
    let entries: Vec<_> = ops.into_iter().zip(1..).map(|(op, index)| entry(index, op)).collect();
    let (first, rest) = entries.split_at(12);
    a.apply(first.to_vec()).expect("applied");

    let snapshot = a.take_snapshot().await.expect("built");
    let at = snapshot.meta.last_log_id.expect("at an entry").index;
    let cursor = a.release_cursor().expect("applied");
    assert!(at > 0 && at <= cursor, "snapshot at {at}, release cursor {cursor}");
    assert_eq!(a.snapshot_index(), Some(at));

    let b = open("b").expect("opens");
    b.install(snapshot.clone()).await.expect("installed");
    assert_eq!(b.last_applied(), snapshot.meta.last_log_id);
    let after: Vec<_> = first.iter().filter(|e| e.log_id.index > at).cloned().collect();
    b.apply(after).expect("applied");
    a.apply(rest.to_vec()).expect("applied");
    b.apply(rest.to_vec()).expect("applied");
    assert_eq!(b.read(StateSnapshot::of), a.read(StateSnapshot::of));
    assert_eq!(a.read(|s| s.held_by(&c)), vec![id(6)]);

    // Reopened, a replica starts from its saved snapshot.
    let reopened = open("b").expect("reopens");
    assert_eq!(reopened.last_applied(), snapshot.meta.last_log_id);
    let current = b.current_snapshot().expect("read").expect("kept");
    assert_eq!(current.meta, snapshot.meta);
}

#[tokio::test]
async fn a_replica_applies_the_machine_versions_it_knows_and_stops_at_a_newer_one() {
    use crate::feature_flags::GroupMachineKind;
    use crate::raft_adapter::StateMachine;
    let dir = tempfile::tempdir().expect("tempdir");
    let (tx, _effects) = unbounded_channel();
    let machine = QuorumStateMachine::open("v", dir.path().join("v"), Settings::default(), 2, tx).expect("opens");
    let newest = GroupMachineKind::QuorumQueue.newest_version();
    let known = vec![entry(1, enqueue("a", None, None)), entry(2, Op::SetMachineVersion { version: newest })];
    machine.apply(known).expect("applied");
    assert_eq!(machine.read(QueueState::machine_version), newest);

    let newer = vec![
        entry(3, enqueue("b", None, None)),
        entry(4, Op::SetMachineVersion { version: newest + 1 }),
        entry(5, enqueue("c", None, None)),
    ];
    let error = machine.apply(newer).expect_err("a version this node does not know");
    assert!(error.to_string().contains("upgrade this node"), "{error}");
    assert_eq!(machine.last_applied().map(|id| id.index), Some(3), "applied up to the version entry");
    assert_eq!(machine.read(QueueState::ready_count), 2);
}

#[test]
fn a_state_past_the_first_machine_version_snapshots_with_it_and_one_at_the_first_as_before() {
    use crate::feature_flags::FIRST_MACHINE_VERSION;
    use crate::quorum::snapshot::{SNAPSHOT_FORMAT_VERSION, SNAPSHOT_FORMAT_WITH_POLICY};
    use crate::quorum::QUEUE_POLICIES_GROUP_VERSION;
    let mut state = QueueState::new(Settings::default());
    state.apply(1, &Command::new(1_000, enqueue("a", Some(3), None)));
    let first = StateSnapshot::of(&state).encode().expect("encodes");
    assert_eq!(first[0], SNAPSHOT_FORMAT_VERSION, "a node of an earlier release installs it");
    assert_eq!(StateSnapshot::decode(&first).expect("decodes").machine_version(), FIRST_MACHINE_VERSION);

    // From the version that applies policies on, the snapshot keeps what the policy set,
    // which the queue's definition (the settings it is restored with) does not give.
    let mut later = state.at_machine_version(QUEUE_POLICIES_GROUP_VERSION);
    let policy = PolicySettings { max_length: Some(7), delivery_limit: 3, ..PolicySettings::default() };
    later.apply(2, &Command::new(1_001, Op::ApplyPolicy { settings: policy }));
    let snapshot = StateSnapshot::of(&later);
    let bytes = snapshot.encode().expect("encodes");
    assert_eq!(bytes[0], SNAPSHOT_FORMAT_WITH_POLICY);
    let read = StateSnapshot::decode(&bytes).expect("decodes");
    assert_eq!(read, snapshot);
    let restored = read.restore(Settings::default()).expect("restores");
    assert_eq!((restored.machine_version(), restored.ready_count()), (QUEUE_POLICIES_GROUP_VERSION, 1));
    assert_eq!(restored.settings().policy, policy);
}
