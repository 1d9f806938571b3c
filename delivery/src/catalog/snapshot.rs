//! The catalog group's snapshot: the catalog as data at one applied entry (every vhost's
//! durable exchanges, queues and bindings, the access state, the nodes that joined or were
//! forgotten), and how a node that receives one makes its own state equal to it.
//!
//! Taking snapshots lets openraft purge the log behind them, so a long-lived cluster's
//! catalog log and restart time stay bounded. A node that fell behind the purge (it was down,
//! or it joins) gets the snapshot instead of the entries: it works out the changes that take
//! its catalog to the snapshot's (what it has that the snapshot has not is deleted first, then
//! what it lacks is declared) and applies them as it would have applied the entries, through
//! the same interpreter.
//!
//! The document is JSON with a format number, so that a later release can read an older
//! snapshot. Transient queues are not in it (they do not outlive a restart either).

use super::command::{CatalogCommand, DefinitionOp};
use crate::access::AccessChange;
use crate::broker::Broker;
use crate::definitions::{BindingRecord, Definitions, ExchangeRecord, QueueRecord};
use crate::exchange::DELAYED_TYPE;
use crate::feature_flags::FIRST_MACHINE_VERSION;
use crate::policy::PolicyKind;
use crate::queue::QueueArguments;
use crate::quorum::InitialMembers;
use amq_protocol::types::FieldTable;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap, HashSet};

/// The snapshot document's format.
const CATALOG_SNAPSHOT_FORMAT: u32 = 1;

/// The catalog at one applied entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CatalogSnapshot {
    /// [`CATALOG_SNAPSHOT_FORMAT`] when written.
    format: u32,
    /// Users, vhosts, permissions and limits, as the changes that rebuild them.
    pub access: Vec<AccessChange>,
    /// Each vhost's durable definitions; every queue names the nodes it lives on.
    pub vhosts: Vec<VhostCatalog>,
    /// Nodes that left the cluster, by Raft id.
    pub forgotten: BTreeSet<u64>,
    /// Nodes that joined after the cluster formed: name, then address.
    pub joined: Vec<(String, String)>,
    /// The catalog's machine version at the snapshot (snapshots of format 1 written before
    /// machine versions hold none: the first).
    #[serde(default = "first_machine_version")]
    pub machine_version: u16,
}

fn first_machine_version() -> u16 {
    FIRST_MACHINE_VERSION
}

/// One vhost's durable definitions in a [`CatalogSnapshot`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VhostCatalog {
    /// The vhost.
    pub name: String,
    /// Its durable exchanges, queues (each with its homes, never empty) and bindings.
    pub definitions: Definitions,
}

/// Why a snapshot could not be taken or read.
#[derive(Debug, thiserror::Error)]
pub enum CatalogSnapshotError {
    /// Not JSON of a snapshot.
    #[error("the catalog snapshot does not decode: {0}")]
    Decode(#[from] serde_json::Error),
    /// Written by a release that knows a newer format.
    #[error(
        "the catalog snapshot has format {found}, and this release reads formats up to {known}: upgrade this node"
    )]
    NewerFormat {
        /// The snapshot's format.
        found: u32,
        /// The newest this release knows.
        known: u32,
    },
}

impl CatalogSnapshot {
    /// The catalog of `broker` as node `me` holds it now, with the cluster's `forgotten` and
    /// `joined` nodes.
    pub fn capture(broker: &Broker, me: u64, forgotten: BTreeSet<u64>, joined: Vec<(String, String)>) -> Self {
        let vhosts = broker
            .vhosts()
            .iter()
            .map(|vhost| {
                let mut definitions = vhost.durable_definitions();
                for record in &mut definitions.queues {
                    if record.homes.is_empty() {
                        // It lives here: on this node alone, or on its group's members.
                        let members = vhost.queue(&record.name).ok().and_then(|queue| {
                            queue.replicas().map(|group| group.members().into_iter().map(|(id, _)| id).collect())
                        });
                        record.homes = members.unwrap_or_else(|| vec![me]);
                    }
                }
                VhostCatalog { name: vhost.name().to_string(), definitions }
            })
            .collect();
        CatalogSnapshot {
            format: CATALOG_SNAPSHOT_FORMAT,
            access: broker.access().as_changes(),
            vhosts,
            forgotten,
            joined,
            machine_version: FIRST_MACHINE_VERSION,
        }
    }

    /// This snapshot, taken at catalog machine version `version`.
    pub fn at_machine_version(mut self, version: u16) -> Self {
        self.machine_version = version;
        self
    }

    /// The document's bytes.
    pub fn encode(&self) -> Result<Vec<u8>, CatalogSnapshotError> {
        Ok(serde_json::to_vec(self)?)
    }

