//! Where Warren's replicated state machines meet openraft, once. Each machine (a quorum
//! queue's, a replicated stream's, the catalog's) implements [`StateMachine`] in its own terms:
//! what it applied, applying entries, taking, installing and reading back a snapshot.
//! [`Adapter`] is openraft's state machine and snapshot builder over any of them, with the
//! errors openraft expects; `typ` names the openraft types the machines use.

pub mod typ;

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{BasicNode, OptionalSend, RaftSnapshotBuilder, StorageError, StorageIOError};
use std::future::Future;
use std::io::Cursor;
use std::pin::Pin;
use typ::{Entry, LogId, RaftTypeConfig, SnapshotMeta, StoredMembership};

/// The Raft types of every group of Warren's: u64 node ids, `BasicNode`, openraft's entries,
/// snapshots in memory.
pub trait GroupTypes:
    RaftTypeConfig<NodeId = u64, Node = BasicNode, Entry = Entry<Self>, SnapshotData = Cursor<Vec<u8>>>
{
}

impl<C> GroupTypes for C where
    C: RaftTypeConfig<NodeId = u64, Node = BasicNode, Entry = Entry<C>, SnapshotData = Cursor<Vec<u8>>>
{
}

/// A snapshot as a machine gives and takes it: what it is of, and the encoded state.
#[derive(Debug, Clone)]
pub struct MachineSnapshot {
    /// Its last entry, membership and id.
    pub meta: SnapshotMeta,
    /// The machine's encoding of its state there.
    pub data: Vec<u8>,
}

/// Why a machine failed; openraft stops the group on any of them.
#[derive(Debug, thiserror::Error)]
pub enum MachineError {
    /// An entry cannot be applied on this node (the entries before it are).
    #[error("entry {} cannot be applied here: {reason}", log_id.index)]
    Apply {
        /// The entry.
        log_id: LogId,
        /// Why.
        reason: String,
    },
    /// What the machine applied cannot be kept.
    #[error("the applied state cannot be kept: {0}")]
    State(String),
    /// A snapshot cannot be taken, stored, read or installed.
    #[error("{0}")]
    Snapshot(String),
}

/// A snapshot being taken: the machine captures its state when it is asked (between two
/// applied batches), then encodes and stores it when openraft awaits this.
pub type SnapshotTaking = Pin<Box<dyn Future<Output = Result<MachineSnapshot, MachineError>> + Send>>;

/// A replicated state machine of Warren's, in its own terms (see the module documentation).
pub trait StateMachine<C: GroupTypes>: Clone + Send + Sync + 'static {
    /// The last entry applied and the membership then.
    fn applied_state(&self) -> (Option<LogId>, StoredMembership);

    /// Applies committed `entries` in order: a response per entry.
    fn apply(&self, entries: Vec<Entry<C>>) -> Result<Vec<C::R>, MachineError>;

    /// Starts taking a snapshot of the state as it is now (see [`SnapshotTaking`]).
    fn take_snapshot(&self) -> SnapshotTaking;

    /// Makes the state the snapshot's, sent by the leader.
    fn install(&self, snapshot: MachineSnapshot) -> impl Future<Output = Result<(), MachineError>> + Send;

    /// The snapshot stored last, if any.
    fn current_snapshot(&self) -> Result<Option<MachineSnapshot>, MachineError>;
}

/// openraft's state machine over a [`StateMachine`].
#[derive(Clone)]
pub struct Adapter<M>(M);

impl<M> Adapter<M> {
    /// openraft's view of `machine`.
    pub fn new(machine: M) -> Self {
        Adapter(machine)
    }
}

/// openraft's snapshot builder: awaits the snapshot the machine started taking (behind a lock
/// only because openraft wants the builder `Sync`; it is never contended).
pub struct SnapshotBuilder(parking_lot::Mutex<Option<SnapshotTaking>>);

fn storage_error(error: &MachineError, meta: Option<&SnapshotMeta>) -> StorageError<u64> {
    let io = match error {
        MachineError::Apply { log_id, .. } => StorageIOError::apply(*log_id, error),
        MachineError::State(_) => StorageIOError::write_state_machine(error),
        MachineError::Snapshot(_) => StorageIOError::write_snapshot(meta.map(SnapshotMeta::signature), error),
    };
    StorageError::from(io)
}

fn to_raft<C: GroupTypes>(snapshot: MachineSnapshot) -> Snapshot<C> {
    Snapshot { meta: snapshot.meta, snapshot: Box::new(Cursor::new(snapshot.data)) }
}

impl<C: GroupTypes> RaftSnapshotBuilder<C> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<C>, StorageError<u64>> {
        let taking =
            self.0.get_mut().take().ok_or_else(|| MachineError::Snapshot("the snapshot was built already".into()));
        let snapshot = match taking {
            Ok(taking) => taking.await,
            Err(error) => Err(error),
        };
        snapshot.map(to_raft).map_err(|error| storage_error(&error, None))
    }
}

impl<C: GroupTypes, M: StateMachine<C>> RaftStateMachine<C> for Adapter<M> {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError<u64>> {
        Ok(self.0.applied_state())
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<C::R>, StorageError<u64>>
    where
        I: IntoIterator<Item = Entry<C>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        self.0.apply(entries.into_iter().collect()).map_err(|error| storage_error(&error, None))
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        SnapshotBuilder(parking_lot::Mutex::new(Some(self.0.take_snapshot())))
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError<u64>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<u64>> {
        let snapshot = MachineSnapshot { meta: meta.clone(), data: snapshot.into_inner() };
        self.0.install(snapshot).await.map_err(|error| storage_error(&error, Some(meta)))
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<C>>, StorageError<u64>> {
        let current = self
            .0
            .current_snapshot()
            .map_err(|error| StorageError::from(StorageIOError::read_snapshot(None, &error)))?;
        Ok(current.map(to_raft))
    }
}
