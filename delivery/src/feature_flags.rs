//! Machine versions and the feature flags that switch them, as RabbitMQ's: a replicated state
//! machine's entries are applied with the semantics of the machine version in effect where
//! they lie in the log, and the version changes only through an entry of the log itself, which
//! the cluster appends once every member runs a release that knows the new version
//! (`warren ctl enable_feature_flag`). A node never applies an entry of a version newer than it
//! knows: it stops and says to upgrade it. A cluster formed by nodes of one release starts
//! with every flag they all know enabled; a cluster upgraded node by node keeps its old
//! versions until the operator enables the new flags.
//!
//! Each flag is declared once, in [`FEATURE_FLAGS`]; the versions a release knows, what the API
//! lists and what `enable_feature_flag` checks all follow from that table.

use std::sync::atomic::{AtomicBool, Ordering};

/// A replicated state machine that has versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Machine {
    /// The catalog (its Raft group, one member on a node alone).
    Catalog,
}

impl Machine {
    /// Every machine, for the versions a node announces.
    pub const ALL: [Machine; 1] = [Machine::Catalog];

    /// Its name between nodes and in messages.
    pub fn name(self) -> &'static str {
        match self {
            Machine::Catalog => "catalog",
        }
    }

    /// The machine called `name`.
    pub fn named(name: &str) -> Option<Machine> {
        Machine::ALL.into_iter().find(|machine| machine.name() == name)
    }
}

/// The version of every machine before any flag: what releases before machine versions
/// wrote and applied.
pub const FIRST_MACHINE_VERSION: u16 = 1;

/// A feature flag: enabling it moves `machine` to `version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeatureFlag {
    /// Its name (`enable_feature_flag NAME`).
    pub name: &'static str,
    /// What it brings.
    pub description: &'static str,
    /// The machine it versions.
    pub machine: Machine,
    /// The machine version it switches to.
    pub version: u16,
    /// The group machine version it lets groups of a kind move to, if it brings one: each
    /// group's leader moves its group there once the flag is enabled (every node knows it).
    pub group_version: Option<(GroupMachineKind, u16)>,
}

/// The catalog's snapshots ([`crate::catalog::CatalogSnapshot`]): a release before them
/// cannot install one, so the log is not purged until every node can.
pub const CATALOG_SNAPSHOTS: FeatureFlag = FeatureFlag {
    name: "catalog_snapshots",
    description: "The catalog group snapshots the catalog and purges its log behind the snapshot; a node that \
                  fell behind installs the snapshot",
    machine: Machine::Catalog,
    version: 2,
    group_version: None,
};

/// Policies and operator policies ([`crate::policy`]) and topic permissions in the catalog: a
/// release before them cannot read such a change.
pub const POLICIES: FeatureFlag = FeatureFlag {
    name: "policies",
    description: "Policies and operator policies configure queues by name pattern (set_policy, /api/policies); \
                  topic permissions restrict routing keys on topic exchanges",
    machine: Machine::Catalog,
    version: 3,
    group_version: None,
};

/// Quorum queues run with the policies that apply to them: each queue's group leader moves
/// the group to machine version 2, where `quorum::Op::ApplyPolicy` changes what the queue
/// obeys at one entry of its log on every replica. A release before it cannot read that op.
pub const QUORUM_QUEUE_POLICIES: FeatureFlag = FeatureFlag {
    name: "quorum_queue_policies",
    description: "Quorum queues run with the policies and operator policies that apply to them; a change reaches \
                  every replica through the queue's own log",
    machine: Machine::Catalog,
    version: 4,
    group_version: Some((GroupMachineKind::QuorumQueue, crate::quorum::QUEUE_POLICIES_GROUP_VERSION)),
};

/// Streams run with the policies that apply to them: a replicated stream's group leader moves
/// the group to machine version 2, where `quorum::Op::ApplyRetention` changes what every
/// replica's log keeps at one entry. A release before it cannot read that op.
pub const STREAM_POLICIES: FeatureFlag = FeatureFlag {
    name: "stream_policies",
    description: "Streams take their retention (max-age, max-length-bytes) from the policies and operator policies \
                  that apply to them; a change reaches every replica through the stream's own log",
    machine: Machine::Catalog,
    version: 5,
    group_version: Some((GroupMachineKind::Stream, crate::stream::STREAM_POLICIES_GROUP_VERSION)),
};

/// Every feature flag, oldest first.
pub const FEATURE_FLAGS: &[FeatureFlag] = &[CATALOG_SNAPSHOTS, POLICIES, QUORUM_QUEUE_POLICIES, STREAM_POLICIES];

impl FeatureFlag {
    /// Whether the flag is enabled where its machine is at `version`.
    pub fn enabled_at(&self, version: u16) -> bool {
        version >= self.version
    }
}

/// The flag called `name`.
pub fn flag(name: &str) -> Option<&'static FeatureFlag> {
    FEATURE_FLAGS.iter().find(|flag| flag.name == name)
}

