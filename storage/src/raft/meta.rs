//! The Raft state kept beside a Raft log: the vote, the committed log id and the last
//! purged log id, in one small file replaced atomically as a whole ([`SnapshotFile`]:
//! temporary file, fsync, rename, directory fsync), so the three always agree.
//!
//! Layout: format version (u8, 1), CRC-32 (u32 LE, IEEE) of the body, body (postcard of
//! [`RaftMeta`]). A file that does not check out is an error, never "no vote": forgetting
//! a vote could let this node vote twice in one term.

use std::path::Path;

use openraft::{LogId, NodeId, Vote};
use serde::{Deserialize, Serialize};

use crate::raft::codec;
use crate::raft::error::RaftLogError;
use crate::snapshot_file::SnapshotFile;

/// Format version of the file.
const META_FORMAT_V1: u8 = 1;
/// Bytes before the body: version and CRC.
const META_HEADER_BYTES: usize = 5;

/// What the file holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(bound = "")]
pub(crate) struct RaftMeta<NID: NodeId> {
    /// The last vote saved.
    pub vote: Option<Vote<NID>>,
    /// The last committed log id saved (may lag behind the real one: see `RaftLog`).
    pub committed: Option<LogId<NID>>,
    /// Entries up to this one are purged, whether or not their segments are deleted yet.
    pub last_purged: Option<LogId<NID>>,
}

impl<NID: NodeId> Default for RaftMeta<NID> {
    fn default() -> Self {
        RaftMeta { vote: None, committed: None, last_purged: None }
    }
}

impl<NID: NodeId> RaftMeta<NID> {
    /// Index of the first entry not purged.
    pub(crate) fn purged_next(&self) -> u64 {
        self.last_purged.as_ref().map_or(0, |id| id.index + 1)
    }
}

/// The file.
#[derive(Debug, Clone)]
pub(crate) struct MetaFile {
    file: SnapshotFile,
}

impl MetaFile {
    pub(crate) fn new(path: &Path) -> Self {
        MetaFile { file: SnapshotFile::new(path) }
    }

    pub(crate) fn path(&self) -> &Path {
        self.file.path()
    }

    /// The saved state, or the default (no vote, nothing committed or purged) if the file
    /// was never written.
    pub(crate) fn read<NID: NodeId>(&self) -> Result<RaftMeta<NID>, RaftLogError> {
        let Some(bytes) = self.file.read()? else {
            return Ok(RaftMeta::default());
        };
        let bad = |reason: String| RaftLogError::BadMeta { path: self.path().to_path_buf(), reason };
        if bytes.len() < META_HEADER_BYTES {
            return Err(bad(format!("{} bytes, shorter than its header", bytes.len())));
        }
        if bytes[0] != META_FORMAT_V1 {
            return Err(bad(format!("unknown format version {}", bytes[0])));
        }
        let crc = u32::from_le_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]);
        let body = &bytes[META_HEADER_BYTES..];
        if crc32fast::hash(body) != crc {
            return Err(bad("CRC mismatch".into()));
        }
        codec::decode_exact(body).map_err(bad)
    }

    /// Replaces the saved state with `meta`, durably, before returning.
    pub(crate) fn write<NID: NodeId>(&self, meta: &RaftMeta<NID>) -> Result<(), RaftLogError> {
        let mut bytes = vec![META_FORMAT_V1, 0, 0, 0, 0];
        bytes = codec::encode_into(meta, bytes).map_err(|e| RaftLogError::BadMeta {
            path: self.path().to_path_buf(),
            reason: format!("cannot encode: {e}"),
        })?;
        let crc = crc32fast::hash(&bytes[META_HEADER_BYTES..]);
        bytes[1..META_HEADER_BYTES].copy_from_slice(&crc.to_le_bytes());
        self.file.write(&bytes)?;
        Ok(())
    }
}
