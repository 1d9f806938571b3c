//! Starting this node's member of the catalog group (`warren_delivery::catalog`): with the
//! cluster's nodes, or alone, as a group of one (a broker on its own is a cluster of one).
//!
//! Its files are under `DATA_DIR/cluster/`: the Raft log, the applied state, and the name of
//! the cluster the directory belongs to (a node started on a data directory of another
//! cluster refuses to start). The group forms from the seed list with no manual step: the
//! node whose name sorts first initializes it with every seed as a member, once, when its log
//! is empty; the others wait for it (openraft elects a leader once a majority is up), and a
//! restart never initializes it again.

use super::raft_network::GroupNetwork;
use super::raft_router::RaftRouter;
use super::raft_rpc::{fit_to_transport, RaftGroupId};
use super::replication::ClusterReplication;
use openraft::storage::RaftLogStorage;
use openraft::{BasicNode, Config, Raft, SnapshotPolicy};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use warren_delivery::catalog::{Catalog, CatalogForwarding, CatalogMachine, CatalogRaft, NoOtherNodes};
use warren_delivery::feature_flags::{newest_common_version, newest_version, Machine, CATALOG_SNAPSHOTS};
use warren_delivery::quorum::{NoPeers, Replication, SingleNode};
use warren_delivery::raft_adapter::{Adapter, StateMachine};
use warren_delivery::Broker;
use warren_storage::raft::RaftLog;
use warren_storage::LogConfig;
use warren_webui::ClusterView;

/// The catalog group's name on the wire.
pub const METADATA_GROUP: &str = "metadata";
/// The cluster's files, in the data directory.
const CLUSTER_DIR: &str = "cluster";
/// The catalog member's Raft log, in the cluster's files.
const LOG_DIR: &str = "metadata-log";
/// The catalog state machine's applied state, in the cluster's files.
const APPLIED_FILE: &str = "metadata-applied";
/// Segment size of the catalog log: its entries are small (about 65 bytes for a declare), so
/// that a purge behind each snapshot frees whole segments often and the log stays a few
/// megabytes (a 64 MiB segment would hold a million changes before the first could go).
const LOG_SEGMENT_BYTES: u64 = 4 * 1024 * 1024;
/// Group-commit spacing of the catalog log (see `LogConfig::flush_interval`). A change is
/// answered only once its entry is synced and one client's changes come one at a time, so the
/// 1 ms spacing of message logs would cap such a client at about a thousand changes a second;
/// changes arriving during a sync still share the next one.
const LOG_FLUSH_INTERVAL: std::time::Duration = std::time::Duration::from_micros(50);
/// Entries kept in the log behind a snapshot, so that a node a little behind catches up from
/// the log rather than from a whole snapshot.
const LOG_KEPT_BEHIND_SNAPSHOT_ENTRIES: u64 = 1024;
/// The file naming the cluster the data directory belongs to.
const CLUSTER_NAME_FILE: &str = "cluster-name";

/// The catalog member could not start.
#[derive(Debug, thiserror::Error)]
pub enum CatalogStartError {
    /// The data directory belongs to another cluster.
    #[error(
        "the data directory {dir} belongs to cluster '{found}', not '{expected}': start this node with \
         --cluster-name {found}, or give it an empty data directory to join '{expected}'"
    )]
    OtherCluster {
        /// The directory.
        dir: PathBuf,
        /// The cluster it belongs to.
        found: String,
        /// The cluster this node was started for.
        expected: String,
    },
    /// A file could not be read or written.
    #[error("cannot use {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The catalog was written by this node in the other mode (alone, or in a cluster) and
    /// not stopped cleanly: its log holds changes its definitions journals may lack.
    #[error(
        "the catalog in {dir} was written by this node running {}, and it was not stopped cleanly: start it once \
         as it ran before so that it recovers, stop it, then start it {}",
        if *alone { "alone" } else { "in a cluster" },
        if *alone { "in the cluster" } else { "alone" }
    )]
    OtherMode {
        /// The catalog's directory.
        dir: PathBuf,
        /// Whether it was written by the node alone.
        alone: bool,
    },
    /// The Raft log, state machine or Raft itself failed.
    #[error("the catalog cannot start: {0}")]
    Raft(String),
}

