//! A replicated stream's state machine ([`StreamStateMachine`]): what the entries of its Raft
//! group build on every replica. The stream's log (warren-storage segments, dense offsets)
//! *is* the state: an applied publish is appended at the log's next offset, so offsets are
//! the same on every replica and independent of Raft's indexes, which also count membership
//! changes, blank entries and offset commits. Beside the log, replicated too: the consumer
//! groups' committed offsets, the deduplication window, the stream's clock and, from machine
//! version [`STREAM_POLICIES_GROUP_VERSION`], the retention its policies give it.
//!
//! openraft applies only committed entries, and only applied entries reach the log: a reader
//! of any replica never sees an uncommitted record.
//!
//! Snapshots are small (the log's bounds, the groups, the window), taken after an fsync of
//! the log, so that the Raft log can be purged up to them. A replica that installs one (it
//! lagged behind the purged Raft log, or it is new) fetches the records it lacks from another
//! replica, a chunk at a time (`super::catch_up`): no replica ever holds a stream in memory.
//!
//! After a restart openraft applies the Raft log again from the snapshot on. The records of
//! those entries are in the stream's log already, up to its end: apply counts offsets from
//! the snapshot's and appends only past the end.

use super::catch_up::{self, StreamChunk};
use super::{tag, PartitionGroups};
use crate::dedup_window::{key_in, DedupEntries, DedupSettings, DedupWindow};
use crate::feature_flags::{GroupMachineKind, FIRST_MACHINE_VERSION};
use crate::message::WireMessage;
use crate::message_store::codec as message_codec;
use crate::quorum::leader_changes::LeaderChanges;
use crate::quorum::{decode_versioned, decode_whole, Op, QuorumError, QuorumRaft, Replication, Response};
use crate::raft_adapter::typ::{Entry, EntryPayload, LogId, SnapshotMeta, StoredMembership};
use crate::raft_adapter::{MachineError, MachineSnapshot, SnapshotTaking, StateMachine};
use crate::tag_filter::message_tag;
use openraft::{Config, ConfigError, SnapshotPolicy};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::watch;
use warren_storage::{Log, NewRecord, Retention, SnapshotFile};

/// Entries applied since the last snapshot before openraft takes a new one. A snapshot costs
/// an fsync of the stream's log and a small file; it lets the Raft log (a second copy of
/// every publish) be purged.
const SNAPSHOT_LOGS_SINCE_LAST: u64 = 1024;
/// Entries kept in the Raft log below a snapshot, so that a replica a little behind catches up
/// from the log rather than through a snapshot and the records it lacks.
const LOGS_KEPT_BELOW_SNAPSHOT: u64 = 512;
/// Consumer groups a stream keeps offsets for at most: a commit for one more group is
/// ignored (its members start from their `x-stream-offset`), so that clients cannot grow the
/// replicated state without bound.
pub const MAX_CONSUMER_GROUPS: usize = 10_000;
/// The first byte of a snapshot file: its format version.
const SNAPSHOT_FORMAT_VERSION: u8 = 2;
/// The format of snapshot files that also keep the retention a policy gave the stream (then
/// the machine version and the retention).
const SNAPSHOT_FORMAT_WITH_RETENTION: u8 = 3;
/// The group machine version from which a replicated stream's retention follows its policies
/// ([`Op::ApplyRetention`]).
pub const STREAM_POLICIES_GROUP_VERSION: u16 = 2;
/// The format of snapshot files before machine versions, still read.
const FIRST_SNAPSHOT_FORMAT_VERSION: u8 = 1;

/// openraft's configuration for a replicated stream's group: as a quorum queue's (heartbeats
/// and elections driven by the cluster's failure detector), with snapshots rarer and some log
/// kept below them.
pub fn stream_raft_config(cluster_name: &str) -> Result<Config, Box<ConfigError>> {
    let quorum = crate::quorum::quorum_raft_config(cluster_name)?;
    Config {
        snapshot_policy: SnapshotPolicy::LogsSinceLast(SNAPSHOT_LOGS_SINCE_LAST),
        max_in_snapshot_log_to_keep: LOGS_KEPT_BELOW_SNAPSHOT,
        ..quorum
    }
    .validate()
    .map_err(Box::new)
}

