//! The catalog group's openraft glue: its type config ([`CatalogRaft`]) and state machine
//! ([`CatalogMachine`]), which applies each committed [`CatalogCommand`] to this node's
//! virtual hosts, as the channel that received the method would have.
//!
//! The Raft log is the record of every change: an entry is synced there before it is
//! applied, and applying it writes the virtual hosts' definitions journals without syncing
//! them (a change costs one sync, the log's). What the state machine keeps on disk besides
//! is its checkpoint: the last entry applied once every journal was synced up to it. A
//! restart replays the log from the checkpoint onto the journals as they were left, which is
//! safe because only changes that cannot be undone by replaying them again are let through
//! between two checkpoints: declares and binds, which applied again find themselves done, and
//! whose queues reopen the files they left ([`Broker::set_replaying`]). A change that
//! destroys something (a delete, an unbind, access, membership) is checkpointed before its
//! `-ok`, so no replay ever runs it again over something declared after it (a delete
//! replayed over a queue declared again later would lose its messages). Once every node can install one (the `catalog_snapshots` feature flag), a
//! snapshot ([`CatalogSnapshot`], the catalog as it stands once the entries so far are
//! applied) is taken every so many entries and openraft purges the log behind it; a node that
//! fell behind the purge installs the snapshot instead. The catalog's machine version is kept
//! with the applied state, and an entry that moves it beyond what this node knows is not applied.

use super::applied_state::{decode_applied, Applied};
use super::command::{CatalogCommand, ChangeOutcome, ChangeResult, DefinitionOp};
use super::local::ANYONE;
use super::snapshot::CatalogSnapshot;
use crate::broker::Broker;
use crate::connection_id::ConnectionId;
use crate::error::{BrokerError, BrokerResult, ReplyCode};
use crate::exchange::ExchangeDefinition;
use crate::feature_flags::{check_known, Machine};
use crate::queue::{QueueArguments, QueueDefinition};
use crate::quorum::leader_changes::LeaderChanges;
use crate::quorum::Replication;
use crate::raft_adapter::typ::{Entry, EntryPayload, LogId, SnapshotMeta, StoredMembership};
use crate::raft_adapter::{MachineError, MachineSnapshot, SnapshotTaking, StateMachine};
use crate::vhost::DeletedQueue;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use tokio::sync::watch;
use warren_storage::{AlternatingFile, SnapshotFile};

openraft::declare_raft_types!(
    /// The catalog group's Raft types: entries carry [`CatalogCommand`]s and apply to a
    /// [`ChangeResult`]; u64 node ids, `BasicNode`, tokio.
    pub CatalogRaft:
        D = CatalogCommand,
        R = ChangeResult,
);

/// The catalog group's name in logs.
const GROUP_LABEL: &str = "metadata";
/// Results of this node's own commands kept for their proposer, at most: one that is never
/// taken (its client went away) is dropped after this many newer ones.
const RESULTS_KEPT: usize = 4096;
/// The snapshot file's format version.
const SAVED_SNAPSHOT_FORMAT_VERSION: u8 = 1;

/// A snapshot as kept in its file: openraft's metadata and the encoded [`CatalogSnapshot`].
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SavedSnapshot {
    meta: SnapshotMeta,
    data: Vec<u8>,
}

impl From<SavedSnapshot> for MachineSnapshot {
    fn from(saved: SavedSnapshot) -> Self {
        MachineSnapshot { meta: saved.meta, data: saved.data }
    }
}

struct Shared {
    node_id: u64,
    broker: Weak<Broker>,
    replication: Arc<dyn Replication>,
    /// The applied state, rewritten in place after every applied batch.
    file: AlternatingFile,
    /// Where releases before the alternating file kept it (read once, removed after the
    /// first write).
    legacy: Mutex<Option<SnapshotFile>>,
    /// The current snapshot, replaced atomically (held while it is written).
    snapshot: Mutex<SnapshotFile>,
    applied: Mutex<Applied>,
    /// The results of commands proposed by this node, by log index, until taken.
    results: Mutex<BTreeMap<u64, ChangeResult>>,
    /// Queues deleted by commands this node proposed, by log index, until taken: their
    /// consumers here are told once the proposer's `-ok` is out, as RabbitMQ does.
    deleted: Mutex<BTreeMap<u64, DeletedQueue>>,
    /// The last applied index.
    applied_index: watch::Sender<u64>,
    leader_changes: Mutex<LeaderChanges>,
    /// The last entry in the log when this node started: entries up to it are replayed.
    recovery_point: u64,
    /// Whether the replay up to [`Shared::recovery_point`] is done.
    recovered: std::sync::atomic::AtomicBool,
}

