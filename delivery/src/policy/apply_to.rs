//! [`ApplyTo`]: which objects a policy is for (RabbitMQ's `apply-to`), and [`Target`], the
//! object a policy is matched against.

use crate::error::{BrokerError, BrokerResult};
use crate::queue::QueueType;

/// The objects a policy applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ApplyTo {
    /// Queues (of every kind, streams included) and exchanges: RabbitMQ's default.
    #[default]
    All,
    /// Queues of every kind, streams included.
    Queues,
    /// Exchanges.
    Exchanges,
    /// Classic queues only.
    ClassicQueues,
    /// Quorum queues only.
    QuorumQueues,
    /// Streams only.
    Streams,
}

/// The object a policy is matched against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// An exchange.
    Exchange,
    /// A queue of this kind.
    Queue(QueueType),
}

impl ApplyTo {
    /// Every value, in the order errors list them.
    const ALL: [ApplyTo; 6] = [
        ApplyTo::Queues,
        ApplyTo::Exchanges,
        ApplyTo::All,
        ApplyTo::ClassicQueues,
        ApplyTo::QuorumQueues,
        ApplyTo::Streams,
    ];

    /// Its name in RabbitMQ's API, definitions and `--apply-to`.
    pub fn as_str(self) -> &'static str {
        match self {
            ApplyTo::All => "all",
            ApplyTo::Queues => "queues",
            ApplyTo::Exchanges => "exchanges",
            ApplyTo::ClassicQueues => "classic_queues",
            ApplyTo::QuorumQueues => "quorum_queues",
            ApplyTo::Streams => "streams",
        }
    }

    /// The value named `name`; 400-style text with the names there are if none is.
    pub fn parse(name: &str) -> BrokerResult<Self> {
        Self::ALL.into_iter().find(|apply_to| apply_to.as_str() == name).ok_or_else(|| {
            let known: Vec<&str> = Self::ALL.iter().map(|a| a.as_str()).collect();
            BrokerError::precondition_failed(format!(
                "'{}' is not a valid apply-to value (one of: {})",
                crate::client_text::sanitize(name, crate::client_text::MAX_TEXT_BYTES),
                known.join(", ")
            ))
        })
    }

    /// Whether a policy of this `apply-to` may apply to `target`.
    pub fn covers(self, target: Target) -> bool {
        matches!(
            (self, target),
            (ApplyTo::All, _)
                | (ApplyTo::Exchanges, Target::Exchange)
                | (ApplyTo::Queues, Target::Queue(_))
                | (ApplyTo::ClassicQueues, Target::Queue(QueueType::Classic))
                | (ApplyTo::QuorumQueues, Target::Queue(QueueType::Quorum))
                | (ApplyTo::Streams, Target::Queue(QueueType::Stream))
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_value_covers_what_rabbitmq_documents() {
        let stream = Target::Queue(QueueType::Stream);
        let classic = Target::Queue(QueueType::Classic);
        assert!(ApplyTo::Queues.covers(stream) && ApplyTo::All.covers(Target::Exchange));
        assert!(!ApplyTo::Exchanges.covers(classic) && !ApplyTo::Queues.covers(Target::Exchange));
        assert!(ApplyTo::Streams.covers(stream) && !ApplyTo::QuorumQueues.covers(stream));
        for apply_to in ApplyTo::ALL {
            assert_eq!(ApplyTo::parse(apply_to.as_str()).expect("its own name"), apply_to);
        }
        assert!(ApplyTo::parse("both").expect_err("not a value").text.contains("classic_queues"));
    }
}