/// What a snapshot holds besides openraft's metadata: the state at its entry, but the log's
/// records, which stay in the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct StreamSnapshot {
    /// The oldest offset the snapshotting replica held (retention removes older ones).
    first_offset: u64,
    /// The offset of the next publish after the snapshot's entry.
    next_offset: u64,
    /// The stream's clock: the newest proposing leader's time, in ms.
    clock_ms: u64,
    /// Committed offsets by consumer group.
    groups: Vec<(String, u64)>,
    /// The deduplication keys seen lately, oldest first.
    dedup: DedupEntries,
    /// The consumer groups of the super stream this stream is the first partition of.
    partition_groups: PartitionGroups,
    /// The machine version the state applies entries with: not in the snapshot's own
    /// encoding, which a node of an earlier release must still read (see
    /// [`SavedSnapshot::to_machine`]).
    #[serde(skip, default = "first_machine_version")]
    machine_version: u16,
    /// The retention the last [`Op::ApplyRetention`] gave the log (`None`: its own arguments'),
    /// not in the snapshot's own encoding either.
    #[serde(skip)]
    retention: Option<Retention>,
}

impl Default for StreamSnapshot {
    fn default() -> Self {
        StreamSnapshot {
            first_offset: 0,
            next_offset: 0,
            clock_ms: 0,
            groups: Vec::new(),
            dedup: DedupEntries::default(),
            partition_groups: PartitionGroups::default(),
            machine_version: FIRST_MACHINE_VERSION,
            retention: None,
        }
    }
}

fn first_machine_version() -> u16 {
    FIRST_MACHINE_VERSION
}

/// What a snapshot's id ends with when its state is past the first machine version: the
/// version follows it, and the state is encoded with the version after it. A snapshot at the
/// first version is as releases before machine versions sent it, so that they install it
/// while a cluster is upgraded.
const MACHINE_VERSION_ID_SUFFIX: &str = "-machine-v";

/// A snapshot as kept in its file (format 2: then the machine version; 3: then the version
/// and the retention, once a policy gave one; format 1 was at the first).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SavedSnapshot {
    meta: SnapshotMeta,
    state: StreamSnapshot,
}

impl SavedSnapshot {
    fn encode(&self) -> Result<Vec<u8>, QuorumError> {
        let version = self.state.machine_version;
        let encoded = match self.state.retention {
            Some(retention) => postcard::to_extend(&(self, version, retention), vec![SNAPSHOT_FORMAT_WITH_RETENTION]),
            None => postcard::to_extend(&(self, version), vec![SNAPSHOT_FORMAT_VERSION]),
        };
        encoded.map_err(QuorumError::Encode)
    }

    fn decode(bytes: &[u8]) -> Result<Self, QuorumError> {
        match bytes.split_first() {
            Some((&FIRST_SNAPSHOT_FORMAT_VERSION, rest)) => decode_whole(rest),
            Some((&SNAPSHOT_FORMAT_WITH_RETENTION, rest)) => {
                let (saved, machine_version, retention): (SavedSnapshot, u16, Retention) = decode_whole(rest)?;
                let state = StreamSnapshot { machine_version, retention: Some(retention), ..saved.state };
                Ok(SavedSnapshot { state, ..saved })
            }
            _ => {
                let (saved, machine_version): (SavedSnapshot, u16) = decode_versioned(bytes, SNAPSHOT_FORMAT_VERSION)?;
                Ok(SavedSnapshot { state: StreamSnapshot { machine_version, ..saved.state }, ..saved })
            }
        }
    }

