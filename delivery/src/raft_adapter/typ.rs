//! The openraft types Warren's state machines speak, named once: node ids are `u64` and nodes
//! `BasicNode` in every group, so the machines import these rather than openraft's generics.

pub use openraft::{EntryPayload, RaftTypeConfig};

/// Where an entry lies in a group's log: the leader (term and node) that appended it, and its
/// index.
pub type LogId = openraft::LogId<u64>;
/// The leader part of a [`LogId`].
pub type CommittedLeaderId = openraft::CommittedLeaderId<u64>;
/// A group's membership, with the entry that set it.
pub type StoredMembership = openraft::StoredMembership<u64, openraft::BasicNode>;
/// What a snapshot is of: its last entry and membership, and its id.
pub type SnapshotMeta = openraft::SnapshotMeta<u64, openraft::BasicNode>;
/// An entry of a group whose types are `C`.
pub type Entry<C> = openraft::Entry<C>;
