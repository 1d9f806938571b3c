//! Content assembly: `basic.publish`, then a content header, then body frames, into a message.

use crate::frame::BASIC_CLASS_ID;
use amq_protocol::protocol::basic::Publish;
use bytes::{Buf, Bytes, BytesMut};
use warren_delivery::field_table::FieldTableError;
use warren_delivery::{BrokerError, Message, Properties, PropertiesError, ReplyCode};

/// A publish whose content is still arriving.
#[derive(Debug)]
pub struct PendingContent {
    publish: Publish,
    header: Option<Header>,
    body: Body,
}

#[derive(Debug)]
struct Header {
    body_size: u64,
    properties: Properties,
}

/// The body so far. A body that arrives whole in one frame stays a slice of the read buffer
/// (no copy); one still incomplete is copied out, so that a few bytes waiting for the rest do
/// not pin a whole read buffer. Either way memory grows with the bytes that arrived, never with
/// the size the header announces: a client may announce 128 MiB and send two bytes, on every
/// channel it opens.
#[derive(Debug)]
enum Body {
    Empty,
    One(Bytes),
    Many(BytesMut),
}

impl Body {
    fn len(&self) -> usize {
        match self {
            Body::Empty => 0,
            Body::One(b) => b.len(),
            Body::Many(b) => b.len(),
        }
    }

    fn push(&mut self, piece: Bytes, completes: bool) {
        *self = match std::mem::replace(self, Body::Empty) {
            Body::Empty if completes => Body::One(piece),
            Body::Empty => Body::Many(BytesMut::from(&piece[..])),
            Body::One(first) => {
                let mut joined = BytesMut::with_capacity(first.len() + piece.len());
                joined.extend_from_slice(&first);
                joined.extend_from_slice(&piece);
                Body::Many(joined)
            }
            Body::Many(mut joined) => {
                joined.extend_from_slice(&piece);
                Body::Many(joined)
            }
        }
    }

    fn into_bytes(self) -> Bytes {
        match self {
            Body::Empty => Bytes::new(),
            Body::One(b) => b,
            Body::Many(b) => b.freeze(),
        }
    }
}

/// Headers nested too deep are refused on the channel (406), like too-deep arguments; any
/// other malformed property list is a syntax error that closes the connection.
fn properties_error(error: PropertiesError) -> BrokerError {
    match error {
        PropertiesError::BadHeaders(FieldTableError::TooDeep) => {
            BrokerError::precondition_failed(format!("message headers: {}", FieldTableError::TooDeep))
        }
        other => BrokerError::new(ReplyCode::SyntaxError, format!("bad content properties: {other}")),
    }
}

fn unexpected(text: impl Into<String>) -> BrokerError {
    BrokerError::new(ReplyCode::UnexpectedFrame, text)
}

impl PendingContent {
    /// Starts assembling after `basic.publish`.
    pub fn new(publish: Publish) -> Self {
        PendingContent { publish, header: None, body: Body::Empty }
    }

    /// Whether the next frame must be the content header.
    pub fn awaits_header(&self) -> bool {
        self.header.is_none()
    }

    /// Takes the content header frame's payload. A body over `max_message_bytes` is 406.
    pub fn header(&mut self, mut payload: Bytes, max_message_bytes: u64) -> Result<(), BrokerError> {
        if payload.len() < 14 {
            return Err(BrokerError::new(ReplyCode::FrameError, "content header frame too short"));
        }
        let class_id = payload.get_u16();
        let _weight = payload.get_u16();
        let body_size = payload.get_u64();
        if class_id != BASIC_CLASS_ID {
            return Err(unexpected(format!("content header for class {class_id}, expected {BASIC_CLASS_ID}")));
        }
        if body_size > max_message_bytes {
            return Err(BrokerError::precondition_failed(format!(
                "message size {body_size} is larger than configured max size {max_message_bytes}"
            )));
        }
        let properties = Properties::decode(payload).map_err(properties_error)?;
        self.header = Some(Header { body_size, properties });
        Ok(())
    }

    /// Takes a body frame's payload; a body longer than announced is badly-formatted content,
    /// 505 UNEXPECTED_FRAME (AMQP 0-9-1, 4.2.6).
    pub fn body(&mut self, piece: Bytes) -> Result<(), BrokerError> {
        let expected = self.header.as_ref().map_or(0, |h| h.body_size) as usize;
        if self.body.len() + piece.len() > expected {
            return Err(BrokerError::new(
                ReplyCode::UnexpectedFrame,
                format!("body frames carry more than the {expected} bytes announced"),
            ));
        }
        let completes = self.body.len() + piece.len() == expected;
        self.body.push(piece, completes);
        Ok(())
    }

    /// Whether header and all body bytes have arrived.
    pub fn is_complete(&self) -> bool {
        self.header.as_ref().is_some_and(|h| self.body.len() as u64 == h.body_size)
    }

    /// The publish's `mandatory` flag and the assembled message (call once complete).
    pub fn finish(self) -> (bool, Message) {
        let properties = self.header.map(|h| h.properties).unwrap_or_else(Properties::empty);
        let message = Message {
            exchange: self.publish.exchange,
            routing_key: self.publish.routing_key,
            properties,
            body: self.body.into_bytes(),
        };
        (self.publish.mandatory, message)
    }
}
