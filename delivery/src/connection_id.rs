//! Which client connection something belongs to: exclusive queues, channels and direct
//! reply-to addresses all name their connection by this number.

/// Identifies a client connection, for exclusive queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnectionId(pub u64);
