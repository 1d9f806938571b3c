//! Who makes a request: HTTP Basic authentication against the broker's users (the same store
//! AMQP uses), or the session cookie the UI logs in for once (a browser cannot put an
//! `Authorization` header on a WebSocket). 401 without credentials or with wrong ones, as
//! RabbitMQ's API answers.
//!
//! Sessions are kept in memory ([`Sessions`]): a random token in an `HttpOnly`,
//! `SameSite=Strict` cookie, valid for [`SESSION_TTL`] from its last use; a restart logs
//! everyone out. A user needs a management tag (`administrator`, `monitoring`, `management`,
//! `policymaker`) to use the API at all. Failed logins count and are throttled per address
//! as AMQP's are (see `warren_delivery::access::LoginThrottle`).

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
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};
use warren_delivery::access::User;

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
    /// Whether it is tagged administrator: it may change users, vhosts and permissions,
    /// and use every vhost.
    pub administrator: bool,
    /// Whether it sees every vhost (administrator or monitoring); else only those it has
    /// permissions in.
    pub sees_everything: bool,
}

impl Authenticated {
    fn of(user: &User) -> Self {
        Authenticated {
            user: user.name.clone(),
            administrator: user.is_administrator(),
            sees_everything: user.sees_everything(),
        }
    }

    /// 401 unless the user is an administrator, as RabbitMQ answers.
    pub fn require_administrator(&self) -> Result<(), ApiError> {
        if self.administrator {
            return Ok(());
        }
        Err(unauthorized("Not administrator user").without_challenge())
    }
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

/// The peer's address (unspecified if unknown: then it is not loopback).
fn peer_ip(parts: &Parts) -> IpAddr {
    parts.extensions.get::<ConnectInfo<SocketAddr>>().map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip())
}

impl FromRequestParts<Management> for Authenticated {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Management) -> Result<Self, ApiError> {
        let from_ui = parts.headers.contains_key(UI_HEADER);
        authenticate(parts, state).await.map_err(|e| if from_ui { e.without_challenge() } else { e })
    }
}

/// Who `parts` come from: Basic credentials, else the session cookie.
async fn authenticate(parts: &Parts, state: &Management) -> Result<Authenticated, ApiError> {
    let basic = parts.headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    if let Some(encoded) = basic.and_then(|v| v.strip_prefix("Basic ")) {
        let decoded = STANDARD.decode(encoded.trim()).map_err(|_| unauthorized("Not authorised"))?;
        let decoded = String::from_utf8(decoded).map_err(|_| unauthorized("Not authorised"))?;
        let (user, password) = decoded.split_once(':').ok_or_else(|| unauthorized("Not authorised"))?;
        let user = check_login(state, user, password, peer_ip(parts)).await?;
        return management_user(&user);
    }
    let user = session_token(&parts.headers).and_then(|token| state.sessions().user(token));
    match user.and_then(|name| state.broker().access().user(&name)) {
        Some(user) => management_user(&user),
        None => Err(unauthorized("Not authorised")),
    }
}

/// A user without a management tag may not use the API.
fn management_user(user: &User) -> Result<Authenticated, ApiError> {
    if !user.may_manage() {
        return Err(unauthorized("Not management user"));
    }
    Ok(Authenticated::of(user))
}

/// How management logins are named in the failed-login log.
const HTTP_MECHANISM: &str = "HTTP";

/// Checks a password login from `peer`, after the delay its address has earned if it failed
/// too often; failures are counted and logged (at most once a second per address).
async fn check_login(state: &Management, user: &str, password: &str, peer: IpAddr) -> Result<User, ApiError> {
    let access = state.broker().access();
    if let Some(delay) = access.throttle().delay(peer) {
        tokio::time::sleep(delay).await;
    }
    let checked = access.authenticate(user, password, peer);
    access.count_login(peer, user, HTTP_MECHANISM, checked.as_ref().err().map(ToString::to_string).as_deref());
    checked.map_err(|_| unauthorized("Login failed"))
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
    let user =
        check_login(&api, &form.username, &form.password, peer.ip()).await.map_err(ApiError::without_challenge)?;
    management_user(&user).map_err(ApiError::without_challenge)?;
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