/// Removes what this node's catalog member keeps in the cluster's files of `data_dir` (its
/// log and applied state): `join_cluster` starts it afresh. The path that could not be
/// removed, and why.
pub fn remove_member_files(data_dir: &Path) -> Result<(), (PathBuf, std::io::Error)> {
    let dir = cluster_dir(data_dir);
    let log = dir.join(LOG_DIR);
    match std::fs::remove_dir_all(&log) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => return Err((log, error)),
        _ => {}
    }
    let applied = dir.join(APPLIED_FILE);
    CatalogMachine::remove_applied(&applied).map_err(|error| (applied, error))
}

/// The cluster's files in data directory `data_dir`.
pub fn cluster_dir(data_dir: &Path) -> PathBuf {
    data_dir.join(CLUSTER_DIR)
}

/// How the catalog member runs: the cluster's name and the entries between two snapshots.
#[derive(Debug, Clone)]
pub struct CatalogSettings {
    /// The cluster's name (a data directory of another cluster is refused).
    pub cluster_name: String,
    /// Entries between two snapshots of the catalog.
    pub snapshot_interval_entries: u64,
}

/// Starts this node's catalog member over `broker`, routes the group's RPCs and proposals to
/// it, and makes `broker`'s definition changes go through it. The group is initialized here
/// if `may_initialize`, its log is empty and this node's name sorts first.
pub async fn start(
    cluster: &Arc<ClusterReplication>,
    router: &RaftRouter,
    broker: &Arc<Broker>,
    data_dir: &Path,
    settings: &CatalogSettings,
    log_config: LogConfig,
    may_initialize: bool,
) -> Result<Arc<Catalog>, CatalogStartError> {
    check_cluster_name(&cluster_dir(data_dir), &settings.cluster_name)?;
    // Elections are called by the failure detector, after a pre-vote (`super::election`).
    let config = Config { enable_elect: false, ..raft_config(settings) };
    let config = fit_to_transport(&config).map_err(|e| CatalogStartError::Raft(e.to_string()))?;
    let network = GroupNetwork::<CatalogRaft>::new(cluster.transport().clone(), RaftGroupId::new(METADATA_GROUP));
    let first = cluster.node_names().into_iter().next();
    let initializes = may_initialize && first.as_deref() == Some(cluster.transport().node_name());
    let member = Member {
        replication: Arc::clone(cluster) as Arc<dyn Replication>,
        forwarding: Arc::clone(cluster) as Arc<dyn CatalogForwarding>,
        initial_members: initializes.then(|| cluster.members()),
        runs_alone: false,
    };
    let (catalog, initialized) = open_member(broker, data_dir, settings, config, network, member, log_config).await?;
    if initialized {
        tracing::info!(nodes = ?cluster.node_names(), "initialized the catalog");
        enable_common_versions(Arc::clone(cluster), Arc::clone(&catalog));
    }
    router.set_catalog(Arc::clone(&catalog));
    Ok(catalog)
}

