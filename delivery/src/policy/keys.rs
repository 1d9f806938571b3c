//! Every key a policy definition may hold, declared once in [`POLICY_KEYS`]: what it sets (a
//! queue argument, the alternate exchange, or nothing in Warren), which wins when a queue's own
//! `x-` argument sets it too (per kind of queue, as RabbitMQ's queue types decide), and whether
//! an operator policy may set it and how its value merges with the user policy's. Validation,
//! resolution, the API's "no effect" report and README's table follow from it.

use crate::error::{BrokerError, BrokerResult};
use crate::queue::QueueType;
use amq_protocol::types::{AMQPValue, LongString};
use serde_json::Value;

/// Which value a queue runs with when both its `x-` argument and a policy set a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precedence {
    /// The queue's argument, if it has one (RabbitMQ's `res_arg`).
    Argument,
    /// The policy's value.
    Policy,
    /// The lower of the two (RabbitMQ's `res_min`): a policy can only tighten a limit.
    Lower,
}

impl Precedence {
    /// README's words for it.
    pub fn describe(self) -> &'static str {
        match self {
            Precedence::Argument => "the argument",
            Precedence::Policy => "the policy",
            Precedence::Lower => "the lower value",
        }
    }
}

/// How an operator policy's value merges with the user policy's, when both set a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merge {
    /// The lower of the two (limits, TTLs).
    Lower,
    /// The higher of the two (`target-group-size`).
    Higher,
    /// The operator policy's value.
    Operator,
}

/// What a key does.
#[derive(Debug, Clone, Copy)]
pub enum Effect {
    /// It sets queue argument `argument`; `precedence` says, per kind of queue, which value
    /// wins over the queue's own argument.
    QueueArgument {
        /// The argument it stands for (`x-message-ttl` for `message-ttl`).
        argument: &'static str,
        /// Which wins, per kind.
        precedence: fn(QueueType) -> Precedence,
    },
    /// An exchange's alternate exchange (the exchange's own `alternate-exchange` argument wins).
    AlternateExchange,
    /// Accepted, and changes nothing in Warren: `why` says so.
    NoEffect {
        /// Why.
        why: &'static str,
    },
}

/// One key a policy definition may hold.
#[derive(Debug, Clone, Copy)]
pub struct PolicyKey {
    /// Its name in the definition. A name ending in `*` covers every key with that prefix.
    pub name: &'static str,
    /// What it does.
    pub effect: Effect,
    /// Whether an operator policy may set it, and how.
    pub operator: Option<Merge>,
    /// The kinds of queue a policy holding it does not apply to at all: as in RabbitMQ, whose
    /// queue types list the keys they do not support, one such key keeps the whole policy
    /// off the queue (a policy of lower priority may then apply).
    pub unsupported: &'static [QueueType],
}

const STREAM: &[QueueType] = &[QueueType::Stream];
const CLASSIC_AND_STREAM: &[QueueType] = &[QueueType::Classic, QueueType::Stream];
const QUORUM_AND_STREAM: &[QueueType] = &[QueueType::Quorum, QueueType::Stream];
const QUEUES: &[QueueType] = &[QueueType::Classic, QueueType::Quorum];

const fn argument(
    name: &'static str,
    argument: &'static str,
    precedence: fn(QueueType) -> Precedence,
    unsupported: &'static [QueueType],
) -> PolicyKey {
    PolicyKey { name, effect: Effect::QueueArgument { argument, precedence }, operator: None, unsupported }
}

const fn no_effect(name: &'static str, why: &'static str, unsupported: &'static [QueueType]) -> PolicyKey {
    PolicyKey { name, effect: Effect::NoEffect { why }, operator: None, unsupported }
}

const fn by_operator(key: PolicyKey, merge: Merge) -> PolicyKey {
    PolicyKey { operator: Some(merge), ..key }
}

