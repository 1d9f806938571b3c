//! [`VhostPolicies`]: a virtual host's policies and operator policies, which of them applies to
//! an object, and the arguments a queue runs with once they are applied ([`ResolvedQueue`]).
//!
//! A queue keeps the arguments it was declared with (a redeclare is compared with those); what
//! it runs with is those merged with the policy and the operator policy that apply to it, key
//! by key as [`POLICY_KEYS`](super::keys::POLICY_KEYS) says. A policy value that the queue's
//! kind does not take (`reject-publish-dlx` on a quorum queue, a TTL on a stream) is left out
//! for that queue, as RabbitMQ leaves it out, rather than failing the queue.

use super::apply_to::Target;
use super::keys::{amqp_value, Effect, Merge, PolicyKey, Precedence};
use super::policy_spec::{Policy, PolicyKind};
use crate::error::BrokerResult;
use crate::field_value::whole_number_within;
use crate::queue::QueueArguments;
use amq_protocol::types::{AMQPValue, FieldTable};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A virtual host's policies of both kinds.
#[derive(Debug, Clone, Default)]
pub struct VhostPolicies {
    policies: BTreeMap<(PolicyKind, String), Arc<Policy>>,
}

/// Which policies apply to an object, and the definition they make together (what RabbitMQ's
/// API shows as `policy`, `operator_policy` and `effective_policy_definition`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AppliedPolicy {
    /// The user policy that applies, if any.
    pub policy: Option<String>,
    /// The operator policy that applies, if any.
    pub operator_policy: Option<String>,
    /// Their definitions merged (the operator's values merged in by its rules).
    pub definition: Map<String, Value>,
}

/// What a queue runs with: its declared arguments with the policies applied.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResolvedQueue {
    /// The arguments in effect.
    pub arguments: QueueArguments,
    /// Which policies gave them.
    pub applied: AppliedPolicy,
}

impl VhostPolicies {
    /// Adds `policy`, or replaces the one of its kind and name.
    pub fn put(&mut self, policy: Policy) {
        self.policies.insert((policy.kind, policy.name.clone()), Arc::new(policy));
    }

    /// Removes the policy of `kind` called `name`; whether there was one.
    pub fn remove(&mut self, kind: PolicyKind, name: &str) -> bool {
        self.policies.remove(&(kind, name.to_string())).is_some()
    }

    /// The policy of `kind` called `name`.
    pub fn get(&self, kind: PolicyKind, name: &str) -> Option<&Arc<Policy>> {
        self.policies.get(&(kind, name.to_string()))
    }

    /// The policies of `kind`, by name.
    pub fn of_kind(&self, kind: PolicyKind) -> impl Iterator<Item = &Arc<Policy>> {
        self.policies.iter().filter(move |((k, _), _)| *k == kind).map(|(_, policy)| policy)
    }

