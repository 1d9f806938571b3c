//! Who may do what (issue 15): users with RabbitMQ-compatible password hashes and tags, the
//! virtual hosts that exist with their limits and policies (issue 31), and each user's
//! permissions per vhost, kept in `access.json` under the data directory; the failed-login
//! throttle.
//!
//! - `password`: [`PasswordHash`]; `user`: [`User`] and its tags;
//! - `permission`: [`Permissions`], the three patterns, and RabbitMQ's refusal;
//! - `operation`: [`Operation`], what each operation needs of them (RabbitMQ's table);
//! - `change`: [`AccessChange`], one change as the cluster replicates it;
//! - `access_state`: what is held, how a change is checked against it and made, and the
//!   bounds on what clients may make it hold;
//! - `stored`: the file's format; `login_throttle`: [`LoginThrottle`].
//!
//! [`AccessControl`] answers logins and checks; it changes only by [`AccessControl::apply`],
//! which the broker calls for each change (on every node of a cluster).

mod access_state;
mod change;
mod login_throttle;
mod operation;
mod password;
mod permission;
mod stored;
mod topic_permission;
pub mod user;

pub use change::{AccessChange, PasswordChange};
pub use login_throttle::LoginThrottle;
pub use operation::Operation;
pub use password::{HashingAlgorithm, PasswordHash, PasswordHashError};
pub use permission::{Access, PermissionSpec, Permissions, Resource};
pub use topic_permission::{TopicAccess, TopicPermissionSpec, TopicPermissions};
pub use user::User;

use crate::error::{BrokerError, BrokerResult};
use crate::policy::{PolicyKind, PolicySpec, VhostPolicies};
use crate::user_limits::UserLimits;
use crate::vhost_limits::VhostLimits;
use access_state::AccessState;
use parking_lot::RwLock;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;
use warren_storage::SnapshotFile;

/// What a fresh broker starts with, and who may log in from loopback only.
#[derive(Debug, Clone)]
pub struct AccessSettings {
    /// The user created on first start (`--default-user`).
    pub default_user: String,
    /// Its password (`--default-pass`).
    pub default_pass: String,
    /// The vhost created on first start (`--default-vhost`).
    pub default_vhost: String,
    /// Users that may connect only from loopback (`--loopback-users`; RabbitMQ's
    /// `loopback_users`, by default guest).
    pub loopback_users: Vec<String>,
}

impl Default for AccessSettings {
    fn default() -> Self {
        AccessSettings {
            default_user: user::DEFAULT_USER.to_string(),
            default_pass: user::DEFAULT_PASSWORD.to_string(),
            default_vhost: crate::DEFAULT_VHOST.to_string(),
            loopback_users: vec![user::DEFAULT_USER.to_string()],
        }
    }
}

/// Why a login was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// Unknown user or wrong password (deliberately not told apart).
    #[error("username or password not allowed")]
    BadCredentials,
    /// The user may only connect from loopback.
    #[error("user '{0}' can only connect via localhost")]
    LoopbackOnly(String),
}

/// A vhost as access control knows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VhostEntry {
    /// What it is for.
    pub description: String,
    /// Its limits.
    pub limits: VhostLimits,
}

/// Users, vhosts and permissions.
#[derive(Debug)]
pub struct AccessControl {
    state: RwLock<AccessState>,
    /// Held while a change is applied and stored.
    changing: parking_lot::Mutex<()>,
    /// Counts changes, so that a check remembered by a channel is known to be current.
    generation: std::sync::atomic::AtomicU64,
    file: Option<SnapshotFile>,
    loopback_users: Vec<String>,
    throttle: LoginThrottle,
}

fn not_found(what: &str, name: &str) -> BrokerError {
    BrokerError::not_found(format!("no {what} '{name}'"))
}