const ARGUMENT_WINS: fn(QueueType) -> Precedence = |_| Precedence::Argument;
const POLICY_WINS: fn(QueueType) -> Precedence = |_| Precedence::Policy;
const LOWER_WINS: fn(QueueType) -> Precedence = |_| Precedence::Lower;
/// A classic queue keeps its own `x-overflow`; a quorum queue takes the policy's
/// (RabbitMQ's `res_arg` and `policy_has_precedence`).
const POLICY_WINS_ON_QUORUM: fn(QueueType) -> Precedence = |kind| match kind {
    QueueType::Quorum => Precedence::Policy,
    _ => Precedence::Argument,
};
/// A stream's retention comes from the policy; a queue's byte limit is the lower.
const POLICY_WINS_ON_STREAM: fn(QueueType) -> Precedence = |kind| match kind {
    QueueType::Stream => Precedence::Policy,
    _ => Precedence::Lower,
};

/// What Warren does not have, said once for the keys of each such feature.
const NO_MIRRORING: &str = "classic queue mirroring was removed in RabbitMQ 4; use quorum queues";
const NO_FEDERATION: &str = "Warren has no federation";
const NO_STORAGE_MODES: &str = "Warren's queues choose between memory and disk themselves";
const NO_GROWTH: &str = "Warren does not grow quorum queues by itself; use warren ctl grow";

/// Every key a policy may set, with RabbitMQ's rules (its 4.x queue types' `capabilities`,
/// `args_policy_lookup` resolutions and `merge_policy_value`).
pub const POLICY_KEYS: &[PolicyKey] = &[
    by_operator(argument("message-ttl", "x-message-ttl", LOWER_WINS, STREAM), Merge::Lower),
    by_operator(argument("expires", "x-expires", LOWER_WINS, STREAM), Merge::Lower),
    by_operator(argument("max-length", "x-max-length", LOWER_WINS, STREAM), Merge::Lower),
    by_operator(argument("max-length-bytes", "x-max-length-bytes", POLICY_WINS_ON_STREAM, &[]), Merge::Lower),
    by_operator(argument("delivery-limit", "x-delivery-limit", LOWER_WINS, CLASSIC_AND_STREAM), Merge::Lower),
    by_operator(argument("overflow", "x-overflow", POLICY_WINS_ON_QUORUM, STREAM), Merge::Operator),
    argument("dead-letter-exchange", "x-dead-letter-exchange", ARGUMENT_WINS, STREAM),
    argument("dead-letter-routing-key", "x-dead-letter-routing-key", ARGUMENT_WINS, STREAM),
    argument("dead-letter-strategy", "x-dead-letter-strategy", ARGUMENT_WINS, CLASSIC_AND_STREAM),
    argument("queue-leader-locator", "x-queue-leader-locator", POLICY_WINS, &[]),
    argument("initial-cluster-size", "x-initial-cluster-size", POLICY_WINS, QUEUES),
    argument("max-age", "x-max-age", POLICY_WINS, QUEUES),
    argument("stream-max-segment-size-bytes", "x-stream-max-segment-size-bytes", POLICY_WINS, QUEUES),
    argument("consumer-timeout", "x-consumer-timeout", LOWER_WINS, &[]),
    PolicyKey { name: "alternate-exchange", effect: Effect::AlternateExchange, operator: None, unsupported: &[] },
    no_effect("queue-mode", NO_STORAGE_MODES, QUORUM_AND_STREAM),
    by_operator(no_effect("queue-version", NO_STORAGE_MODES, &[]), Merge::Operator),
    by_operator(no_effect("max-in-memory-length", NO_STORAGE_MODES, CLASSIC_AND_STREAM), Merge::Lower),
    by_operator(no_effect("max-in-memory-bytes", NO_STORAGE_MODES, CLASSIC_AND_STREAM), Merge::Lower),
    by_operator(no_effect("target-group-size", NO_GROWTH, CLASSIC_AND_STREAM), Merge::Higher),
    no_effect("queue-master-locator", NO_MIRRORING, QUORUM_AND_STREAM),
    no_effect("ha-*", NO_MIRRORING, QUORUM_AND_STREAM),
    no_effect("federation-upstream*", NO_FEDERATION, &[]),
    no_effect("shovel*", "Warren has no shovels", &[]),
];