    /// Whether there is none of either kind.
    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }

    /// The policy of `kind` that applies to object `name` of kind `target`: the one of highest
    /// priority among those that match; of equal priorities, the first by name.
    pub fn applying(&self, kind: PolicyKind, name: &str, target: Target) -> Option<&Arc<Policy>> {
        // Names are visited in order, so `max_by_key` would keep the last of a tie: compare
        // with the name reversed to keep the first.
        self.of_kind(kind)
            .filter(|policy| policy.matches(name, target))
            .max_by(|a, b| a.spec.priority.cmp(&b.spec.priority).then_with(|| b.name.cmp(&a.name)))
    }

    /// The policies that apply to object `name` of kind `target`, and their merged definition.
    pub fn applied(&self, name: &str, target: Target) -> AppliedPolicy {
        let user = self.applying(PolicyKind::User, name, target);
        let operator = self.applying(PolicyKind::Operator, name, target);
        AppliedPolicy {
            policy: user.map(|p| p.name.clone()),
            operator_policy: operator.map(|p| p.name.clone()),
            definition: merged(user.map(|p| &p.definition), operator.map(|p| &p.definition)),
        }
    }

    /// The arguments queue `name`, declared with `declared`, runs with; 406 if `declared`
    /// itself is not valid.
    pub fn resolve_queue(&self, name: &str, declared: &FieldTable) -> BrokerResult<ResolvedQueue> {
        let own = QueueArguments::parse(declared)?;
        let kind = own.queue_type;
        let applied = self.applied(name, Target::Queue(kind));
        if applied.definition.is_empty() {
            return Ok(ResolvedQueue { arguments: own, applied });
        }
        let mut table = declared.clone();
        for (key, value) in &applied.definition {
            let Some(Effect::QueueArgument { argument, precedence }) = PolicyKey::named(key).map(|k| k.effect) else {
                continue;
            };
            let Ok(from_policy) = amqp_value(key, value) else { continue };
            if !kind.interprets(argument) {
                continue;
            }
            let chosen = match (precedence(kind), declared.inner().get(argument)) {
                (_, None) | (Precedence::Policy, Some(_)) => from_policy,
                (Precedence::Argument, Some(_)) => continue,
                (Precedence::Lower, Some(own)) => lower(own, from_policy),
            };
            let mut candidate = table.clone();
            candidate.insert(argument.into(), chosen);
            if QueueArguments::parse(&candidate).is_ok() {
                table = candidate;
            }
        }
        Ok(ResolvedQueue { arguments: QueueArguments::parse(&table)?, applied })
    }
}

/// The user policy's definition with the operator policy's merged in.
fn merged(user: Option<&Map<String, Value>>, operator: Option<&Map<String, Value>>) -> Map<String, Value> {
    let mut definition = user.cloned().unwrap_or_default();
    for (key, value) in operator.into_iter().flatten() {
        let merge = PolicyKey::named(key).and_then(|k| k.operator);
        let value = match (merge, definition.get(key)) {
            (Some(merge @ (Merge::Lower | Merge::Higher)), Some(Value::Number(user))) => {
                match (user.as_i64(), value.as_i64()) {
                    (Some(u), Some(o)) if merge == Merge::Lower => Value::from(u.min(o)),
                    (Some(u), Some(o)) => Value::from(u.max(o)),
                    _ => value.clone(),
                }
            }
            _ => value.clone(),
        };
        definition.insert(key.clone(), value);
    }
    definition
}

