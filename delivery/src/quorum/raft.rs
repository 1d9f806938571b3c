//! The Raft side of a quorum queue: its type config ([`QuorumRaft`]), its state machine
//! ([`QuorumStateMachine`], a [`StateMachine`] that `raft_adapter` runs for openraft) and the
//! Raft [`Config`] its snapshots need.
//!
//! The log is `warren_storage::raft::RaftLog<QuorumRaft>`. The state machine applies
//! entries to a [`QueueState`], sends each entry's effects to the queue through a channel
//! ([`AppliedEffects`]), keeps [`Checkpoints`], and builds snapshots from the newest one at
//! or below the release cursor, so that openraft, which purges the log up to its snapshot
//! (with [`quorum_raft_config`]), never purges a live message's body. The current
//! snapshot is kept in a file replaced atomically; a restart restores it and openraft
//! replays the log after it.

use super::command::{message_id, Command, CommandBatch, Op, Response};
use super::effect::Effect;
use super::error::QuorumError;
use super::leader_changes::LeaderChanges;
use super::settings::Settings;
use super::snapshot::{decode_versioned, Checkpoint, Checkpoints, StateSnapshot, SAVED_SNAPSHOT_FORMAT_VERSION};
use super::state::QueueState;
use crate::feature_flags::GroupMachineKind;
use crate::raft_adapter::typ::{Entry, EntryPayload, LogId, SnapshotMeta, StoredMembership};
use crate::raft_adapter::{MachineError, MachineSnapshot, SnapshotTaking, StateMachine};
use bytes::Bytes;
use openraft::{Config, ConfigError, SnapshotPolicy};
use parking_lot::Mutex;
// declare_raft_types! takes snapshots as `Cursor<Vec<u8>>`, by that name.
use serde::{Deserialize, Serialize};
use std::io::Cursor;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedSender;
use tracing::warn;
use warren_storage::SnapshotFile;

openraft::declare_raft_types!(
    /// A quorum queue's Raft types: entries carry [`CommandBatch`]es and apply to one
    /// [`Response`] per op; u64 node ids, `BasicNode`, tokio.
    pub QuorumRaft:
        D = CommandBatch,
        R = Vec<Response>,
);

/// Entries applied since the last snapshot before openraft asks for a new one. A request
/// when the release cursor has not moved returns the current snapshot, which openraft
/// ignores (it is not newer).
pub const SNAPSHOT_LOGS_SINCE_LAST: u64 = 1024;

/// openraft's tick for a quorum queue's group, in ms (its heartbeat interval setting).
/// Groups send no heartbeats of their own and call no elections on a timeout: with one group
/// per queue, a thousand idle queues would send thousands of heartbeats a second (43% of a
/// core on three nodes at openraft's default of 50 ms). The cluster watches its nodes
/// instead, once per pair of nodes, and asks the groups that need it for a heartbeat (a node
/// came back) or an election (their leader's node is gone): see the server's failure
/// detector. Commits reach followers without heartbeats: openraft sends the new commit index
/// after each commit.
///
/// openraft's own timer ticks every 1.5 heartbeat intervals whether or not its elections are
/// on; 1 s makes that a tick every 1.5 s per group (it was every 0.75 s at 500 ms).
pub const HEARTBEAT_INTERVAL_MS: u64 = 1_000;
/// openraft's election timeout range, in ms. Its election timer is off: the server's failure
/// detector has a member that lost its leader campaign (a pre-vote, then an election), and
/// turns the timer on only for a group that stayed without a leader for long, as a last resort.
pub const ELECTION_TIMEOUT_MS: (u64, u64) = (1_500, 3_000);
/// How long a follower that heard from its leader refuses to vote for another candidate
/// (openraft's leader lease; upstream ties it to the election timeout, 3 s here). Elections
/// are called only after a pre-vote that a follower grants once it has lost the leader too
/// (the server's `cluster::election`), so the lease need not keep disruptive candidates out:
/// it is shorter than the 0.5 s a peer must be gone before its groups campaign, so that the
/// first election after a leader's death is not refused for a lease nobody holds any more.
pub const LEADER_LEASE_MS: u64 = 300;

