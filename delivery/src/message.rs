//! A published message as the broker holds it: where it was published, and its content.

use crate::properties::Properties;
use amq_protocol::types::ShortString;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// What a message held in memory costs besides its body and properties (the `Message`, its
/// `Arc`, its routing, allocator rounding): measured as about 350 bytes for 1 KiB messages.
pub const MESSAGE_OVERHEAD_BYTES: usize = 320;

/// One message. Shared (`Arc`) between every queue it was routed to; never copied.
#[derive(Debug, Clone)]
pub struct Message {
    /// The exchange it was published to ("" for the default exchange).
    pub exchange: ShortString,
    /// The routing key it was published with.
    pub routing_key: ShortString,
    /// The basic properties, raw and scanned.
    pub properties: Properties,
    /// The body, as the slices of the read buffer it arrived in.
    pub body: Bytes,
}

impl Message {
    /// A copy whose bytes are its own. A message read from a log shares the read buffer it
    /// came in with its neighbours; one that will be kept (re-queued after a delay, or
    /// dead-lettered) is compacted so it does not keep that whole buffer alive.
    pub fn compacted(&self) -> Message {
        Message {
            exchange: self.exchange.clone(),
            routing_key: self.routing_key.clone(),
            properties: self.properties.compacted(),
            body: Bytes::copy_from_slice(&self.body),
        }
    }

    /// Memory this message takes while held in memory: its body, its properties (with what
    /// their headers take decoded, see [`Properties::memory_bytes`]) and
    /// [`MESSAGE_OVERHEAD_BYTES`]. The one measure every memory budget counts messages by, so
    /// that no part of a message a client controls escapes them. (Length limits in bytes,
    /// `x-max-length-bytes`, count bodies only, as RabbitMQ's do.)
    pub fn memory_bytes(&self) -> usize {
        self.body.len() + self.properties.memory_bytes() + MESSAGE_OVERHEAD_BYTES
    }
}

/// A message as it travels between nodes and into a quorum queue's Raft log: its routing and
/// its content-header property list as received, so that nothing is re-encoded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireMessage {
    /// The exchange it was published to.
    pub exchange: String,
    /// Its routing key.
    pub routing_key: String,
    /// Its content-header property list, as received (flags then fields).
    pub properties: Bytes,
    /// Its body.
    pub body: Bytes,
}

impl WireMessage {
    /// The wire form of `message` (its bytes are shared, not copied).
    pub fn of(message: &Message) -> Self {
        WireMessage {
            exchange: message.exchange.to_string(),
            routing_key: message.routing_key.to_string(),
            properties: message.properties.raw().clone(),
            body: message.body.clone(),
        }
    }

    /// The message again; `None` if its property list does not decode (a peer or a log
    /// that sent garbage).
    pub fn into_message(self) -> Option<Message> {
        let properties = Properties::decode(self.properties).ok()?;
        Some(Message {
            exchange: self.exchange.as_str().into(),
            routing_key: self.routing_key.as_str().into(),
            properties,
            body: self.body,
        })
    }
}
