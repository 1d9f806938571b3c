//! Errors as RabbitMQ's management API answers them: a status and
//! `{"error": "...", "reason": "..."}`.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use warren_delivery::{BrokerError, ReplyCode};

/// An API error.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    error: &'static str,
    reason: String,
    /// A 401 asks for Basic credentials (`WWW-Authenticate`) unless the UI made the request:
    /// a browser would pop up its own login box over the UI's.
    challenge: bool,
}

impl ApiError {
    /// `status` with RabbitMQ's error word for it and `reason`.
    pub fn new(status: StatusCode, reason: impl Into<String>) -> Self {
        let error = match status {
            StatusCode::UNAUTHORIZED => "not_authorised",
            StatusCode::NOT_FOUND => "Object Not Found",
            StatusCode::BAD_REQUEST => "bad_request",
            StatusCode::FORBIDDEN => "forbidden",
            StatusCode::SERVICE_UNAVAILABLE => "unavailable",
            _ => "internal_error",
        };
        ApiError { status, error, reason: reason.into(), challenge: true }
    }

    /// The same error without asking the browser for credentials.
    pub fn without_challenge(mut self) -> Self {
        self.challenge = false;
        self
    }
}

impl ApiError {
    /// Why, as the body's `reason` says.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl From<BrokerError> for ApiError {
    fn from(error: BrokerError) -> Self {
        let status = match error.code {
            ReplyCode::NotFound => StatusCode::NOT_FOUND,
            ReplyCode::PreconditionFailed
            | ReplyCode::AccessRefused
            | ReplyCode::NotAllowed
            | ReplyCode::CommandInvalid
            | ReplyCode::NotImplemented
            | ReplyCode::ResourceLocked => StatusCode::BAD_REQUEST,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, error.text)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Json(serde_json::json!({ "error": self.error, "reason": self.reason }));
        if self.status == StatusCode::UNAUTHORIZED && self.challenge {
            return (self.status, [(header::WWW_AUTHENTICATE, "Basic realm=\"Warren Management\"")], body)
                .into_response();
        }
        (self.status, body).into_response()
    }
}
