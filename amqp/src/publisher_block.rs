//! A connection's side of the resource alarms: once it has published, an alarm blocks it (no
//! more is read from its socket, so TCP holds the publisher back) until the alarm clears. A
//! client that announced the `connection.blocked` capability is told both ways, with the
//! reason, as RabbitMQ does. A connection that never published (a consumer) is never
//! blocked: its acks are what drain the broker.

use amq_protocol::protocol::connection;
use amq_protocol::types::{AMQPValue, FieldTable};
use warren_delivery::resource_alarm::AlarmState;

/// Whether one connection is blocked, and what its client was told.
#[derive(Debug, Default)]
pub struct PublisherBlock {
    /// The client handles `connection.blocked` / `unblocked`.
    notifies: bool,
    /// The connection has published at least once.
    published: bool,
    /// The connection is blocked now.
    blocked: bool,
}

impl PublisherBlock {
    /// Reads the client's capability from its `connection.start-ok` properties.
    pub fn set_client_properties(&mut self, properties: &FieldTable) {
        self.notifies = matches!(
            properties.inner().get("capabilities"),
            Some(AMQPValue::FieldTable(capabilities))
                if matches!(capabilities.inner().get("connection.blocked"), Some(AMQPValue::Boolean(true)))
        );
    }

    /// The connection received a publish's content.
    pub fn published(&mut self) {
        self.published = true;
    }

    /// Whether reading is held back.
    pub fn is_blocked(&self) -> bool {
        self.blocked
    }

    /// Follows the alarms: what to tell the client, if its state changed.
    pub fn follow(&mut self, alarms: AlarmState) -> Option<connection::AMQPMethod> {
        let blocked = self.published && alarms.any();
        if blocked == self.blocked {
            return None;
        }
        self.blocked = blocked;
        // The alarm itself is logged once; a line per connection would flood the log.
        tracing::debug!(blocked, reason = alarms.reason().unwrap_or(""), "publishing connection flow");
        if !self.notifies {
            return None;
        }
        Some(match alarms.reason() {
            Some(reason) if blocked => connection::AMQPMethod::Blocked(connection::Blocked { reason: reason.into() }),
            _ => connection::AMQPMethod::Unblocked(connection::Unblocked {}),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capable() -> FieldTable {
        let mut capabilities = FieldTable::default();
        capabilities.insert("connection.blocked".into(), AMQPValue::Boolean(true));
        let mut properties = FieldTable::default();
        properties.insert("capabilities".into(), AMQPValue::FieldTable(capabilities));
        properties
    }

    #[test]
    fn only_a_publishing_connection_is_blocked_and_a_capable_client_is_told() {
        let memory = AlarmState { memory: true, disk: false };
        let mut block = PublisherBlock::default();
        block.set_client_properties(&capable());
        assert_eq!(block.follow(memory), None, "a consumer is not blocked");
        assert!(!block.is_blocked());
        block.published();
        let told = block.follow(memory);
        assert!(matches!(&told, Some(connection::AMQPMethod::Blocked(b)) if b.reason.as_str() == "low on memory"));
        assert!(block.is_blocked());
        assert_eq!(block.follow(memory), None, "told once");
        assert!(matches!(block.follow(AlarmState::default()), Some(connection::AMQPMethod::Unblocked(_))));

        let mut silent = PublisherBlock::default();
        silent.published();
        assert_eq!(silent.follow(memory), None, "no capability, nothing said");
        assert!(silent.is_blocked(), "but blocked all the same");
    }
}
