//! [`PolicySpec`]: a policy as it is given, stored and replicated (RabbitMQ's pattern,
//! definition, priority and apply-to); [`Policy`]: one checked and compiled, with its name and
//! whether it is an operator policy.

use super::apply_to::{ApplyTo, Target};
use super::keys::PolicyKey;
use crate::client_text::{sanitize, MAX_TEXT_BYTES};
use crate::error::{BrokerError, BrokerResult};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The longest policy name accepted.
pub const MAX_POLICY_NAME_BYTES: usize = 255;
/// The longest pattern accepted, as RabbitMQ 4.2 (patterns come through the API).
const MAX_PATTERN_BYTES: usize = 1024;
/// The most a compiled pattern may take.
const MAX_COMPILED_PATTERN_BYTES: usize = 1 << 20;
/// The longest definition accepted, as JSON text.
const MAX_DEFINITION_BYTES: usize = 64 * 1024;

/// Whether a policy is an operator's (`set_operator_policy`) or a user's (`set_policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum PolicyKind {
    /// A policy (`/api/policies`).
    User,
    /// An operator policy (`/api/operator-policies`): limits the user policies cannot lift.
    Operator,
}

impl PolicyKind {
    /// What errors and logs call it.
    pub fn noun(self) -> &'static str {
        match self {
            PolicyKind::User => "policy",
            PolicyKind::Operator => "operator policy",
        }
    }
}

/// A policy as given. The definition is kept as JSON text: the replicated log's encoding
/// cannot carry a self-describing JSON value, and the text is what the API gave.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicySpec {
    /// The regular expression matched against object names (anywhere in the name, as
    /// RabbitMQ matches it: anchor with `^` and `$`).
    pub pattern: String,
    /// The definition, a JSON object of keys and values.
    pub definition: String,
    /// The highest priority among matching policies wins.
    pub priority: i64,
    /// The objects it applies to.
    pub apply_to: String,
}

/// A policy, checked and compiled.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Its name in its vhost.
    pub name: String,
    /// A user's or an operator's.
    pub kind: PolicyKind,
    /// As given.
    pub spec: PolicySpec,
    /// Its definition.
    pub definition: Map<String, Value>,
    apply_to: ApplyTo,
    pattern: regex::Regex,
}

impl Policy {
    /// Checks `spec` (name, pattern, apply-to, every key and value of the definition, and for
    /// an operator policy that it sets only what operators may) and compiles it.
    pub fn compile(kind: PolicyKind, name: &str, spec: PolicySpec) -> BrokerResult<Self> {
        let refuse =
            |why: String| BrokerError::precondition_failed(format!("{} '{}': {why}", kind.noun(), shown(name)));
        if name.is_empty() || name.len() > MAX_POLICY_NAME_BYTES {
            return Err(refuse(format!("a name is 1 to {MAX_POLICY_NAME_BYTES} bytes")));
        }
        if spec.pattern.len() > MAX_PATTERN_BYTES {
            return Err(refuse(format!("the pattern is longer than {MAX_PATTERN_BYTES} bytes")));
        }
        let pattern = regex::RegexBuilder::new(&spec.pattern)
            .size_limit(MAX_COMPILED_PATTERN_BYTES)
            .build()
            .map_err(|e| refuse(format!("the pattern is not a regular expression: {}", shown(&e.to_string()))))?;
        let apply_to = ApplyTo::parse(&spec.apply_to).map_err(|e| refuse(e.text))?;
        let definition = parse_definition(&spec.definition).map_err(refuse)?;
        for (key, value) in &definition {
            let known = PolicyKey::named(key).ok_or_else(|| refuse(format!("'{}' is not a policy key", shown(key))))?;
            if kind == PolicyKind::Operator && known.operator.is_none() {
                return Err(refuse(format!("'{}' cannot be set by an operator policy", shown(key))));
            }
            known.validate(value).map_err(|e| refuse(e.text))?;
        }
        Ok(Policy { name: name.to_string(), kind, spec, definition, apply_to, pattern })
    }

    /// Whether it applies to the object `name` of kind `target`: its apply-to covers the
    /// object, its pattern matches the name, and (for a queue) every key it holds is one the
    /// queue's kind supports.
    pub fn matches(&self, name: &str, target: Target) -> bool {
        let supported =
            |kind| self.definition.keys().all(|key| PolicyKey::named(key).is_some_and(|k| k.supported_by(kind)));
        self.apply_to.covers(target)
            && self.pattern.is_match(name)
            && match target {
                Target::Queue(kind) => supported(kind),
                Target::Exchange => true,
            }
    }

