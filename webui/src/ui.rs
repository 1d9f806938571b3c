//! The browser UI: a page, a script and a style sheet, embedded in the binary (no build step,
//! no CDN: the UI works offline), served at `/`. The page logs in once (`/api/login`), then
//! renders what the live feed (`/ws`) pushes and acts through the API.

use crate::authorization::Rule;
use crate::route_table::RouteTable;
use axum::http::header;
use axum::response::IntoResponse;

const INDEX_HTML: &str = include_str!("../static/index.html");
const APP_JS: &str = include_str!("../static/app.js");
const CHART_JS: &str = include_str!("../static/chart.js");
const STYLE_CSS: &str = include_str!("../static/style.css");
const FAVICON_SVG: &str = include_str!("../static/favicon.svg");

/// The UI's routes: its files need no login (the page asks for one).
pub fn routes(table: &mut RouteTable) {
    table
        .get("/", Rule::Public, || file("text/html; charset=utf-8", INDEX_HTML))
        .get("/app.js", Rule::Public, || file("text/javascript; charset=utf-8", APP_JS))
        .get("/chart.js", Rule::Public, || file("text/javascript; charset=utf-8", CHART_JS))
        .get("/style.css", Rule::Public, || file("text/css; charset=utf-8", STYLE_CSS))
        .get("/favicon.svg", Rule::Public, || file("image/svg+xml", FAVICON_SVG));
}

async fn file(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    let headers = [
        (header::CONTENT_TYPE, content_type),
        (header::CACHE_CONTROL, "no-cache"),
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self' ws: wss:; img-src 'self' data:; frame-ancestors 'none'",
        ),
    ];
    (headers, body)
}
