//! Helpers shared by the Raft log tests: a type config whose commands carry message
//! bodies as `Bytes`, entry builders, and logs opened with a private flusher.
#![allow(dead_code)]

use std::io::Cursor;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use openraft::{BasicNode, CommittedLeaderId, Entry, EntryPayload, LogId, Membership};
use serde::{Deserialize, Serialize};
use warren_storage::{FlushPolicy, Flusher, LogConfig, RaftLog};

/// A command of the test state machine: set `key` to `body`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Store `body` under `key`.
    Set { key: String, body: Bytes },
}

/// What applying an entry returns: the body it replaced, if any.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    pub previous: Option<Bytes>,
}

openraft::declare_raft_types!(
    /// The test type config: u64 node ids, `BasicNode`, `Entry`, tokio.
    pub TypeConfig: D = Request, R = Response,
);

pub type Log = RaftLog<TypeConfig>;

pub fn log_id(term: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, 0), index)
}

/// A deterministic body for entry `index`, of varying length (0 to ~600 bytes).
pub fn body(index: u64) -> Bytes {
    let len = (index * 53 % 600) as usize;
    Bytes::from((0..len).map(|j| (index as usize * 7 + j) as u8).collect::<Vec<u8>>())
}

/// A normal entry at `index` in `term` carrying [`body`].
pub fn normal(term: u64, index: u64) -> Entry<TypeConfig> {
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Normal(Request::Set { key: format!("k{index}"), body: body(index) }),
    }
}

pub fn blank(term: u64, index: u64) -> Entry<TypeConfig> {
    Entry { log_id: log_id(term, index), payload: EntryPayload::Blank }
}

pub fn membership(term: u64, index: u64) -> Entry<TypeConfig> {
    let nodes = [(1, BasicNode::new("127.0.0.1:1")), (2, BasicNode::new("127.0.0.1:2"))];
    let membership =
        Membership::new(vec![[1, 2].into()], nodes.into_iter().collect::<std::collections::BTreeMap<_, _>>());
    Entry { log_id: log_id(term, index), payload: EntryPayload::Membership(membership) }
}

/// Small segments (4 KiB), so a few entries span several; `batch` with a short interval.
pub fn small_config(policy: FlushPolicy) -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
        index_interval_bytes: 256,
        write_buffer_bytes: 1024,
        flush_policy: policy,
        flush_interval: Duration::from_millis(1),
        ..LogConfig::default()
    }
}

pub fn open(dir: &Path, config: LogConfig) -> Log {
    Log::open_with_flusher(dir, config, Flusher::new(1).unwrap()).unwrap()
}

/// Copies every file of `from` into `to` (created): the disk image a crash would leave
/// behind at this instant (everything written to the page cache included).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

/// Bases of the segments in `dir`, sorted.
pub fn segment_bases(dir: &Path) -> Vec<u64> {
    let mut bases: Vec<u64> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let path = e.unwrap().path();
            (path.extension()? == "log").then(|| path.file_stem()?.to_str()?.parse().ok())?
        })
        .collect();
    bases.sort_unstable();
    bases
}
