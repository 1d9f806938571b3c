//! Consumer groups across a super stream's partitions (`x-consumer-group` on a consumer of the
//! super stream): which member reads which partition. Kafka's rebalance, kept by the super
//! stream's first partition (its Raft group in a cluster, so that every node sees the same
//! assignment; the stream itself on one node).
//!
//! [`PartitionGroups`] is deterministic state, changed only by [`GroupOp`]s applied in order:
//! members in the order they joined; for each partition a *target* (who should read it) and an
//! *owner* (who may read it now). Targets are sticky: each member's share is the partitions
//! divided by the members (the earliest members take one more when it does not divide), each
//! partition stays with its target while that member is in the group and within its share,
//! and only the partitions left over move, in order, to members below their share. A
//! partition whose target changes keeps its owner until the owner's node releases it (its
//! in-flight deliveries settled, or a timeout passed: see the session's part): no partition is
//! read by two members at once. A member that leaves (cancel, channel or connection closed) or
//! whose node is down owns nothing from then on.
//!
//! Each member reads the partitions the super stream had when it joined: a partition added
//! later is given only to members that joined since (the others have no consumer for it),
//! even beyond their share when none within it can take it.

use crate::queue::consumer::Consumer;
use crate::quorum::{ConsumerId, Op};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tokio::sync::watch;

/// Partitions a group may have: as many as a super stream may ([`crate::exchange::super_stream`]).
pub const MAX_GROUP_PARTITIONS: u32 = 1024;
/// Members one group may have (a member is one consumer of the super stream). As many as
/// there may be partitions: members beyond the partitions read nothing, and every member
/// costs each change of the group.
pub const MAX_GROUP_MEMBERS: usize = MAX_GROUP_PARTITIONS as usize;

/// A change to the groups of a super stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum GroupOp {
    /// `member` joined `group` of a super stream of `partitions` partitions.
    Join {
        /// The group.
        group: String,
        /// The consumer.
        member: ConsumerId,
        /// The super stream's partitions as the member saw them.
        partitions: u32,
    },
    /// `member` left `group` (cancelled, or its channel closed).
    Leave {
        /// The group.
        group: String,
        /// The consumer.
        member: ConsumerId,
    },
    /// `member` stopped reading `partition` of `group`, which moves to its target.
    Released {
        /// The group.
        group: String,
        /// The partition's place.
        partition: u32,
        /// The owner until now.
        member: ConsumerId,
        /// Where the next owner starts: the first offset the old one had not settled; `None`
        /// if it never read the partition (the next owner starts where the group committed).
        offset: Option<u64>,
    },
    /// Node `node` is gone (or restarted): its members left every group.
    Down {
        /// The node's Raft id.
        node: u64,
    },
}

/// One group's members and partitions.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct PartitionGroup {
    /// In the order they joined.
    members: Vec<ConsumerId>,
    /// The partitions each member (in the same order) can read: those the super stream had
    /// when it joined.
    reaches: Vec<u32>,
    /// Who should read each partition.
    targets: Vec<Option<ConsumerId>>,
    /// Who may read each partition now.
    owners: Vec<Option<ConsumerId>>,
    /// Where each partition's next owner starts, as its last owner released it (the group's
    /// committed offset in the partition may not have reached a replica yet).
    released_at: Vec<Option<u64>>,
}

/// Every consumer group of a super stream (see the module documentation).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionGroups {
    groups: BTreeMap<String, PartitionGroup>,
}

impl PartitionGroups {
    /// Applies `op`.
    pub fn apply(&mut self, op: &GroupOp) {
        match op {
            GroupOp::Join { group, member, partitions } => self.join(group, member, *partitions),
            GroupOp::Leave { group, member } => self.change(group, |g| g.remove(|m| m == member)),
            GroupOp::Released { group, partition, member, offset } => self.change(group, |g| {
                let place = *partition as usize;
                if g.owners.get(place).is_some_and(|owner| owner.as_ref() == Some(member)) {
                    g.owners[place] = None;
                    g.released_at[place] = *offset;
                }
            }),
            GroupOp::Down { node } => {
                let names: Vec<String> = self.groups.keys().cloned().collect();
                for name in names {
                    self.change(&name, |g| g.remove(|m| m.node == *node));
                }
            }
        }
    }