/// openraft's configuration for a quorum queue's group: snapshots every
/// [`SNAPSHOT_LOGS_SINCE_LAST`] entries and purging up to the snapshot exactly (the
/// snapshot is at the release cursor, so nothing live is purged); heartbeats and elections
/// as above.
pub fn quorum_raft_config(cluster_name: &str) -> Result<Config, Box<ConfigError>> {
    Config {
        cluster_name: cluster_name.to_owned(),
        snapshot_policy: SnapshotPolicy::LogsSinceLast(SNAPSHOT_LOGS_SINCE_LAST),
        max_in_snapshot_log_to_keep: 0,
        heartbeat_interval: HEARTBEAT_INTERVAL_MS,
        election_timeout_min: ELECTION_TIMEOUT_MS.0,
        election_timeout_max: ELECTION_TIMEOUT_MS.1,
        leader_lease: Some(LEADER_LEASE_MS),
        enable_heartbeat: false,
        enable_elect: false,
        ..Default::default()
    }
    .validate()
    .map_err(Box::new)
}

/// The effects of one applied entry. Act on them only on the leader that appended the
/// entry, in the term it appended it: `log_id.leader_id` says who that was (entries a new
/// leader applies from its predecessor carry the predecessor's id). Entries replayed at
/// startup send none (see [`QuorumStateMachine::skip_effects_through`]): a single node
/// restarting may lead again in the same term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedEffects {
    /// The entry.
    pub log_id: LogId,
    /// What it asks for, in order.
    pub effects: Vec<Effect>,
}

/// A snapshot as kept in its file: openraft's metadata and the encoded state.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SavedSnapshot {
    meta: SnapshotMeta,
    /// An encoded [`StateSnapshot`].
    data: Bytes,
}

impl SavedSnapshot {
    fn to_machine(&self) -> MachineSnapshot {
        MachineSnapshot { meta: self.meta.clone(), data: self.data.to_vec() }
    }

    fn index(&self) -> Option<u64> {
        self.meta.last_log_id.map(|id| id.index)
    }
}

/// Everything the state machine holds, behind one lock shared with its snapshot builder
/// and readers.
struct Machine {
    settings: Settings,
    state: QueueState,
    last_applied: Option<LogId>,
    membership: StoredMembership,
    checkpoints: Checkpoints,
    current: Option<SavedSnapshot>,
    effects: UnboundedSender<AppliedEffects>,
    /// Entries up to this index were in the log at startup: their effects were the
    /// concern of the process that appended them, and are not sent again.
    replayed_through: Option<u64>,
    /// When (the proposing leader's clock) the queue was last used as `x-expires` counts use:
    /// a `basic.get` or a consumer attached, through any node. Not part of the snapshot: a
    /// restart starts the queue's idle time afresh.
    last_used_ms: u64,
    leader_changes: LeaderChanges,
}

struct Shared {
    machine: Mutex<Machine>,
    file: SnapshotFile,
    /// Serializes snapshot file writes (a build and an install may race).
    file_lock: tokio::sync::Mutex<()>,
}

/// A quorum queue's state machine for openraft.
#[derive(Clone)]
pub struct QuorumStateMachine {
    shared: Arc<Shared>,
}

impl QuorumStateMachine {
    /// Opens the state machine whose snapshot file is `snapshot_path` (none yet: an empty
    /// queue), for a queue obeying `settings`, taking a checkpoint every
    /// `checkpoint_interval_entries` at least, and sending effects to `effects`.
    pub fn open(
        group: &str,
        snapshot_path: impl Into<PathBuf>,
        settings: Settings,
        checkpoint_interval_entries: u64,
        effects: UnboundedSender<AppliedEffects>,
    ) -> Result<Self, QuorumError> {
        let file = SnapshotFile::new(snapshot_path);
        let current: Option<SavedSnapshot> =
            file.read()?.map(|bytes| decode_versioned(&bytes, SAVED_SNAPSHOT_FORMAT_VERSION)).transpose()?;
        let (state, last_applied, membership) = match &current {
            Some(saved) => (
                StateSnapshot::decode(&saved.data)?.restore(settings.clone())?,
                saved.meta.last_log_id,
                saved.meta.last_membership.clone(),
            ),
            None => (QueueState::new(settings.clone()), None, StoredMembership::default()),
        };
        let machine = Machine {
            settings,
            state,
            last_applied,
            membership,
            checkpoints: Checkpoints::new(checkpoint_interval_entries),
            current,
            effects,
            replayed_through: None,
            last_used_ms: 0,
            leader_changes: LeaderChanges::new(group),
        };
        let shared = Shared { machine: Mutex::new(machine), file, file_lock: tokio::sync::Mutex::new(()) };
        Ok(QuorumStateMachine { shared: Arc::new(shared) })
    }

