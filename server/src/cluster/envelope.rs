//! What travels on an authenticated inter-node connection: requests and their responses
//! matched by id, one-way messages, and heartbeats. The payload types belong to the layer
//! above (Raft RPCs tagged with their group, forwarded client operations).

use serde::{Deserialize, Serialize};

/// A request's id, unique per sending node for the life of the process.
pub type RequestId = u64;

/// One frame's content. `Q` is the request and one-way message type, `S` the response type.
/// A response is encoded as `Envelope<(), S>`: postcard writes a variant's index and fields
/// only, so the unused type does not change the bytes.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Envelope<Q, S> {
    /// A request; the peer answers with a `Response` of the same id.
    Request {
        /// Matches the response.
        id: RequestId,
        /// The request.
        body: Q,
    },
    /// The answer to a request.
    Response {
        /// The request's id.
        id: RequestId,
        /// The answer.
        body: S,
    },
    /// A message that gets no answer.
    OneWay {
        /// The message.
        body: Q,
    },
    /// Sent when a connection is otherwise idle, so that a dead peer is noticed.
    Heartbeat,
}