/// Set by the test-only switch that makes this node behave as the release before the newest
/// flags (see [`pretend_previous_release`]).
static PREVIOUS_RELEASE: AtomicBool = AtomicBool::new(false);

/// Makes this node know each machine's versions as the previous release did: the newest
/// version of each machine is unknown to it. For tests of mixed-release clusters only.
pub fn pretend_previous_release() {
    PREVIOUS_RELEASE.store(true, Ordering::Relaxed);
}

/// The newest version of `machine` this node knows.
pub fn newest_version(machine: Machine) -> u16 {
    let mut versions: Vec<u16> = FEATURE_FLAGS.iter().filter(|f| f.machine == machine).map(|f| f.version).collect();
    versions.sort_unstable();
    if PREVIOUS_RELEASE.load(Ordering::Relaxed) {
        versions.pop();
    }
    versions.last().copied().unwrap_or(FIRST_MACHINE_VERSION)
}

/// The newest version of every machine this node knows, by machine name: what it tells the
/// other nodes (the group machines' too, so that a release whose flags move them can see who
/// knows what).
pub fn known_versions() -> Vec<(String, u16)> {
    let catalog = Machine::ALL.into_iter().map(|machine| (machine.name().to_string(), newest_version(machine)));
    let groups =
        GroupMachineKind::ALL.into_iter().map(|machine| (machine.name().to_string(), machine.newest_version()));
    catalog.chain(groups).collect()
}

/// The state machine a quorum group runs: a quorum queue's (which a replicated delayed
/// exchange runs too, with other settings) or a replicated stream's. Each has a version of its
/// own, kept in its state and snapshots and moved only by an entry of its group's log
/// (`quorum::Op::SetMachineVersion`), checked where it is applied ([`check_group_version`]).
///
/// A flag moves them ([`FeatureFlag::group_version`]); a node of a release that does not know
/// the version meets the version entry, stops the group there and says to upgrade, instead of
/// misreading the entries that follow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupMachineKind {
    /// A quorum queue's (and a replicated delayed exchange's).
    QuorumQueue,
    /// A replicated stream's.
    Stream,
}

impl GroupMachineKind {
    /// Every group machine.
    pub const ALL: [GroupMachineKind; 2] = [GroupMachineKind::QuorumQueue, GroupMachineKind::Stream];

    /// Its name between nodes and in messages.
    pub fn name(self) -> &'static str {
        match self {
            GroupMachineKind::QuorumQueue => "quorum_queue",
            GroupMachineKind::Stream => "stream",
        }
    }

    /// The newest version of it this node knows: the newest that a flag this node knows
    /// brings.
    pub fn newest_version(self) -> u16 {
        self.newest_brought_by(|flag| flag.version <= newest_version(flag.machine))
    }

    /// The version its groups may run at where the catalog is at `catalog_version`: the newest
    /// an enabled flag brings.
    pub fn enabled_version(self, catalog_version: u16) -> u16 {
        self.newest_brought_by(|flag| flag.machine == Machine::Catalog && flag.enabled_at(catalog_version))
    }

    /// The newest version of it that one of the flags `counts` brings.
    fn newest_brought_by(self, counts: impl Fn(&FeatureFlag) -> bool) -> u16 {
        let brought = FEATURE_FLAGS.iter().filter(|flag| counts(flag)).filter_map(|flag| flag.group_version);
        brought.filter(|(kind, _)| *kind == self).map(|(_, version)| version).max().unwrap_or(FIRST_MACHINE_VERSION)
    }
}

/// Refuses `version` of group machine `machine` if this node does not know it.
pub fn check_group_version(machine: GroupMachineKind, version: u16) -> Result<(), NewerVersion> {
    let known = machine.newest_version();
    if version > known {
        return Err(NewerVersion { machine: machine.name(), found: version, known });
    }
    Ok(())
}

/// Why a node may not apply something of `machine`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the {machine} is at machine version {found} and this node knows versions up to {known}: upgrade this node to \
     the release of the others"
)]
pub struct NewerVersion {
    /// The machine's name.
    pub machine: &'static str,
    /// The version met.
    pub found: u16,
    /// The newest this node knows.
    pub known: u16,
}

/// Refuses `version` of `machine` if this node does not know it.
pub fn check_known(machine: Machine, version: u16) -> Result<(), NewerVersion> {
    let known = newest_version(machine);
    if version > known {
        return Err(NewerVersion { machine: machine.name(), found: version, known });
    }
    Ok(())
}

/// The machine versions one node knows, as it answered when asked, or why it did not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeVersions {
    /// The node's name.
    pub node: String,
    /// Its newest version of each machine, by machine name ([`known_versions`]).
    pub known: Result<Vec<(String, u16)>, String>,
}

