//! [`ConnectionContext`]: what a channel needs from its connection (its id, vhost, user,
//! outbox and limits), and the permission checks every method makes through it (topic
//! permissions included).

use crate::outbox::Outbox;
use std::sync::Arc;
use warren_delivery::access::{Operation, TopicAccess, TopicPermissions};
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

    /// The user's topic permission on exchange `exchange`, if the user has one there and the
    /// exchange is a topic exchange (RabbitMQ checks no other type).
    pub fn topic_permissions(&self, exchange: &str) -> Option<Arc<TopicPermissions>> {
        let permissions = self.broker.access().topic_permissions_of(self.vhost.name(), &self.user, exchange)?;
        let is_topic = self.vhost.exchange(exchange).is_ok_and(|e| e.definition().type_name() == "topic");
        is_topic.then_some(permissions)
    }

    /// `Ok` if `key` may be used for `access` on `exchange` by the user's topic permissions
    /// (403 if not).
    pub fn check_topic(&self, access: TopicAccess, exchange: &str, key: &str) -> BrokerResult<()> {
        match self.topic_permissions(exchange) {
            Some(permissions) => permissions.check(access, key, exchange, self.vhost.name(), &self.user),
            None => Ok(()),
        }
    }
}
