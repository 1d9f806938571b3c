//! What Warren's fuzz targets (`fuzz/`, run with cargo-fuzz) feed arbitrary bytes to, kept
//! here so that a stable `#[test]` (`tests/replay.rs`) replays the committed corpora and every
//! crash reproducer on each CI run. Each function must return for any input: an error is a
//! fine answer; a panic, a hang or an allocation the bytes merely announce is a bug.
//!
//! - `frames`: the frame splitter; `methods`: method, field-table and content-header decoding;
//! - `connection`: the I/O-free `Connection` after a valid handshake;
//! - `segment`: storage recovery of a segment (and its index) made of the bytes.

pub mod connection;
pub mod frames;
pub mod methods;
pub mod segment;

/// A fuzz target: its name (its directory under `fuzz/corpus/` and `fuzz/regressions/`) and
/// what it runs.
pub struct Target {
    /// The name.
    pub name: &'static str,
    /// What it runs on one input.
    pub run: fn(&[u8]),
}

/// Every target.
pub const TARGETS: [Target; 4] = [
    Target { name: "frames", run: frames::run },
    Target { name: "methods", run: methods::run },
    Target { name: "connection", run: connection::run },
    Target { name: "segment", run: segment::run },
];
