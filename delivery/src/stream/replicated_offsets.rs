//! [`ReplicatedOffsets`]: a replicated stream's consumer-group offsets as this node's replica
//! uses them, read from the state machine and committed through the stream's group.

use super::replica::{StreamStateMachine, MAX_CONSUMER_GROUPS};
use crate::quorum::Op;
use std::collections::BTreeMap;

/// A replicated stream's consumer-group offsets as its replica on this node uses them: read
/// from the state machine, committed by proposing [`Op::CommitOffset`] to the group. Commits
/// proposed here and not applied yet count too, so that a member taking over on this node
/// resumes after them.
pub struct ReplicatedOffsets {
    machine: StreamStateMachine,
    propose: Box<dyn Fn(Op) + Send + Sync>,
    proposed: BTreeMap<String, u64>,
}

impl ReplicatedOffsets {
    /// Offsets of `machine`'s stream, committed through `propose`.
    pub fn new(machine: StreamStateMachine, propose: impl Fn(Op) + Send + Sync + 'static) -> Self {
        ReplicatedOffsets { machine, propose: Box::new(propose), proposed: BTreeMap::new() }
    }
}

impl super::OffsetStore for ReplicatedOffsets {
    fn get(&self, group: &str) -> Option<u64> {
        self.machine.group_offset(group).max(self.proposed.get(group).copied())
    }

    fn all(&self) -> Vec<(String, u64)> {
        let mut all = self.machine.group_offsets();
        for (group, proposed) in &self.proposed {
            match all.binary_search_by(|(g, _)| g.as_str().cmp(group)) {
                Ok(at) => all[at].1 = all[at].1.max(*proposed),
                Err(at) => all.insert(at, (group.clone(), *proposed)),
            }
        }
        all
    }

    fn commit(&mut self, group: &str, offset: u64) -> Result<(), crate::message_store::StoreError> {
        if self.get(group).is_some_and(|committed| committed >= offset) {
            return Ok(());
        }
        if self.proposed.len() < MAX_CONSUMER_GROUPS || self.proposed.contains_key(group) {
            self.proposed.insert(group.to_string(), offset);
        }
        (self.propose)(Op::CommitOffset { group: group.to_string(), offset });
        Ok(())
    }

    /// Commits are in the group's log (or lost with an unconfirmed proposal, which only
    /// means some deliveries come again).
    fn close(&self) -> Result<(), crate::message_store::StoreError> {
        Ok(())
    }
}
