//! The catalog: one Raft group over every node that replicates
//! definitions (exchanges, queues with their replicas, bindings) and access (users, vhosts,
//! permissions, limits), so that a declare on any node is known on every node once committed,
//! and its `-ok` is sent only then. A node alone runs it too, as a group of one: a broker on
//! its own is a cluster of one, and changes its definitions the same way.
//!
//! - `command`: [`CatalogCommand`] (a vhost and a [`DefinitionOp`], from the node it came from)
//!   and what applying it answers.
//! - `machine`: the type config [`CatalogRaft`] and [`CatalogMachine`], which applies each
//!   command to this node's virtual hosts as a channel would.
//! - `handle`: [`Catalog`], how a channel proposes a definition change and waits for it.
//! - `local`: [`change_for`], the one entry the front ends use: what stays on this node (an
//!   exclusive queue's changes), what goes through the catalog, and what a node does with an
//!   applied change.
//! - `snapshot`: [`CatalogSnapshot`], the catalog at one entry, which lets the log be
//!   purged behind it, and the changes that bring a node that fell behind up to it.
//! - `fence`: [`DefinitionsFence`], what a group's new leader passes before it routes by
//!   this node's definitions.
//!
//! Every node applies every command; classic queues and streams live on the node they were
//! declared on (commands about them only act there), quorum queues on their members.

mod applied_state;
mod command;
mod fence;
mod handle;
mod local;
mod machine;
mod snapshot;

pub use command::{CatalogCommand, ChangeOutcome, ChangeResult, DefinitionOp};
pub use fence::DefinitionsFence;
pub use handle::{Catalog, CatalogForwarding, NoOtherNodes, StoreStatus};
pub use local::{change, change_for, Changed};
pub use machine::{CatalogMachine, CatalogRaft};
pub use snapshot::{CatalogSnapshot, CatalogSnapshotError, VhostCatalog};

/// Catalog changes between two snapshots of the catalog, unless configured otherwise: a
/// snapshot of 100,000 queues takes a fraction of a second, and at this interval costs little
/// next to the declares between two.
pub const DEFAULT_SNAPSHOT_INTERVAL_ENTRIES: u64 = 8192;
#[cfg(test)]
mod snapshot_tests;
