//! The format of `access.json`: a version and the list of changes that rebuild the state
//! (readable by an operator, and the same type the cluster replicates).

use super::change::AccessChange;
use crate::error::{internal_error, BrokerResult};
use serde::{Deserialize, Serialize};

/// The version of the format.
const FORMAT_VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct StoredAccess {
    version: u32,
    changes: Vec<AccessChange>,
}

/// The file's bytes for `changes`.
pub(super) fn encode(changes: &[AccessChange]) -> BrokerResult<Vec<u8>> {
    let stored = StoredAccess { version: FORMAT_VERSION, changes: changes.to_vec() };
    serde_json::to_vec_pretty(&stored).map_err(|e| internal_error("cannot encode access control", e))
}

/// The changes in the file's `bytes`.
pub(super) fn decode(bytes: &[u8]) -> BrokerResult<Vec<AccessChange>> {
    let stored: StoredAccess =
        serde_json::from_slice(bytes).map_err(|e| internal_error("access.json is not readable", e))?;
    if stored.version != FORMAT_VERSION {
        return Err(internal_error("access.json", format!("format version {} is not known", stored.version)));
    }
    Ok(stored.changes)
}
