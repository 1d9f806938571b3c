//! Who makes a request: HTTP Basic authentication against the broker's users (the same store
//! AMQP uses), or the session cookie the UI logs in for once (a browser cannot put an
//! `Authorization` header on a WebSocket). 401 without credentials or with wrong ones, as
//! RabbitMQ's API answers.
//!
//! Sessions are kept in memory ([`Sessions`]): a random token in an `HttpOnly`,
//! `SameSite=Strict` cookie, valid for [`SESSION_TTL`] from its last use; a restart logs
//! everyone out. Login attempts are not throttled here yet (issue 15 does it for all logins).

use crate::api::Management;
use crate::error::ApiError;
use axum::extract::{ConnectInfo, FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use parking_lot::Mutex;
use rand::RngCore;
use serde::Deserialize;
use serde_json::json;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// How long a session lives after its last use.
pub const SESSION_TTL: Duration = Duration::from_secs(8 * 60 * 60);
/// The session cookie's name.
pub const SESSION_COOKIE: &str = "warren_session";
/// Sessions kept at most; the oldest go first when more log in.
const MAX_SESSIONS: usize = 10_000;
/// Random bytes in a session token.
const TOKEN_BYTES: usize = 32;

/// The authenticated user of a request.
#[derive(Debug, Clone)]
pub struct Authenticated {
    /// Its name.
    pub user: String,
}

/// The UI's sessions, by token.
#[derive(Debug, Default)]
pub struct Sessions {
    by_token: Mutex<HashMap<String, (String, Instant)>>,
}

impl Sessions {
    /// A new session for `user`; its token.
    fn open(&self, user: &str) -> String {
        let mut bytes = [0u8; TOKEN_BYTES];
        rand::thread_rng().fill_bytes(&mut bytes);
        let token = URL_SAFE_NO_PAD.encode(bytes);
        let mut sessions = self.by_token.lock();
        let now = Instant::now();
        sessions.retain(|_, (_, used)| now.duration_since(*used) < SESSION_TTL);
        if sessions.len() >= MAX_SESSIONS {
            if let Some(oldest) = sessions.iter().min_by_key(|(_, (_, used))| *used).map(|(t, _)| t.clone()) {
                sessions.remove(&oldest);
            }
        }
        sessions.insert(token.clone(), (user.to_string(), now));
        token
    }

    /// The user of session `token`, if it is live (its life starts again).
    fn user(&self, token: &str) -> Option<String> {
        let mut sessions = self.by_token.lock();
        let (user, used) = sessions.get_mut(token)?;
        if used.elapsed() >= SESSION_TTL {
            sessions.remove(token);
            return None;
        }
        *used = Instant::now();
        Some(user.clone())
    }

    fn close(&self, token: &str) {
        self.by_token.lock().remove(token);
    }
}

fn unauthorized(why: &str) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, why.to_string())
}

/// The session token of a request's cookie, if any.
fn session_token(headers: &HeaderMap) -> Option<&str> {
    let cookies = headers.get_all(header::COOKIE).into_iter().filter_map(|v| v.to_str().ok());
    cookies.flat_map(|line| line.split(';')).find_map(|pair| {
        let (name, value) = pair.trim().split_once('=')?;
        (name == SESSION_COOKIE).then_some(value)
    })
}

/// The header the UI sends with its requests, so that a 401 does not make the browser ask.
pub const UI_HEADER: &str = "x-warren-ui";

fn from_loopback(parts: &Parts) -> bool {
    parts.extensions.get::<ConnectInfo<SocketAddr>>().is_some_and(|c| c.0.ip().to_canonical().is_loopback())
}

impl FromRequestParts<Management> for Authenticated {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Management) -> Result<Self, ApiError> {
        let from_ui = parts.headers.contains_key(UI_HEADER);
        authenticate(parts, state).map_err(|e| if from_ui { e.without_challenge() } else { e })
    }
}

/// Who `parts` come from: Basic credentials, else the session cookie.
fn authenticate(parts: &Parts, state: &Management) -> Result<Authenticated, ApiError> {
    let basic = parts.headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    if let Some(encoded) = basic.and_then(|v| v.strip_prefix("Basic ")) {
        let decoded = STANDARD.decode(encoded.trim()).map_err(|_| unauthorized("Not authorised"))?;
        let decoded = String::from_utf8(decoded).map_err(|_| unauthorized("Not authorised"))?;
        let (user, password) = decoded.split_once(':').ok_or_else(|| unauthorized("Not authorised"))?;
        return match state.broker().users().authenticate(user, password, from_loopback(parts)) {
            Ok(_) => Ok(Authenticated { user: user.to_string() }),
            Err(_) => Err(unauthorized("Login failed")),
        };
    }
    match session_token(&parts.headers).and_then(|token| state.sessions().user(token)) {
        Some(user) => Ok(Authenticated { user }),
        None => Err(unauthorized("Not authorised")),
    }
}

/// The login and logout routes of the UI.
pub fn routes() -> Router<Management> {
    Router::new().route("/api/login", post(login)).route("/api/logout", post(logout))
}

/// A login form.
#[derive(Debug, Deserialize)]
struct Login {
    username: String,
    password: String,
}

fn cookie(token: &str, max_age: Duration) -> String {
    format!("{SESSION_COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}", max_age.as_secs())
}

/// Checks the credentials once and answers a session cookie.
async fn login(
    State(api): State<Management>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Json(form): Json<Login>,
) -> Result<Response, ApiError> {
    let loopback = peer.ip().to_canonical().is_loopback();
    if api.broker().users().authenticate(&form.username, &form.password, loopback).is_err() {
        return Err(unauthorized("Login failed").without_challenge());
    }
    let token = api.sessions().open(&form.username);
    let body = Json(json!({ "name": form.username }));
    Ok(([(header::SET_COOKIE, cookie(&token, SESSION_TTL))], body).into_response())
}

/// Ends the request's session and clears its cookie.
async fn logout(State(api): State<Management>, headers: HeaderMap) -> Response {
    if let Some(token) = session_token(&headers) {
        api.sessions().close(token);
    }
    ([(header::SET_COOKIE, cookie("", Duration::ZERO))], StatusCode::NO_CONTENT).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_know_their_user_until_closed() {
        let sessions = Sessions::default();
        let token = sessions.open("guest");
        assert_eq!(sessions.user(&token).as_deref(), Some("guest"));
        assert_eq!(sessions.user("forged"), None);
        sessions.close(&token);
        assert_eq!(sessions.user(&token), None);
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, "theme=dark; warren_session=abc; x=y".parse().expect("header"));
        assert_eq!(session_token(&headers), Some("abc"));
    }
}
