//! The broker: its virtual hosts and users, shared by every connection.

use crate::queue::ConnectionId;
use crate::user::UserStore;
use crate::vhost::VirtualHost;
use std::collections::HashMap;
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
}

impl Broker {
    /// A broker with the default vhost and the default user.
    pub fn new() -> Arc<Self> {
        let mut vhosts = HashMap::new();
        vhosts.insert(DEFAULT_VHOST.to_string(), VirtualHost::new(DEFAULT_VHOST));
        Arc::new(Broker { vhosts, users: UserStore::with_default_user(), next_connection: AtomicU64::new(1) })
    }

    /// A virtual host by name.
    pub fn vhost(&self, name: &str) -> Option<Arc<VirtualHost>> {
        self.vhosts.get(name).cloned()
    }

    /// The user store.
    pub fn users(&self) -> &UserStore {
        &self.users
    }

    /// A fresh connection id.
    pub fn next_connection_id(&self) -> ConnectionId {
        ConnectionId(self.next_connection.fetch_add(1, Ordering::Relaxed))
    }
}