/// This node's metadata state machine.
#[derive(Clone)]
pub struct CatalogMachine {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for CatalogMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CatalogMachine").field("node_id", &self.shared.node_id).finish_non_exhaustive()
    }
}

impl CatalogMachine {
    /// The state machine of node `node_id`, applying to `broker`'s virtual hosts, its applied
    /// state kept in `applied_path` and its current snapshot beside it. `recovery_point` is
    /// the index of the last entry in the log at start: the entries after the checkpoint up
    /// to it are a replay.
    pub fn open(
        node_id: u64,
        broker: &Arc<Broker>,
        replication: Arc<dyn Replication>,
        applied_path: impl Into<PathBuf>,
        recovery_point: u64,
    ) -> Result<Self, warren_storage::StorageError> {
        let applied_path = applied_path.into();
        let snapshot = SnapshotFile::new(snapshot_path(&applied_path));
        let file = AlternatingFile::new(&applied_path);
        let legacy = SnapshotFile::new(applied_path);
        let applied: Applied = match file.read()?.or(legacy.read()?) {
            Some(bytes) => decode_applied(&bytes)?,
            None => Applied::default(),
        };
        let legacy = legacy.path().exists().then_some(legacy);
        check_known(Machine::Catalog, applied.machine_version)
            .map_err(|e| warren_storage::StorageError::Failed(e.to_string()))?;
        for (name, address) in &applied.joined {
            replication.add_node(name, address);
        }
        for node in &applied.forgotten {
            replication.forget_node(*node);
        }
        let index = applied.last_applied.map_or(0, |id| id.index);
        let shared = Shared {
            node_id,
            broker: Arc::downgrade(broker),
            replication,
            file,
            legacy: Mutex::new(legacy),
            snapshot: Mutex::new(snapshot),
            applied: Mutex::new(applied),
            results: Mutex::new(BTreeMap::new()),
            deleted: Mutex::new(BTreeMap::new()),
            applied_index: watch::Sender::new(index),
            leader_changes: Mutex::new(LeaderChanges::new(GROUP_LABEL)),
            recovery_point,
            recovered: std::sync::atomic::AtomicBool::new(false),
        };
        let machine = CatalogMachine { shared: Arc::new(shared) };
        if recovery_point <= index {
            machine.finish_recovery(broker);
        } else {
            broker.set_replaying(true);
        }
        Ok(machine)
    }

    /// The replay is done: declares are new again, and the files no definition owns go.
    /// What a queue named `name` declared with `arguments` in `vhost` would run with: its
    /// own arguments with the vhost's policies (which may place it: `queue-leader-locator`,
    /// `initial-cluster-size`). 406 if its own arguments are not valid.
    pub(crate) fn resolve_queue(
        &self,
        vhost: &str,
        name: &str,
        arguments: &amq_protocol::types::FieldTable,
    ) -> BrokerResult<QueueArguments> {
        match self.shared.broker.upgrade().and_then(|broker| broker.vhost(vhost)) {
            Some(vhost) => vhost.resolve_arguments(name, arguments).map(|resolved| resolved.arguments),
            None => QueueArguments::parse(arguments),
        }
    }

