//! This node's identity: its name and the short id derived from it.
//!
//! Addresses that must lead back to this node from anywhere in a cluster (direct reply-to
//! names, for one) carry the id. As RabbitMQ does with its node names, the id is a hash of
//! the name, so every node can compute any member's id from the member list. Until the
//! cluster (issue #10) names nodes in its configuration, a node is `warren@<host name>`.

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
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:08x}", self.0)
    }
}

/// This node's name: `warren@<host name>`.
pub fn local_name() -> &'static str {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| {
        let host = std::fs::read_to_string(HOSTNAME_FILE)
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "localhost".to_string());
        format!("{NODE_NAME_PREFIX}{host}")
    })
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
        assert!(local_name().starts_with(NODE_NAME_PREFIX));
    }
}