    fn join(&mut self, group: &str, member: &ConsumerId, partitions: u32) {
        let partitions = partitions.min(MAX_GROUP_PARTITIONS) as usize;
        let entry = self.groups.entry(group.to_string()).or_default();
        if !entry.members.contains(member) && entry.members.len() < MAX_GROUP_MEMBERS {
            entry.members.push(member.clone());
            entry.reaches.push(partitions as u32);
        }
        if entry.targets.len() < partitions {
            entry.targets.resize(partitions, None);
            entry.owners.resize(partitions, None);
            entry.released_at.resize(partitions, None);
        }
        self.change(group, |_| {});
    }

    /// Changes `group` by `change`, then rebalances it (and forgets it once it has no member).
    fn change(&mut self, group: &str, change: impl FnOnce(&mut PartitionGroup)) {
        let Some(entry) = self.groups.get_mut(group) else { return };
        change(entry);
        entry.rebalance();
        if entry.members.is_empty() && entry.owners.iter().all(Option::is_none) {
            self.groups.remove(group);
        }
    }

    /// Who may read `partition` of `group` now.
    pub fn owner(&self, group: &str, partition: u32) -> Option<&ConsumerId> {
        self.groups.get(group)?.owners.get(partition as usize)?.as_ref()
    }

    /// Where the owner of `partition` of `group` starts, if its last owner released it there.
    pub fn released_at(&self, group: &str, partition: u32) -> Option<u64> {
        *self.groups.get(group)?.released_at.get(partition as usize)?
    }

    /// Who should read `partition` of `group` (the owner releases it when it is not).
    pub fn target(&self, group: &str, partition: u32) -> Option<&ConsumerId> {
        self.groups.get(group)?.targets.get(partition as usize)?.as_ref()
    }

    /// The members of `group`, in join order.
    pub fn members(&self, group: &str) -> &[ConsumerId] {
        self.groups.get(group).map_or(&[], |g| g.members.as_slice())
    }

    /// The nodes with members in any group.
    pub fn nodes(&self) -> std::collections::BTreeSet<u64> {
        self.groups.values().flat_map(|g| g.members.iter().map(|m| m.node)).collect()
    }
}

impl PartitionGroup {
    /// Removes the members `leaving` picks: they own and are targeted by nothing.
    fn remove(&mut self, leaving: impl Fn(&ConsumerId) -> bool) {
        let kept: Vec<bool> = self.members.iter().map(|m| !leaving(m)).collect();
        let mut kept_reaches = kept.iter();
        self.reaches.retain(|_| kept_reaches.next().copied().unwrap_or(false));
        self.members.retain(|m| !leaving(m));
        for slot in self.targets.iter_mut().chain(self.owners.iter_mut()) {
            if slot.as_ref().is_some_and(&leaving) {
                *slot = None;
            }
        }
    }

    /// Sticky targets within each member's share, then owners for the partitions nobody owns.
    /// A member is given only partitions it reaches.
    fn rebalance(&mut self) {
        let (partitions, members) = (self.targets.len(), self.members.len());
        if members == 0 {
            self.targets.iter_mut().for_each(|t| *t = None);
            return;
        }
        let share = |place: usize| partitions / members + usize::from(place < partitions % members);
        let reaches = &self.reaches;
        let reach = |place: usize, partition: usize| reaches.get(place).is_some_and(|r| partition < *r as usize);
        let places: HashMap<&ConsumerId, usize> = self.members.iter().enumerate().map(|(p, m)| (m, p)).collect();
        let mut counts = vec![0usize; members];
        for (partition, target) in self.targets.iter_mut().enumerate() {
            let kept = target
                .as_ref()
                .and_then(|m| places.get(m).copied())
                .filter(|&p| counts[p] < share(p) && reach(p, partition));
            match kept {
                Some(place) => counts[place] += 1,
                None => *target = None,
            }
        }
        for (partition, target) in self.targets.iter_mut().enumerate().filter(|(_, t)| t.is_none()) {
            let within_share = (0..members).find(|&p| counts[p] < share(p) && reach(p, partition));
            let least_loaded = || (0..members).filter(|&p| reach(p, partition)).min_by_key(|&p| counts[p]);
            if let Some(place) = within_share.or_else(least_loaded) {
                counts[place] += 1;
                *target = Some(self.members[place].clone());
            }
        }
        for (owner, target) in self.owners.iter_mut().zip(&self.targets) {
            if owner.is_none() {
                owner.clone_from(target);
            }
        }
    }
}