    fn finish_recovery(&self, broker: &Broker) {
        if self.shared.recovered.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return;
        }
        broker.set_replaying(false);
        broker.remove_orphaned_stores();
    }

    /// Syncs every virtual host's definitions, then records the last applied entry as the
    /// checkpoint a restart replays the log from.
    pub fn checkpoint(&self) -> Result<(), warren_storage::StorageError> {
        if let Some(broker) = self.shared.broker.upgrade() {
            broker.sync_definitions().map_err(|e| warren_storage::StorageError::Failed(e.to_string()))?;
        }
        self.save()
    }

    /// Whether applying `entry` cannot be repeated safely over later changes: it must be
    /// checkpointed before it is answered (see the module documentation).
    fn destroys(entry: &Entry<CatalogRaft>) -> bool {
        match &entry.payload {
            EntryPayload::Normal(command) => !matches!(
                command.op,
                DefinitionOp::DeclareExchange { .. }
                    | DefinitionOp::DeclareReplicatedExchange { .. }
                    | DefinitionOp::DeclareQueue { .. }
                    | DefinitionOp::Bind { .. }
            ),
            EntryPayload::Membership(_) => true,
            EntryPayload::Blank => false,
        }
    }

    /// A declare of something that does not outlive a restart, replayed after one: skipped.
    fn is_transient_declare(entry: &Entry<CatalogRaft>) -> bool {
        matches!(
            &entry.payload,
            EntryPayload::Normal(CatalogCommand {
                op: DefinitionOp::DeclareExchange { durable: false, .. }
                    | DefinitionOp::DeclareQueue { durable: false, .. },
                ..
            })
        )
    }

    /// Removes the applied state kept at `applied_path` (`join_cluster` starts the member
    /// afresh).
    pub fn remove_applied(applied_path: &std::path::Path) -> std::io::Result<()> {
        AlternatingFile::new(applied_path).remove()?;
        for path in [applied_path.to_path_buf(), snapshot_path(applied_path)] {
            match std::fs::remove_file(path) {
                Err(error) if error.kind() != std::io::ErrorKind::NotFound => return Err(error),
                _ => {}
            }
        }
        Ok(())
    }

    /// The catalog's machine version in effect here.
    pub fn machine_version(&self) -> u16 {
        self.shared.applied.lock().machine_version
    }

    /// The index of the last entry applied here, as it moves.
    pub fn applied_index(&self) -> watch::Receiver<u64> {
        self.shared.applied_index.subscribe()
    }

    /// Waits until the entry at `index` is applied here; then the result of this node's own
    /// command at that index (`None` if it was not this node's, or was taken).
    pub async fn applied(&self, index: u64) -> Option<ChangeResult> {
        let mut applied = self.shared.applied_index.subscribe();
        let _ = applied.wait_for(|at| *at >= index).await;
        self.shared.results.lock().remove(&index)
    }

    /// The queue deleted by this node's own command at `index`, applied already, if any.
    pub(super) fn take_deleted(&self, index: u64) -> Option<DeletedQueue> {
        self.shared.deleted.lock().remove(&index)
    }

    /// Waits at most `within` until the entry at `index` is applied here; whether it is.
    pub async fn applied_within(&self, index: u64, within: std::time::Duration) -> bool {
        let mut applied = self.shared.applied_index.subscribe();
        tokio::time::timeout(within, applied.wait_for(|at| *at >= index)).await.is_ok_and(|r| r.is_ok())
    }

    fn save(&self) -> Result<(), warren_storage::StorageError> {
        let bytes = self.shared.applied.lock().encode()?;
        self.shared.file.write(&bytes)?;
        if let Some(legacy) = self.shared.legacy.lock().take() {
            if let Err(error) = std::fs::remove_file(legacy.path()) {
                if error.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(file = %legacy.path().display(), %error, "cannot remove the replaced applied state");
                }
            }
        }
        Ok(())
    }

    /// Applies one command to this node's virtual host; a queue it deleted is returned, not
    /// dropped (which tells its consumers).
    fn apply_keeping(&self, command: &CatalogCommand) -> (ChangeResult, Option<DeletedQueue>) {
        let DefinitionOp::DeleteQueue { name, if_unused, if_empty } = &command.op else {
            return (self.apply_command(command), None);
        };
        let vhost = self.shared.broker.upgrade().and_then(|broker| broker.vhost(&command.vhost));
        let Some(vhost) = vhost else {
            return (Err(BrokerError::new(ReplyCode::NotAllowed, format!("no vhost '{}'", command.vhost))), None);
        };
        match vhost.delete_queue(name, *if_unused, *if_empty, ANYONE) {
            Ok(deleted) => {
                (Ok(ChangeOutcome { message_count: deleted.message_count, consumer_count: 0 }), Some(deleted))
            }
            Err(error) => (Err(error), None),
        }
    }

    /// Applies one command to this node's virtual host.
    fn apply_command(&self, command: &CatalogCommand) -> ChangeResult {
        let broker =
            self.shared.broker.upgrade().ok_or_else(|| BrokerError::new(ReplyCode::InternalError, "stopping"))?;
        match &command.op {
            DefinitionOp::Access(change) => return broker.apply_access(change).map(|()| ChangeOutcome::default()),
            DefinitionOp::SetMachineVersion { version } => {
                // apply() has refused a version this node does not know.
                self.shared.applied.lock().machine_version = *version;
                tracing::info!(version, "the catalog's machine version changed");
                // A flag may have brought policies to a kind of queue that ran without them.
                for vhost in broker.vhosts() {
                    vhost.set_policies(vhost.policies());
                }
                return Ok(ChangeOutcome::default());
            }
            _ => {}
        }
        let vhost = broker
            .vhost(&command.vhost)
            .ok_or_else(|| BrokerError::new(ReplyCode::NotAllowed, format!("no vhost '{}'", command.vhost)))?;
        match &command.op {
            DefinitionOp::DeclareQueue { name, durable, auto_delete, arguments, members } => {
                let definition = QueueDefinition {
                    name: name.clone(),
                    durable: *durable,
                    exclusive_owner: None,
                    auto_delete: *auto_delete,
                    arguments: arguments.clone(),
                };
                let homes = match (QueueArguments::parse(arguments)?.queue_type, members) {
                    (kind, Some(members)) if kind.is_replicated() => members.ids_leader_first(),
                    // Classic queues (and streams declared before streams were replicated)
                    // live on the node they were declared on.
                    _ => vec![command.origin],
                };
                if !homes.contains(&self.shared.node_id) {
                    // Its clients here reach it through a stand-in.
                    vhost.declare_remote_queue(definition, homes)?;
                    return Ok(ChangeOutcome::default());
                }
                if let Some(members) = members {
                    self.shared.replication.plan_members(&command.vhost, name, members.clone());
                }
                let declared = vhost.declare_proposed_queue(definition, ConnectionId(0))?;
                return Ok(ChangeOutcome {
                    message_count: declared.message_count,
                    consumer_count: declared.consumer_count,
                });
            }
            DefinitionOp::DeclareReplicatedExchange { name, kind, auto_delete, internal, arguments, members } => {
                let definition =
                    ExchangeDefinition::declared(name, kind, true, *auto_delete, *internal, arguments.clone())?;
                vhost.declare_replicated_exchange(definition, members.clone())?;
            }
            DefinitionOp::AddMember { name, node, node_id, arguments } => {
                self.add_member(&vhost, &command.vhost, name, node, *node_id, arguments)?;
            }
            DefinitionOp::DeleteMember { name, node_id } => self.delete_member(&vhost, name, *node_id),
            DefinitionOp::ForgetNode { node_id } => {
                self.shared.applied.lock().forgotten.insert(*node_id);
                self.shared.replication.forget_node(*node_id);
            }
            DefinitionOp::AddNode { name, address } => {
                let mut applied = self.shared.applied.lock();
                applied.joined.retain(|(joined, _)| joined != name);
                applied.joined.push((name.clone(), address.clone()));
                let id = crate::node::NodeId::of(name).raft_id();
                applied.forgotten.remove(&id);
                drop(applied);
                self.shared.replication.add_node(name, address);
            }
            other => return super::local::apply_here(&vhost, other, ANYONE).unwrap_or(Ok(ChangeOutcome::default())),
        }
        Ok(ChangeOutcome::default())
    }

    /// The new member's node creates its replica (it is not initialized: the leader sends it
    /// the log); the leader's node adds it to the group.
    fn add_member(
        &self,
        vhost: &Arc<crate::vhost::VirtualHost>,
        vhost_name: &str,
        name: &str,
        node: &str,
        node_id: u64,
        arguments: &amq_protocol::types::FieldTable,
    ) -> Result<(), BrokerError> {
        let me = self.shared.node_id;
        let stand_in = vhost.queue(name).map(|queue| queue.homes().is_some());
        if node_id == me && !matches!(stand_in, Ok(false)) {
            self.shared.replication.plan_members(vhost_name, name, crate::quorum::InitialMembers::joining());
            let definition = QueueDefinition {
                name: name.to_string(),
                durable: true,
                exclusive_owner: None,
                auto_delete: false,
                arguments: arguments.clone(),
            };
            match stand_in {
                Ok(_) => vhost.replace_stand_in(definition)?,
                Err(_) => drop(vhost.declare_queue(definition, ConnectionId(0))?),
            }
        }
        let Ok(queue) = vhost.queue(name) else { return Ok(()) };
        if queue.replicas().is_some_and(|group| group.is_leader()) {
            let (queue, node) = (Arc::clone(&queue), openraft::BasicNode::new(node));
            tokio::spawn(async move {
                if let Some(group) = queue.replicas() {
                    match group.add_member(node_id, node).await {
                        Ok(()) => tracing::info!(queue = queue.name(), node_id, "replica added"),
                        Err(error) => tracing::warn!(queue = queue.name(), %error, "cannot add a replica"),
                    }
                }
            });
        }
        Ok(())
    }

    /// The leader's node removes the member; the member's node drops its replica once it is
    /// out of the group.
    fn delete_member(&self, vhost: &Arc<crate::vhost::VirtualHost>, name: &str, node_id: u64) {
        let Ok(queue) = vhost.queue(name) else { return };
        let Some(group) = queue.replicas() else { return };
        if group.is_leader() {
            let queue = Arc::clone(&queue);
            tokio::spawn(async move {
                if let Some(group) = queue.replicas() {
                    if let Err(error) = group.remove_member(node_id).await {
                        tracing::warn!(queue = queue.name(), %error, "cannot remove a replica");
                    }
                }
            });
        }
        if node_id == self.shared.node_id {
            let (vhost, queue) = (Arc::clone(vhost), Arc::clone(&queue));
            tokio::spawn(async move { drop_replica_when_out(vhost, queue, node_id).await });
        }
    }

    /// The catalog as it stands now, after the last applied entry.
    fn take_snapshot_now(&self) -> Result<SavedSnapshot, String> {
        let broker = self.shared.broker.upgrade().ok_or("the broker is stopping")?;
        let applied = self.shared.applied.lock().clone();
        let catalog = CatalogSnapshot::capture(&broker, self.shared.node_id, applied.forgotten, applied.joined)
            .at_machine_version(applied.machine_version);
        let data = catalog.encode().map_err(|e| e.to_string())?;
        let snapshot_id =
            applied.last_applied.map_or_else(|| "none".into(), |id| format!("{}-{}", id.leader_id, id.index));
        let meta = SnapshotMeta { last_log_id: applied.last_applied, last_membership: applied.membership, snapshot_id };
        Ok(SavedSnapshot { meta, data })
    }

    fn store_snapshot(&self, snapshot: &SavedSnapshot) -> Result<(), warren_storage::StorageError> {
        let bytes = postcard::to_extend(snapshot, vec![SAVED_SNAPSHOT_FORMAT_VERSION])
            .map_err(|e| warren_storage::StorageError::Failed(format!("cannot encode the catalog snapshot: {e}")))?;
        self.shared.snapshot.lock().write(&bytes)
    }

    fn stored_snapshot(&self) -> Result<Option<SavedSnapshot>, warren_storage::StorageError> {
        let Some(bytes) = self.shared.snapshot.lock().read()? else { return Ok(None) };
        let undecodable = |why: String| warren_storage::StorageError::Failed(format!("catalog snapshot: {why}"));
        match bytes.split_first() {
            Some((&SAVED_SNAPSHOT_FORMAT_VERSION, rest)) => {
                postcard::from_bytes(rest).map(Some).map_err(|e| undecodable(e.to_string()))
            }
            _ => Err(undecodable("unknown format".into())),
        }
    }

    /// Makes this node's catalog the snapshot's (see [`CatalogSnapshot::changes_from`]): a
    /// change refused here is logged and skipped, as an entry refused here would be.
    fn install_saved(&self, snapshot: &SavedSnapshot) -> Result<(), String> {
        let meta = &snapshot.meta;
        let catalog = CatalogSnapshot::decode(&snapshot.data).map_err(|e| e.to_string())?;
        check_known(Machine::Catalog, catalog.machine_version).map_err(|e| e.to_string())?;
        let broker = self.shared.broker.upgrade().ok_or("the broker is stopping")?;
        let changes = catalog.changes_from(&broker, self.shared.node_id);
        tracing::info!(index = ?meta.last_log_id.map(|id| id.index), changes = changes.len(), "installing the catalog's snapshot");
        for command in changes {
            if let Err(error) = self.apply_command(&command) {
                tracing::warn!(vhost = command.vhost, op = ?command.op, %error, "a change of the catalog's snapshot is refused here");
            }
        }
        {
            let mut applied = self.shared.applied.lock();
            applied.last_applied = meta.last_log_id;
            applied.membership = meta.last_membership.clone();
            applied.forgotten = catalog.forgotten.clone();
            applied.joined = catalog.joined.clone();
            applied.machine_version = catalog.machine_version;
        }
        for (name, address) in &catalog.joined {
            self.shared.replication.add_node(name, address);
        }
        for node in &catalog.forgotten {
            self.shared.replication.forget_node(*node);
        }
        self.checkpoint().map_err(|e| e.to_string())?;
        self.store_snapshot(snapshot).map_err(|e| e.to_string())?;
        self.shared.applied_index.send_replace(meta.last_log_id.map_or(0, |id| id.index));
        Ok(())
    }

    /// Refuses an entry that moves the catalog to a machine version this node does not know.
    fn check_version(entry: &openraft::Entry<CatalogRaft>) -> Result<(), crate::feature_flags::NewerVersion> {
        match &entry.payload {
            EntryPayload::Normal(CatalogCommand { op: DefinitionOp::SetMachineVersion { version }, .. }) => {
                check_known(Machine::Catalog, *version)
            }
            _ => Ok(()),
        }
    }

    fn apply_entry(&self, log_id: LogId, payload: EntryPayload<CatalogRaft>) -> ChangeResult {
        let result = match payload {
            EntryPayload::Normal(command) => {
                let (result, deleted) = self.apply_keeping(&command);
                if command.origin == self.shared.node_id {
                    let mut results = self.shared.results.lock();
                    results.insert(log_id.index, result.clone());
                    while results.len() > RESULTS_KEPT {
                        results.pop_first();
                    }
                    if let Some(deleted) = deleted {
                        let mut held = self.shared.deleted.lock();
                        held.insert(log_id.index, deleted);
                        while held.len() > RESULTS_KEPT {
                            held.pop_first();
                        }
                    }
                } else if let Err(error) = &result {
                    tracing::debug!(index = log_id.index, %error, "catalog change refused here too");
                }
                result
            }
            EntryPayload::Membership(membership) => {
                self.shared.applied.lock().membership = StoredMembership::new(Some(log_id), membership);
                Ok(ChangeOutcome::default())
            }
            EntryPayload::Blank => {
                // The applied index is stored with every entry: nothing is applied twice.
                self.shared.leader_changes.lock().blank_applied(&log_id, false);
                Ok(ChangeOutcome::default())
            }
        };
        self.shared.applied.lock().last_applied = Some(log_id);
        result
    }
}