impl AccessControl {
    /// Access control kept in `file` (none: in memory). A missing file is a first start: the
    /// default user (tagged administrator) and vhost are created, the user with every
    /// permission there.
    pub fn open(file: Option<SnapshotFile>, settings: &AccessSettings) -> BrokerResult<Self> {
        let stored = match &file {
            Some(file) => file.read().map_err(|e| crate::error::internal_error("cannot read access control", e))?,
            None => None,
        };
        let control = AccessControl {
            state: RwLock::new(AccessState::default()),
            changing: parking_lot::Mutex::new(()),
            generation: std::sync::atomic::AtomicU64::new(0),
            file,
            loopback_users: settings.loopback_users.clone(),
            throttle: LoginThrottle::default(),
        };
        match stored {
            Some(bytes) => {
                for change in stored::decode(&bytes)? {
                    control.apply_to_state(&change)?;
                }
            }
            None => {
                for change in first_start(settings) {
                    control.apply(&change)?;
                }
            }
        }
        Ok(control)
    }

    /// Whether `change` can be made: what it names exists, its hash and patterns are valid, and
    /// it keeps what access control holds within bounds. Checked before a change is proposed,
    /// so that the cluster's log holds only valid ones.
    pub fn validate(&self, change: &AccessChange) -> BrokerResult<()> {
        self.state.read().validate(change)
    }

    /// Makes `change` and stores the result.
    pub fn apply(&self, change: &AccessChange) -> BrokerResult<()> {
        // One change at a time, state and file together: two changes saving side by side
        // could otherwise leave the file without the later one.
        let _one_at_a_time = self.changing.lock();
        self.apply_to_state(change)?;
        self.save()
    }

    fn apply_to_state(&self, change: &AccessChange) -> BrokerResult<()> {
        let generation = self.generation.fetch_add(1, std::sync::atomic::Ordering::Release) + 1;
        self.state.write().apply(change, generation)
    }

    fn save(&self) -> BrokerResult<()> {
        let Some(file) = &self.file else { return Ok(()) };
        let bytes = stored::encode(&self.as_changes())?;
        file.write(&bytes).map_err(|e| crate::error::internal_error("cannot store access control", e))
    }

    /// The whole state as the changes that rebuild it (what the file and the catalog's
    /// snapshot hold).
    pub(crate) fn as_changes(&self) -> Vec<AccessChange> {
        self.state.read().as_changes()
    }

    /// Every global runtime parameter: its name and its value as JSON text.
    pub fn global_parameters(&self) -> Vec<(String, String)> {
        self.state.read().global_parameters.iter().map(|(n, v)| (n.clone(), v.clone())).collect()
    }

    /// The global runtime parameter `name`, as JSON text.
    pub fn global_parameter(&self, name: &str) -> Option<String> {
        self.state.read().global_parameters.get(name).cloned()
    }

    /// The limits of user `name` (none set: no limit).
    pub fn user_limits(&self, name: &str) -> UserLimits {
        self.state.read().user_limits.get(name).copied().unwrap_or_default()
    }

    /// Every user with a limit, and its limits.
    pub fn all_user_limits(&self) -> Vec<(String, UserLimits)> {
        self.state.read().user_limits.iter().map(|(user, limits)| (user.clone(), *limits)).collect()
    }

    /// Every topic permission: (vhost, user, exchange and patterns).
    pub fn topic_permissions(&self) -> Vec<(String, String, TopicPermissionSpec)> {
        self.state.read().every_topic_grant().collect()
    }

    /// `user`'s topic permission on `exchange` in `vhost`, if it has one (then publishing to
    /// and binding from that topic exchange are checked against it).
    pub fn topic_permissions_of(&self, vhost: &str, user: &str, exchange: &str) -> Option<Arc<TopicPermissions>> {
        let state = self.state.read();
        let grant = state.topic_grants.get(vhost)?.get(user)?.get(exchange)?;
        Some(Arc::clone(&grant.compiled))
    }

    /// The policies of vhost `name` (none if it has none).
    pub fn policies(&self, vhost: &str) -> Arc<VhostPolicies> {
        self.state.read().policies.get(vhost).cloned().unwrap_or_default()
    }