/// Starts the catalog of a node alone: the same state machine and log as a cluster's
/// catalog member, in a group of one (it leads itself at once; nothing is forwarded), so that
/// a broker on its own changes its definitions exactly as a cluster does.
pub async fn start_alone(
    broker: &Arc<Broker>,
    data_dir: &Path,
    settings: &CatalogSettings,
    log_config: LogConfig,
) -> Result<Arc<Catalog>, CatalogStartError> {
    let me = warren_delivery::quorum::LOCAL_NODE_ID;
    let member = Member {
        replication: SingleNode::shared(),
        forwarding: Arc::new(NoOtherNodes),
        initial_members: Some(BTreeMap::from([(me, BasicNode::new(ALONE_NODE_ADDRESS))])),
        runs_alone: true,
    };
    let config = raft_config(settings);
    let (catalog, initialized) = open_member(broker, data_dir, settings, config, NoPeers, member, log_config).await?;
    if initialized {
        // Before the listeners open: a client's first change (an import of definitions
        // with policies, say) must not find the new catalog below the version it needs.
        let version = newest_version(Machine::Catalog);
        if let Err(error) = catalog.set_machine_version(version).await {
            tracing::warn!(%error, version, "cannot move the new catalog to the newest machine version");
            return Ok(catalog);
        }
        let new = Arc::clone(&catalog);
        tokio::spawn(async move {
            // What the data directory held before (an earlier release's definitions files) is
            // the catalog's from its first snapshot on: the record a node of a cluster it
            // later forms would be sent, and what its log is purged behind.
            if !CATALOG_SNAPSHOTS.enabled_at(new.machine_version()) {
                return;
            }
            if let Err(error) = new.raft().trigger().snapshot().await {
                tracing::warn!(%error, "cannot take the new catalog's first snapshot");
            }
        });
    }
    Ok(catalog)
}

/// The address a node alone gives itself in its catalog's membership (it has no other).
const ALONE_NODE_ADDRESS: &str = "local";

/// What differs between a member of a cluster and the catalog of a node alone.
struct Member {
    replication: Arc<dyn Replication>,
    forwarding: Arc<dyn CatalogForwarding>,
    /// The members to initialize the group with if its log is empty; `None`: another node
    /// initializes it.
    initial_members: Option<BTreeMap<u64, BasicNode>>,
    runs_alone: bool,
}

fn raft_config(settings: &CatalogSettings) -> Config {
    Config {
        cluster_name: settings.cluster_name.clone(),
        // Snapshots are asked for once every node can install one (Catalog::snapshot_every).
        snapshot_policy: SnapshotPolicy::Never,
        max_in_snapshot_log_to_keep: LOG_KEPT_BEHIND_SNAPSHOT_ENTRIES,
        ..Default::default()
    }
}

/// Opens the member's log and state machine (starting afresh over a catalog written in the
/// other mode, if it was stopped cleanly), starts Raft, initializes the group when its log is
/// empty and `member` says with whom, and makes `broker`'s definition changes go through it.
/// Whether it initialized the group.
async fn open_member<N: openraft::network::RaftNetworkFactory<CatalogRaft>>(
    broker: &Arc<Broker>,
    data_dir: &Path,
    settings: &CatalogSettings,
    config: Config,
    network: N,
    member: Member,
    log_config: LogConfig,
) -> Result<(Arc<Catalog>, bool), CatalogStartError> {
    let dir = cluster_dir(data_dir);
    let raft_error = |e: &dyn std::fmt::Display| CatalogStartError::Raft(e.to_string());
    let log_config = LogConfig { segment_bytes: LOG_SEGMENT_BYTES, flush_interval: LOG_FLUSH_INTERVAL, ..log_config };
    let node_id = member.replication.node_id();
    let mut discarded = false;
    let (log, machine, last) = loop {
        let log = RaftLog::<CatalogRaft>::open(dir.join(LOG_DIR), log_config.clone()).map_err(|e| raft_error(&e))?;
        let last = log.clone().get_log_state().await.map_err(|e| raft_error(&e))?.last_log_id;
        let recovery_point = last.map_or(0, |id| id.index);
        let replication = Arc::clone(&member.replication);
        let machine = CatalogMachine::open(node_id, broker, replication, dir.join(APPLIED_FILE), recovery_point)
            .map_err(|e| raft_error(&e))?;
        let (applied, membership) = StateMachine::applied_state(&machine);
        let voters: BTreeSet<u64> = membership.membership().voter_ids().collect();
        if discarded || voters.is_empty() || written_alone(&voters) == member.runs_alone {
            break (log, machine, last);
        }
        if applied != last {
            return Err(CatalogStartError::OtherMode { dir, alone: !member.runs_alone });
        }
        // Stopped cleanly: the definitions journals hold everything, the log adds nothing.
        drop((log, machine));
        tracing::info!(dir = %dir.display(), "starting the catalog afresh: it was written by this node in the other mode");
        remove_member_files(data_dir).map_err(|(path, source)| CatalogStartError::Io { path, source })?;
        discarded = true;
    };
    let raft = Raft::new(node_id, Arc::new(config), network, log, Adapter::new(machine.clone()))
        .await
        .map_err(|e| raft_error(&e))?;
    let initializes = last.is_none() && member.initial_members.is_some();
    if let Some(members) = member.initial_members.filter(|_| last.is_none()) {
        if let Err(error) = raft.initialize(members).await {
            tracing::info!(%error, "the catalog group was initialized already");
        }
    }
    let catalog = Catalog::new(raft, machine, member.forwarding, member.replication);
    catalog.snapshot_every(settings.snapshot_interval_entries);
    broker.join_catalog(&catalog);
    Ok((catalog, initializes))
}

