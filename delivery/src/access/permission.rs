//! Permissions of one user in one virtual host, as RabbitMQ has them: three regular
//! expressions, for configure (declare, delete), write (publish, bind to) and read (consume,
//! get, purge, bind from), matched against the name of the exchange or queue an operation
//! touches. What each AMQP operation needs is the protocol layer's table; this module answers
//! whether a name is allowed, and refuses with RabbitMQ's text.

use crate::error::{BrokerError, BrokerResult};
use regex::Regex;

/// The three kinds of access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Create, delete or change a resource.
    Configure,
    /// Put messages into it.
    Write,
    /// Take messages from it.
    Read,
}

/// What an operation touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource<'a> {
    /// An exchange ("" is the default exchange, checked as `amq.default`, as RabbitMQ does).
    Exchange(&'a str),
    /// A queue.
    Queue(&'a str),
}

/// The name RabbitMQ checks permissions against for the default exchange.
const DEFAULT_EXCHANGE_NAME: &str = "amq.default";

impl Resource<'_> {
    fn name(&self) -> &str {
        match self {
            Resource::Exchange("") => DEFAULT_EXCHANGE_NAME,
            Resource::Exchange(name) | Resource::Queue(name) => name,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Resource::Exchange(_) => "exchange",
            Resource::Queue(_) => "queue",
        }
    }
}

/// One permission pattern, compiled.
#[derive(Debug, Clone)]
pub(super) enum Pattern {
    /// `.*`: every name (the common case, checked without a regex).
    Everything,
    /// `""`: no name at all, as RabbitMQ reads an empty pattern.
    Nothing,
    /// Any other expression, matched anywhere in the name (RabbitMQ does not anchor it).
    Regex(Regex),
}

/// The longest pattern accepted: patterns come from operators, but through the API.
const MAX_PATTERN_BYTES: usize = 4096;

impl Pattern {
    pub(super) fn compile(text: &str) -> Result<Self, BrokerError> {
        match text {
            ".*" => Ok(Pattern::Everything),
            "" => Ok(Pattern::Nothing),
            _ if text.len() > MAX_PATTERN_BYTES => {
                Err(BrokerError::precondition_failed(format!("a permission is longer than {MAX_PATTERN_BYTES} bytes")))
            }
            _ => regex::RegexBuilder::new(text).size_limit(1 << 20).build().map(Pattern::Regex).map_err(|e| {
                BrokerError::precondition_failed(format!("permission '{text}' is not a regular expression: {e}"))
            }),
        }
    }

    pub(super) fn allows(&self, name: &str) -> bool {
        match self {
            Pattern::Everything => true,
            Pattern::Nothing => false,
            Pattern::Regex(regex) => regex.is_match(name),
        }
    }
}

/// The permissions as given: three regular expressions.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PermissionSpec {
    /// Configure.
    pub configure: String,
    /// Write.
    pub write: String,
    /// Read.
    pub read: String,
}

impl PermissionSpec {
    /// Everything allowed (`.*` three times), what the default user gets.
    pub fn everything() -> Self {
        PermissionSpec { configure: ".*".into(), write: ".*".into(), read: ".*".into() }
    }
}

/// A user's permissions in a vhost, compiled.
#[derive(Debug, Clone)]
pub struct Permissions {
    configure: Pattern,
    write: Pattern,
    read: Pattern,
}

impl Permissions {
    /// Compiles `spec`; a pattern that is not a regular expression is refused.
    pub fn compile(spec: &PermissionSpec) -> Result<Self, BrokerError> {
        Ok(Permissions {
            configure: Pattern::compile(&spec.configure)?,
            write: Pattern::compile(&spec.write)?,
            read: Pattern::compile(&spec.read)?,
        })
    }

    /// Whether `access` to `resource` is allowed.
    pub fn allows(&self, access: Access, resource: Resource<'_>) -> bool {
        let pattern = match access {
            Access::Configure => &self.configure,
            Access::Write => &self.write,
            Access::Read => &self.read,
        };
        pattern.allows(resource.name())
    }
}

/// 403 ACCESS_REFUSED with RabbitMQ's text (which names the resource, not the access kind).
pub fn refused(resource: Resource<'_>, vhost: &str, user: &str) -> BrokerError {
    BrokerError::access_refused(format!(
        "access to {} '{}' in vhost '{vhost}' refused for user '{user}'",
        resource.kind(),
        resource.name()
    ))
}

/// `Ok` if `permissions` (none: the user has no access to the vhost) allow `access` to `resource`.
pub fn check(
    permissions: Option<&Permissions>,
    access: Access,
    resource: Resource<'_>,
    vhost: &str,
    user: &str,
) -> BrokerResult<()> {
    match permissions {
        Some(permissions) if permissions.allows(access, resource) => Ok(()),
        _ => Err(refused(resource, vhost, user)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(configure: &str, write: &str, read: &str) -> Permissions {
        Permissions::compile(&PermissionSpec { configure: configure.into(), write: write.into(), read: read.into() })
            .unwrap()
    }

    #[test]
    fn patterns_match_anywhere_as_rabbitmq_does() {
        let p = spec("^app\\.", "orders", "");
        assert!(p.allows(Access::Configure, Resource::Queue("app.q")));
        assert!(!p.allows(Access::Configure, Resource::Queue("xapp.q")));
        assert!(p.allows(Access::Write, Resource::Exchange("all-orders-here")));
        assert!(!p.allows(Access::Read, Resource::Queue("anything")));
    }

    #[test]
    fn the_default_exchange_is_checked_as_amq_default() {
        let p = spec(".*", "^amq\\.default$", ".*");
        assert!(p.allows(Access::Write, Resource::Exchange("")));
        assert!(!p.allows(Access::Write, Resource::Exchange("amq.direct")));
        let text = refused(Resource::Exchange(""), "/", "bob").text;
        assert_eq!(text, "access to exchange 'amq.default' in vhost '/' refused for user 'bob'");
    }

    #[test]
    fn a_pattern_that_is_not_a_regex_is_refused() {
        let bad = PermissionSpec { configure: "(".into(), write: ".*".into(), read: ".*".into() };
        assert!(Permissions::compile(&bad).is_err());
    }
}