    /// As openraft sends it to another replica: the state past the first machine version
    /// carries it (and from [`STREAM_POLICIES_GROUP_VERSION`] the retention too), and says so
    /// in the snapshot's id.
    fn to_machine(&self) -> Result<MachineSnapshot, QuorumError> {
        let version = self.state.machine_version;
        let mut meta = self.meta.clone();
        let data = if version == FIRST_MACHINE_VERSION {
            postcard::to_allocvec(&self.state)
        } else {
            let id = meta.snapshot_id.split(MACHINE_VERSION_ID_SUFFIX).next().unwrap_or_default();
            meta.snapshot_id = format!("{id}{MACHINE_VERSION_ID_SUFFIX}{version}");
            match version >= STREAM_POLICIES_GROUP_VERSION {
                true => postcard::to_allocvec(&(&self.state, version, self.state.retention)),
                false => postcard::to_allocvec(&(&self.state, version)),
            }
        };
        Ok(MachineSnapshot { meta, data: data.map_err(QuorumError::Encode)? })
    }

    /// The state another replica sent with `meta` ([`SavedSnapshot::to_machine`]).
    fn state_sent(meta: &SnapshotMeta, data: &[u8]) -> Result<StreamSnapshot, QuorumError> {
        let version = meta.snapshot_id.rsplit_once(MACHINE_VERSION_ID_SUFFIX).and_then(|(_, v)| v.parse::<u16>().ok());
        match version {
            None => decode_whole(data),
            Some(version) if version >= STREAM_POLICIES_GROUP_VERSION => {
                let (state, machine_version, retention): (StreamSnapshot, u16, Option<Retention>) = decode_whole(data)?;
                Ok(StreamSnapshot { machine_version, retention, ..state })
            }
            Some(_) => {
                let (state, machine_version): (StreamSnapshot, u16) = decode_whole(data)?;
                Ok(StreamSnapshot { machine_version, ..state })
            }
        }
    }
}

/// The state the applied entries built, besides the log.
struct Applied {
    last_applied: Option<LogId>,
    membership: StoredMembership,
    /// The offset the next applied publish takes (behind the log's end while entries whose
    /// records are in the log are applied again after a restart).
    next_offset: u64,
    clock_ms: u64,
    groups: BTreeMap<String, u64>,
    dedup: DedupWindow,
    partition_groups: PartitionGroups,
    /// Whether entries applied since the groups were last published changed them.
    partition_groups_changed: bool,
    /// The machine version entries are applied with ([`Op::SetMachineVersion`]): from
    /// [`STREAM_POLICIES_GROUP_VERSION`] on, [`Op::ApplyRetention`] applies; every other op is
    /// applied alike by every version so far.
    machine_version: u16,
    /// The retention the last [`Op::ApplyRetention`] gave the log, if one did.
    retention: Option<Retention>,
    current: Option<SavedSnapshot>,
}

impl Applied {
    fn restore(saved: Option<SavedSnapshot>) -> Self {
        let state = saved.as_ref().map(|s| s.state.clone()).unwrap_or_default();
        Applied {
            last_applied: saved.as_ref().and_then(|s| s.meta.last_log_id),
            membership: saved.as_ref().map(|s| s.meta.last_membership.clone()).unwrap_or_default(),
            next_offset: state.next_offset,
            clock_ms: state.clock_ms,
            groups: state.groups.into_iter().collect(),
            dedup: DedupWindow::restore(state.dedup),
            partition_groups: state.partition_groups,
            partition_groups_changed: false,
            machine_version: state.machine_version,
            retention: state.retention,
            current: saved,
        }
    }

    fn snapshot(&self, first_offset: u64) -> StreamSnapshot {
        StreamSnapshot {
            first_offset,
            next_offset: self.next_offset,
            clock_ms: self.clock_ms,
            groups: self.groups.iter().map(|(g, o)| (g.clone(), *o)).collect(),
            dedup: self.dedup.entries(),
            partition_groups: self.partition_groups.clone(),
            machine_version: self.machine_version,
            retention: self.retention,
        }
    }

    fn commit_offset(&mut self, group: String, offset: u64) {
        if self.groups.len() >= MAX_CONSUMER_GROUPS && !self.groups.contains_key(&group) {
            return;
        }
        let committed = self.groups.entry(group).or_insert(offset);
        *committed = (*committed).max(offset);
    }
}

