//! Headers every answer carries against the browser attacks on a management UI: it may not be
//! framed by another page (`frame-ancestors 'none'`, `X-Frame-Options`), its types are not
//! sniffed, and over HTTPS the browser is told to come back over HTTPS only (HSTS).

use crate::http_listener::OverTls;
use axum::extract::Request;
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;

/// How long a browser keeps to HTTPS after an answer over HTTPS (one year, as commonly set).
const HSTS_MAX_AGE_SECS: u64 = 365 * 24 * 60 * 60;
/// The content security policy of answers that set none of their own (the API's JSON).
const FRAMING_POLICY: &str = "frame-ancestors 'none'";

/// Adds the headers to the answer to `request`.
pub async fn add(request: Request, next: Next) -> Response {
    let over_tls = request.extensions().get::<OverTls>().is_some_and(|tls| tls.0);
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    if !headers.contains_key(header::CONTENT_SECURITY_POLICY) {
        headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(FRAMING_POLICY));
    }
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    if over_tls {
        if let Ok(value) = HeaderValue::from_str(&format!("max-age={HSTS_MAX_AGE_SECS}")) {
            headers.insert(header::STRICT_TRANSPORT_SECURITY, value);
        }
    }
    response
}
