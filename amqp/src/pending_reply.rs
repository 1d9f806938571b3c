//! Replies that wait: a method whose answer depends on something still in progress (the fsync
//! covering a transaction's publishes; with quorum queues, a Raft commit). While one is
//! pending the connection processes no further frame, so replies reach the client in the
//! order of its methods, as AMQP requires of a channel.

use amq_protocol::protocol::AMQPClass;
use bytes::Bytes;
use std::future::Future;
use std::pin::Pin;
use warren_delivery::vhost::DeletedQueue;
use warren_delivery::BrokerError;

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Answer::Method(method) => f.debug_tuple("Method").field(method).finish(),
            Answer::MethodThenCancel(method, _) => f.debug_tuple("MethodThenCancel").field(method).finish(),
            Answer::Frames(frames) => f.debug_tuple("Frames").field(&frames.len()).finish(),
            Answer::Nothing => f.write_str("Nothing"),
        }
    }
}

/// What a waiting method answers.
pub enum Answer {
    /// A method.
    Method(AMQPClass),
    /// A method, after which the consumers of the queue it deleted are told: `delete-ok`
    /// comes before their `basic.cancel`, as in RabbitMQ.
    MethodThenCancel(AMQPClass, DeletedQueue),
    /// Frames already encoded (a method with content, such as `basic.get-ok`).
    Frames(Bytes),
    /// Nothing (a `nowait` method, whose effect later methods must still wait for).
    Nothing,
}

/// What a waiting method will answer: the reply, or an error that closes its channel.
pub type Outcome = Result<Answer, BrokerError>;

/// The reply of a method on `channel`, once `reply` completes.
pub struct PendingReply {
    channel: u16,
    reply: Pin<Box<dyn Future<Output = Outcome> + Send>>,
}

impl std::fmt::Debug for PendingReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingReply").field("channel", &self.channel).finish_non_exhaustive()
    }
}

impl PendingReply {
    /// The reply to a method on `channel`, when `reply` is ready.
    pub fn new(channel: u16, reply: impl Future<Output = Outcome> + Send + 'static) -> Self {
        PendingReply { channel, reply: Box::pin(reply) }
    }

    /// The channel the method was on.
    pub fn channel(&self) -> u16 {
        self.channel
    }

    /// Waits for the outcome. Cancel-safe: the work goes on inside, and a later call resumes it.
    pub async fn outcome(&mut self) -> Outcome {
        self.reply.as_mut().await
    }
}
