//! Direct reply-to, as RabbitMQ names it: RPC replies delivered straight to the requesting
//! channel, through no queue.
//!
//! A requester consumes from the pseudo-queue `amq.rabbitmq.reply-to` (in no-ack mode only)
//! and publishes its requests with `reply_to: amq.rabbitmq.reply-to`. The broker rewrites that
//! property to the channel's own reply address, `amq.rabbitmq.reply-to.<token>`. A responder
//! publishes its reply to the default exchange with the address as routing key, and the
//! broker hands it to the requester's reply consumer at once. Nothing is declared or stored,
//! nothing is listed as a queue, and a reply is delivered at most once.
//!
//! The token says where the requester is: `<node>.<connection>.<channel>.<key>`, in hex. The
//! node id (see [`crate::node`]) lets a reply published on any node of a cluster be sent to
//! the requester's node; there the connection and channel find the entry in this registry,
//! and the key, 128 random bits drawn when the reply consumer starts, must equal the one
//! registered. A forged token (a guessed key), a stale one (its consumer was cancelled, its
//! channel or connection closed, the broker restarted) or a malformed one finds nothing: the
//! reply is unroutable, dropped quietly or returned when published `mandatory`, like any
//! message that reaches no queue.

use crate::connection_id::ConnectionId;
use crate::error::{BrokerError, BrokerResult};
use crate::message::Message;
use crate::node::NodeId;
use parking_lot::RwLock;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Weak};

/// The pseudo-queue a requester consumes from, and the `reply_to` it publishes with.
pub const PSEUDO_QUEUE: &str = "amq.rabbitmq.reply-to";
/// What every reply address starts with.
pub const ADDRESS_PREFIX: &str = "amq.rabbitmq.reply-to.";
/// Hex digits of a node id in a token.
const NODE_HEX_DIGITS: usize = 8;
/// Hex digits of a key in a token.
const KEY_HEX_DIGITS: usize = 32;

/// Whether `name` is a reply address (`amq.rabbitmq.reply-to.<token>`), valid or not.
pub fn is_reply_address(name: &str) -> bool {
    name.starts_with(ADDRESS_PREFIX)
}

/// Whether `name` is the pseudo-queue or a reply address: neither is a queue to bind.
pub fn is_reply_name(name: &str) -> bool {
    name == PSEUDO_QUEUE || is_reply_address(name)
}

/// Where replies to one reply consumer go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyAddress {
    node: NodeId,
    connection: ConnectionId,
    channel: u16,
    key: u128,
}

impl ReplyAddress {
    /// Reads the token of a reply address; `None` unless it is exactly as [`fmt::Display`]
    /// writes it.
    fn parse(name: &str) -> Option<Self> {
        let mut parts = name.strip_prefix(ADDRESS_PREFIX)?.split('.');
        let node = hex(parts.next()?, NODE_HEX_DIGITS..=NODE_HEX_DIGITS)?;
        let connection = hex(parts.next()?, 1..=16)?;
        let channel = hex(parts.next()?, 1..=4)?;
        let key = hex(parts.next()?, KEY_HEX_DIGITS..=KEY_HEX_DIGITS)?;
        if parts.next().is_some() {
            return None;
        }
        Some(ReplyAddress {
            node: NodeId(u32::try_from(node).ok()?),
            connection: ConnectionId(u64::try_from(connection).ok()?),
            channel: u16::try_from(channel).ok()?,
            key,
        })
    }
}

/// Hex digits only (no sign, no prefix), as many as `digits` allows.
fn hex(text: &str, digits: std::ops::RangeInclusive<usize>) -> Option<u128> {
    let plain = digits.contains(&text.len()) && text.bytes().all(|b| b.is_ascii_hexdigit());
    plain.then(|| u128::from_str_radix(text, 16).ok()).flatten()
}

impl fmt::Display for ReplyAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{ADDRESS_PREFIX}{}.{:x}.{:x}.{:032x}", self.node, self.connection.0, self.channel, self.key)
    }
}

/// Where the replies sent to a registered address go: the requesting channel's session.
pub trait Requester: Send + Sync + fmt::Debug {
    /// Delivers `message` if `address` is still the channel's reply consumer; whether it did.
    fn deliver_reply(&self, address: &ReplyAddress, message: Arc<Message>) -> bool;
}

/// A channel's reply consumer as registered.
#[derive(Debug)]
struct Registered {
    key: u128,
    session: Weak<dyn Requester>,
}