/// How long a removed member waits for the group to drop it before it drops its replica
/// anyway.
const MEMBER_REMOVAL_WAIT_MS: u64 = 30_000;

/// Drops this node's replica of `queue` (its files too) once the group no longer counts it
/// as a member; a stand-in forwarding to the remaining members takes its place.
async fn drop_replica_when_out(vhost: Arc<crate::vhost::VirtualHost>, queue: Arc<crate::queue::Queue>, me: u64) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(MEMBER_REMOVAL_WAIT_MS);
    while queue.replicas().is_some_and(|g| g.members().iter().any(|(id, _)| *id == me))
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let members = queue.replicas().map(|g| g.members()).unwrap_or_default();
    let homes = members.into_iter().map(|(id, _)| id).filter(|id| *id != me).collect();
    vhost.replace_with_stand_in(&queue, homes);
}

fn snapshot_error(error: impl ToString) -> MachineError {
    MachineError::Snapshot(error.to_string())
}

/// The current snapshot's file, beside the applied state's.
fn snapshot_path(applied_path: &std::path::Path) -> PathBuf {
    let mut name = applied_path.file_name().unwrap_or_default().to_os_string();
    name.push(".snapshot");
    applied_path.with_file_name(name)
}

impl StateMachine<CatalogRaft> for CatalogMachine {
    fn applied_state(&self) -> (Option<LogId>, StoredMembership) {
        let applied = self.shared.applied.lock();
        (applied.last_applied, applied.membership.clone())
    }