    /// Entries up to `index` (the log's last index when the node starts, before
    /// `Raft::new`) are replayed, not new: their effects are not sent.
    pub fn skip_effects_through(&self, index: u64) {
        self.shared.machine.lock().replayed_through = Some(index);
    }

    /// Reads the queue's state (counts, held messages, next expiry...). Keep `f` short: it
    /// runs with the state machine locked.
    pub fn read<R>(&self, f: impl FnOnce(&QueueState) -> R) -> R {
        f(&self.shared.machine.lock().state)
    }

    /// When a `basic.get` or a new consumer last used the queue, through any node (the
    /// proposing leader's clock, ms; 0 if not since this node started).
    pub fn last_used_ms(&self) -> u64 {
        self.shared.machine.lock().last_used_ms
    }

    /// The last entry applied.
    pub fn last_applied(&self) -> Option<LogId> {
        self.shared.machine.lock().last_applied
    }

    /// The release cursor now: no entry at or below it holds a live message.
    pub fn release_cursor(&self) -> Option<u64> {
        let machine = self.shared.machine.lock();
        machine.last_applied.map(|applied| machine.state.release_cursor(applied.index))
    }

    /// The index of the current snapshot, if any.
    pub fn snapshot_index(&self) -> Option<u64> {
        self.shared.machine.lock().current.as_ref().and_then(SavedSnapshot::index)
    }

    /// Saves `snapshot` as the current one unless a newer one is; true if it was saved.
    async fn save(&self, snapshot: SavedSnapshot) -> Result<bool, QuorumError> {
        let _writing = self.shared.file_lock.lock().await;
        let current = self.shared.machine.lock().current.as_ref().and_then(SavedSnapshot::index);
        if current.is_some() && current >= snapshot.index() {
            return Ok(false);
        }
        let mut bytes = vec![SAVED_SNAPSHOT_FORMAT_VERSION];
        bytes = postcard::to_extend(&snapshot, bytes).map_err(QuorumError::Encode)?;
        let file = self.shared.file.clone();
        match tokio::task::spawn_blocking(move || file.write(&bytes)).await {
            Ok(written) => written?,
            Err(join) => return Err(QuorumError::Storage(warren_storage::StorageError::Failed(join.to_string()))),
        }
        self.shared.machine.lock().current = Some(snapshot);
        Ok(true)
    }
}

impl Machine {
    /// Applies one entry; returns the responses of its ops.
    fn apply_entry(&mut self, log_id: LogId, payload: EntryPayload<QuorumRaft>) -> Vec<Response> {
        let responses = match payload {
            EntryPayload::Blank => {
                let replayed = self.replayed_through.is_some_and(|through| log_id.index <= through);
                self.leader_changes.blank_applied(&log_id, replayed);
                Vec::new()
            }
            EntryPayload::Normal(batch) => {
                let mut effects = Vec::new();
                let mut responses = Vec::with_capacity(batch.ops.len());
                for (position, op) in batch.ops.into_iter().enumerate() {
                    if matches!(op, Op::Dequeue { .. } | Op::Checkout { .. } | Op::CheckoutFiltered { .. }) {
                        self.last_used_ms = self.last_used_ms.max(batch.at_ms);
                    }
                    let command = Command::new(batch.at_ms, op);
                    let (response, more) = self.state.apply(message_id(log_id.index, position), &command);
                    responses.push(response);
                    effects.extend(more);
                }
                let replayed = self.replayed_through.is_some_and(|through| log_id.index <= through);
                if !effects.is_empty() && !replayed {
                    // No receiver: no queue acts on effects here (e.g. a test).
                    let _ = self.effects.send(AppliedEffects { log_id, effects });
                }
                responses
            }
            EntryPayload::Membership(membership) => {
                self.membership = StoredMembership::new(Some(log_id), membership);
                Vec::new()
            }
        };
        self.last_applied = Some(log_id);
        self.maybe_checkpoint(log_id);
        responses
    }