/// Where a stream keeps the consumer groups of the super stream it is the first partition of:
/// applied here (a stream on one node), or proposed to its Raft group, whose state machine
/// applies them on every replica (a replicated stream). Either way, the groups as they are
/// now are watched through [`GroupCoordination::subscribe`].
pub struct GroupCoordination {
    /// This node's Raft id: a member's id starts with it.
    node: u64,
    view: watch::Sender<Arc<PartitionGroups>>,
    propose: Option<Box<dyn Fn(Op) + Send + Sync>>,
}

impl GroupCoordination {
    /// Groups kept by a stream on this node alone.
    pub fn local() -> Self {
        let (view, _) = watch::channel(Arc::default());
        GroupCoordination { node: crate::quorum::LOCAL_NODE_ID, view, propose: None }
    }

    /// Groups kept by a replicated stream's state machine (which updates `view`), changed by
    /// proposing through `propose`, on node `node`.
    pub fn replicated(
        node: u64,
        view: watch::Sender<Arc<PartitionGroups>>,
        propose: impl Fn(Op) + Send + Sync + 'static,
    ) -> Self {
        GroupCoordination { node, view, propose: Some(Box::new(propose)) }
    }

    /// Makes `op`.
    pub fn change(&self, op: GroupOp) {
        match &self.propose {
            Some(propose) => propose(Op::Group(op)),
            None => self.view.send_modify(|groups| Arc::make_mut(groups).apply(&op)),
        }
    }

    /// The groups now, and each change.
    pub fn subscribe(&self) -> watch::Receiver<Arc<PartitionGroups>> {
        self.view.subscribe()
    }

