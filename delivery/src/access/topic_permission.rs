//! Topic permissions (RabbitMQ's): per user, vhost and topic exchange, a `write` pattern that
//! the routing key of every message published to the exchange must match, and a `read` pattern
//! that the binding key of every binding from it must match. `{username}` and `{vhost}` in a
//! pattern stand for the user's and the vhost's names (escaped, so a name's dots match only
//! dots, as RabbitMQ 4.2 expands them). A user with no topic permission for an exchange is not
//! restricted by topic there, as in RabbitMQ.

use super::permission::Pattern;
use crate::error::{BrokerError, BrokerResult};
use serde::{Deserialize, Serialize};

/// A topic permission as given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicPermissionSpec {
    /// The topic exchange it is about.
    pub exchange: String,
    /// What routing keys may be published with.
    pub write: String,
    /// What binding keys may be bound with.
    pub read: String,
}

/// Whether a topic permission is checked for publishing or for binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicAccess {
    /// `basic.publish`: the routing key against `write`.
    Write,
    /// A bind or unbind from the exchange: the binding key against `read`.
    Read,
}

impl TopicAccess {
    fn name(self) -> &'static str {
        match self {
            TopicAccess::Write => "write",
            TopicAccess::Read => "read",
        }
    }
}

/// A topic permission, its variables expanded and its patterns compiled.
#[derive(Debug, Clone)]
pub struct TopicPermissions {
    write: Pattern,
    read: Pattern,
}

impl TopicPermissions {
    /// Compiles `spec` for `user` in `vhost`; a pattern that is not a regular expression is
    /// refused. An empty pattern allows only the empty key, as RabbitMQ reads it.
    pub fn compile(spec: &TopicPermissionSpec, user: &str, vhost: &str) -> BrokerResult<Self> {
        let expand = |pattern: &str| {
            let expanded =
                pattern.replace("{username}", &regex::escape(user)).replace("{vhost}", &regex::escape(vhost));
            Pattern::compile(if expanded.is_empty() { "^$" } else { &expanded })
        };
        Ok(TopicPermissions { write: expand(&spec.write)?, read: expand(&spec.read)? })
    }

    /// `Ok` if `key` may be used for `access` on `exchange`; 403 with RabbitMQ's text if not.
    pub fn check(&self, access: TopicAccess, key: &str, exchange: &str, vhost: &str, user: &str) -> BrokerResult<()> {
        let pattern = match access {
            TopicAccess::Write => &self.write,
            TopicAccess::Read => &self.read,
        };
        if pattern.allows(key) {
            return Ok(());
        }
        // The key is the client's: escaped before it reaches the log.
        let key = crate::client_text::sanitize(key, crate::client_text::MAX_TEXT_BYTES);
        Err(BrokerError::access_refused(format!(
            "{} access to topic '{key}' in exchange '{exchange}' in vhost '{vhost}' refused for user '{user}'",
            access.name()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compiled(write: &str, read: &str, user: &str) -> TopicPermissions {
        let spec = TopicPermissionSpec { exchange: "amq.topic".into(), write: write.into(), read: read.into() };
        TopicPermissions::compile(&spec, user, "/").expect("valid")
    }

    #[test]
    fn variables_stand_for_the_user_and_the_vhost_escaped() {
        let permissions = compiled("^{username}\\.", "^(shared|{username})\\.", "bob.smith");
        assert!(permissions.check(TopicAccess::Write, "bob.smith.orders", "amq.topic", "/", "bob.smith").is_ok());
        assert!(permissions.check(TopicAccess::Write, "bobxsmith.orders", "amq.topic", "/", "bob.smith").is_err());
        assert!(permissions.check(TopicAccess::Read, "shared.news", "amq.topic", "/", "bob.smith").is_ok());
    }

    #[test]
    fn a_refusal_says_what_rabbitmq_says() {
        let error = compiled("^a", "", "bob").check(TopicAccess::Write, "b.c", "amq.topic", "/", "bob").expect_err("b");
        assert_eq!(
            error.text,
            "write access to topic 'b.c' in exchange 'amq.topic' in vhost '/' refused for user 'bob'"
        );
        let empty = compiled("^a", "", "bob");
        assert!(empty.check(TopicAccess::Read, "", "amq.topic", "/", "bob").is_ok(), "an empty pattern is ^$");
        assert!(empty.check(TopicAccess::Read, "x", "amq.topic", "/", "bob").is_err());
    }
}