    fn maybe_checkpoint(&mut self, log_id: LogId) {
        let live = self.state.ready_count() + self.state.unacked_count();
        if !self.checkpoints.due(log_id.index, live) {
            return;
        }
        match StateSnapshot::of(&self.state).encode() {
            Ok(data) => self.checkpoints.push(Checkpoint {
                log_id,
                membership: self.membership.clone(),
                data: Bytes::from(data),
            }),
            Err(error) => warn!(%error, index = log_id.index, "quorum queue: checkpoint skipped"),
        }
    }

    /// The snapshot at the newest checkpoint the release cursor passed, if any.
    fn usable_snapshot(&mut self) -> Option<SavedSnapshot> {
        let applied = self.last_applied?;
        let cursor = self.state.release_cursor(applied.index);
        let checkpoint = self.checkpoints.take_usable(cursor)?;
        let snapshot_id = format!("{}-{}", checkpoint.log_id.leader_id, checkpoint.log_id.index);
        let meta =
            SnapshotMeta { last_log_id: Some(checkpoint.log_id), last_membership: checkpoint.membership, snapshot_id };
        Some(SavedSnapshot { meta, data: checkpoint.data })
    }

    /// The current snapshot, or that of the empty queue before any entry.
    fn current_or_empty(&self) -> Result<SavedSnapshot, QuorumError> {
        if let Some(current) = &self.current {
            return Ok(current.clone());
        }
        let data = StateSnapshot::of(&QueueState::new(self.settings.clone())).encode()?;
        Ok(SavedSnapshot { meta: SnapshotMeta::default(), data: Bytes::from(data) })
    }
}

fn snapshot_error(error: QuorumError) -> MachineError {
    MachineError::Snapshot(error.to_string())
}

impl QuorumStateMachine {
    /// The snapshot at the newest checkpoint the release cursor passed, saved; the current
    /// one if there is no newer.
    async fn build(&self) -> Result<MachineSnapshot, QuorumError> {
        let usable = self.shared.machine.lock().usable_snapshot();
        if let Some(snapshot) = usable {
            if self.save(snapshot.clone()).await? {
                return Ok(snapshot.to_machine());
            }
        }
        let current = self.shared.machine.lock().current_or_empty();
        current.map(|snapshot| snapshot.to_machine())
    }

    async fn install_saved(&self, snapshot: MachineSnapshot) -> Result<(), QuorumError> {
        let MachineSnapshot { meta, data } = snapshot;
        let data = Bytes::from(data);
        let settings = self.shared.machine.lock().settings.clone();
        let state = StateSnapshot::decode(&data).and_then(|s| s.restore(settings))?;
        let saved = SavedSnapshot { meta: meta.clone(), data };
        self.save(saved).await?;
        let mut machine = self.shared.machine.lock();
        machine.state = state;
        machine.last_applied = meta.last_log_id;
        machine.membership = meta.last_membership.clone();
        machine.checkpoints.clear();
        Ok(())
    }
}

impl StateMachine<QuorumRaft> for QuorumStateMachine {
    fn applied_state(&self) -> (Option<LogId>, StoredMembership) {
        let machine = self.shared.machine.lock();
        (machine.last_applied, machine.membership.clone())
    }

    fn apply(&self, entries: Vec<Entry<QuorumRaft>>) -> Result<Vec<Vec<Response>>, MachineError> {
        let mut machine = self.shared.machine.lock();
        let mut responses = Vec::with_capacity(entries.len());
        for entry in entries {
            if let EntryPayload::Normal(batch) = &entry.payload {
                if let Err(error) = batch.check_machine_version(GroupMachineKind::QuorumQueue) {
                    let group = machine.leader_changes.group();
                    tracing::error!(group, index = entry.log_id.index, %error, "the group's log cannot be applied further here");
                    return Err(MachineError::Apply { log_id: entry.log_id, reason: error.to_string() });
                }
            }
            responses.push(machine.apply_entry(entry.log_id, entry.payload));
        }
        Ok(responses)
    }

    fn take_snapshot(&self) -> SnapshotTaking {
        let machine = self.clone();
        Box::pin(async move { machine.build().await.map_err(snapshot_error) })
    }

    async fn install(&self, snapshot: MachineSnapshot) -> Result<(), MachineError> {
        self.install_saved(snapshot).await.map_err(snapshot_error)
    }

    fn current_snapshot(&self) -> Result<Option<MachineSnapshot>, MachineError> {
        Ok(self.shared.machine.lock().current.as_ref().map(SavedSnapshot::to_machine))
    }
}
