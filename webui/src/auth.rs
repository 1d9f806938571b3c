//! HTTP Basic authentication against the broker's users (the same store AMQP uses): 401
//! without credentials or with wrong ones, as RabbitMQ's API.

use crate::api::Management;
use crate::error::ApiError;
use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use std::net::SocketAddr;

/// The authenticated user of a request.
#[derive(Debug, Clone)]
pub struct Authenticated {
    /// Its name.
    #[allow(dead_code)]
    pub user: String,
}

impl FromRequestParts<Management> for Authenticated {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Management) -> Result<Self, ApiError> {
        let unauthorized = |why: &str| ApiError::new(StatusCode::UNAUTHORIZED, why.to_string());
        let value = parts.headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        let encoded = value.and_then(|v| v.strip_prefix("Basic ")).ok_or_else(|| unauthorized("Not authorised"))?;
        let decoded = STANDARD.decode(encoded.trim()).map_err(|_| unauthorized("Not authorised"))?;
        let decoded = String::from_utf8(decoded).map_err(|_| unauthorized("Not authorised"))?;
        let (user, password) = decoded.split_once(':').ok_or_else(|| unauthorized("Not authorised"))?;
        let loopback = parts.extensions.get::<ConnectInfo<SocketAddr>>().is_some_and(|c| c.0.ip().is_loopback());
        match state.broker().users().authenticate(user, password, loopback) {
            Ok(_) => Ok(Authenticated { user: user.to_string() }),
            Err(_) => Err(unauthorized("Login failed")),
        }
    }
}