/// The lower of a queue's own value and a policy's; the queue's if either is not a number.
fn lower(own: &AMQPValue, from_policy: AMQPValue) -> AMQPValue {
    match (whole_number_within(own, 0, u64::MAX), whole_number_within(&from_policy, 0, u64::MAX)) {
        (Some(a), Some(b)) if b < a => from_policy,
        _ => own.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field_value::test_values::{table, text};
    use crate::overflow::Overflow;
    use crate::policy::PolicySpec;
    use crate::queue::QueueType;

    fn policy(kind: PolicyKind, name: &str, pattern: &str, priority: i64, definition: &str) -> Policy {
        let spec =
            PolicySpec { pattern: pattern.into(), definition: definition.into(), priority, apply_to: "all".into() };
        Policy::compile(kind, name, spec).expect("valid")
    }

    fn policies(list: Vec<Policy>) -> VhostPolicies {
        let mut policies = VhostPolicies::default();
        list.into_iter().for_each(|p| policies.put(p));
        policies
    }

    #[test]
    fn the_highest_priority_wins_and_a_tie_goes_to_the_first_name() {
        let set = policies(vec![
            policy(PolicyKind::User, "b", ".*", 1, r#"{"max-length": 1}"#),
            policy(PolicyKind::User, "a", ".*", 1, r#"{"max-length": 2}"#),
            policy(PolicyKind::User, "low", ".*", 0, r#"{"max-length": 3}"#),
        ]);
        let target = Target::Queue(QueueType::Classic);
        assert_eq!(set.applying(PolicyKind::User, "q", target).map(|p| p.name.as_str()), Some("a"));
        assert_eq!(set.applying(PolicyKind::Operator, "q", target).map(|p| p.name.as_str()), None);
    }

    #[test]
    fn limits_take_the_lower_value_and_the_dead_letter_exchange_the_argument() {
        let set = policies(vec![policy(
            PolicyKind::User,
            "p",
            ".*",
            0,
            r#"{"max-length": 10, "message-ttl": 5000, "dead-letter-exchange": "policy-dlx"}"#,
        )]);
        let declared = table(&[
            ("x-max-length", AMQPValue::LongInt(3)),
            ("x-message-ttl", AMQPValue::LongInt(60_000)),
            ("x-dead-letter-exchange", text("own-dlx")),
        ]);
        let resolved = set.resolve_queue("q", &declared).expect("valid");
        assert_eq!(resolved.arguments.max_length, Some(3), "the argument is lower");
        assert_eq!(resolved.arguments.message_ttl_ms, Some(5000), "the policy is lower");
        assert_eq!(resolved.arguments.dead_letter_exchange.as_deref(), Some("own-dlx"), "the argument wins");
        assert_eq!(resolved.applied.policy.as_deref(), Some("p"));
        let bare = set.resolve_queue("q", &FieldTable::default()).expect("valid");
        assert_eq!(bare.arguments.dead_letter_exchange.as_deref(), Some("policy-dlx"));
    }

    #[test]
    fn overflow_from_a_policy_wins_on_quorum_queues_only_and_a_value_a_kind_refuses_is_left_out() {
        let set = policies(vec![policy(PolicyKind::User, "p", ".*", 0, r#"{"overflow": "reject-publish-dlx"}"#)]);
        let quorum = table(&[("x-queue-type", text("quorum")), ("x-overflow", text("drop-head"))]);
        let resolved = set.resolve_queue("q", &quorum).expect("valid");
        assert_eq!(resolved.arguments.overflow, Overflow::DropHead, "quorum queues refuse reject-publish-dlx");
        let set = policies(vec![policy(PolicyKind::User, "p", ".*", 0, r#"{"overflow": "reject-publish"}"#)]);
        assert_eq!(set.resolve_queue("q", &quorum).expect("valid").arguments.overflow, Overflow::RejectPublish);
        let classic = table(&[("x-overflow", text("drop-head"))]);
        assert_eq!(set.resolve_queue("q", &classic).expect("valid").arguments.overflow, Overflow::DropHead);
    }

    #[test]
    fn an_operator_policy_tightens_what_the_user_policy_sets() {
        let set = policies(vec![
            policy(PolicyKind::User, "user", ".*", 0, r#"{"max-length": 100, "expires": 1000}"#),
            policy(PolicyKind::Operator, "ops", ".*", 0, r#"{"max-length": 50, "expires": 9000, "message-ttl": 7}"#),
        ]);
        let resolved = set.resolve_queue("q", &FieldTable::default()).expect("valid");
        assert_eq!(resolved.arguments.max_length, Some(50));
        assert_eq!(resolved.arguments.expires_ms, Some(1000));
        assert_eq!(resolved.arguments.message_ttl_ms, Some(7));
        assert_eq!(resolved.applied.operator_policy.as_deref(), Some("ops"));
        assert_eq!(resolved.applied.definition["max-length"], Value::from(50));
    }

    #[test]
    fn a_stream_takes_retention_from_a_policy_and_no_policy_with_queue_keys() {
        let set = policies(vec![
            policy(PolicyKind::User, "retention", ".*", 0, r#"{"max-age": "1h", "max-length-bytes": 5000}"#),
            policy(PolicyKind::User, "queues", ".*", 9, r#"{"message-ttl": 5}"#),
        ]);
        let stream = table(&[
            ("x-queue-type", text("stream")),
            ("x-max-age", text("7D")),
            ("x-max-length-bytes", AMQPValue::LongInt(1_000_000)),
        ]);
        let resolved = set.resolve_queue("s", &stream).expect("valid");
        assert_eq!(resolved.applied.policy.as_deref(), Some("retention"), "a TTL keeps the higher policy off a stream");
        assert_eq!(resolved.arguments.stream.retention.age, Some(std::time::Duration::from_secs(3600)));
        assert_eq!(resolved.arguments.stream.retention.bytes, Some(5000), "a stream takes the policy's retention");
    }
}