    /// Every policy of `kind`: (vhost, name, spec).
    pub fn policies_of_kind(&self, kind: PolicyKind) -> Vec<(String, String, PolicySpec)> {
        let state = self.state.read();
        let by_vhost = state.policies.iter();
        by_vhost
            .flat_map(|(vhost, policies)| {
                policies.of_kind(kind).map(|p| (vhost.clone(), p.name.clone(), p.spec.clone())).collect::<Vec<_>>()
            })
            .collect()
    }

    /// Checks a password login of `name` from `peer`.
    pub fn authenticate(&self, name: &str, password: &str, peer: IpAddr) -> Result<User, AuthError> {
        let user = self.state.read().users.get(name).cloned().ok_or(AuthError::BadCredentials)?;
        if !user.password.as_ref().is_some_and(|hash| hash.verifies(password)) {
            return Err(AuthError::BadCredentials);
        }
        self.check_origin(&user, peer)?;
        Ok(user)
    }

    /// Checks a login of `name` whose identity something else proved (a client certificate).
    pub fn authenticate_external(&self, name: &str, peer: IpAddr) -> Result<User, AuthError> {
        let user = self.state.read().users.get(name).cloned().ok_or(AuthError::BadCredentials)?;
        self.check_origin(&user, peer)?;
        Ok(user)
    }

    fn check_origin(&self, user: &User, peer: IpAddr) -> Result<(), AuthError> {
        // An IPv6 listener sees IPv4 clients as ::ffff:a.b.c.d; 127.0.0.1 is loopback there too.
        if self.loopback_users.contains(&user.name) && !peer.to_canonical().is_loopback() {
            return Err(AuthError::LoopbackOnly(user.name.clone()));
        }
        Ok(())
    }

    /// How many changes were made: a check that passed under the same number still holds.
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Counts a login attempt from `peer` as `user` by `mechanism`; a failure (`why`) is
    /// logged, at most once a second per address (a guessing client cannot flood the log).
    /// Answers how long to hold back the refusal: an address that keeps failing has its
    /// failures answered one at a time (see [`LoginThrottle`]); a success never waits.
    pub fn count_login(&self, peer: IpAddr, user: &str, mechanism: &str, failure: Option<&str>) -> Option<Duration> {
        let Some(why) = failure else {
            self.throttle.succeeded();
            return None;
        };
        let failed = self.throttle.failed(peer);
        if failed.log {
            let user = crate::client_text::sanitize(user, crate::client_text::MAX_TEXT_BYTES);
            let mechanism = crate::client_text::sanitize(mechanism, MAX_MECHANISM_LOG_BYTES);
            tracing::warn!(%peer, user, mechanism, why, "login failed");
        }
        failed.delay
    }

    /// The failed-login table.
    pub fn throttle(&self) -> &LoginThrottle {
        &self.throttle
    }

    /// The user called `name`.
    pub fn user(&self, name: &str) -> Option<User> {
        self.state.read().users.get(name).cloned()
    }

    /// Every user, by name.
    pub fn users(&self) -> Vec<User> {
        self.state.read().users.values().cloned().collect()
    }

    /// Every vhost, by name.
    pub fn vhosts(&self) -> Vec<(String, VhostEntry)> {
        self.state.read().vhosts.iter().map(|(name, entry)| (name.clone(), entry.clone())).collect()
    }

    /// The vhost called `name`.
    pub fn vhost(&self, name: &str) -> Option<VhostEntry> {
        self.state.read().vhosts.get(name).cloned()
    }

    /// Every permission: (vhost, user, patterns).
    pub fn permissions(&self) -> Vec<(String, String, PermissionSpec)> {
        let state = self.state.read();
        let by_vhost = state.grants.iter();
        by_vhost
            .flat_map(|(vhost, grants)| grants.iter().map(|(user, g)| (vhost.clone(), user.clone(), g.spec.clone())))
            .collect()
    }

