//! The cluster's nodes as this node knows them: one directory that the transport's dialling,
//! quorum queues' placement, forwarding and the failure detector all read, so that a node
//! that joins (`join_cluster`) or leaves (`forget_cluster_node`) is seen by every part at once.
//!
//! A node is known from the seed list (`--peers`), from the catalog group (a node that
//! joined later, with its address), or from the answer to this node's own `join_cluster`.
//! Forgotten nodes stay in the directory (their Raft ids still name old log entries) but are
//! no longer counted.

use super::peer_address::PeerAddress;
use super::raft_rpc::raft_node_id;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{PoisonError, RwLock};

/// A node of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Known {
    name: String,
    /// Where to dial it, when known (this node's own entry has none).
    address: Option<String>,
}

/// Every node of the cluster, by Raft id.
#[derive(Debug)]
pub struct Nodes {
    me: String,
    known: RwLock<BTreeMap<u64, Known>>,
    forgotten: RwLock<BTreeSet<u64>>,
}

impl Nodes {
    /// Node `me` and its seeds.
    pub fn new(me: &str, seeds: &[PeerAddress]) -> Self {
        let mut known = BTreeMap::new();
        known.insert(raft_node_id(me), Known { name: me.to_string(), address: None });
        for seed in seeds.iter().filter(|seed| seed.name != me) {
            known.insert(
                raft_node_id(&seed.name),
                Known { name: seed.name.clone(), address: Some(seed.address.clone()) },
            );
        }
        Nodes { me: me.to_string(), known: RwLock::new(known), forgotten: RwLock::new(BTreeSet::new()) }
    }

    /// This node's name.
    pub fn me(&self) -> &str {
        &self.me
    }

    /// Makes `node` known (or updates its address); true if it was not known before.
    pub fn add(&self, node: &PeerAddress) -> bool {
        if node.name == self.me {
            return false;
        }
        let known = Known { name: node.name.clone(), address: Some(node.address.clone()) };
        let id = raft_node_id(&node.name);
        let was_forgotten = self.forgotten.write().unwrap_or_else(PoisonError::into_inner).remove(&id);
        let previous = self.known.write().unwrap_or_else(PoisonError::into_inner).insert(id, known.clone());
        was_forgotten || previous != Some(known)
    }

    /// Node `id` left the cluster: no longer counted.
    pub fn forget(&self, id: u64) {
        self.forgotten.write().unwrap_or_else(PoisonError::into_inner).insert(id);
    }

    /// The nodes counted now (this one included), by Raft id.
    pub fn current(&self) -> BTreeMap<u64, String> {
        let forgotten = self.forgotten.read().unwrap_or_else(PoisonError::into_inner).clone();
        let known = self.known.read().unwrap_or_else(PoisonError::into_inner);
        known.iter().filter(|(id, _)| !forgotten.contains(id)).map(|(id, k)| (*id, k.name.clone())).collect()
    }

    /// The other nodes counted now, by Raft id.
    pub fn peers(&self) -> BTreeMap<u64, String> {
        let mut nodes = self.current();
        nodes.retain(|_, name| *name != self.me);
        nodes
    }

    /// The name of node `id` (forgotten or not).
    pub fn name_of(&self, id: u64) -> Option<String> {
        self.known.read().unwrap_or_else(PoisonError::into_inner).get(&id).map(|k| k.name.clone())
    }

    /// The other nodes counted now whose address is known, as a seed list.
    pub fn addresses(&self) -> Vec<PeerAddress> {
        let current = self.current();
        let known = self.known.read().unwrap_or_else(PoisonError::into_inner);
        current
            .keys()
            .filter_map(|id| known.get(id))
            .filter_map(|k| Some(PeerAddress { name: k.name.clone(), address: k.address.clone()? }))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(name: &str, address: &str) -> PeerAddress {
        PeerAddress { name: name.to_string(), address: address.to_string() }
    }

    #[test]
    fn seeds_joins_and_forgetting() {
        let nodes = Nodes::new("warren@a", &[peer("warren@b", "h:2"), peer("warren@a", "h:1")]);
        assert_eq!(nodes.current().into_values().collect::<Vec<_>>().len(), 2);
        assert!(nodes.add(&peer("warren@c", "h:3")));
        assert!(!nodes.add(&peer("warren@c", "h:3")), "already known");
        assert!(nodes.add(&peer("warren@c", "h:4")), "a new address");
        assert!(!nodes.add(&peer("warren@a", "h:9")), "this node is not its own peer");
        let c = raft_node_id("warren@c");
        nodes.forget(c);
        assert!(!nodes.current().contains_key(&c));
        assert_eq!(nodes.name_of(c).as_deref(), Some("warren@c"), "a forgotten node keeps its name");
        let mut names: Vec<String> = nodes.addresses().into_iter().map(|p| p.name).collect();
        names.sort();
        assert_eq!(names, ["warren@b"]);
        assert!(nodes.add(&peer("warren@c", "h:4")), "a forgotten node may join again");
        assert_eq!(nodes.peers().len(), 2);
    }
}