    /// Its apply-to.
    pub fn apply_to(&self) -> ApplyTo {
        self.apply_to
    }

    /// The keys of its definition that change nothing in Warren, each with why.
    pub fn without_effect(&self) -> Vec<(String, &'static str)> {
        let why = |key: &String| match PolicyKey::named(key).map(|k| k.effect) {
            Some(super::keys::Effect::NoEffect { why }) => Some((key.clone(), why)),
            _ => None,
        };
        self.definition.keys().filter_map(why).collect()
    }
}

fn parse_definition(text: &str) -> Result<Map<String, Value>, String> {
    if text.len() > MAX_DEFINITION_BYTES {
        return Err(format!("the definition is longer than {MAX_DEFINITION_BYTES} bytes"));
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) if !map.is_empty() => Ok(map),
        Ok(Value::Object(_)) => Err("the definition sets no key".into()),
        Ok(other) => Err(format!("the definition must be a JSON object, not {}", shown(&other.to_string()))),
        Err(e) => Err(format!("the definition is not JSON: {e}")),
    }
}

fn shown(text: &str) -> String {
    sanitize(text, MAX_TEXT_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::QueueType;

    fn spec(pattern: &str, definition: &str, apply_to: &str) -> PolicySpec {
        PolicySpec { pattern: pattern.into(), definition: definition.into(), priority: 0, apply_to: apply_to.into() }
    }

    #[test]
    fn a_policy_matches_by_pattern_anywhere_in_the_name_and_by_apply_to() {
        let policy = Policy::compile(PolicyKind::User, "ttl", spec("orders", r#"{"message-ttl": 1000}"#, "queues"))
            .expect("valid");
        assert!(policy.matches("eu.orders.v2", Target::Queue(QueueType::Quorum)));
        assert!(!policy.matches("eu.orders.v2", Target::Exchange));
        assert!(!policy.matches("invoices", Target::Queue(QueueType::Classic)));
    }

    #[test]
    fn bad_policies_are_refused_with_what_to_fix() {
        for (kind, spec, expected) in [
            (PolicyKind::User, spec("(", r#"{"message-ttl": 1}"#, "all"), "not a regular expression"),
            (PolicyKind::User, spec(".*", r#"{"message-ttl": -5}"#, "all"), "policy key 'message-ttl'"),
            (PolicyKind::User, spec(".*", r#"{"bogus": 1}"#, "all"), "'bogus' is not a policy key"),
            (PolicyKind::User, spec(".*", "{}", "all"), "sets no key"),
            (PolicyKind::User, spec(".*", "[1]", "all"), "must be a JSON object"),
            (PolicyKind::User, spec(".*", r#"{"message-ttl": 1}"#, "both"), "not a valid apply-to"),
            (
                PolicyKind::Operator,
                spec(".*", r#"{"dead-letter-exchange": "x"}"#, "queues"),
                "cannot be set by an operator",
            ),
        ] {
            let error = Policy::compile(kind, "p", spec).expect_err(expected);
            assert!(error.text.contains(expected), "{}", error.text);
        }
    }

    #[test]
    fn a_key_a_kind_does_not_support_keeps_the_whole_policy_off_it() {
        let policy =
            Policy::compile(PolicyKind::User, "p", spec(".*", r#"{"max-age": "1D", "message-ttl": 1000}"#, "queues"))
                .expect("valid");
        for kind in [QueueType::Classic, QueueType::Quorum, QueueType::Stream] {
            assert!(!policy.matches("q", Target::Queue(kind)), "{kind:?}");
        }
        let retention = Policy::compile(PolicyKind::User, "r", spec(".*", r#"{"max-length-bytes": 1000}"#, "queues"))
            .expect("valid");
        assert!(retention.matches("s", Target::Queue(QueueType::Stream)));
    }

    #[test]
    fn keys_without_effect_are_reported() {
        let policy =
            Policy::compile(PolicyKind::User, "ha", spec(".*", r#"{"ha-mode": "all", "max-length": 5}"#, "all"))
                .expect("accepted");
        let without: Vec<String> = policy.without_effect().into_iter().map(|(key, _)| key).collect();
        assert_eq!(without, ["ha-mode"]);
    }
}