    fn apply(&self, entries: Vec<Entry<CatalogRaft>>) -> Result<Vec<ChangeResult>, MachineError> {
        let mut results = Vec::with_capacity(entries.len());
        let mut refused = None;
        let mut checkpoint = false;
        for entry in entries {
            if let Err(error) = Self::check_version(&entry) {
                // Applied no further: with semantics this release does not know, this node
                // would diverge from the others.
                tracing::error!(index = entry.log_id.index, %error, "the catalog's log cannot be applied further here");
                refused = Some(MachineError::Apply { log_id: entry.log_id, reason: error.to_string() });
                break;
            }
            checkpoint |= Self::destroys(&entry);
            if entry.log_id.index <= self.shared.recovery_point && Self::is_transient_declare(&entry) {
                self.shared.applied.lock().last_applied = Some(entry.log_id);
                results.push(Ok(ChangeOutcome::default()));
                continue;
            }
            results.push(self.apply_entry(entry.log_id, entry.payload));
        }
        let index = self.shared.applied.lock().last_applied.map_or(0, |id| id.index);
        let recovering = !self.shared.recovered.load(std::sync::atomic::Ordering::Acquire);
        if checkpoint || (recovering && index >= self.shared.recovery_point) {
            self.checkpoint().map_err(|e| MachineError::State(e.to_string()))?;
        }
        if recovering && index >= self.shared.recovery_point {
            if let Some(broker) = self.shared.broker.upgrade() {
                self.finish_recovery(&broker);
            }
        }
        self.shared.applied_index.send_replace(index);
        match refused {
            Some(error) => Err(error),
            None => Ok(results),
        }
    }

