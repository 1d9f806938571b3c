//! What the transport hands to the layer above: requests (with a [`Responder`] to answer
//! them) and one-way messages from peers, through one bounded queue per node. When the layer
//! above falls behind, the queue fills and the transport stops reading from peers, which in
//! turn stop sending once their outgoing budget is spent: back-pressure, not memory.

use super::connection::LinkSender;
use super::envelope::{Envelope, RequestId};
use super::frame;
use super::transport::{TransportError, Wire};
use std::marker::PhantomData;
use tokio::sync::mpsc;

/// Something a peer sent.
#[derive(Debug)]
pub enum Incoming<Q, S> {
    /// A request; answer it with [`IncomingRequest::respond`].
    Request(IncomingRequest<Q, S>),
    /// A one-way message.
    Message {
        /// The sending node.
        from: String,
        /// The message.
        body: Q,
    },
}

/// A request from a peer. Dropping it without answering lets the requester time out.
#[derive(Debug)]
pub struct IncomingRequest<Q, S> {
    /// The sending node.
    pub from: String,
    /// The request.
    pub body: Q,
    /// How to answer.
    pub responder: Responder<S>,
}

impl<Q, S: Wire> IncomingRequest<Q, S> {
    /// Answers the request on the connection it came from (waiting for room in that peer's
    /// outgoing budget).
    pub async fn respond(self, body: S) -> Result<(), TransportError> {
        self.responder.respond(body).await
    }
}

/// Answers one request; can be moved to another task.
#[derive(Debug)]
pub struct Responder<S> {
    id: RequestId,
    link: LinkSender,
    response: PhantomData<fn(S)>,
}

impl<S: Wire> Responder<S> {
    pub(crate) fn new(id: RequestId, link: LinkSender) -> Self {
        Responder { id, link, response: PhantomData }
    }

    /// Sends `body` as the answer.
    pub async fn respond(self, body: S) -> Result<(), TransportError> {
        let envelope: Envelope<(), S> = Envelope::Response { id: self.id, body };
        let bytes = frame::encode(&envelope, frame::MAX_FRAME_BYTES)?;
        self.link.send_frame(bytes).await
    }
}

/// The receiving end of everything peers send to this node.
#[derive(Debug)]
pub struct Inbox<Q, S> {
    pub(crate) receiver: mpsc::Receiver<Incoming<Q, S>>,
}

impl<Q, S> Inbox<Q, S> {
    /// The next request or message; `None` once the transport has shut down.
    pub async fn recv(&mut self) -> Option<Incoming<Q, S>> {
        self.receiver.recv().await
    }
}
