//! What the metadata state machine keeps on disk, besides the catalog itself: the last entry
//! it applied, the group's membership, the nodes that joined or were forgotten, and the
//! catalog's machine version; and the formats earlier releases wrote it in, still read.

use crate::feature_flags::FIRST_MACHINE_VERSION;
use crate::raft_adapter::typ::{LogId, StoredMembership};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use warren_storage::StorageError;

/// The applied-state file's format version (1: without the forgotten nodes; 2: without the
/// joined ones; 3: without the machine version).
const APPLIED_FORMAT_VERSION: u8 = 4;

/// What the state machine keeps on disk.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Applied {
    /// The last entry applied: a restart applies nothing twice.
    pub(super) last_applied: Option<LogId>,
    /// The group's membership as of the last membership entry applied.
    pub(super) membership: StoredMembership,
    /// Nodes that left the cluster (`forget_cluster_node`), by Raft id.
    pub(super) forgotten: BTreeSet<u64>,
    /// Nodes that joined the cluster after it formed (`join_cluster`): name, then address.
    pub(super) joined: Vec<(String, String)>,
    /// The catalog's machine version in effect after the last applied entry.
    pub(super) machine_version: u16,
}

impl Default for Applied {
    fn default() -> Self {
        Applied {
            last_applied: None,
            membership: StoredMembership::default(),
            forgotten: BTreeSet::new(),
            joined: Vec::new(),
            machine_version: FIRST_MACHINE_VERSION,
        }
    }
}

impl Applied {
    /// The file's bytes: the format version, then the state.
    pub(super) fn encode(&self) -> Result<Vec<u8>, StorageError> {
        postcard::to_extend(self, vec![APPLIED_FORMAT_VERSION]).map_err(|e| StorageError::Failed(e.to_string()))
    }
}

/// The applied state as format 3 stored it.
#[derive(Debug, Deserialize)]
struct AppliedV3 {
    last_applied: Option<LogId>,
    membership: StoredMembership,
    forgotten: BTreeSet<u64>,
    joined: Vec<(String, String)>,
}

/// The applied state as format 2 stored it.
#[derive(Debug, Deserialize)]
struct AppliedV2 {
    last_applied: Option<LogId>,
    membership: StoredMembership,
    forgotten: BTreeSet<u64>,
}

/// The applied state as format 1 stored it.
#[derive(Debug, Deserialize)]
struct AppliedV1 {
    last_applied: Option<LogId>,
    membership: StoredMembership,
}

pub(super) fn decode_applied(bytes: &[u8]) -> Result<Applied, StorageError> {
    let undecodable =
        |e: postcard::Error| StorageError::Failed(format!("the catalog's applied state does not decode: {e}"));
    match bytes.split_first() {
        Some((&APPLIED_FORMAT_VERSION, rest)) => postcard::from_bytes(rest).map_err(undecodable),
        Some((3, rest)) => {
            let v3: AppliedV3 = postcard::from_bytes(rest).map_err(undecodable)?;
            let AppliedV3 { last_applied, membership, forgotten, joined } = v3;
            Ok(Applied { last_applied, membership, forgotten, joined, ..Applied::default() })
        }
        Some((2, rest)) => {
            let v2: AppliedV2 = postcard::from_bytes(rest).map_err(undecodable)?;
            let AppliedV2 { last_applied, membership, forgotten } = v2;
            Ok(Applied { last_applied, membership, forgotten, ..Applied::default() })
        }
        Some((1, rest)) => {
            let v1: AppliedV1 = postcard::from_bytes(rest).map_err(undecodable)?;
            Ok(Applied { last_applied: v1.last_applied, membership: v1.membership, ..Applied::default() })
        }
        _ => Err(StorageError::Failed("unknown format of the catalog's applied state".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied_at(index: u64) -> Applied {
        Applied {
            last_applied: Some(LogId::new(crate::raft_adapter::typ::CommittedLeaderId::new(1, 1), index)),
            ..Applied::default()
        }
    }

    #[test]
    fn an_applied_state_of_format_3_reads_at_the_first_machine_version() {
        #[derive(Serialize)]
        struct Format3 {
            last_applied: Option<LogId>,
            membership: StoredMembership,
            forgotten: BTreeSet<u64>,
            joined: Vec<(String, String)>,
        }
        let written = Format3 {
            last_applied: applied_at(7).last_applied,
            membership: StoredMembership::default(),
            forgotten: BTreeSet::from([9]),
            joined: vec![("warren@d".into(), "127.0.0.1:1".into())],
        };
        let read = decode_applied(&postcard::to_extend(&written, vec![3]).expect("encodes")).expect("decodes");
        assert_eq!(read.last_applied.map(|id| id.index), Some(7));
        assert_eq!((read.forgotten, read.joined), (written.forgotten, written.joined));
        assert_eq!(read.machine_version, FIRST_MACHINE_VERSION);
    }
}
