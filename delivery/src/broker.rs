//! The broker: its virtual hosts and users, shared by every connection.

use crate::connections::Connections;
use crate::definitions::VhostStorage;
use crate::error::BrokerError;
use crate::message_store::LogStoreConfig;
use crate::queue::ConnectionId;
use crate::quorum::{Replication, SingleNode};
use crate::remote::{Forwarder, Forwarding, NoForwarding};
use crate::resource_alarm::ResourceAlarms;
use crate::scheduler::Scheduler;
use crate::user::UserStore;
use crate::vhost::VirtualHost;
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The virtual host every broker has.
pub const DEFAULT_VHOST: &str = "/";

/// The whole broker core.
#[derive(Debug)]
pub struct Broker {
    vhosts: HashMap<String, Arc<VirtualHost>>,
    users: UserStore,
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

impl Broker {
    /// A broker kept wholly in memory, with the default vhost and the default user.
    pub fn in_memory() -> Arc<Self> {
        let scheduler = Arc::new(Scheduler::default());
        let forwarder = Forwarder::new(Arc::new(NoForwarding));
        Self::with_vhost(VirtualHost::new(DEFAULT_VHOST, Arc::clone(&scheduler)), scheduler, forwarder)
    }

    /// A broker on `data_dir`: durable definitions and messages are recovered from it.
    pub fn open(data_dir: &Path, store_config: LogStoreConfig) -> Result<Arc<Self>, BrokerError> {
        Self::open_clustered(data_dir, store_config, SingleNode::shared(), Arc::new(NoForwarding))
    }

    /// A broker on `data_dir`, a node of a cluster: its quorum queues are replicated through
    /// `replication`, and its clients reach queues of other nodes through `forwarding`.
    pub fn open_clustered(
        data_dir: &Path,
        store_config: LogStoreConfig,
        replication: Arc<dyn Replication>,
        forwarding: Arc<dyn Forwarding>,
    ) -> Result<Arc<Self>, BrokerError> {
        let hex: String = DEFAULT_VHOST.bytes().map(|b| format!("{b:02x}")).collect();
        let storage = VhostStorage::new(data_dir.join(VHOSTS_DIR).join(hex), store_config);
        let scheduler = Arc::new(Scheduler::default());
        let forwarder = Forwarder::new(forwarding);
        let vhost =
            VirtualHost::open(DEFAULT_VHOST, storage, Arc::clone(&scheduler), replication, Arc::clone(&forwarder))?;
        Ok(Self::with_vhost(vhost, scheduler, forwarder))
    }

    fn with_vhost(vhost: Arc<VirtualHost>, scheduler: Arc<Scheduler>, forwarder: Arc<Forwarder>) -> Arc<Self> {
        let mut vhosts = HashMap::new();
        vhosts.insert(vhost.name().to_string(), vhost);
        let users = UserStore::with_default_user();
        let connections = Arc::new(Connections::default());
        let next_connection = AtomicU64::new(1);
        let alarms = Arc::new(ResourceAlarms::default());
        let broker = Arc::new(Broker { vhosts, users, next_connection, scheduler, forwarder, connections, alarms });
        broker.forwarder.serve(&broker);
        broker
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

    /// How late delayed messages fired since the last call (a figure to log or graph).
    pub fn take_firing_lateness(&self) -> crate::scheduler::FiringLateness {
        self.scheduler.take_lateness()
    }

    /// A virtual host by name.
    pub fn vhost(&self, name: &str) -> Option<Arc<VirtualHost>> {
        self.vhosts.get(name).cloned()
    }

    /// Makes this node part of a cluster whose definitions change through `metadata` (in
    /// place of the group it was part of before, if any).
    pub fn join_metadata(&self, metadata: &Arc<crate::metadata::Metadata>) {
        for vhost in self.vhosts.values() {
            *vhost.metadata.write() = Some(Arc::clone(metadata));
        }
    }

    /// Every virtual host.
    pub fn vhosts(&self) -> Vec<Arc<VirtualHost>> {
        self.vhosts.values().cloned().collect()
    }

    /// The user store.
    pub fn users(&self) -> &UserStore {
        &self.users
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
        for vhost in self.vhosts.values() {
            vhost.close();
        }
    }

    /// A fresh connection id.
    pub fn next_connection_id(&self) -> ConnectionId {
        ConnectionId(self.next_connection.fetch_add(1, Ordering::Relaxed))
    }
}