    /// A snapshot from its bytes; refused if a newer release wrote it.
    pub fn decode(bytes: &[u8]) -> Result<Self, CatalogSnapshotError> {
        let snapshot: CatalogSnapshot = serde_json::from_slice(bytes)?;
        if snapshot.format > CATALOG_SNAPSHOT_FORMAT {
            return Err(CatalogSnapshotError::NewerFormat { found: snapshot.format, known: CATALOG_SNAPSHOT_FORMAT });
        }
        Ok(snapshot)
    }

    /// The changes that take `broker`'s catalog (node `me`'s) to this one, in the order they
    /// apply: access first (a vhost must exist before its definitions), then, per vhost,
    /// unbinds, deletes, declares and binds.
    pub fn changes_from(&self, broker: &Broker, me: u64) -> Vec<CatalogCommand> {
        let command = |vhost: &str, op| CatalogCommand { origin: me, vhost: vhost.to_string(), op };
        let mut changes: Vec<CatalogCommand> =
            access_changes(broker, &self.access).into_iter().map(|c| command("", DefinitionOp::Access(c))).collect();
        for target in &self.vhosts {
            let here = broker.vhost(&target.name).map(|vhost| vhost.durable_definitions()).unwrap_or_default();
            changes.extend(definition_changes(&here, &target.definitions, me, &target.name));
        }
        changes
    }
}

/// What a snapshot's access changes name: each set holds the keys its changes set.
#[derive(Default)]
struct NamedInTarget<'a> {
    users: HashSet<&'a str>,
    vhosts: HashSet<&'a str>,
    grants: HashSet<(&'a str, &'a str)>,
    topic_grants: HashSet<(&'a str, &'a str, &'a str)>,
    policies: HashSet<(&'a str, PolicyKind, &'a str)>,
    limited_users: HashSet<&'a str>,
    parameters: HashSet<&'a str>,
}

impl<'a> NamedInTarget<'a> {
    fn of(target: &'a [AccessChange]) -> Self {
        let mut named = NamedInTarget::default();
        for change in target {
            match change {
                AccessChange::PutUser { name, .. } => drop(named.users.insert(name)),
                AccessChange::PutVhost { name, .. } => drop(named.vhosts.insert(name)),
                AccessChange::SetPermissions { vhost, user, .. } => drop(named.grants.insert((vhost, user))),
                AccessChange::SetTopicPermissions { vhost, user, permissions } => {
                    named.topic_grants.insert((vhost, user, &permissions.exchange));
                }
                AccessChange::SetPolicy { vhost, kind, name, .. } => drop(named.policies.insert((vhost, *kind, name))),
                AccessChange::SetUserLimits { user, .. } => drop(named.limited_users.insert(user)),
                AccessChange::SetGlobalParameter { name, .. } => drop(named.parameters.insert(name)),
                _ => {}
            }
        }
        named
    }
}

/// Deletes of what `broker` has and `target` has not (permissions, topic permissions, user
/// limits, global parameters, policies, users, vhosts), then `target`'s changes (each sets
/// what it names, whatever was there).
fn access_changes(broker: &Broker, target: &[AccessChange]) -> Vec<AccessChange> {
    let named = NamedInTarget::of(target);
    let access = broker.access();
    let mut changes: Vec<AccessChange> = Vec::new();
    let grants = access.permissions().into_iter().filter(|(v, u, _)| !named.grants.contains(&(v.as_str(), u.as_str())));
    changes.extend(grants.map(|(vhost, user, _)| AccessChange::ClearPermissions { vhost, user }));
    let topic = access.topic_permissions().into_iter();
    let topic = topic.filter(|(v, u, p)| !named.topic_grants.contains(&(v.as_str(), u.as_str(), p.exchange.as_str())));
    changes.extend(topic.map(|(vhost, user, permissions)| AccessChange::ClearTopicPermissions {
        vhost,
        user,
        exchange: Some(permissions.exchange),
    }));
    let limits = access.all_user_limits().into_iter().filter(|(user, _)| !named.limited_users.contains(user.as_str()));
    changes.extend(limits.map(|(user, _)| AccessChange::SetUserLimits { user, limits: Default::default() }));
    let parameters =
        access.global_parameters().into_iter().filter(|(name, _)| !named.parameters.contains(name.as_str()));
    changes.extend(parameters.map(|(name, _)| AccessChange::ClearGlobalParameter { name }));
    for kind in [PolicyKind::User, PolicyKind::Operator] {
        let gone = access.policies_of_kind(kind).into_iter();
        let gone = gone.filter(|(vhost, name, _)| !named.policies.contains(&(vhost.as_str(), kind, name.as_str())));
        changes.extend(gone.map(|(vhost, name, _)| AccessChange::ClearPolicy { vhost, kind, name }));
    }
    let gone_users = access.users().into_iter().filter(|user| !named.users.contains(user.name.as_str()));
    changes.extend(gone_users.map(|user| AccessChange::DeleteUser { name: user.name }));
    let gone_vhosts = access.vhosts().into_iter().filter(|(name, _)| !named.vhosts.contains(name.as_str()));
    changes.extend(gone_vhosts.map(|(name, _)| AccessChange::DeleteVhost { name }));
    changes.extend(target.iter().cloned());
    changes
}

