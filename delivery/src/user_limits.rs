//! Limits of a user, as RabbitMQ's `set_user_limits` sets them: `max-connections` (client
//! connections it has open at once, on this node) and `max-channels` (channels open on them
//! together). A negative value means no limit; 0 allows none.

use crate::error::{BrokerError, BrokerResult, ReplyCode};
use crate::limit_table::{self, LimitKind};

/// Every limit a user may have (one place: parsing, listing and docs follow from it).
const LIMIT_KINDS: [LimitKind<UserLimits>; 2] = [
    LimitKind { name: "max-connections", field: |limits| &mut limits.max_connections },
    LimitKind { name: "max-channels", field: |limits| &mut limits.max_channels },
];

/// A user's limits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UserLimits {
    /// Client connections the user has open at once.
    pub max_connections: Option<u32>,
    /// Channels open on the user's connections together.
    pub max_channels: Option<u32>,
}

impl UserLimits {
    /// Limits from RabbitMQ's JSON object (`{"max-connections": 10, "max-channels": 20}`).
    pub fn from_json(limits: &serde_json::Map<String, serde_json::Value>) -> BrokerResult<Self> {
        limit_table::from_json(&LIMIT_KINDS, "user", limits)
    }

    /// The limits that are set, as RabbitMQ's JSON object.
    pub fn to_json(&self) -> serde_json::Map<String, serde_json::Value> {
        limit_table::to_json(&LIMIT_KINDS, self)
    }

    /// Whether none is set.
    pub fn is_empty(&self) -> bool {
        self.to_json().is_empty()
    }

    /// 530 NOT_ALLOWED when `user`, with `open()` connections, may not open another
    /// (RabbitMQ's text). The connections are counted only under a limit.
    pub fn check_connection(&self, user: &str, open: impl FnOnce() -> usize) -> BrokerResult<()> {
        match self.max_connections {
            Some(max) if open() >= max as usize => Err(BrokerError::new(
                ReplyCode::NotAllowed,
                format!("connection refused for user '{user}': user connection limit ({max}) is reached"),
            )),
            _ => Ok(()),
        }
    }

    /// 530 NOT_ALLOWED when `user`, with `open()` channels, may not open another (RabbitMQ's
    /// text). The channels are counted only under a limit.
    pub fn check_channel(&self, user: &str, open: impl FnOnce() -> usize) -> BrokerResult<()> {
        match self.max_channels {
            Some(max) if open() >= max as usize => Err(BrokerError::new(
                ReplyCode::NotAllowed,
                format!(
                    "number of channels opened for user '{user}' has reached the maximum allowed user limit of ({max})"
                ),
            )),
            _ => Ok(()),
        }
    }
}

/// In files people read, RabbitMQ's JSON object; in binary formats (the catalog's Raft log),
/// the two limits in order.
impl serde::Serialize for UserLimits {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            self.to_json().serialize(serializer)
        } else {
            (self.max_connections, self.max_channels).serialize(serializer)
        }
    }
}

impl<'de> serde::Deserialize<'de> for UserLimits {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if !deserializer.is_human_readable() {
            let (max_connections, max_channels) = <(Option<u32>, Option<u32>)>::deserialize(deserializer)?;
            return Ok(UserLimits { max_connections, max_channels });
        }
        let map = serde_json::Map::deserialize(deserializer)?;
        UserLimits::from_json(&map).map_err(|e| serde::de::Error::custom(e.text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn limits_parse_as_rabbitmq_writes_them_and_refuse_with_its_texts() {
        let limits = UserLimits::from_json(json!({"max-connections": 2, "max-channels": -1}).as_object().unwrap())
            .expect("valid");
        assert_eq!(limits, UserLimits { max_connections: Some(2), max_channels: None });
        assert!(limits.check_connection("bob", || 1).is_ok());
        let refused = limits.check_connection("bob", || 2).expect_err("two open");
        assert_eq!(refused.text, "connection refused for user 'bob': user connection limit (2) is reached");
        let unknown = UserLimits::from_json(json!({"max-queues": 1}).as_object().unwrap()).expect_err("unknown");
        assert!(unknown.text.contains("max-channels"), "{}", unknown.text);
    }
}
