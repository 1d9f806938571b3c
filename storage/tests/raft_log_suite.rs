//! openraft's own storage conformance suite (`openraft::testing::Suite`, 35 cases: log
//! state, vote, committed, reads, purge, truncate, apply, snapshots) against `RaftLog`,
//! under the `batch` policy with small segments and under `always`. Every case gets a
//! fresh directory. The suite builds its own tokio runtimes, so it runs from a plain
//! `#[test]`. The state machine here exists for the suite only: an in-memory map with
//! snapshots kept in memory.

mod raft_common;

use std::collections::BTreeMap;
use std::io::Cursor;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, RaftSnapshotBuilder, SnapshotMeta, StorageError, StorageIOError,
    StoredMembership,
};
use raft_common::{Request, Response, TypeConfig};
use serde::{Deserialize, Serialize};
use tempfile::TempDir;
use warren_storage::{FlushPolicy, LogConfig};

/// What the state machine holds and a snapshot carries.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Applied {
    last_applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, BasicNode>,
    values: BTreeMap<String, Bytes>,
}

#[derive(Default)]
struct Machine {
    applied: Applied,
    /// The last snapshot built or installed, encoded.
    snapshot: Option<(SnapshotMeta<u64, BasicNode>, Vec<u8>)>,
    snapshots_built: u64,
}

/// The test state machine, shared by its snapshot builders.
#[derive(Clone, Default)]
struct StateMachine(Arc<Mutex<Machine>>);

impl StateMachine {
    fn machine(&self) -> std::sync::MutexGuard<'_, Machine> {
        self.0.lock().expect("state machine lock")
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<u64>> {
        let mut m = self.machine();
        let data = postcard::to_stdvec(&m.applied).map_err(|e| StorageIOError::read_state_machine(&e))?;
        m.snapshots_built += 1;
        let last = m.applied.last_applied;
        let snapshot_id = match last {
            Some(id) => format!("{}-{}-{}", id.leader_id, id.index, m.snapshots_built),
            None => format!("--{}", m.snapshots_built),
        };
        let meta = SnapshotMeta { last_log_id: last, last_membership: m.applied.membership.clone(), snapshot_id };
        m.snapshot = Some((meta.clone(), data.clone()));
        Ok(Snapshot { meta, snapshot: Box::new(Cursor::new(data)) })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<u64>>, StoredMembership<u64, BasicNode>), StorageError<u64>> {
        let m = self.machine();
        Ok((m.applied.last_applied, m.applied.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Response>, StorageError<u64>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
    {
        let mut m = self.machine();
        let mut responses = Vec::new();
        for entry in entries {
            m.applied.last_applied = Some(entry.log_id);
            let response = match entry.payload {
                EntryPayload::Blank => Response::default(),
                EntryPayload::Normal(Request::Set { key, body }) => {
                    Response { previous: m.applied.values.insert(key, body) }
                }
                EntryPayload::Membership(membership) => {
                    m.applied.membership = StoredMembership::new(Some(entry.log_id), membership);
                    Response::default()
                }
            };
            responses.push(response);
        }
        Ok(responses)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError<u64>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<u64>> {
        let data = snapshot.into_inner();
        let applied: Applied =
            postcard::from_bytes(&data).map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
        let mut m = self.machine();
        m.applied = Applied { last_applied: meta.last_log_id, membership: meta.last_membership.clone(), ..applied };
        m.snapshot = Some((meta.clone(), data));
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError<u64>> {
        let m = self.machine();
        Ok(m.snapshot
            .as_ref()
            .map(|(meta, data)| Snapshot { meta: meta.clone(), snapshot: Box::new(Cursor::new(data.clone())) }))
    }
}

/// Opens a `RaftLog` in a fresh temporary directory per case (the directory is the guard).
struct Builder {
    config: LogConfig,
}

impl StoreBuilder<TypeConfig, raft_common::Log, StateMachine, TempDir> for Builder {
    async fn build(&self) -> Result<(TempDir, raft_common::Log, StateMachine), StorageError<u64>> {
        let dir = tempfile::tempdir().map_err(|e| StorageIOError::write(&e))?;
        let log = raft_common::Log::open(dir.path(), self.config.clone()).map_err(|e| StorageIOError::write(&e))?;
        Ok((dir, log, StateMachine::default()))
    }
}

#[test]
fn openraft_suite_batch_small_segments() {
    let config = raft_common::small_config(FlushPolicy::Batch);
    Suite::test_all(Builder { config }).expect("openraft's storage suite under batch");
}

#[test]
fn openraft_suite_always() {
    let config = LogConfig { flush_policy: FlushPolicy::Always, ..LogConfig::default() };
    Suite::test_all(Builder { config }).expect("openraft's storage suite under always");
}
