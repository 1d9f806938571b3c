//! The broker: its virtual hosts and access control, shared by every connection.

use crate::access::{AccessChange, AccessControl, AccessSettings};
use crate::connection_id::ConnectionId;
use crate::connections::Connections;
use crate::definitions::VhostStorage;
use crate::error::{BrokerError, BrokerResult};
use crate::home_node::{HomeNode, VhostDirectory};
use crate::message_store::LogStoreConfig;
use crate::quorum::{Replication, SingleNode};
use crate::remote::{Forwarder, Forwarding, NoForwarding};
use crate::resource_alarm::ResourceAlarms;
use crate::scheduler::Scheduler;
use crate::vhost::VirtualHost;
use parking_lot::RwLock;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

/// The virtual host every broker has.
pub const DEFAULT_VHOST: &str = "/";

/// The whole broker core.
#[derive(Debug)]
pub struct Broker {
    vhosts: RwLock<HashMap<String, Arc<VirtualHost>>>,
    /// Held while a vhost is created or deleted.
    vhost_lifecycle: parking_lot::Mutex<()>,
    /// Where new vhosts are made.
    home: VhostHome,
    /// Users, vhosts' limits, permissions.
    access: AccessControl,
    /// The catalog every definition change goes through, once the server has started it (a
    /// bare broker, as in delivery's own tests, has none and changes each host directly).
    catalog: RwLock<Option<Arc<crate::catalog::Catalog>>>,
    next_connection: AtomicU64,
    scheduler: Arc<Scheduler>,
    /// This node's end of forwarding to and from queues of other nodes.
    forwarder: Arc<Forwarder>,
    /// The client connections, for the management API.
    connections: Arc<Connections>,
    /// Memory and disk alarms, which block publishers.
    alarms: Arc<ResourceAlarms>,
}

/// Where virtual hosts live under the data directory.
const VHOSTS_DIR: &str = "vhosts";
/// The access control file under the data directory.
const ACCESS_FILE: &str = "access.json";

/// Where a broker keeps its virtual hosts.
#[derive(Debug)]
enum VhostHome {
    /// In memory (tests, benchmarks).
    Memory,
    /// Each in its directory under `dir`, named by [`vhost_dir_name`].
    Disk { dir: PathBuf, store_config: LogStoreConfig, replication: Arc<dyn Replication>, catalog_owned: bool },
}

/// Longest vhost directory name that is the hex of the vhost's name. Hex keeps any name
/// (`/`, `..`, bytes a file system refuses) off the path, but doubles its length, and a file
/// name may be at most 255 bytes: above this, the name's digest is used instead. Names
/// short enough keep the hex directories earlier versions made.
const MAX_HEX_DIR_NAME: usize = 200;
/// What starts a directory named by a digest; hex digits never include `h`, so such a name
/// cannot be another vhost's hex.
const DIGEST_DIR_PREFIX: &str = "h-";

/// The directory, under the data directory's `vhosts/`, that holds vhost `name`'s data: the
/// hex of the name when it fits in [`MAX_HEX_DIR_NAME`], else `h-` and the name's SHA-256 in
/// hex. The vhost cannot be read back from a digest: the broker finds its vhosts from the
/// access control's list, never by listing the directory.
fn vhost_dir_name(name: &str) -> String {
    let direct = hex(name.as_bytes());
    if direct.len() <= MAX_HEX_DIR_NAME {
        return direct;
    }
    format!("{DIGEST_DIR_PREFIX}{}", hex(&Sha256::digest(name.as_bytes())))
}

