//! This node's identity: its name and the short id derived from it.
//!
//! Addresses that must lead back to this node from anywhere in a cluster (direct reply-to
//! names, for one) carry the id. As RabbitMQ does with its node names, the id is a hash of
//! the name, so every node can compute any member's id from the member list. The name comes
//! from the configuration (`--node-name`, whose default is [`default_name`]); the process sets
//! it once with [`set_local_name`] before the broker starts.

use sha2::{Digest, Sha256};
use std::fmt;
use std::sync::OnceLock;

/// The prefix of a node's default name, as RabbitMQ's `rabbit@<host>`.
const NODE_NAME_PREFIX: &str = "warren@";
/// Where Linux keeps the host name.
const HOSTNAME_FILE: &str = "/proc/sys/kernel/hostname";

/// A node's short id: the first four bytes of the SHA-256 of its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NodeId(pub u32);

impl NodeId {
    /// The id of the node called `name`.
    pub fn of(name: &str) -> Self {
        let digest = Sha256::digest(name.as_bytes());
        NodeId(u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]))
    }

    /// The node's id in Raft groups (openraft's ids are u64): this id, widened, so that
    /// logs show the same number either way.
    pub fn raft_id(self) -> u64 {
        u64::from(self.0)
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:08x}", self.0)
    }
}

/// The name this process runs as; set once, by [`set_local_name`] or by the first read.
static LOCAL_NAME: OnceLock<String> = OnceLock::new();

/// A node's name when none is configured: `warren@<host name>`.
pub fn default_name() -> String {
    format!("{NODE_NAME_PREFIX}{}", host_name())
}

/// This machine's host name (`localhost` if it has none).
pub fn host_name() -> String {
    std::fs::read_to_string(HOSTNAME_FILE)
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// The node name was already fixed (set before, or read before being set) to another name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("this process already runs as node {current}; it cannot become {requested}")]
pub struct NameAlreadySet {
    /// The name in force.
    pub current: String,
    /// The name asked for.
    pub requested: String,
}

/// Makes `name` this process's node name. Succeeds if the name was not fixed yet or is already
/// `name`; a process hosts one node, so another name is refused.
pub fn set_local_name(name: &str) -> Result<(), NameAlreadySet> {
    let current = LOCAL_NAME.get_or_init(|| name.to_string());
    if current == name {
        Ok(())
    } else {
        Err(NameAlreadySet { current: current.clone(), requested: name.to_string() })
    }
}

/// This node's name: the configured one, or [`default_name`] if none was set before this call.
pub fn local_name() -> &'static str {
    LOCAL_NAME.get_or_init(default_name)
}

/// This node's id.
pub fn local_id() -> NodeId {
    NodeId::of(local_name())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_hashes_of_names() {
        assert_eq!(NodeId::of("warren@a"), NodeId::of("warren@a"));
        assert_ne!(NodeId::of("warren@a"), NodeId::of("warren@b"));
        assert_eq!(NodeId(0xab).to_string(), "000000ab");
        assert!(default_name().starts_with(NODE_NAME_PREFIX));
        assert!(set_local_name(local_name()).is_ok());
        let other = format!("{}-other", local_name());
        assert_eq!(set_local_name(&other).map_err(|e| e.requested), Err(other));
    }
}
