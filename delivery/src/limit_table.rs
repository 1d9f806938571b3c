//! A table of named limits, as RabbitMQ writes them in JSON (`{"max-connections": 10}`; a
//! negative value is no limit, 0 allows none): what [`crate::vhost_limits::VhostLimits`] and
//! [`crate::user_limits::UserLimits`] are each declared with once, and how both read and write
//! their JSON.

use crate::error::{BrokerError, BrokerResult};
use serde_json::{Map, Value};

/// One kind of limit of `T`: its name in RabbitMQ's JSON, and where it is kept.
pub(crate) struct LimitKind<T> {
    pub(crate) name: &'static str,
    pub(crate) field: fn(&mut T) -> &mut Option<u32>,
}

/// Limits of `what` (`vhost`, `user`) from RabbitMQ's JSON object; an unknown name is refused
/// with the names there are.
pub(crate) fn from_json<T: Default>(
    kinds: &[LimitKind<T>],
    what: &str,
    limits: &Map<String, Value>,
) -> BrokerResult<T> {
    let mut parsed = T::default();
    for (name, value) in limits {
        let kind = kinds.iter().find(|kind| kind.name == name).ok_or_else(|| {
            let known: Vec<&str> = kinds.iter().map(|kind| kind.name).collect();
            BrokerError::precondition_failed(format!("unknown {what} limit '{name}' (known: {})", known.join(", ")))
        })?;
        let value = value.as_i64().ok_or_else(|| {
            BrokerError::precondition_failed(format!("{what} limit '{name}' must be an integer, not {value}"))
        })?;
        *(kind.field)(&mut parsed) = u32::try_from(value).ok();
    }
    Ok(parsed)
}

/// The limits of `limits` that are set, as RabbitMQ's JSON object.
pub(crate) fn to_json<T: Copy>(kinds: &[LimitKind<T>], limits: &T) -> Map<String, Value> {
    let mut copy = *limits;
    kinds.iter().filter_map(|kind| (kind.field)(&mut copy).map(|value| (kind.name.to_string(), value.into()))).collect()
}
