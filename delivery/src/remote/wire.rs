//! What nodes send each other to reach queues that live elsewhere: [`Forwarded`] messages,
//! one-way and in order on the link between two nodes. A request that needs an answer carries
//! an id; its [`RemoteAnswer`] comes back as a message of its own, after everything the home
//! node sent before it (deliveries included), so nothing overtakes anything on either side.

use crate::error::BrokerError;
use crate::message::WireMessage;
use amq_protocol::types::FieldTable;
use serde::{Deserialize, Serialize};

/// A request's id, unique per sending node for the life of the process.
pub type RequestId = u64;

/// A channel on the node its client is connected to (the number of its session there).
pub type ChannelId = u64;

/// A forwarded operation, or what comes back of one.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Forwarded {
    /// To a queue's home node: store these messages, routed to `queue` on the client's node;
    /// answered with [`RemoteAnswer::Published`].
    Publish {
        /// Matches the answer.
        id: RequestId,
        /// The virtual host.
        vhost: String,
        /// The queue.
        queue: String,
        /// The messages, in publish order.
        messages: Vec<WireMessage>,
    },
    /// To a queue's home node: start a consumer for a client's channel; answered with
    /// [`RemoteAnswer::Consumed`] before any of its deliveries.
    Consume {
        /// Matches the answer.
        id: RequestId,
        /// The virtual host.
        vhost: String,
        /// The queue.
        queue: String,
        /// The client's channel.
        channel: ChannelId,
        /// The consumer tag.
        tag: String,
        /// What the consumer asked for.
        spec: ConsumeSpec,
    },
    /// To a queue's home node: `basic.cancel`.
    Cancel {
        /// The client's channel.
        channel: ChannelId,
        /// The consumer tag.
        tag: String,
    },
    /// To a queue's home node: deliveries (by the home node's delivery tags) were settled.
    Settle {
        /// The client's channel.
        channel: ChannelId,
        /// The home node's delivery tags.
        tags: Vec<u64>,
        /// How.
        how: Settlement,
    },
    /// To a queue's home node: `basic.get`; answered with [`RemoteAnswer::Got`].
    Get {
        /// Matches the answer.
        id: RequestId,
        /// The virtual host.
        vhost: String,
        /// The queue.
        queue: String,
        /// The client's channel.
        channel: ChannelId,
        /// Settled on sending.
        no_ack: bool,
    },
    /// To a queue's home node: `queue.purge`; answered with [`RemoteAnswer::Purged`].
    Purge {
        /// Matches the answer.
        id: RequestId,
        /// The virtual host.
        vhost: String,
        /// The queue.
        queue: String,
    },
    /// To a queue's home node: its ready messages and consumers (a passive `queue.declare`);
    /// answered with [`RemoteAnswer::Counts`].
    Counts {
        /// Matches the answer.
        id: RequestId,
        /// The virtual host.
        vhost: String,
        /// The queue.
        queue: String,
    },
    /// To a queue's home node: the client's channel closed; what it holds goes back.
    ChannelClosed {
        /// The client's channel.
        channel: ChannelId,
    },
    /// To the client's node: a delivery to a forwarded consumer.
    Deliver {
        /// The client's channel.
        channel: ChannelId,
        /// The consumer tag.
        tag: String,
        /// The home node's delivery tag (what the settlement names).
        delivery_tag: u64,
        /// Whether it was delivered before.
        redelivered: bool,
        /// The message.
        message: WireMessage,
    },
    /// To the client's node: the home node ended a forwarded consumer (its queue went away).
    Cancelled {
        /// The client's channel.
        channel: ChannelId,
        /// The consumer tag.
        tag: String,
    },
    /// To the requesting node: the answer to a request.
    Answer {
        /// The request's id.
        id: RequestId,
        /// The answer.
        answer: RemoteAnswer,
    },
}

/// What a forwarded consumer asked for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConsumeSpec {
    /// Deliveries need no ack.
    pub no_ack: bool,
    /// No other consumer may use the queue.
    pub exclusive: bool,
    /// The consume arguments (priority, stream offset, filters).
    pub arguments: FieldTable,
    /// Its prefetch limit (0 = none).
    pub prefetch: u16,
    /// Its channel's shared prefetch limit (0 = none).
    pub channel_prefetch: u16,
}

/// How deliveries were settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Settlement {
    /// `basic.ack`.
    Ack,
    /// `basic.reject` / `basic.nack` without requeue: dead-lettered or dropped.
    Reject,
    /// Back to the queue.
    Requeue,
}

/// The answer to a forwarded request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum RemoteAnswer {
    /// What became of each message of a [`Forwarded::Publish`], in order.
    Published(Vec<Stored>),
    /// The outcome of a [`Forwarded::Get`].
    Got(Result<Option<RemoteGet>, BrokerError>),
    /// The outcome of a [`Forwarded::Purge`].
    Purged(Result<u32, BrokerError>),
    /// The answer to [`Forwarded::Counts`]: ready messages and consumers.
    Counts(Result<(u32, u32), BrokerError>),
    /// The answer to [`Forwarded::Consume`]: started, or why not.
    Consumed(Result<(), BrokerError>),
}

/// What became of one forwarded message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Stored {
    /// Stored as the queue promises (fsynced, or committed, if it is durable).
    Safely,
    /// Refused by `x-overflow: reject-publish`: the publisher gets a nack.
    Refused,
    /// Not stored, or its fate is unknown: the publisher gets a nack.
    Failed(String),
}

/// A message taken by a forwarded `basic.get`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RemoteGet {
    /// The home node's delivery tag.
    pub delivery_tag: u64,
    /// Whether it was delivered before.
    pub redelivered: bool,
    /// The message.
    pub message: WireMessage,
    /// Messages still ready after it.
    pub message_count: u32,
}