struct Shared {
    /// The group's name, to ask other replicas for records.
    group: String,
    log: Arc<Log>,
    deduplication: Option<DedupSettings>,
    applied: Mutex<Applied>,
    /// The log's end after each applied entry: consumers wait on it.
    appended: watch::Sender<u64>,
    /// The super stream's consumer groups after each change (see [`PartitionGroups`]).
    partition_groups: watch::Sender<Arc<PartitionGroups>>,
    replication: Arc<dyn Replication>,
    file: SnapshotFile,
    leader_changes: Mutex<LeaderChanges>,
    /// Serializes snapshot file writes (a build and an install may race).
    file_lock: tokio::sync::Mutex<()>,
}

/// A replicated stream's state machine for openraft (see the module documentation).
#[derive(Clone)]
pub struct StreamStateMachine {
    shared: Arc<Shared>,
}

impl StreamStateMachine {
    /// Opens the state machine of group `group` over the stream's `log`, its snapshot in
    /// `snapshot_path` (none yet: a new replica), deduplicating by `deduplication`; a replica
    /// catching up reads what it lacks through `replication`.
    pub fn open(
        group: &str,
        snapshot_path: impl Into<PathBuf>,
        log: Arc<Log>,
        deduplication: Option<DedupSettings>,
        replication: Arc<dyn Replication>,
    ) -> Result<Self, QuorumError> {
        let file = SnapshotFile::new(snapshot_path);
        let saved = file.read()?.map(|bytes| SavedSnapshot::decode(&bytes)).transpose()?;
        let (appended, _) = watch::channel(log.next_offset());
        let applied = Applied::restore(saved);
        if let Some(retention) = applied.retention {
            set_retention(group, &log, retention);
        }
        let (partition_groups, _) = watch::channel(Arc::new(applied.partition_groups.clone()));
        let shared = Shared {
            group: group.to_string(),
            log,
            deduplication,
            applied: Mutex::new(applied),
            appended,
            partition_groups,
            replication,
            file,
            leader_changes: Mutex::new(LeaderChanges::new(group)),
            file_lock: tokio::sync::Mutex::new(()),
        };
        Ok(StreamStateMachine { shared: Arc::new(shared) })
    }

    /// The last entry applied.
    pub fn last_applied(&self) -> Option<LogId> {
        self.shared.applied.lock().last_applied
    }

    /// The stream's log (every record in it is committed).
    pub fn log(&self) -> &Arc<Log> {
        &self.shared.log
    }

    /// The machine version its entries are applied with, and the retention an
    /// [`Op::ApplyRetention`] gave the log (`None`: still its own arguments').
    pub fn applied_retention(&self) -> (u16, Option<Retention>) {
        let applied = self.shared.applied.lock();
        (applied.machine_version, applied.retention)
    }

    /// The committed offset of consumer group `group`, as applied on this replica.
    pub fn group_offset(&self, group: &str) -> Option<u64> {
        self.shared.applied.lock().groups.get(group).copied()
    }

    /// Every consumer group's committed offset, as applied on this replica, by name.
    pub fn group_offsets(&self) -> Vec<(String, u64)> {
        self.shared.applied.lock().groups.iter().map(|(g, o)| (g.clone(), *o)).collect()
    }

    /// The log's end, updated as entries are applied.
    pub fn subscribe_appended(&self) -> watch::Receiver<u64> {
        self.shared.appended.subscribe()
    }

    /// What a replica's stream watches its super stream's consumer groups on.
    pub fn partition_groups(&self) -> watch::Sender<Arc<PartitionGroups>> {
        self.shared.partition_groups.clone()
    }

    /// Waits (at most `within`) until this replica's log reaches `end`; whether it did.
    pub async fn appended_up_to(&self, end: u64, within: std::time::Duration) -> bool {
        let mut appended = self.subscribe_appended();
        tokio::time::timeout(within, appended.wait_for(|at| *at >= end)).await.is_ok_and(|r| r.is_ok())
    }