/// `bytes` in lower-case hex, two digits each: safe in any file name.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Broker {
    /// A broker kept wholly in memory, with the default vhost and the default user.
    pub fn in_memory() -> Arc<Self> {
        let forwarder = Forwarder::new(Arc::new(NoForwarding));
        // Without a file and with the default settings, nothing here can fail.
        let access = AccessControl::open(None, &AccessSettings::default()).unwrap_or_else(|_| unreachable!());
        Self::build(VhostHome::Memory, access, forwarder).unwrap_or_else(|_| unreachable!())
    }

    /// A broker on `data_dir`: durable definitions and messages are recovered from it.
    pub fn open(data_dir: &Path, store_config: LogStoreConfig) -> Result<Arc<Self>, BrokerError> {
        let access = AccessSettings::default();
        Self::open_clustered(data_dir, store_config, &access, SingleNode::shared(), Arc::new(NoForwarding), false)
    }

    /// A broker on `data_dir`, a node of a cluster: its quorum queues are replicated through
    /// `replication`, and its clients reach queues of other nodes through `forwarding`. On a
    /// first start, `access` says which user and vhost to create. With `catalog_owned`, the
    /// catalog's Raft log records every definition change first (see
    /// [`VhostStorage::owned_by_catalog`]).
    pub fn open_clustered(
        data_dir: &Path,
        store_config: LogStoreConfig,
        access: &AccessSettings,
        replication: Arc<dyn Replication>,
        forwarding: Arc<dyn Forwarding>,
        catalog_owned: bool,
    ) -> Result<Arc<Self>, BrokerError> {
        let control = AccessControl::open(Some(warren_storage::SnapshotFile::new(data_dir.join(ACCESS_FILE))), access)?;
        let home = VhostHome::Disk { dir: data_dir.join(VHOSTS_DIR), store_config, replication, catalog_owned };
        Self::build(home, control, Forwarder::new(forwarding))
    }

    fn build(home: VhostHome, access: AccessControl, forwarder: Arc<Forwarder>) -> Result<Arc<Self>, BrokerError> {
        let broker = Arc::new(Broker {
            vhosts: RwLock::new(HashMap::new()),
            vhost_lifecycle: parking_lot::Mutex::new(()),
            home,
            access,
            catalog: RwLock::new(None),
            next_connection: AtomicU64::new(1),
            scheduler: Arc::new(Scheduler::default()),
            forwarder,
            connections: Arc::new(Connections::default()),
            alarms: Arc::new(ResourceAlarms::default()),
        });
        for (name, entry) in broker.access.vhosts() {
            broker.add_vhost(&name)?.set_limits(entry.limits);
        }
        let vhosts: Weak<Broker> = Arc::downgrade(&broker);
        broker.forwarder.serve(Arc::new(HomeNode::new(vhosts)));
        Ok(broker)
    }

    /// Opens (or, if it has no data yet, creates) vhost `name`; the one there is if any.
    fn add_vhost(&self, name: &str) -> Result<Arc<VirtualHost>, BrokerError> {
        // Two creations of one name must not open its directory twice.
        let _one_at_a_time = self.vhost_lifecycle.lock();
        if let Some(vhost) = self.vhost(name) {
            return Ok(vhost);
        }
        let vhost = match &self.home {
            VhostHome::Memory => VirtualHost::new(name, Arc::clone(&self.scheduler)),
            VhostHome::Disk { dir, store_config, replication, catalog_owned } => {
                let mut storage = VhostStorage::new(dir.join(vhost_dir_name(name)), store_config.clone());
                if *catalog_owned {
                    storage = storage.owned_by_catalog();
                }
                let scheduler = Arc::clone(&self.scheduler);
                let (replication, forwarder) = (Arc::clone(replication), Arc::clone(&self.forwarder));
                VirtualHost::open(name, storage, scheduler, replication, forwarder, self.access.policies(name))?
            }
        };
        *vhost.catalog.write() = self.catalog.read().clone();
        self.vhosts.write().insert(name.to_string(), Arc::clone(&vhost));
        Ok(vhost)
    }

    /// Deletes vhost `name`: its connections are closed (320), its queues and their data go.
    fn remove_vhost(&self, name: &str) {
        let _one_at_a_time = self.vhost_lifecycle.lock();
        let Some(vhost) = self.vhosts.write().remove(name) else { return };
        let reason = format!("vhost '{name}' is deleted");
        for connection in self.connections.all() {
            if connection.handshake().vhost.as_deref() == Some(name) {
                connection.request_close(&reason);
            }
        }
        vhost.delete_everything();
        if let Some(dir) = vhost.data_dir() {
            if let Err(error) = std::fs::remove_dir_all(dir) {
                tracing::error!(vhost = name, dir = %dir.display(), %error, "the deleted vhost's files stay");
            }
        }
        tracing::info!(vhost = name, "vhost deleted");
    }

    /// Users, vhosts and permissions.
    pub fn access(&self) -> &AccessControl {
        &self.access
    }

    /// Makes `change`: through the catalog when there is one (every
    /// node then makes it), here at once otherwise.
    pub async fn change_access(&self, change: AccessChange) -> Result<(), BrokerError> {
        self.access.validate(&change)?;
        let catalog = self.catalog.read().clone();
        match catalog {
            Some(catalog) => catalog.change_access(change).await,
            None => self.apply_access(&change),
        }
    }

    /// Applies `change` on this node (what the catalog group's state machine calls).
    pub fn apply_access(&self, change: &AccessChange) -> Result<(), BrokerError> {
        match change {
            AccessChange::PutVhost { name, .. } => {
                self.add_vhost(name)?;
            }
            AccessChange::DeleteVhost { name } => self.remove_vhost(name),
            AccessChange::SetVhostLimits { vhost, limits } => {
                if let Some(vhost) = self.vhost(vhost) {
                    vhost.set_limits(*limits);
                }
            }
            _ => {}
        }
        self.access.apply(change)?;
        if let AccessChange::SetPolicy { vhost, .. } | AccessChange::ClearPolicy { vhost, .. } = change {
            if let Some(host) = self.vhost(vhost) {
                host.set_policies(self.access.policies(vhost));
            }
        }
        Ok(())
    }

    /// Client connections user `name` has open (past `connection.open`) on this node.
    pub fn connections_of(&self, name: &str) -> usize {
        let opened = |handshake: &crate::connections::Handshake| handshake.vhost.is_some();
        let of_user = self.connections.all().into_iter().map(|c| c.handshake());
        of_user.filter(|h| h.user.as_deref() == Some(name) && opened(h)).count()
    }

    /// Channels open on user `name`'s connections to this node, together.
    pub fn channels_of(&self, name: &str) -> usize {
        let of_user = self.connections.all().into_iter().filter(|c| c.handshake().user.as_deref() == Some(name));
        of_user.map(|c| c.channels().len()).sum()
    }

    /// Client connections open in vhost `name` on this node.
    pub fn connections_in(&self, name: &str) -> usize {
        self.connections.all().iter().filter(|c| c.handshake().vhost.as_deref() == Some(name)).count()
    }

    /// This node's end of forwarding: the cluster layer hands it what peers send
    /// ([`Forwarder::receive`]) and tells it when a peer's link goes ([`Forwarder::node_down`]).
    pub fn forwarder(&self) -> &Arc<Forwarder> {
        &self.forwarder
    }

    /// Handles the timers due at `now_ms` (TTLs, queue expiry, delayed messages). Whoever runs
    /// the broker calls this every [`crate::scheduler::TICK_MS`].
    pub fn fire_timers(&self, now_ms: u64) {
        self.scheduler.fire_due(now_ms);
    }

    /// Timers waiting in the broker's wheel (TTLs, queue expiry, delayed messages, stream
    /// retention checks): a figure to graph, and a sign of what a queue costs.
    pub fn pending_timers(&self) -> usize {
        self.scheduler.pending()
    }

    /// How late delayed messages fired since the last call (a figure to log or graph).
    pub fn take_firing_lateness(&self) -> crate::scheduler::FiringLateness {
        self.scheduler.take_lateness()
    }

    /// A virtual host by name.
    pub fn vhost(&self, name: &str) -> Option<Arc<VirtualHost>> {
        self.vhosts.read().get(name).cloned()
    }

    /// Makes every definition change go through `catalog` (in place of the one before, if any:
    /// a node joining a cluster swaps its one-member catalog for the cluster's).
    pub fn join_catalog(&self, catalog: &Arc<crate::catalog::Catalog>) {
        *self.catalog.write() = Some(Arc::clone(catalog));
        for vhost in self.vhosts.read().values() {
            *vhost.catalog.write() = Some(Arc::clone(catalog));
        }
    }

    /// The catalog, once the server has started it.
    pub fn catalog(&self) -> Option<Arc<crate::catalog::Catalog>> {
        self.catalog.read().clone()
    }

    /// Makes every definition change recorded so far durable (the catalog's checkpoint).
    pub fn sync_definitions(&self) -> BrokerResult<()> {
        self.vhosts().iter().try_for_each(|vhost| vhost.sync_definitions())
    }

    /// Tells every virtual host whether the catalog is replaying its log after a start (see
    /// [`VirtualHost::set_replaying`]).
    pub fn set_replaying(&self, replaying: bool) {
        self.vhosts().iter().for_each(|vhost| vhost.set_replaying(replaying));
    }

    /// Removes the data directories no queue or delayed exchange owns, which catalog-owned
    /// storage keeps at start until the catalog's replay is done.
    pub fn remove_orphaned_stores(&self) {
        self.vhosts().iter().for_each(|vhost| vhost.remove_orphaned_stores());
    }

    /// Every virtual host.
    pub fn vhosts(&self) -> Vec<Arc<VirtualHost>> {
        let mut vhosts: Vec<Arc<VirtualHost>> = self.vhosts.read().values().cloned().collect();
        vhosts.sort_by(|a, b| a.name().cmp(b.name()));
        vhosts
    }

    /// The client connections.
    pub fn connections(&self) -> &Arc<Connections> {
        &self.connections
    }

    /// The memory and disk alarms (checked by whoever runs the broker, see
    /// [`ResourceAlarms::check`]).
    pub fn alarms(&self) -> &Arc<ResourceAlarms> {
        &self.alarms
    }

    /// The broker is stopping: flush and fsync every durable queue.
    pub fn close(&self) {
        for vhost in self.vhosts() {
            vhost.close();
        }
        // A clean stop replays nothing at the next start.
        if let Some(catalog) = self.catalog() {
            if let Err(error) = catalog.machine().checkpoint() {
                tracing::warn!(%error, "cannot checkpoint the catalog: the next start replays its log");
            }
        }
    }

    /// A fresh connection id.
    pub fn next_connection_id(&self) -> ConnectionId {
        ConnectionId(self.next_connection.fetch_add(1, Ordering::Relaxed))
    }
}