    /// Taken at once, between two applied batches, so that it is the catalog at its index;
    /// written to its file when openraft awaits it.
    fn take_snapshot(&self) -> SnapshotTaking {
        // The log is purged behind the snapshot: every journal must hold what it covers.
        let checkpointed = self.checkpoint().map_err(|e| e.to_string());
        let (machine, taken) = (self.clone(), checkpointed.and_then(|()| self.take_snapshot_now()));
        Box::pin(async move {
            let snapshot = taken.map_err(snapshot_error)?;
            let saved = snapshot.clone();
            match tokio::task::spawn_blocking(move || machine.store_snapshot(&saved)).await {
                Ok(Ok(())) => Ok(snapshot.into()),
                Ok(Err(error)) => Err(snapshot_error(error)),
                Err(join) => Err(snapshot_error(join)),
            }
        })
    }

    async fn install(&self, snapshot: MachineSnapshot) -> Result<(), MachineError> {
        let saved = SavedSnapshot { meta: snapshot.meta, data: snapshot.data };
        self.install_saved(&saved).map_err(snapshot_error)
    }

    fn current_snapshot(&self) -> Result<Option<MachineSnapshot>, MachineError> {
        let current = self.stored_snapshot().map_err(snapshot_error)?;
        Ok(current.map(MachineSnapshot::from))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message_store::LogStoreConfig;
    use crate::quorum::SingleNode;

    fn applied_at(index: u64) -> Applied {
        Applied { last_applied: Some(LogId::new(openraft::CommittedLeaderId::new(1, 1), index)), ..Applied::default() }
    }

    fn encoded(applied: &Applied) -> Vec<u8> {
        applied.encode().expect("encodes")
    }

    #[tokio::test]
    async fn the_applied_state_of_a_release_before_the_alternating_file_is_read_then_replaced() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = Broker::open(&dir.path().join("data"), LogStoreConfig::default()).expect("broker");
        let path = dir.path().join("metadata-applied");
        SnapshotFile::new(&path).write(&encoded(&applied_at(41))).expect("the old release's file");

        let machine = CatalogMachine::open(1, &broker, SingleNode::shared(), &path, 0).expect("open");
        let (last, _) = machine.applied_state();
        assert_eq!(last.map(|id| id.index), Some(41), "read from the old file");
        *machine.shared.applied.lock() = applied_at(42);
        machine.save().expect("save");
        assert!(!path.exists(), "the old file goes once the new one holds the state");

        let reopened = CatalogMachine::open(1, &broker, SingleNode::shared(), &path, 0).expect("reopen");
        let (last, _) = reopened.applied_state();
        assert_eq!(last.map(|id| id.index), Some(42));
        CatalogMachine::remove_applied(&path).expect("remove");
        let fresh = CatalogMachine::open(1, &broker, SingleNode::shared(), &path, 0).expect("open afresh");
        assert_eq!(fresh.applied_state().0, None, "join_cluster starts afresh");
    }
}