/// Whether a catalog with these voters is a node alone's (a cluster's node ids are digests of
/// names; a node alone is [`warren_delivery::quorum::LOCAL_NODE_ID`]).
fn written_alone(voters: &BTreeSet<u64>) -> bool {
    voters.len() == 1 && voters.contains(&warren_delivery::quorum::LOCAL_NODE_ID)
}

/// How long a new cluster's first node waits for every seed to say which machine versions
/// it knows.
const FORMATION_VERSIONS_WAIT: Duration = Duration::from_secs(60);
/// Between two asks of the seeds' machine versions while the cluster forms.
const FORMATION_VERSIONS_RETRY: Duration = Duration::from_secs(1);

/// A cluster formed by nodes of one release starts with every feature flag they all know
/// enabled, as RabbitMQ's does: the first node asks every seed, and moves the catalog to the
/// newest version they share. A seed that does not answer in time leaves the flags to the
/// operator (`warren ctl enable_feature_flag all`).
fn enable_common_versions(cluster: Arc<ClusterReplication>, catalog: Arc<Catalog>) {
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + FORMATION_VERSIONS_WAIT;
        while tokio::time::Instant::now() < deadline {
            let nodes = ClusterView::machine_versions(&*cluster).await;
            if let Some(version) = newest_common_version(Machine::Catalog, &nodes) {
                if version <= catalog.machine_version() {
                    return;
                }
                match catalog.set_machine_version(version).await {
                    Ok(()) => {
                        return tracing::info!(
                            version,
                            "the new cluster's catalog is at the newest version its nodes share"
                        )
                    }
                    Err(error) => tracing::debug!(%error, "cannot set the new cluster's machine version yet"),
                }
            }
            tokio::time::sleep(FORMATION_VERSIONS_RETRY).await;
        }
        tracing::info!("not every seed said which versions it knows: enable the feature flags with warren ctl enable_feature_flag all");
    });
}

/// Records the cluster's name in a new data directory; refuses one of another cluster.
fn check_cluster_name(dir: &Path, cluster_name: &str) -> Result<(), CatalogStartError> {
    let path = dir.join(CLUSTER_NAME_FILE);
    let io = |source| CatalogStartError::Io { path: path.clone(), source };
    match std::fs::read_to_string(&path) {
        Ok(found) if found.trim() == cluster_name => Ok(()),
        Ok(found) => Err(CatalogStartError::OtherCluster {
            dir: dir.to_path_buf(),
            found: found.trim().to_string(),
            expected: cluster_name.to_string(),
        }),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(io)?;
            std::fs::write(&path, format!("{cluster_name}\n")).map_err(io)
        }
        Err(error) => Err(io(error)),
    }
}
