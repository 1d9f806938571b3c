//! Who makes a request: HTTP Basic authentication against the broker's users (the same store
//! AMQP uses), or the session cookie the UI logs in for once (a browser cannot put an
//! `Authorization` header on a WebSocket). 401 without credentials or with wrong ones, as
//! RabbitMQ's API answers.
//!
//! A user needs a management tag (`administrator`, `monitoring`, `management`,
//! `policymaker`) to use the API at all. Failed logins count and are throttled per address as
//! AMQP's are: a right password is answered at once, a wrong one from an address that keeps
//! failing waits its turn (see `warren_delivery::access::LoginThrottle`). A session ends
//! when its user's access changes: its next request is 401.

use crate::api::Management;
use crate::authorization::Caller;
use crate::error::ApiError;
use crate::http_listener::OverTls;
use crate::json_body::JsonBody;
use crate::sessions::SESSION_TTL;
use axum::extract::{ConnectInfo, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde::Deserialize;
use serde_json::json;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;
use warren_delivery::access::User;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "warren_session";
/// The header the UI sends with its requests, so that a 401 does not make the browser ask.
pub const UI_HEADER: &str = "x-warren-ui";
/// How management logins are named in the failed-login log.
const HTTP_MECHANISM: &str = "HTTP";

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

/// The peer's address (unspecified if unknown: then it is not loopback).
fn peer_ip(parts: &Parts) -> IpAddr {
    parts.extensions.get::<ConnectInfo<SocketAddr>>().map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip())
}

/// Who `parts` come from: Basic credentials, else the session cookie. A 401 for the UI does
/// not ask the browser for credentials (it would pop its own login box over the UI's).
pub async fn authenticate(parts: &Parts, management: &Management) -> Result<Caller, ApiError> {
    let from_ui = parts.headers.contains_key(UI_HEADER);
    let found = credentials(parts, management).await;
    found.map_err(|error| if from_ui { error.without_challenge() } else { error })
}

async fn credentials(parts: &Parts, management: &Management) -> Result<Caller, ApiError> {
    let basic = parts.headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    if let Some(encoded) = basic.and_then(|v| v.strip_prefix("Basic ")) {
        let decoded = STANDARD.decode(encoded.trim()).map_err(|_| unauthorized("Not authorised"))?;
        let decoded = String::from_utf8(decoded).map_err(|_| unauthorized("Not authorised"))?;
        let (user, password) = decoded.split_once(':').ok_or_else(|| unauthorized("Not authorised"))?;
        let user = check_login(management, user, password, peer_ip(parts)).await?;
        return management_user(management, &user.name, None);
    }
    let Some(token) = session_token(&parts.headers) else { return Err(unauthorized("Not authorised")) };
    let sessions = management.sessions();
    let (name, revision) = sessions.find(token).ok_or_else(|| unauthorized("Not authorised"))?;
    let current = management.broker().access().user_revision(&name);
    if current != Some(revision) {
        sessions.close(token);
        return Err(unauthorized("Session ended: the user's access changed; log in again"));
    }
    let caller = management_user(management, &name, Some(token.to_string()))?;
    if caller.revision != revision {
        // It changed since the line above: the session is over all the same.
        sessions.close(token);
        return Err(unauthorized("Session ended: the user's access changed; log in again"));
    }
    Ok(caller)
}

/// The caller user `name` is now, in `session` if it came with one, if it has a management
/// tag (401 otherwise). Its tags and revision are read together.
fn management_user(management: &Management, name: &str, session: Option<String>) -> Result<Caller, ApiError> {
    let (user, revision) =
        management.broker().access().user_with_revision(name).ok_or_else(|| unauthorized("Not authorised"))?;
    if !user.may_manage() {
        return Err(unauthorized("Not management user"));
    }
    Ok(Caller::of(&user, revision, session))
}

/// Checks a password login from `peer`; failures are counted and logged (at most once a
/// second per address), and a failure from an address that keeps failing is answered late.
async fn check_login(management: &Management, user: &str, password: &str, peer: IpAddr) -> Result<User, ApiError> {
    let access = management.broker().access();
    let checked = access.authenticate(user, password, peer);
    let why = checked.as_ref().err().map(ToString::to_string);
    if let Some(delay) = access.count_login(peer, user, HTTP_MECHANISM, why.as_deref()) {
        tokio::time::sleep(delay).await;
    }
    checked.map_err(|_| unauthorized("Login failed"))
}

/// A login form.
#[derive(Debug, Deserialize)]
pub struct Login {
    username: String,
    password: String,
}

/// The session cookie: `Secure` when the UI came over HTTPS, so the browser never sends it in
/// the clear.
fn cookie(token: &str, max_age: Duration, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{SESSION_COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}{secure}", max_age.as_secs())
}

fn over_tls(tls: Option<Extension<OverTls>>) -> bool {
    tls.is_some_and(|Extension(OverTls(tls))| tls)
}

/// `POST /api/login`: checks the credentials once and answers a session cookie.
pub async fn login(
    State(api): State<Management>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    tls: Option<Extension<OverTls>>,
    JsonBody(form): JsonBody<Login>,
) -> Result<Response, ApiError> {
    let user =
        check_login(&api, &form.username, &form.password, peer.ip()).await.map_err(ApiError::without_challenge)?;
    let caller = management_user(&api, &user.name, None).map_err(ApiError::without_challenge)?;
    let token = api.sessions().open(&caller.user, caller.revision);
    let body = Json(json!({ "name": form.username }));
    Ok(([(header::SET_COOKIE, cookie(&token, SESSION_TTL, over_tls(tls)))], body).into_response())
}

/// `POST /api/logout`: ends the request's session and clears its cookie.
pub async fn logout(State(api): State<Management>, tls: Option<Extension<OverTls>>, headers: HeaderMap) -> Response {
    if let Some(token) = session_token(&headers) {
        api.sessions().close(token);
    }
    ([(header::SET_COOKIE, cookie("", Duration::ZERO, over_tls(tls)))], StatusCode::NO_CONTENT).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, "theme=dark; warren_session=abc; x=y".parse().expect("header"));
        assert_eq!(session_token(&headers), Some("abc"));
    }

    #[test]
    fn the_cookie_is_secure_over_https_only() {
        assert!(cookie("t", SESSION_TTL, true).ends_with("; Secure"));
        assert!(!cookie("t", SESSION_TTL, false).contains("Secure"));
    }
}