/// The changes that take one vhost's definitions from `here` to `target`. Queues and
/// exchanges present on both sides stay as they are (their definitions do not change once
/// declared).
fn definition_changes(here: &Definitions, target: &Definitions, me: u64, vhost: &str) -> Vec<CatalogCommand> {
    let command = |origin, op| CatalogCommand { origin, vhost: vhost.to_string(), op };
    let mut changes = Vec::new();
    let (bound_here, bound_there) = (BindingSet::of(here), BindingSet::of(target));
    for binding in here.bindings.iter().filter(|b| !bound_there.contains(b)) {
        changes.push(command(me, unbind(binding)));
    }
    let queues_there: HashSet<&str> = target.queues.iter().map(|q| q.name.as_str()).collect();
    for queue in here.queues.iter().filter(|q| !queues_there.contains(q.name.as_str())) {
        let op = DefinitionOp::DeleteQueue { name: queue.name.clone(), if_unused: false, if_empty: false };
        changes.push(command(me, op));
    }
    let exchanges_there: HashSet<&str> = target.exchanges.iter().map(|e| e.name.as_str()).collect();
    for exchange in here.exchanges.iter().filter(|e| !exchanges_there.contains(e.name.as_str())) {
        changes.push(command(me, DefinitionOp::DeleteExchange { name: exchange.name.clone(), if_unused: false }));
    }
    let exchanges_here: HashSet<&str> = here.exchanges.iter().map(|e| e.name.as_str()).collect();
    for exchange in target.exchanges.iter().filter(|e| !exchanges_here.contains(e.name.as_str())) {
        changes.push(command(me, declare_exchange(exchange)));
    }
    let queues_here: HashSet<&str> = here.queues.iter().map(|q| q.name.as_str()).collect();
    for queue in target.queues.iter().filter(|q| !queues_here.contains(q.name.as_str())) {
        let origin = queue.homes.first().copied().unwrap_or(me);
        changes.push(command(origin, declare_queue(queue)));
    }
    for binding in target.bindings.iter().filter(|b| !bound_here.contains(b)) {
        changes.push(command(me, bind(binding)));
    }
    changes
}

/// Bindings looked up by their ends and key, then compared by arguments (which cannot be
/// hashed: they may hold floats).
struct BindingSet<'a> {
    by_key: HashMap<(&'a str, &'a str, bool, &'a str), Vec<&'a FieldTable>>,
}

impl<'a> BindingSet<'a> {
    fn of(definitions: &'a Definitions) -> Self {
        let mut by_key: HashMap<_, Vec<&FieldTable>> = HashMap::new();
        for b in &definitions.bindings {
            by_key.entry(Self::key(b)).or_default().push(&b.arguments);
        }
        BindingSet { by_key }
    }

    fn key(b: &BindingRecord) -> (&str, &str, bool, &str) {
        (&b.source, &b.destination, b.to_exchange, &b.routing_key)
    }

    fn contains(&self, b: &BindingRecord) -> bool {
        self.by_key.get(&Self::key(b)).is_some_and(|arguments| arguments.contains(&&b.arguments))
    }
}

/// A durable exchange's declare; a delayed one joins its pending set's group, which formed
/// when it was first declared.
fn declare_exchange(record: &ExchangeRecord) -> DefinitionOp {
    let ExchangeRecord { name, kind, auto_delete, internal, arguments } = record.clone();
    if kind == DELAYED_TYPE {
        let members = InitialMembers::joining();
        return DefinitionOp::DeclareReplicatedExchange { name, kind, auto_delete, internal, arguments, members };
    }
    DefinitionOp::DeclareExchange { name, kind, durable: true, auto_delete, internal, arguments }
}

/// A durable queue's declare where it lives: a replicated queue's members are those of its
/// formed group (nobody initializes it again); a classic queue's home is the declare's origin.
fn declare_queue(record: &QueueRecord) -> DefinitionOp {
    let replicated = QueueArguments::parse(&record.arguments).is_ok_and(|a| a.queue_type.is_replicated());
    DefinitionOp::DeclareQueue {
        name: record.name.clone(),
        durable: true,
        auto_delete: record.auto_delete,
        arguments: record.arguments.clone(),
        members: replicated.then(|| InitialMembers::formed(record.homes.iter().copied())),
    }
}

fn bind(record: &BindingRecord) -> DefinitionOp {
    let BindingRecord { source, destination, to_exchange, routing_key, arguments } = record.clone();
    DefinitionOp::Bind { source, destination, to_exchange, routing_key, arguments }
}

fn unbind(record: &BindingRecord) -> DefinitionOp {
    let BindingRecord { source, destination, to_exchange, routing_key, arguments } = record.clone();
    DefinitionOp::Unbind { source, destination, to_exchange, routing_key, arguments }
}