impl VhostDirectory for Broker {
    fn vhost(&self, name: &str) -> Option<Arc<VirtualHost>> {
        Broker::vhost(self, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The longest vhost name access control accepts.
    const LONGEST_NAME_BYTES: usize = 255;
    /// Longest file name common file systems (ext4, XFS, APFS, NTFS) accept.
    const MAX_FILE_NAME_BYTES: usize = 255;

    #[test]
    fn short_names_keep_their_hex_directory() {
        assert_eq!(vhost_dir_name("/"), "2f");
        assert_eq!(vhost_dir_name("prod"), "70726f64");
        let longest_hex = "a".repeat(MAX_HEX_DIR_NAME / 2);
        assert_eq!(vhost_dir_name(&longest_hex), "61".repeat(MAX_HEX_DIR_NAME / 2));
    }

    #[test]
    fn long_names_get_a_digest_that_fits_a_file_name() {
        for name in
            ["a".repeat(MAX_HEX_DIR_NAME / 2 + 1), "é".repeat(LONGEST_NAME_BYTES / 2), "v".repeat(LONGEST_NAME_BYTES)]
        {
            let dir = vhost_dir_name(&name);
            assert!(dir.starts_with(DIGEST_DIR_PREFIX) && dir.len() <= MAX_FILE_NAME_BYTES, "{dir}");
            assert_eq!(dir, vhost_dir_name(&name), "the same name, the same directory");
        }
    }

    #[test]
    fn distinct_names_get_distinct_directories() {
        let names: Vec<String> = (0..LONGEST_NAME_BYTES).map(|n| "x".repeat(n + 1)).collect();
        let mut dirs: Vec<String> = names.iter().map(|n| vhost_dir_name(n)).collect();
        let long = "y".repeat(LONGEST_NAME_BYTES);
        dirs.push(vhost_dir_name(&long));
        let count = dirs.len();
        dirs.sort();
        dirs.dedup();
        assert_eq!(dirs.len(), count);
    }
}
