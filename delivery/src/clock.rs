//! The wall clock as the broker reads it: milliseconds since the Unix epoch, the one unit of
//! every timestamp, deadline and TTL in the core (and in what it shows the management API).

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}
