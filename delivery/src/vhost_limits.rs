//! Limits of a virtual host, as RabbitMQ's `set_vhost_limits` sets them: `max-connections`
//! (client connections open in it) and `max-queues` (queues declared in it). A negative value
//! means no limit; 0 allows none.

use crate::error::{BrokerError, BrokerResult};
use crate::limit_table::{self, LimitKind};

/// Every limit a vhost may have (one place: parsing, listing and docs follow from it).
const LIMIT_KINDS: [LimitKind<VhostLimits>; 2] = [
    LimitKind { name: "max-connections", field: |limits| &mut limits.max_connections },
    LimitKind { name: "max-queues", field: |limits| &mut limits.max_queues },
];

/// A vhost's limits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VhostLimits {
    /// Client connections open in the vhost at once.
    pub max_connections: Option<u32>,
    /// Queues in the vhost.
    pub max_queues: Option<u32>,
}

impl VhostLimits {
    /// Limits from RabbitMQ's JSON object (`{"max-connections": 10, "max-queues": -1}`);
    /// an unknown name is refused with the names there are.
    pub fn from_json(limits: &serde_json::Map<String, serde_json::Value>) -> BrokerResult<Self> {
        limit_table::from_json(&LIMIT_KINDS, "vhost", limits)
    }

    /// The limits that are set, as RabbitMQ's JSON object.
    pub fn to_json(&self) -> serde_json::Map<String, serde_json::Value> {
        limit_table::to_json(&LIMIT_KINDS, self)
    }

    /// Whether none is set.
    pub fn is_empty(&self) -> bool {
        self.to_json().is_empty()
    }
}

/// In files people read (the access file, definitions), RabbitMQ's JSON object; in binary
/// formats (the catalog's Raft log, postcard, which cannot read a JSON value back), the two
/// limits in order.
impl serde::Serialize for VhostLimits {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            self.to_json().serialize(serializer)
        } else {
            (self.max_connections, self.max_queues).serialize(serializer)
        }
    }
}

impl<'de> serde::Deserialize<'de> for VhostLimits {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if !deserializer.is_human_readable() {
            let (max_connections, max_queues) = <(Option<u32>, Option<u32>)>::deserialize(deserializer)?;
            return Ok(VhostLimits { max_connections, max_queues });
        }
        let map = serde_json::Map::deserialize(deserializer)?;
        VhostLimits::from_json(&map).map_err(|e| serde::de::Error::custom(e.text))
    }
}

/// 406 when `vhost` already holds `max` queues, with RabbitMQ's text.
pub(crate) fn check_queue_limit(vhost: &str, queue: &str, queues: usize, max: Option<u32>) -> BrokerResult<()> {
    match max {
        Some(max) if queues >= max as usize => Err(BrokerError::precondition_failed(format!(
            "cannot declare queue '{queue}': queue limit in vhost '{vhost}' ({max}) is reached"
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn limits_parse_as_rabbitmq_writes_them() {
        let json = json!({"max-connections": 10, "max-queues": -1});
        let limits = VhostLimits::from_json(json.as_object().unwrap()).unwrap();
        assert_eq!(limits, VhostLimits { max_connections: Some(10), max_queues: None });
        assert_eq!(serde_json::Value::Object(limits.to_json()), json!({"max-connections": 10}));
        let unknown = json!({"max-channels": 1});
        assert!(VhostLimits::from_json(unknown.as_object().unwrap()).unwrap_err().text.contains("max-queues"));
    }

    #[test]
    fn a_limits_change_reads_back_from_the_catalogs_log_and_the_access_file() {
        let change = crate::access::AccessChange::SetVhostLimits {
            vhost: "small".into(),
            limits: VhostLimits { max_connections: Some(1), max_queues: None },
        };
        let binary = postcard::to_allocvec(&change).expect("encodes");
        assert_eq!(postcard::from_bytes::<crate::access::AccessChange>(&binary).expect("decodes"), change);
        let text = serde_json::to_string(&change).expect("encodes");
        assert!(text.contains(r#""max-connections":1"#), "RabbitMQ's names in JSON: {text}");
        assert_eq!(serde_json::from_str::<crate::access::AccessChange>(&text).expect("decodes"), change);
    }
}