    /// `consumer`'s id as a member of a group.
    pub fn member(&self, consumer: &Consumer) -> ConsumerId {
        ConsumerId::new(self.node, consumer.session().id().0, consumer.tag().as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn member(n: u64) -> ConsumerId {
        ConsumerId::new(1 + n % 3, n, format!("m{n}"))
    }

    fn join(groups: &mut PartitionGroups, n: u64) {
        groups.apply(&GroupOp::Join { group: "g".into(), member: member(n), partitions: 6 });
    }

    fn targets(groups: &PartitionGroups) -> Vec<Option<u64>> {
        (0..6).map(|p| groups.target("g", p).map(|m| m.channel)).collect()
    }

    /// Releases every partition whose owner is not its target, as the owners' nodes do.
    fn release_all(groups: &mut PartitionGroups) {
        for p in 0..6 {
            if let Some(owner) = groups.owner("g", p).cloned() {
                if groups.target("g", p) != Some(&owner) {
                    groups.apply(&GroupOp::Released {
                        group: "g".into(),
                        partition: p,
                        member: owner,
                        offset: Some(7),
                    });
                }
            }
        }
    }

    #[test]
    fn partitions_are_shared_and_a_join_moves_as_few_as_it_can() {
        let mut groups = PartitionGroups::default();
        join(&mut groups, 1);
        assert_eq!(targets(&groups), vec![Some(1); 6], "one member reads everything");
        join(&mut groups, 2);
        assert_eq!(targets(&groups), [1, 1, 1, 2, 2, 2].map(Some).to_vec(), "the second takes half");
        // Until member 1 releases them, it still owns 3..6.
        assert_eq!(groups.owner("g", 3).map(|m| m.channel), Some(1));
        release_all(&mut groups);
        assert_eq!(groups.owner("g", 3).map(|m| m.channel), Some(2));
        assert_eq!(groups.released_at("g", 3), Some(7), "where the new owner starts");
        join(&mut groups, 3);
        let after = targets(&groups);
        assert_eq!(after, [1, 1, 3, 2, 2, 3].map(Some).to_vec(), "two partitions move, one from each");
        groups.apply(&GroupOp::Leave { group: "g".into(), member: member(2) });
        assert_eq!(targets(&groups), [1, 1, 3, 1, 3, 3].map(Some).to_vec(), "the leaver's share is taken over");
        assert_eq!(groups.owner("g", 3).map(|m| m.channel), Some(1), "a leaver's partitions move at once");
    }

    #[test]
    fn a_down_node_loses_its_members_and_an_empty_group_is_forgotten() {
        let mut groups = PartitionGroups::default();
        join(&mut groups, 1);
        join(&mut groups, 2);
        groups.apply(&GroupOp::Down { node: member(2).node });
        assert_eq!(groups.members("g"), &[member(1)]);
        release_all(&mut groups);
        assert!((0..6).all(|p| groups.owner("g", p) == Some(&member(1))));
        groups.apply(&GroupOp::Leave { group: "g".into(), member: member(1) });
        assert_eq!(groups, PartitionGroups::default());
    }

    #[test]
    fn a_partition_added_later_goes_only_to_members_that_joined_since() {
        let mut groups = PartitionGroups::default();
        let (a, b, c) = (member(1), member(2), member(3));
        let join_with = |groups: &mut PartitionGroups, m: &ConsumerId, partitions| {
            groups.apply(&GroupOp::Join { group: "g".into(), member: m.clone(), partitions });
            release_all(groups);
        };
        join_with(&mut groups, &a, 3);
        // Three partitions were added: B consumes all six, A has no consumer for 3..6.
        join_with(&mut groups, &b, 6);
        let readers = |groups: &PartitionGroups| (0..6).map(|p| groups.owner("g", p).cloned()).collect::<Vec<_>>();
        assert_eq!(readers(&groups)[3..], [Some(b.clone()), Some(b.clone()), Some(b.clone())]);
        assert!(readers(&groups)[..3].iter().all(|r| r.as_ref() == Some(&a)));
        // B leaves: the new partitions wait for a member that can read them, not for A.
        groups.apply(&GroupOp::Leave { group: "g".into(), member: b.clone() });
        assert_eq!(readers(&groups), [Some(a.clone()), Some(a.clone()), Some(a.clone()), None, None, None]);
        join_with(&mut groups, &c, 6);
        assert!(readers(&groups)[3..].iter().all(|r| r.as_ref() == Some(&c)), "{:?}", readers(&groups));
    }

    #[test]
    fn a_release_by_a_member_that_never_read_moves_the_partition_without_an_offset() {
        let mut groups = PartitionGroups::default();
        join(&mut groups, 1);
        join(&mut groups, 2);
        groups.apply(&GroupOp::Released { group: "g".into(), partition: 4, member: member(1), offset: None });
        assert_eq!(groups.owner("g", 4), Some(&member(2)));
        assert_eq!(groups.released_at("g", 4), None, "the next owner starts where the group committed");
    }

    proptest! {
        /// Whatever the joins, leaves and releases: no partition has two owners (there is one
        /// slot each), every owner and target is a member, each member's targets are within
        /// one of the others', and once every moving partition is released, every partition
        /// is owned by its target.
        #[test]
        fn assignments_stay_balanced_and_exclusive(ops in proptest::collection::vec((0u8..3, 0u64..6), 1..60)) {
            let mut groups = PartitionGroups::default();
            for (kind, n) in ops {
                let op = match kind {
                    0 => GroupOp::Join { group: "g".into(), member: member(n), partitions: 6 },
                    1 => GroupOp::Leave { group: "g".into(), member: member(n) },
                    _ => {
                        release_all(&mut groups);
                        continue;
                    }
                };
                groups.apply(&op);
                let members = groups.members("g").to_vec();
                for p in 0..6 {
                    for slot in [groups.owner("g", p), groups.target("g", p)].into_iter().flatten() {
                        prop_assert!(members.contains(slot));
                    }
                }
                if !members.is_empty() {
                    let counts: Vec<usize> =
                        members.iter().map(|m| (0..6).filter(|p| groups.target("g", *p) == Some(m)).count()).collect();
                    prop_assert!(counts.iter().max().unwrap_or(&0) - counts.iter().min().unwrap_or(&0) <= 1);
                    prop_assert_eq!(counts.iter().sum::<usize>(), 6);
                }
            }
            release_all(&mut groups);
            for p in 0..6 {
                prop_assert_eq!(groups.owner("g", p), groups.target("g", p));
            }
        }
    }
}