    /// What this replica can give another catching up: its records from `from` (or from its
    /// oldest, if retention removed `from`), about `max_bytes` of them.
    pub fn read_chunk(&self, from: u64, max_bytes: u32) -> Result<StreamChunk, warren_storage::StorageError> {
        catch_up::read_chunk(&self.shared.log, from, max_bytes)
    }

    fn apply_entry(
        &self,
        applied: &mut Applied,
        log_id: LogId,
        payload: EntryPayload<QuorumRaft>,
    ) -> Result<Vec<Response>, warren_storage::StorageError> {
        let responses = match payload {
            EntryPayload::Blank => {
                self.shared.leader_changes.lock().blank_applied(&log_id, false);
                Vec::new()
            }
            EntryPayload::Membership(membership) => {
                applied.membership = StoredMembership::new(Some(log_id), membership);
                Vec::new()
            }
            EntryPayload::Normal(batch) => {
                if let Err(error) = batch.check_machine_version(GroupMachineKind::Stream) {
                    let group = &self.shared.group;
                    tracing::error!(group, index = log_id.index, %error, "the group's log cannot be applied further here");
                    return Err(warren_storage::StorageError::Failed(error.to_string()));
                }
                applied.clock_ms = applied.clock_ms.max(batch.at_ms);
                let mut appending = Appending::new(self.shared.log.next_offset());
                let responses = batch.ops.into_iter().map(|op| self.apply_op(applied, op, &mut appending)).collect();
                appending.write(&self.shared.log, applied.clock_ms)?;
                responses
            }
        };
        applied.last_applied = Some(log_id);
        Ok(responses)
    }

    fn apply_op(&self, applied: &mut Applied, op: Op, appending: &mut Appending) -> Response {
        match op {
            Op::Enqueue(message) => self.append(applied, message, appending),
            Op::CommitOffset { group, offset } => {
                applied.commit_offset(group, offset);
                Response::Done
            }
            // A stream keeps its messages: only retention removes them.
            Op::Purge => Response::Purged(0),
            Op::Sync => Response::NextOffset(applied.next_offset),
            Op::SetMachineVersion { version } => {
                applied.machine_version = version;
                Response::Done
            }
            Op::Group(op) => {
                applied.partition_groups.apply(&op);
                applied.partition_groups_changed = true;
                Response::Done
            }
            Op::ApplyRetention { retention } if applied.machine_version >= STREAM_POLICIES_GROUP_VERSION => {
                applied.retention = Some(retention);
                set_retention(&self.shared.group, &self.shared.log, retention);
                Response::Done
            }
            // Consumers of a stream read by offset on their own node: nothing else is replicated.
            _ => Response::Done,
        }
    }

    /// Appends a publish at the next offset, unless its key is in the deduplication window.
    fn append(&self, applied: &mut Applied, message: WireMessage, appending: &mut Appending) -> Response {
        let Some(message) = message.into_message() else { return Response::Rejected };
        let dedup = self.shared.deduplication.as_ref();
        if let (Some(key), Some(settings)) = (dedup.and_then(|s| key_in(&message.properties, s)), dedup) {
            if applied.dedup.contains(&key, applied.clock_ms, settings) {
                crate::dedup_window::note_dropped();
                return Response::Duplicate;
            }
            applied.dedup.insert(key, applied.clock_ms, settings);
        }
        let offset = applied.next_offset;
        applied.next_offset += 1;
        appending.push(offset, &message);
        Response::Enqueued(offset)
    }

    /// Saves `saved` as the current snapshot unless a newer one is.
    async fn save(&self, saved: SavedSnapshot) -> Result<(), QuorumError> {
        let _writing = self.shared.file_lock.lock().await;
        let index = |s: &SavedSnapshot| s.meta.last_log_id.map(|id| id.index);
        let current = self.shared.applied.lock().current.as_ref().and_then(index);
        if current.is_some() && current >= index(&saved) {
            return Ok(());
        }
        let bytes = saved.encode()?;
        let file = self.shared.file.clone();
        blocking(move || file.write(&bytes)).await?;
        self.shared.applied.lock().current = Some(saved);
        Ok(())
    }

