//! The policy verbs of rabbitmqctl: `set_policy`, `clear_policy`, `set_operator_policy`,
//! `clear_operator_policy` (the lists are in `lists`), over `/api/policies` and
//! `/api/operator-policies`.

use super::client::{encode, Client};
use super::output::say;
use super::CtlError;
use serde_json::{json, Value};

/// A user's policy or an operator's.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// `set_policy`.
    User,
    /// `set_operator_policy`.
    Operator,
}

impl Kind {
    fn path(self, vhost: &str, name: &str) -> String {
        let base = match self {
            Kind::User => "/api/policies",
            Kind::Operator => "/api/operator-policies",
        };
        format!("{base}/{}/{}", encode(vhost), encode(name))
    }

    fn noun(self) -> &'static str {
        match self {
            Kind::User => "policy",
            Kind::Operator => "operator policy",
        }
    }
}

/// A policy as `set_policy` and `set_operator_policy` take it, rabbitmqctl's grammar.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct PolicyArgs {
    /// Its name.
    pub name: String,
    /// A regular expression over object names (anchor it with ^ and $).
    #[arg(allow_hyphen_values = true)]
    pub pattern: String,
    /// Its keys and values, as JSON.
    pub definition: String,
    /// Among policies matching one object, the highest wins.
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    pub priority: i64,
    /// What it applies to: all, queues, exchanges, classic_queues, quorum_queues, streams.
    #[arg(long = "apply-to", default_value = "all")]
    pub apply_to: String,
}

/// `set_policy` / `set_operator_policy`: the definition must be a JSON object; the broker
/// checks every key and value and says what is wrong.
pub fn set(client: &Client, kind: Kind, vhost: &str, policy: &PolicyArgs) -> Result<(), CtlError> {
    let definition: Value = serde_json::from_str(&policy.definition).map_err(|e| {
        CtlError::Failed(format!("the definition is a JSON object such as '{{\"message-ttl\": 60000}}': {e}"))
    })?;
    let body = json!({
        "pattern": policy.pattern,
        "definition": definition,
        "priority": policy.priority,
        "apply-to": policy.apply_to,
    });
    client.send("PUT", &kind.path(vhost, &policy.name), &body)?;
    say(&format!(
        "Setting {} \"{}\" for pattern \"{}\" to \"{}\" with priority \"{}\" for vhost \"{vhost}\" ...\n",
        kind.noun(),
        policy.name,
        policy.pattern,
        policy.definition,
        policy.priority
    ));
    Ok(())
}

/// `clear_policy` / `clear_operator_policy`.
pub fn clear(client: &Client, kind: Kind, vhost: &str, name: &str) -> Result<(), CtlError> {
    client.delete(&kind.path(vhost, name), &[])?;
    say(&format!("Clearing {} \"{name}\" on vhost \"{vhost}\" ...\n", kind.noun()));
    Ok(())
}
