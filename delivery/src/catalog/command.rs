//! What goes through the catalog group's log: definition changes as a channel received them
//! (a [`DefinitionOp`] in a virtual host, from a node), and what applying one answers.

use crate::error::BrokerError;
use crate::quorum::InitialMembers;
use amq_protocol::types::FieldTable;
use serde::{Deserialize, Serialize};

/// One definition change, with the fields of the AMQP method that asked for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum DefinitionOp {
    /// `exchange.declare` (not passive).
    DeclareExchange {
        /// Name.
        name: String,
        /// Type name.
        kind: String,
        /// Durable flag.
        durable: bool,
        /// Auto-delete flag.
        auto_delete: bool,
        /// Internal flag.
        internal: bool,
        /// Arguments.
        arguments: FieldTable,
    },
    /// `exchange.delete`.
    DeleteExchange {
        /// Name.
        name: String,
        /// Only if it has no bindings.
        if_unused: bool,
    },
    /// `queue.declare` of a queue that is not exclusive (not passive; named by its node).
    DeclareQueue {
        /// Name (a server-generated one is chosen by the node the declare came from).
        name: String,
        /// Durable flag.
        durable: bool,
        /// Auto-delete flag.
        auto_delete: bool,
        /// Arguments.
        arguments: FieldTable,
        /// A quorum queue's members, chosen by the node the declare came from.
        members: Option<InitialMembers>,
    },
    /// `queue.delete`.
    DeleteQueue {
        /// Name.
        name: String,
        /// Only if it has no consumers.
        if_unused: bool,
        /// Only if it has no messages.
        if_empty: bool,
    },
    /// A quorum queue or a replicated stream gains a member on node `node` (its Raft id
    /// `node_id`): that node creates its replica (with the queue's definition, carried here),
    /// and the group's leader adds it (`warren ctl add_member`, `add_replica`).
    AddMember {
        /// The queue.
        name: String,
        /// The new member's node name.
        node: String,
        /// Its Raft id.
        node_id: u64,
        /// The queue's arguments (the new member has no copy of its definition yet).
        arguments: FieldTable,
    },
    /// A quorum queue or a replicated stream loses its member on node `node_id`: the leader
    /// removes it from the group, and that node drops its replica once it is out (`warren
    /// ctl delete_member`, `delete_replica`).
    DeleteMember {
        /// The queue.
        name: String,
        /// The member's Raft id.
        node_id: u64,
    },
    /// `warren ctl forget_cluster_node`: node `node_id` (stopped, its quorum queue and stream
    /// members removed first) leaves the cluster: every node stops counting it, and the metadata
    /// group's leader removes it from the group.
    ForgetNode {
        /// The node's Raft id.
        node_id: u64,
    },
    /// `queue.bind` or `exchange.bind`.
    Bind {
        /// Source exchange.
        source: String,
        /// Destination queue or exchange.
        destination: String,
        /// Whether the destination is an exchange.
        to_exchange: bool,
        /// Routing key.
        routing_key: String,
        /// Arguments.
        arguments: FieldTable,
    },
    /// `queue.unbind` or `exchange.unbind`.
    Unbind {
        /// Source exchange.
        source: String,
        /// Destination queue or exchange.
        destination: String,
        /// Whether the destination is an exchange.
        to_exchange: bool,
        /// Routing key.
        routing_key: String,
        /// Arguments.
        arguments: FieldTable,
    },
    /// `warren ctl join_cluster`: node `name` joins the cluster: every node learns where to
    /// dial it and counts it, and the catalog group's leader makes it a member of the group.
    /// (Last of the ops, so that logs written before it existed still decode.)
    AddNode {
        /// The node's name.
        name: String,
        /// Where its inter-node listener is (`host:port`).
        address: String,
    },
    /// A change of users, vhosts, permissions or vhost limits: every node applies it to its
    /// own access control (the command's vhost is unused).
    Access(crate::access::AccessChange),
    /// `exchange.declare` of a durable `x-delayed-message` exchange in a cluster: its pending
    /// set is replicated on `members`, chosen by the node the declare came from. (After the
    /// other ops, so that logs written before it existed still decode.)
    DeclareReplicatedExchange {
        /// Name.
        name: String,
        /// Type name.
        kind: String,
        /// Auto-delete flag.
        auto_delete: bool,
        /// Internal flag.
        internal: bool,
        /// Arguments.
        arguments: FieldTable,
        /// Where its pending set is replicated.
        members: InitialMembers,
    },
    /// The catalog's machine version changes to `version` (a feature flag was enabled): the
    /// entries after this one apply with its semantics, and a node that does not know it
    /// stops applying and says why. (Last of the ops, so that logs written before it existed
    /// still decode.)
    SetMachineVersion {
        /// The new version.
        version: u16,
    },
}

/// A definition change in `vhost`, proposed by node `origin`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CatalogCommand {
    /// The node whose client asked for it (its answer is that node's own result).
    pub origin: u64,
    /// The virtual host.
    pub vhost: String,
    /// The change.
    pub op: DefinitionOp,
}

/// What a declare answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ChangeOutcome {
    /// Ready messages (`queue.declare-ok`, `queue.delete-ok`).
    pub message_count: u32,
    /// Consumers (`queue.declare-ok`).
    pub consumer_count: u32,
}

/// The result of applying a command on one node: its outcome, or the error that closes
/// the channel.
pub type ChangeResult = Result<ChangeOutcome, BrokerError>;