    /// Makes the log durable up to its end (a snapshot is about to say it holds that much).
    async fn flush_log(&self) -> Result<(), QuorumError> {
        let log = Arc::clone(&self.shared.log);
        blocking(move || log.flush()).await
    }

    async fn build(&self) -> Result<MachineSnapshot, QuorumError> {
        let (meta, state) = {
            let applied = self.shared.applied.lock();
            let same = applied.current.as_ref().is_some_and(|c| c.meta.last_log_id == applied.last_applied);
            if let (true, Some(current)) = (same, &applied.current) {
                return current.to_machine();
            }
            let last_log_id = applied.last_applied;
            let snapshot_id = last_log_id.map(|id| format!("{}-{}", id.leader_id, id.index)).unwrap_or_default();
            let meta = SnapshotMeta { last_log_id, last_membership: applied.membership.clone(), snapshot_id };
            (meta, applied.snapshot(self.shared.log.first_offset()))
        };
        // Records appended after the state was read are past its next offset: applying their
        // entries again after a restart skips them.
        self.flush_log().await?;
        let saved = SavedSnapshot { meta, state };
        self.save(saved.clone()).await?;
        saved.to_machine()
    }

    async fn install_sent(&self, meta: &SnapshotMeta, data: &[u8]) -> Result<(), QuorumError> {
        let state = SavedSnapshot::state_sent(meta, data)?;
        let sources = catch_up::sources(meta, self.shared.replication.node_id());
        let fetch = |node: u64, from: u64, max_bytes: u32| {
            self.shared.replication.read_stream(node, &self.shared.group, from, max_bytes)
        };
        let had = self.shared.log.next_offset();
        catch_up::fill(&self.shared.log, state.first_offset, state.next_offset, &sources, fetch).await?;
        if self.shared.log.next_offset() != had {
            tracing::info!(
                group = %self.shared.group,
                from = had,
                to = state.next_offset,
                "stream replica caught up from another replica's log"
            );
        }
        self.flush_log().await?;
        let saved = SavedSnapshot { meta: meta.clone(), state };
        self.save(saved.clone()).await?;
        let mut applied = self.shared.applied.lock();
        *applied = Applied::restore(Some(saved));
        if let Some(retention) = applied.retention {
            set_retention(&self.shared.group, &self.shared.log, retention);
        }
        self.shared.appended.send_replace(self.shared.log.next_offset());
        self.shared.partition_groups.send_replace(Arc::new(applied.partition_groups.clone()));
        Ok(())
    }
}

/// The records one entry appends, encoded, written to the log in one batch.
struct Appending {
    /// The log's end when the entry began: offsets below it are in the log already.
    log_end: u64,
    /// The offset of the first record to write, which must be the log's end.
    first: Option<u64>,
    payloads: Vec<u8>,
    records: Vec<(usize, u32, u8)>,
}

impl Appending {
    fn new(log_end: u64) -> Self {
        Appending { log_end, first: None, payloads: Vec::new(), records: Vec::new() }
    }

    fn push(&mut self, offset: u64, message: &crate::message::Message) {
        if offset < self.log_end {
            return;
        }
        self.first.get_or_insert(offset);
        let (flags, tag_hash) = tag::header_fields(message_tag(message));
        message_codec::encode(message, &mut self.payloads);
        self.records.push((self.payloads.len(), tag_hash, flags));
    }

    /// Appends the records at `clock_ms`. A log that cannot take them stops the group (a
    /// replica with a hole in its log must not go on applying).
    fn write(self, log: &Log, clock_ms: u64) -> Result<(), warren_storage::StorageError> {
        let Some(first) = self.first else { return Ok(()) };
        if first != self.log_end {
            // The log lost records the state counts (a power loss under `--fsync never`):
            // appending would shift every later offset away from the other replicas'.
            return Err(warren_storage::StorageError::Failed(format!(
                "the stream's log ends at offset {} but its next record is offset {first}: records are missing",
                self.log_end
            )));
        }
        let mut start = 0;
        let records: Vec<NewRecord<'_>> = self
            .records
            .iter()
            .map(|&(end, tag_hash, flags)| {
                let payload = &self.payloads[start..end];
                start = end;
                NewRecord { timestamp_ms: clock_ms as i64, tag_hash, flags, payload }
            })
            .collect();
        log.append_batch(&records).map(|_| ())
    }
}

