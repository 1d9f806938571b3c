//! A user: a name, a password hash (none for users that log in only with a client
//! certificate) and tags, which say what the management API lets it do.

use super::password::PasswordHash;

/// The user a fresh broker has unless `--default-user` says otherwise, as in RabbitMQ.
pub const DEFAULT_USER: &str = "guest";
/// The default user's password unless `--default-pass` says otherwise.
pub const DEFAULT_PASSWORD: &str = "guest";

/// The user tags RabbitMQ gives meaning to.
pub mod tags {
    /// May do everything, users, vhosts and permissions included.
    pub const ADMINISTRATOR: &str = "administrator";
    /// May see everything in the management API.
    pub const MONITORING: &str = "monitoring";
    /// May use the management API for the vhosts it has permissions in.
    pub const MANAGEMENT: &str = "management";
    /// May set policies (Warren has none yet): a management user as far as Warren goes.
    pub const POLICYMAKER: &str = "policymaker";
    /// Tags that open the management API.
    pub const MANAGEMENT_TAGS: [&str; 4] = [ADMINISTRATOR, MONITORING, MANAGEMENT, POLICYMAKER];
}

/// One user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// The login name.
    pub name: String,
    /// The password hash; `None` if it cannot log in with a password.
    pub password: Option<PasswordHash>,
    /// Its tags (RabbitMQ accepts any text as a tag; [`tags`] lists those with a meaning).
    pub tags: Vec<String>,
}

impl User {
    /// Whether it has `tag`.
    pub fn has_tag(&self, tag: &str) -> bool {
        self.tags.iter().any(|t| t == tag)
    }

    /// Whether it may do everything.
    pub fn is_administrator(&self) -> bool {
        self.has_tag(tags::ADMINISTRATOR)
    }

    /// Whether it may use the management API at all.
    pub fn may_manage(&self) -> bool {
        tags::MANAGEMENT_TAGS.iter().any(|tag| self.has_tag(tag))
    }

    /// Whether it may see every vhost's objects (administrator or monitoring).
    pub fn sees_everything(&self) -> bool {
        self.is_administrator() || self.has_tag(tags::MONITORING)
    }
}

/// Tags from RabbitMQ's comma-separated text ("administrator,monitoring"; "" is none).
pub fn parse_tags(text: &str) -> Vec<String> {
    text.split(',').map(str::trim).filter(|tag| !tag.is_empty()).map(str::to_string).collect()
}