/// The reply consumers of one node, by connection and channel.
#[derive(Debug)]
pub struct ReplyConsumers {
    node: NodeId,
    registered: RwLock<HashMap<(ConnectionId, u16), Registered>>,
}

impl ReplyConsumers {
    /// The registry of node `node`.
    pub fn new(node: NodeId) -> Self {
        ReplyConsumers { node, registered: RwLock::new(HashMap::new()) }
    }

    /// Registers the reply consumer of `channel` on `connection` (replacing any earlier one)
    /// under a fresh key; returns its address.
    pub(crate) fn register(
        &self,
        connection: ConnectionId,
        channel: u16,
        session: Weak<dyn Requester>,
    ) -> ReplyAddress {
        let key = rand::random::<u128>();
        self.registered.write().insert((connection, channel), Registered { key, session });
        ReplyAddress { node: self.node, connection, channel, key }
    }

    /// Forgets the reply consumer at `address` (if it is still the one registered).
    pub(crate) fn unregister(&self, address: &ReplyAddress) {
        let mut registered = self.registered.write();
        let slot = (address.connection, address.channel);
        if registered.get(&slot).is_some_and(|r| r.key == address.key) {
            registered.remove(&slot);
        }
    }

    /// The address a reply name reads as and the live session it leads to on this node, if
    /// any.
    fn find(&self, name: &str) -> Option<(ReplyAddress, Arc<dyn Requester>)> {
        let address = ReplyAddress::parse(name)?;
        if address.node != self.node {
            // Another node's requester: forwarding comes with the cluster (#10).
            return None;
        }
        let registered = self.registered.read();
        let entry = registered.get(&(address.connection, address.channel))?;
        let session = (entry.key == address.key).then(|| entry.session.upgrade()).flatten()?;
        Some((address, session))
    }

    /// Delivers a reply published to `message.routing_key`; returns whether it reached a
    /// requester (false: the address is forged, stale or malformed). The session checks the
    /// address again under its own lock, so a consumer cancelled meanwhile gets nothing.
    pub fn deliver(&self, message: Arc<Message>) -> bool {
        match self.find(message.routing_key.as_str()) {
            Some((address, session)) => session.deliver_reply(&address, message),
            None => false,
        }
    }

    /// `queue.declare` of the pseudo-queue or of a reply address: succeeds (as for a queue
    /// with one consumer) while the requester is there, 404 otherwise. A responder uses it to
    /// check that its requester is still waiting. Nothing is created either way.
    pub fn declare(&self, name: &str, vhost: &str) -> BrokerResult<()> {
        if name == PSEUDO_QUEUE || self.find(name).is_some() {
            return Ok(());
        }
        Err(BrokerError::not_found(format!("no queue '{name}' in vhost '{vhost}'")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address() -> ReplyAddress {
        ReplyAddress { node: NodeId(0xdead_beef), connection: ConnectionId(42), channel: 7, key: 0x1234 }
    }

    #[test]
    fn an_address_reads_back_as_written() {
        let name = address().to_string();
        assert_eq!(name, "amq.rabbitmq.reply-to.deadbeef.2a.7.00000000000000000000000000001234");
        assert_eq!(ReplyAddress::parse(&name), Some(address()));
        assert!(is_reply_address(&name) && is_reply_name(&name) && is_reply_name(PSEUDO_QUEUE));
        assert!(!is_reply_address(PSEUDO_QUEUE));
    }

    #[test]
    fn malformed_addresses_read_as_nothing() {
        let key = "0".repeat(32);
        for name in [
            "amq.rabbitmq.reply-to.".to_string(),
            format!("amq.rabbitmq.reply-to.deadbeef.2a.7.{key}.extra"),
            format!("amq.rabbitmq.reply-to.deadbee.2a.7.{key}"),
            format!("amq.rabbitmq.reply-to.deadbeef.+2a.7.{key}"),
            format!("amq.rabbitmq.reply-to.deadbeef.2a.10000.{key}"),
            format!("amq.rabbitmq.reply-to.deadbeef.2a.7.{}", "0".repeat(31)),
            format!("amq.rabbitmq.reply-to.deadbeef.2a.7.{}", "g".repeat(32)),
            "amq.rabbitmq.reply-to.g2dkABFyYWJiaXRAbG9jYWxob3N0AAAB.c2VjcmV0".to_string(),
        ] {
            assert_eq!(ReplyAddress::parse(&name), None, "{name}");
        }
    }
}
