//! [`ConnectionContext`]: what a channel needs from its connection (its id, vhost, user,
//! outbox and limits), and the permission check every method makes through it.

use crate::outbox::Outbox;
use std::sync::Arc;
use warren_delivery::access::Operation;
use warren_delivery::{BrokerResult, ConnectionId, VirtualHost};

/// What a channel needs from its connection.
#[derive(Debug)]
pub struct ConnectionContext {
    /// The connection's id (owner of its exclusive queues).
    pub id: ConnectionId,
    /// The virtual host opened by the connection.
    pub vhost: Arc<VirtualHost>,
    /// Where replies go.
    pub outbox: Outbox,
    /// The largest body accepted.
    pub max_message_bytes: u64,
    /// The negotiated frame_max, for splitting bodies.
    pub frame_max: u32,
    /// The user the connection logged in as, as the client sent it.
    pub user: String,
    /// The broker, whose access control says what the user may do.
    pub broker: Arc<warren_delivery::Broker>,
}

impl ConnectionContext {
    /// `Ok` if the connection's user may make `operation` in its vhost (403 if not).
    pub fn authorize(&self, operation: &Operation<'_>) -> BrokerResult<()> {
        self.broker.access().authorize(&self.user, self.vhost.name(), operation)
    }
}
