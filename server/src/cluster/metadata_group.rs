//! Starting this node's member of the metadata group (`warren_delivery::metadata`).
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
use openraft::{Config, Raft, SnapshotPolicy};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use warren_delivery::feature_flags::{newest_common_version, Machine};
use warren_delivery::metadata::{MetaRaft, MetaStateMachine, Metadata};
use warren_delivery::quorum::Replication;
use warren_delivery::raft_adapter::Adapter;
use warren_delivery::Broker;
use warren_storage::raft::RaftLog;
use warren_storage::LogConfig;
use warren_webui::ClusterView;

/// The metadata group's name on the wire.
pub const METADATA_GROUP: &str = "metadata";
/// The cluster's files, in the data directory.
const CLUSTER_DIR: &str = "cluster";
/// The metadata member's Raft log, in the cluster's files.
const LOG_DIR: &str = "metadata-log";
/// The metadata state machine's applied state, in the cluster's files.
const APPLIED_FILE: &str = "metadata-applied";
/// Segment size of the metadata log: its entries are small (about 65 bytes for a declare), so
/// that a purge behind each snapshot frees whole segments often and the log stays a few
/// megabytes (a 64 MiB segment would hold a million changes before the first could go).
const LOG_SEGMENT_BYTES: u64 = 4 * 1024 * 1024;
/// Entries kept in the log behind a snapshot, so that a node a little behind catches up from
/// the log rather than from a whole snapshot.
const LOG_KEPT_BEHIND_SNAPSHOT_ENTRIES: u64 = 1024;
/// The file naming the cluster the data directory belongs to.
const CLUSTER_NAME_FILE: &str = "cluster-name";

/// The metadata member could not start.
#[derive(Debug, thiserror::Error)]
pub enum MetadataStartError {
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
    /// The Raft log, state machine or Raft itself failed.
    #[error("the cluster's metadata group cannot start: {0}")]
    Raft(String),
}

/// Removes what this node's metadata member keeps in the cluster's files of `data_dir` (its
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
    MetaStateMachine::remove_applied(&applied).map_err(|error| (applied, error))
}

/// The cluster's files in data directory `data_dir`.
pub fn cluster_dir(data_dir: &Path) -> PathBuf {
    data_dir.join(CLUSTER_DIR)
}

/// How the metadata member runs: the cluster's name and the entries between two snapshots.
#[derive(Debug, Clone)]
pub struct MetadataSettings {
    /// The cluster's name (a data directory of another cluster is refused).
    pub cluster_name: String,
    /// Entries between two snapshots of the catalog.
    pub snapshot_interval_entries: u64,
}

/// Starts this node's metadata member over `broker`, routes the group's RPCs and proposals to
/// it, and makes `broker`'s definition changes go through it. The group is initialized here
/// if `may_initialize`, its log is empty and this node's name sorts first.
pub async fn start(
    cluster: &Arc<ClusterReplication>,
    router: &RaftRouter,
    broker: &Arc<Broker>,
    data_dir: &Path,
    settings: &MetadataSettings,
    log_config: LogConfig,
    may_initialize: bool,
) -> Result<Arc<Metadata>, MetadataStartError> {
    let cluster_name = settings.cluster_name.as_str();
    let dir = cluster_dir(data_dir);
    check_cluster_name(&dir, cluster_name)?;
    let raft_error = |e: &dyn std::fmt::Display| MetadataStartError::Raft(e.to_string());
    let log_config = LogConfig { segment_bytes: LOG_SEGMENT_BYTES, ..log_config };
    let log = RaftLog::<MetaRaft>::open(dir.join(LOG_DIR), log_config).map_err(|e| raft_error(&e))?;
    let replication: Arc<dyn Replication> = Arc::clone(cluster) as Arc<dyn Replication>;
    let node_id = replication.node_id();
    let last = log.clone().get_log_state().await.map_err(|e| raft_error(&e))?.last_log_id;
    let recovery_point = last.map_or(0, |id| id.index);
    let machine =
        MetaStateMachine::open(node_id, broker, Arc::clone(&replication), dir.join(APPLIED_FILE), recovery_point)
            .map_err(|e| raft_error(&e))?;
    let fresh = last.is_none();
    let config = Config {
        cluster_name: cluster_name.to_string(),
        // Snapshots are asked for once every node can install one (Metadata::snapshot_every).
        snapshot_policy: SnapshotPolicy::Never,
        max_in_snapshot_log_to_keep: LOG_KEPT_BEHIND_SNAPSHOT_ENTRIES,
        ..Default::default()
    };
    let config = fit_to_transport(&config).map_err(|e| raft_error(&e))?;
    let network = GroupNetwork::<MetaRaft>::new(cluster.transport().clone(), RaftGroupId::new(METADATA_GROUP));
    let raft = Raft::new(node_id, Arc::new(config), network, log, Adapter::new(machine.clone()))
        .await
        .map_err(|e| raft_error(&e))?;
    let first = cluster.node_names().into_iter().next();
    let initializes = may_initialize && fresh && first.as_deref() == Some(cluster.transport().node_name());
    if initializes {
        if let Err(error) = raft.initialize(cluster.members()).await {
            tracing::info!(%error, "the metadata group was initialized already");
        }
        tracing::info!(nodes = ?cluster.node_names(), "initialized the cluster's metadata group");
    }
    let forwarding = Arc::clone(cluster) as Arc<dyn warren_delivery::metadata::MetaForwarding>;
    let metadata = Metadata::new(raft, machine, forwarding, replication);
    metadata.snapshot_every(settings.snapshot_interval_entries);
    if initializes {
        enable_common_versions(Arc::clone(cluster), Arc::clone(&metadata));
    }
    router.set_metadata(Arc::clone(&metadata));
    broker.join_metadata(&metadata);
    Ok(metadata)
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
fn enable_common_versions(cluster: Arc<ClusterReplication>, metadata: Arc<Metadata>) {
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + FORMATION_VERSIONS_WAIT;
        while tokio::time::Instant::now() < deadline {
            let nodes = ClusterView::machine_versions(&*cluster).await;
            if let Some(version) = newest_common_version(Machine::Catalog, &nodes) {
                if version <= metadata.machine_version() {
                    return;
                }
                match metadata.set_machine_version(version).await {
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
fn check_cluster_name(dir: &Path, cluster_name: &str) -> Result<(), MetadataStartError> {
    let path = dir.join(CLUSTER_NAME_FILE);
    let io = |source| MetadataStartError::Io { path: path.clone(), source };
    match std::fs::read_to_string(&path) {
        Ok(found) if found.trim() == cluster_name => Ok(()),
        Ok(found) => Err(MetadataStartError::OtherCluster {
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