/// Makes the log keep what `retention` says from now on; what it deletes at once and fails to
/// is deleted at its next roll or age check.
fn set_retention(group: &str, log: &Log, retention: Retention) {
    if let Err(error) = log.set_retention(retention) {
        tracing::warn!(group, %error, "a stream replica could not delete the segments its new retention drops");
    }
}

async fn blocking(
    work: impl FnOnce() -> Result<(), warren_storage::StorageError> + Send + 'static,
) -> Result<(), QuorumError> {
    match tokio::task::spawn_blocking(work).await {
        Ok(done) => Ok(done?),
        Err(join) => Err(QuorumError::Storage(warren_storage::StorageError::Failed(join.to_string()))),
    }
}

fn snapshot_error(error: QuorumError) -> MachineError {
    MachineError::Snapshot(error.to_string())
}

impl StateMachine<QuorumRaft> for StreamStateMachine {
    fn applied_state(&self) -> (Option<LogId>, StoredMembership) {
        let applied = self.shared.applied.lock();
        (applied.last_applied, applied.membership.clone())
    }

    fn apply(&self, entries: Vec<Entry<QuorumRaft>>) -> Result<Vec<Vec<Response>>, MachineError> {
        let mut applied = self.shared.applied.lock();
        let mut responses = Vec::with_capacity(entries.len());
        for entry in entries {
            let log_id = entry.log_id;
            let applied_entry = self.apply_entry(&mut applied, log_id, entry.payload);
            responses.push(applied_entry.map_err(|e| MachineError::Apply { log_id, reason: e.to_string() })?);
        }
        // Published once per batch: a group of many members is cloned once, not per change.
        if std::mem::take(&mut applied.partition_groups_changed) {
            self.shared.partition_groups.send_replace(Arc::new(applied.partition_groups.clone()));
        }
        drop(applied);
        self.shared.appended.send_replace(self.shared.log.next_offset());
        Ok(responses)
    }

    fn take_snapshot(&self) -> SnapshotTaking {
        let machine = self.clone();
        Box::pin(async move { machine.build().await.map_err(snapshot_error) })
    }

    async fn install(&self, snapshot: MachineSnapshot) -> Result<(), MachineError> {
        self.install_sent(&snapshot.meta, &snapshot.data).await.map_err(snapshot_error)
    }

