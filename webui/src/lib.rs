//! warren-webui: the HTTP management API, the WebSocket live feed and the browser UI.
//!
//! Not built yet: this crate holds its place in the workspace layout (see DESIGN.md) and
//! exports nothing. The management API arrives with its own issue.
