//! Errors of the broker core, each carrying the AMQP reply code the specification names for it.

use crate::client_text;
use std::fmt;

/// An AMQP reply code, as the 0-9-1 specification (and RabbitMQ) assigns them.
/// Serializable: errors travel between cluster nodes (a declare applied on one node answers
/// a client of another).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ReplyCode {
    /// 311: the message body is larger than the broker accepts.
    ContentTooLarge,
    /// 312: a mandatory message could not be routed to any queue.
    NoRoute,
    /// 320: the broker closed the connection (shutdown, or an operator).
    ConnectionForced,
    /// 403: the operation is not permitted.
    AccessRefused,
    /// 404: the named entity does not exist.
    NotFound,
    /// 405: another connection holds the entity exclusively.
    ResourceLocked,
    /// 406: the request conflicts with the entity's current state.
    PreconditionFailed,
    /// 501: a malformed frame.
    FrameError,
    /// 502: a frame whose fields do not decode.
    SyntaxError,
    /// 503: a method that is not valid now, or an unknown one.
    CommandInvalid,
    /// 504: a frame on a channel that is not open.
    ChannelError,
    /// 505: a frame of a type not expected now.
    UnexpectedFrame,
    /// 506: the broker lacks a resource (too many channels, out of disk).
    ResourceError,
    /// 530: the operation is not allowed (unknown virtual host, for one).
    NotAllowed,
    /// 540: the method is valid but not implemented.
    NotImplemented,
    /// 541: the broker hit an internal error.
    InternalError,
}

impl ReplyCode {
    /// The numeric code sent on the wire.
    pub fn code(self) -> u16 {
        match self {
            ReplyCode::ContentTooLarge => 311,
            ReplyCode::NoRoute => 312,
            ReplyCode::ConnectionForced => 320,
            ReplyCode::AccessRefused => 403,
            ReplyCode::NotFound => 404,
            ReplyCode::ResourceLocked => 405,
            ReplyCode::PreconditionFailed => 406,
            ReplyCode::FrameError => 501,
            ReplyCode::SyntaxError => 502,
            ReplyCode::CommandInvalid => 503,
            ReplyCode::ChannelError => 504,
            ReplyCode::UnexpectedFrame => 505,
            ReplyCode::ResourceError => 506,
            ReplyCode::NotAllowed => 530,
            ReplyCode::NotImplemented => 540,
            ReplyCode::InternalError => 541,
        }
    }

    /// The name the specification gives the code, used in reply texts.
    pub fn name(self) -> &'static str {
        match self {
            ReplyCode::ContentTooLarge => "CONTENT_TOO_LARGE",
            ReplyCode::NoRoute => "NO_ROUTE",
            ReplyCode::ConnectionForced => "CONNECTION_FORCED",
            ReplyCode::AccessRefused => "ACCESS_REFUSED",
            ReplyCode::NotFound => "NOT_FOUND",
            ReplyCode::ResourceLocked => "RESOURCE_LOCKED",
            ReplyCode::PreconditionFailed => "PRECONDITION_FAILED",
            ReplyCode::FrameError => "FRAME_ERROR",
            ReplyCode::SyntaxError => "SYNTAX_ERROR",
            ReplyCode::CommandInvalid => "COMMAND_INVALID",
            ReplyCode::ChannelError => "CHANNEL_ERROR",
            ReplyCode::UnexpectedFrame => "UNEXPECTED_FRAME",
            ReplyCode::ResourceError => "RESOURCE_ERROR",
            ReplyCode::NotAllowed => "NOT_ALLOWED",
            ReplyCode::NotImplemented => "NOT_IMPLEMENTED",
            ReplyCode::InternalError => "INTERNAL_ERROR",
        }
    }

    /// Hard errors close the whole connection; soft ones only the channel. The spec's 5xx
    /// codes are hard but for 506 RESOURCE_ERROR, which it classes soft.
    pub fn is_connection_error(self) -> bool {
        (self.code() >= 500 && self != ReplyCode::ResourceError)
            || matches!(self, ReplyCode::ConnectionForced | ReplyCode::NotAllowed)
    }
}

impl fmt::Display for ReplyCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A refused operation: the reply code to send and a text that says what to fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[error("{code} - {text}")]
pub struct BrokerError {
    /// The reply code for `channel.close` or `connection.close`.
    pub code: ReplyCode,
    /// Human-readable detail, sent as the reply text and logged: control characters escaped
    /// and the length bounded, since it often quotes what a client sent.
    pub text: String,
}

impl BrokerError {
    /// An error with the given code and text (made safe by [`client_text::sanitize`]).
    pub fn new(code: ReplyCode, text: impl Into<String>) -> Self {
        BrokerError { code, text: client_text::sanitize(&text.into(), client_text::MAX_TEXT_BYTES) }
    }

    /// 404 NOT_FOUND.
    pub fn not_found(text: impl Into<String>) -> Self {
        Self::new(ReplyCode::NotFound, text)
    }

    /// 406 PRECONDITION_FAILED.
    pub fn precondition_failed(text: impl Into<String>) -> Self {
        Self::new(ReplyCode::PreconditionFailed, text)
    }

    /// 403 ACCESS_REFUSED.
    pub fn access_refused(text: impl Into<String>) -> Self {
        Self::new(ReplyCode::AccessRefused, text)
    }

    /// 405 RESOURCE_LOCKED.
    pub fn resource_locked(text: impl Into<String>) -> Self {
        Self::new(ReplyCode::ResourceLocked, text)
    }

    /// 503 COMMAND_INVALID.
    pub fn command_invalid(text: impl Into<String>) -> Self {
        Self::new(ReplyCode::CommandInvalid, text)
    }
}

/// 541 INTERNAL_ERROR for a failure of the broker's own (a store that cannot be created or
/// opened): logged here, where the cause is known, and sent to the client as a short text.
pub(crate) fn internal_error(what: &str, error: impl fmt::Display) -> BrokerError {
    tracing::error!(%error, "{what}");
    BrokerError::new(ReplyCode::InternalError, format!("{what}: {error}"))
}

/// Shorthand for results of broker operations.
pub type BrokerResult<T> = Result<T, BrokerError>;