impl NodeVersions {
    /// The newest version of `machine` the node knows (a node that does not list the machine
    /// runs a release from before its versions: the first).
    fn version_of(&self, machine: Machine) -> Result<u16, &str> {
        let known = self.known.as_ref().map_err(String::as_str)?;
        let listed = known.iter().find(|(name, _)| name == machine.name()).map(|(_, version)| *version);
        Ok(listed.unwrap_or(FIRST_MACHINE_VERSION))
    }
}

/// Why `flag` cannot be enabled on the cluster of `nodes`, if it cannot: a node that did not
/// answer, or that runs a release that does not know the flag's version.
pub fn why_not_enabled(flag: &FeatureFlag, nodes: &[NodeVersions]) -> Option<String> {
    let mut reasons = Vec::new();
    for node in nodes {
        match node.version_of(flag.machine) {
            Ok(version) if version >= flag.version => {}
            Ok(_) => reasons.push(format!("node {} runs a release without it: upgrade it first", node.node)),
            Err(why) => reasons.push(format!("node {} did not say what it supports ({why})", node.node)),
        }
    }
    (!reasons.is_empty()).then(|| format!("feature flag '{}' cannot be enabled: {}", flag.name, reasons.join("; ")))
}

/// The newest version of `machine` that every one of `nodes` knows, if every one answered.
pub fn newest_common_version(machine: Machine, nodes: &[NodeVersions]) -> Option<u16> {
    nodes.iter().map(|node| node.version_of(machine).ok()).min().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_flag_names_a_version_above_the_first_and_names_are_unique() {
        for (i, flag) in FEATURE_FLAGS.iter().enumerate() {
            assert!(flag.version > FIRST_MACHINE_VERSION, "{}", flag.name);
            assert!(FEATURE_FLAGS[..i].iter().all(|other| other.name != flag.name), "{}", flag.name);
        }
    }

    #[test]
    fn a_group_machine_refuses_a_version_it_does_not_know_and_is_announced() {
        for machine in GroupMachineKind::ALL {
            assert!(check_group_version(machine, FIRST_MACHINE_VERSION).is_ok());
            let error = check_group_version(machine, machine.newest_version() + 1).expect_err("newer");
            assert!(error.to_string().contains(machine.name()) && error.to_string().contains("upgrade"), "{error}");
            let announced = known_versions().into_iter().find(|(name, _)| name == machine.name());
            assert_eq!(announced, Some((machine.name().to_string(), machine.newest_version())));
        }
    }

    #[test]
    fn a_group_version_is_known_with_its_flag_and_enabled_with_it() {
        let (kind, version) = QUORUM_QUEUE_POLICIES.group_version.expect("brings a group version");
        assert_eq!(kind.newest_version(), version);
        assert_eq!(kind.enabled_version(QUORUM_QUEUE_POLICIES.version), version);
        assert_eq!(kind.enabled_version(QUORUM_QUEUE_POLICIES.version - 1), FIRST_MACHINE_VERSION);
        assert_eq!(GroupMachineKind::Stream.enabled_version(QUORUM_QUEUE_POLICIES.version), FIRST_MACHINE_VERSION);
    }

    #[test]
    fn a_version_above_the_newest_known_is_refused_with_the_fix() {
        let newest = newest_version(Machine::Catalog);
        assert!(check_known(Machine::Catalog, newest).is_ok());
        let error = check_known(Machine::Catalog, newest + 1).expect_err("newer");
        assert!(error.to_string().contains("upgrade this node"), "{error}");
        assert_eq!(Machine::named("catalog"), Some(Machine::Catalog));
    }

    fn node(name: &str, known: Result<Vec<(String, u16)>, String>) -> NodeVersions {
        NodeVersions { node: name.into(), known }
    }

    #[test]
    fn a_flag_is_enabled_only_when_every_node_knows_its_version() {
        let current = || Ok(vec![("catalog".to_string(), CATALOG_SNAPSHOTS.version)]);
        let nodes = [node("warren@a", current()), node("warren@b", current())];
        assert_eq!(why_not_enabled(&CATALOG_SNAPSHOTS, &nodes), None);
        assert_eq!(newest_common_version(Machine::Catalog, &nodes), Some(CATALOG_SNAPSHOTS.version));

        let older = [node("warren@a", current()), node("warren@c", Ok(vec![("catalog".into(), 1)]))];
        let why = why_not_enabled(&CATALOG_SNAPSHOTS, &older).expect("refused");
        assert!(why.contains("warren@c") && why.contains("upgrade it") && !why.contains("warren@a"), "{why}");
        assert_eq!(newest_common_version(Machine::Catalog, &older), Some(1));

        let before_versions = [node("warren@d", Ok(Vec::new()))];
        assert_eq!(newest_common_version(Machine::Catalog, &before_versions), Some(FIRST_MACHINE_VERSION));
        let silent = [node("warren@a", current()), node("warren@e", Err("unreachable".into()))];
        assert!(why_not_enabled(&CATALOG_SNAPSHOTS, &silent).expect("refused").contains("warren@e"));
        assert_eq!(newest_common_version(Machine::Catalog, &silent), None);
    }
}
