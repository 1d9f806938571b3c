//! The same-origin rule of the API and the live feed: a browser page of another origin (another
//! site, or another port of this host, which `SameSite` cookies do not tell apart) may not change
//! anything with the user's session cookie or cached Basic credentials, nor open the live feed.
//!
//! A browser names the page in `Origin` on every cross-origin request (and on every POST);
//! clients that are not browsers (curl, rabbitmqadmin, `warren ctl`) send none and are not
//! concerned. Reads stay open: their answers are not readable by another origin's page.

use crate::error::ApiError;
use axum::extract::Request;
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// `Ok` if the request has no `Origin` (not a browser) or one whose host is the request's.
pub fn check(headers: &HeaderMap, what: &str) -> Result<(), ApiError> {
    let Some(origin) = headers.get(header::ORIGIN) else { return Ok(()) };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or_default();
    let origin = origin.to_str().unwrap_or_default();
    let origin_host = origin.split_once("://").map_or("", |(_, rest)| rest);
    if !host.is_empty() && origin_host.eq_ignore_ascii_case(host) {
        return Ok(());
    }
    Err(ApiError::new(StatusCode::FORBIDDEN, format!("{what} is not open to pages of another origin")))
}

/// Middleware: a request that may change something (any method but GET, HEAD and OPTIONS)
/// from a page of another origin is refused with 403 before it is authenticated.
pub async fn refuse_cross_origin_changes(request: Request, next: Next) -> Response {
    let reads = matches!(*request.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if !reads {
        if let Err(refused) = check(request.headers(), "a change through the API") {
            return refused.into_response();
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(host: &str, origin: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, host.parse().expect("host"));
        if let Some(origin) = origin {
            headers.insert(header::ORIGIN, origin.parse().expect("origin"));
        }
        headers
    }

    #[test]
    fn a_page_of_this_origin_or_no_browser_passes_and_another_port_or_site_does_not() {
        assert!(check(&headers("localhost:15672", None), "x").is_ok());
        assert!(check(&headers("localhost:15672", Some("http://localhost:15672")), "x").is_ok());
        assert!(check(&headers("broker.example:443", Some("https://Broker.example:443")), "x").is_ok());
        assert!(check(&headers("localhost:15672", Some("http://localhost:8080")), "x").is_err());
        assert!(check(&headers("localhost:15672", Some("https://evil.example")), "x").is_err());
        assert!(check(&headers("localhost:15672", Some("null")), "x").is_err());
    }
}