    /// `user`'s permissions in `vhost`, if it has any there (then it may open it).
    pub fn permissions_of(&self, vhost: &str, user: &str) -> Option<Arc<Permissions>> {
        self.state.read().grants.get(vhost)?.get(user).map(|grant| Arc::clone(&grant.compiled))
    }

    /// `Ok` if `user` may have `access` to `resource` in `vhost`; 403 with RabbitMQ's text if not.
    pub fn check(&self, user: &str, vhost: &str, access: Access, resource: Resource<'_>) -> BrokerResult<()> {
        let state = self.state.read();
        let grant = state.grants.get(vhost).and_then(|grants| grants.get(user));
        permission::check(grant.map(|g| &*g.compiled), access, resource, vhost, user)
    }

    /// `Ok` if `user` may make `operation` in `vhost`: every permission it needs (see
    /// [`Operation`]); 403 with RabbitMQ's text for the first it lacks.
    pub fn authorize(&self, user: &str, vhost: &str, operation: &Operation<'_>) -> BrokerResult<()> {
        let state = self.state.read();
        let grant = state.grants.get(vhost).and_then(|grants| grants.get(user)).map(|g| &*g.compiled);
        for (access, resource) in operation.needs() {
            permission::check(grant, access, resource, vhost, user)?;
        }
        Ok(())
    }

    /// The generation at which `user`'s password, tags or permissions last changed (0 if
    /// never since start); `None` if there is no such user. A session or live feed opened
    /// under another answer is stale.
    pub fn user_revision(&self, user: &str) -> Option<u64> {
        self.user_with_revision(user).map(|(_, revision)| revision)
    }

    /// User `name` and its revision (see [`AccessControl::user_revision`]), read together: a
    /// change between two reads would pair old tags with a new revision.
    pub fn user_with_revision(&self, name: &str) -> Option<(User, u64)> {
        let state = self.state.read();
        let user = state.users.get(name)?.clone();
        Some((user, state.revisions.get(name).copied().unwrap_or(0)))
    }
}

/// A message's `user-id` property, when set, must name the user who publishes it: 406, as in
/// RabbitMQ, so that consumers can trust it (AMQP and the management API alike).
pub fn check_user_id(properties: &crate::properties::Properties, user: &str) -> BrokerResult<()> {
    use crate::client_text::{sanitize, MAX_TEXT_BYTES};
    match properties.user_id() {
        Some(claimed) if claimed != user.as_bytes() => {
            let claimed = sanitize(&String::from_utf8_lossy(claimed), MAX_TEXT_BYTES);
            let user = sanitize(user, MAX_TEXT_BYTES);
            Err(BrokerError::precondition_failed(format!(
                "user_id property set to '{claimed}' but authenticated user was '{user}'"
            )))
        }
        _ => Ok(()),
    }
}

/// How much of a client's mechanism name reaches the log.
const MAX_MECHANISM_LOG_BYTES: usize = 32;

/// What a first start creates.
fn first_start(settings: &AccessSettings) -> Vec<AccessChange> {
    let hash = PasswordHash::of(&settings.default_pass);
    vec![
        AccessChange::PutUser {
            name: settings.default_user.clone(),
            password: PasswordChange::Hash {
                hashing_algorithm: hash.algorithm().name().to_string(),
                password_hash: hash.to_base64(),
            },
            tags: Some(vec![user::tags::ADMINISTRATOR.to_string()]),
        },
        AccessChange::PutVhost { name: settings.default_vhost.clone(), description: "Default virtual host".into() },
        AccessChange::SetPermissions {
            vhost: settings.default_vhost.clone(),
            user: settings.default_user.clone(),
            permissions: PermissionSpec::everything(),
        },
    ]
}

impl PasswordChange {
    /// A new password, hashed here.
    pub fn new_password(password: &str) -> Self {
        let hash = PasswordHash::of(password);
        PasswordChange::Hash { hashing_algorithm: hash.algorithm().name().to_string(), password_hash: hash.to_base64() }
    }
}

#[cfg(test)]
mod tests;