impl PolicyKey {
    /// Whether a policy holding this key may apply to queues of `kind`.
    pub fn supported_by(&self, kind: QueueType) -> bool {
        !self.unsupported.contains(&kind)
    }

    /// The key called `name`.
    pub fn named(name: &str) -> Option<&'static PolicyKey> {
        POLICY_KEYS.iter().find(|key| match key.name.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => key.name == name,
        })
    }

    /// Checks `value` as the key's argument would check it (any value, for a key without
    /// effect); a text naming the key and what it expects if it is not valid.
    pub fn validate(&self, value: &Value) -> BrokerResult<()> {
        match self.effect {
            Effect::QueueArgument { argument, .. } => {
                let value = amqp_value(self.name, value)?;
                crate::queue::validate_argument(argument, &value).map_err(|e| {
                    BrokerError::precondition_failed(
                        e.text.replace(&format!("arg '{argument}'"), &format!("policy key '{}'", self.name)),
                    )
                })
            }
            Effect::AlternateExchange => match value {
                Value::String(_) => Ok(()),
                _ => Err(BrokerError::precondition_failed(format!(
                    "policy key '{}' expects a string, got {value}",
                    self.name
                ))),
            },
            Effect::NoEffect { .. } => Ok(()),
        }
    }
}

/// A policy value as the queue argument it stands for: integers as 64-bit integers, strings
/// as long strings, booleans as booleans; nothing else is a value of any key with effect.
pub fn amqp_value(key: &str, value: &Value) -> BrokerResult<AMQPValue> {
    match value {
        Value::Bool(on) => Ok(AMQPValue::Boolean(*on)),
        Value::String(text) => Ok(AMQPValue::LongString(LongString::from(text.as_bytes()))),
        Value::Number(number) => number.as_i64().map(AMQPValue::LongLongInt).ok_or_else(|| {
            BrokerError::precondition_failed(format!("policy key '{key}' expects an integer, got {number}"))
        }),
        _ => Err(BrokerError::precondition_failed(format!(
            "policy key '{key}' expects a number, string or boolean, got {value}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_argument_key_names_an_argument_queues_interpret() {
        for key in POLICY_KEYS {
            if let Effect::QueueArgument { argument, .. } = key.effect {
                assert!(crate::queue::ARGUMENTS.iter().any(|a| a.name == argument), "{}", key.name);
            }
        }
    }

    #[test]
    fn values_are_checked_as_the_arguments_are() {
        let ttl = PolicyKey::named("message-ttl").expect("known");
        assert!(ttl.validate(&json!(60_000)).is_ok());
        let error = ttl.validate(&json!(-1)).expect_err("negative");
        assert!(error.text.contains("policy key 'message-ttl'"), "{}", error.text);
        assert!(PolicyKey::named("overflow").expect("known").validate(&json!("spill")).is_err());
        assert!(PolicyKey::named("max-age").expect("known").validate(&json!("7D")).is_ok());
        assert!(PolicyKey::named("message-ttl").expect("known").validate(&json!([1])).is_err());
    }

    #[test]
    fn keys_of_features_warren_lacks_are_accepted_with_no_effect() {
        for name in ["ha-mode", "ha-sync-mode", "federation-upstream-set", "queue-mode"] {
            let key = PolicyKey::named(name).expect(name);
            assert!(matches!(key.effect, Effect::NoEffect { .. }), "{name}");
            assert!(key.validate(&json!("all")).is_ok());
        }
        assert!(PolicyKey::named("no-such-key").is_none());
    }
}
