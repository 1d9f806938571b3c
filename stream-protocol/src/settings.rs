//! What a Stream-protocol listener offers its clients (the server's side of Tune, and where
//! Metadata and Open tell clients to connect). The values come from the broker's settings
//! (`--stream-*`, server/src/config.rs), where each is declared once.

/// A listener's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSettings {
    /// The largest frame the server takes (0: no limit), as Tune proposes it.
    pub frame_max_bytes: u32,
    /// The heartbeat Tune proposes, in seconds (0: none).
    pub heartbeat_secs: u32,
    /// The host clients are told to connect to (RabbitMQ's `stream.advertised_host`).
    pub advertised_host: String,
    /// The port they are told (`stream.advertised_port`).
    pub advertised_port: u16,
}

/// RabbitMQ's defaults: 1 MiB frames, a heartbeat a minute.
pub const DEFAULT_FRAME_MAX_BYTES: u32 = 1_048_576;
/// The heartbeat RabbitMQ's stream plugin proposes.
pub const DEFAULT_HEARTBEAT_SECS: u32 = 60;