    fn current_snapshot(&self) -> Result<Option<MachineSnapshot>, MachineError> {
        let current = self.shared.applied.lock().current.clone();
        current.map(|c| c.to_machine()).transpose().map_err(snapshot_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quorum::{CommandBatch, SingleNode};

    fn open(dir: &std::path::Path) -> StreamStateMachine {
        let log = Arc::new(Log::open(dir.join("log"), warren_storage::LogConfig::default()).expect("log opens"));
        StreamStateMachine::open("s", dir.join("snapshot"), log, None, SingleNode::shared()).expect("opens")
    }

    fn entry(index: u64, op: Op) -> openraft::Entry<QuorumRaft> {
        let log_id = LogId::new(openraft::CommittedLeaderId::new(1, 1), index);
        openraft::Entry { log_id, payload: EntryPayload::Normal(CommandBatch { at_ms: 1_000, ops: vec![op] }) }
    }

    fn commit(group: &str, offset: u64) -> Op {
        Op::CommitOffset { group: group.into(), offset }
    }

    #[tokio::test]
    async fn a_replica_applies_the_machine_versions_it_knows_and_stops_at_a_newer_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let machine = open(dir.path());
        let newest = GroupMachineKind::Stream.newest_version();
        let known = vec![entry(1, commit("g", 5)), entry(2, Op::SetMachineVersion { version: newest })];
        machine.apply(known).expect("applied");
        assert_eq!(machine.shared.applied.lock().machine_version, newest);

        let newer = vec![
            entry(3, commit("g", 7)),
            entry(4, Op::SetMachineVersion { version: newest + 1 }),
            entry(5, commit("g", 9)),
        ];
        let error = machine.apply(newer).expect_err("a version this node does not know");
        assert!(error.to_string().contains("upgrade this node"), "{error}");
        assert_eq!(machine.last_applied().map(|id| id.index), Some(3), "applied up to the version entry");
        assert_eq!(machine.group_offset("g"), Some(7));
    }

    #[tokio::test]
    async fn a_retention_applies_from_its_entry_at_the_version_that_has_it_and_a_snapshot_keeps_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let machine = open(dir.path());
        let own = machine.log().retention();
        let policy = Retention { bytes: Some(10_000), age: Some(std::time::Duration::from_secs(60)) };
        machine.apply(vec![entry(1, Op::ApplyRetention { retention: policy })]).expect("applied");
        assert_eq!(machine.log().retention(), own, "below its version the op is nothing");
        assert_eq!(machine.applied_retention(), (FIRST_MACHINE_VERSION, None));

        let version = Op::SetMachineVersion { version: STREAM_POLICIES_GROUP_VERSION };
        machine.apply(vec![entry(2, version), entry(3, Op::ApplyRetention { retention: policy })]).expect("applied");
        assert_eq!(machine.log().retention(), policy);
        assert_eq!(machine.applied_retention(), (STREAM_POLICIES_GROUP_VERSION, Some(policy)));

        let sent = machine.build().await.expect("a snapshot");
        drop(machine);
        let reopened = open(dir.path());
        assert_eq!(reopened.log().retention(), policy, "the snapshot file gives the log its retention again");
        let other = tempfile::tempdir().expect("tempdir");
        let installed = open(other.path());
        installed.install_sent(&sent.meta, &sent.data).await.expect("installs");
        assert_eq!(installed.applied_retention(), (STREAM_POLICIES_GROUP_VERSION, Some(policy)));
        assert_eq!(installed.log().retention(), policy, "a sent snapshot carries it");
    }

    fn saved(machine_version: u16) -> SavedSnapshot {
        let state =
            StreamSnapshot { next_offset: 42, groups: vec![("g".into(), 40)], machine_version, ..Default::default() };
        let meta = SnapshotMeta { snapshot_id: "1-1-9".into(), ..Default::default() };
        SavedSnapshot { meta, state }
    }

    #[test]
    fn a_snapshot_at_the_first_machine_version_is_sent_as_earlier_releases_read_it() {
        let first = saved(FIRST_MACHINE_VERSION);
        let sent = first.to_machine().expect("encodes");
        assert_eq!(sent.meta.snapshot_id, "1-1-9");
        let earlier: StreamSnapshot = decode_whole(&sent.data).expect("an earlier release reads it");
        assert_eq!(earlier, first.state);

        let later = saved(2);
        let sent = later.to_machine().expect("encodes");
        assert_eq!(sent.meta.snapshot_id, format!("1-1-9{MACHINE_VERSION_ID_SUFFIX}2"));
        let received = SavedSnapshot::state_sent(&sent.meta, &sent.data).expect("decodes");
        assert_eq!(received, later.state);
        let again = SavedSnapshot { meta: sent.meta.clone(), state: received }.to_machine().expect("encodes");
        assert_eq!(again.meta.snapshot_id, sent.meta.snapshot_id, "the suffix is not repeated when passed on");
    }

    #[test]
    fn a_snapshot_file_keeps_the_machine_version_and_one_of_the_first_format_still_reads() {
        let later = saved(3);
        let read = SavedSnapshot::decode(&later.encode().expect("encodes")).expect("decodes");
        assert_eq!(read.state, later.state);

        let first = saved(FIRST_MACHINE_VERSION);
        let old_file = postcard::to_extend(&first, vec![FIRST_SNAPSHOT_FORMAT_VERSION]).expect("encodes");
        let read = SavedSnapshot::decode(&old_file).expect("a file of the first format reads");
        assert_eq!(read.state, first.state);
        assert_eq!(read.meta, first.meta);
    }
}
