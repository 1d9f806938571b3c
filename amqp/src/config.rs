//! Protocol limits and timeouts that a connection negotiates or enforces.

use std::time::Duration;

/// RabbitMQ's default `consumer_timeout`: 30 minutes.
pub const DEFAULT_CONSUMER_TIMEOUT_MS: u64 = 30 * 60 * 1000;

/// Protocol settings, given by the server's configuration.
#[derive(Debug, Clone)]
pub struct ProtocolConfig {
    /// Most channels a client may have open at once, whatever their numbers (offered in
    /// `connection.tune`; 0: no limit).
    pub channel_max: u16,
    /// Largest frame, header and end octet included (offered in `connection.tune`).
    pub frame_max: u32,
    /// Heartbeat interval offered, in seconds (0 disables).
    pub heartbeat_secs: u16,
    /// How long a delivery may stay unacknowledged before its channel is closed with 406
    /// (`None`: never), unless its queue or consumer sets `x-consumer-timeout`.
    pub consumer_timeout_ms: Option<u64>,
    /// Largest message body accepted; larger is 406 PRECONDITION_FAILED.
    pub max_message_bytes: u64,
    /// Time allowed from accept to `connection.open`.
    pub handshake_timeout: Duration,
    /// Time allowed for the peer's `connection.close-ok` after the broker closes.
    pub close_timeout: Duration,
    /// Most client connections at once (`None`: no limit); one more is refused at
    /// `connection.open` with 530 NOT_ALLOWED.
    pub max_connections: Option<usize>,
}

impl Default for ProtocolConfig {
    fn default() -> Self {
        ProtocolConfig {
            channel_max: 2047,
            frame_max: 131_072,
            heartbeat_secs: 60,
            consumer_timeout_ms: Some(DEFAULT_CONSUMER_TIMEOUT_MS),
            max_message_bytes: 128 * 1024 * 1024,
            handshake_timeout: Duration::from_secs(10),
            close_timeout: Duration::from_secs(3),
            max_connections: None,
        }
    }
}
