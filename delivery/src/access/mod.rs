//! Who may do what (issue 15): users with RabbitMQ-compatible password hashes and tags, the
//! virtual hosts that exist with their limits and policies (issue 31), and each user's
//! permissions per vhost, kept in `access.json` under the data directory; the failed-login
//! throttle.
//!
//! - `password`: [`PasswordHash`]; `user`: [`User`] and its tags;
//! - `permission`: [`Permissions`], the three patterns, and RabbitMQ's refusal;
//! - `operation`: [`Operation`], what each operation needs of them (RabbitMQ's table);
//! - `change`: [`AccessChange`], one change as the cluster replicates it;
//! - `stored`: the file's format; `login_throttle`: [`LoginThrottle`].
//!
//! [`AccessControl`] answers logins and checks; it changes only by [`AccessControl::apply`],
//! which the broker calls for each change (on every node of a cluster).

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

use crate::error::{BrokerError, BrokerResult, ReplyCode};
use crate::policy::{Policy, PolicyKind, PolicySpec, VhostPolicies};
use crate::user_limits::UserLimits;
use crate::vhost_limits::VhostLimits;
use parking_lot::RwLock;
use std::collections::BTreeMap;
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

/// A user's permissions in a vhost: as given, and compiled.
#[derive(Debug, Clone)]
struct Grant {
    spec: PermissionSpec,
    compiled: Arc<Permissions>,
}

/// A user's topic permission on one exchange: as given, and compiled.
#[derive(Debug, Clone)]
struct TopicGrant {
    spec: TopicPermissionSpec,
    compiled: Arc<TopicPermissions>,
}

#[derive(Debug, Default)]
struct AccessState {
    users: BTreeMap<String, User>,
    vhosts: BTreeMap<String, VhostEntry>,
    /// By vhost, then user.
    grants: BTreeMap<String, BTreeMap<String, Grant>>,
    /// By vhost: handed out whole to the vhost, which resolves its queues against them.
    policies: BTreeMap<String, Arc<VhostPolicies>>,
    /// By user: those with any limit.
    user_limits: BTreeMap<String, UserLimits>,
    /// Global runtime parameters, by name: their values as JSON text.
    global_parameters: BTreeMap<String, String>,
    /// By vhost, then user, then exchange.
    topic_grants: BTreeMap<String, BTreeMap<String, BTreeMap<String, TopicGrant>>>,
    /// By user: the generation of the last change to its password, tags or permissions, so
    /// that what was decided under an older one (a UI session, a live feed) is known stale.
    revisions: std::collections::HashMap<String, u64>,
}

impl AccessState {
    /// Every topic permission: (vhost, user, exchange and patterns).
    fn every_topic_grant(&self) -> impl Iterator<Item = (String, String, TopicPermissionSpec)> + '_ {
        self.topic_grants.iter().flat_map(|(vhost, users)| {
            users.iter().flat_map(move |(user, grants)| {
                grants.values().map(move |grant| (vhost.clone(), user.clone(), grant.spec.clone()))
            })
        })
    }

    /// Records that `user`'s credentials or rights changed at `generation`.
    fn revise(&mut self, user: &str, generation: u64) {
        self.revisions.insert(user.to_string(), generation);
    }
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

    /// Whether `change` can be made: what it names exists, its hash and patterns are valid.
    /// Checked before a change is proposed, so that the cluster's log holds only valid ones.
    pub fn validate(&self, change: &AccessChange) -> BrokerResult<()> {
        let state = self.state.read();
        let user_exists =
            |name: &str| state.users.contains_key(name).then_some(()).ok_or_else(|| not_found("user", name));
        let vhost_exists =
            |name: &str| state.vhosts.contains_key(name).then_some(()).ok_or_else(|| not_found("vhost", name));
        match change {
            AccessChange::PutUser { name, password, .. } => {
                validate_name("user", name)?;
                if let PasswordChange::Hash { hashing_algorithm, password_hash } = password {
                    PasswordHash::from_definition(hashing_algorithm, password_hash)
                        .map_err(|e| BrokerError::precondition_failed(e.to_string()))?;
                }
                Ok(())
            }
            AccessChange::DeleteUser { name } => user_exists(name),
            AccessChange::PutVhost { name, .. } => validate_name("vhost", name),
            AccessChange::DeleteVhost { name } => vhost_exists(name),
            AccessChange::SetPermissions { vhost, user, permissions } => {
                user_exists(user)?;
                vhost_exists(vhost)?;
                Permissions::compile(permissions).map(|_| ())
            }
            AccessChange::ClearPermissions { vhost, user } => {
                user_exists(user)?;
                vhost_exists(vhost)
            }
            AccessChange::SetVhostLimits { vhost, .. } => vhost_exists(vhost),
            AccessChange::SetPolicy { vhost, kind, name, spec } => {
                vhost_exists(vhost)?;
                Policy::compile(*kind, name, spec.clone()).map(drop)
            }
            AccessChange::SetTopicPermissions { vhost, user, permissions } => {
                user_exists(user)?;
                vhost_exists(vhost)?;
                TopicPermissions::compile(permissions, user, vhost).map(drop)
            }
            AccessChange::ClearTopicPermissions { vhost, user, .. } => {
                user_exists(user)?;
                vhost_exists(vhost)
            }
            AccessChange::SetUserLimits { user, .. } => user_exists(user),
            AccessChange::SetGlobalParameter { name, value } => {
                let too_many = !state.global_parameters.contains_key(name)
                    && state.global_parameters.len() >= MAX_GLOBAL_PARAMETERS;
                if name.is_empty()
                    || name.len() > MAX_NAME_BYTES
                    || value.len() > MAX_GLOBAL_PARAMETER_BYTES
                    || too_many
                {
                    return Err(BrokerError::precondition_failed(format!(
                        "a global parameter has a name of 1 to {MAX_NAME_BYTES} bytes and a value of at most \
                         {MAX_GLOBAL_PARAMETER_BYTES} bytes, and there are at most {MAX_GLOBAL_PARAMETERS}"
                    )));
                }
                serde_json::from_str::<serde_json::Value>(value)
                    .map(drop)
                    .map_err(|e| BrokerError::precondition_failed(format!("a global parameter's value is JSON: {e}")))
            }
            AccessChange::ClearGlobalParameter { name } => match state.global_parameters.contains_key(name) {
                true => Ok(()),
                false => Err(not_found("global parameter", name)),
            },
            AccessChange::ClearPolicy { vhost, kind, name } => {
                vhost_exists(vhost)?;
                let policies = state.policies.get(vhost);
                match policies.and_then(|p| p.get(*kind, name)) {
                    Some(_) => Ok(()),
                    None => Err(not_found(kind.noun(), name)),
                }
            }
        }
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
        let mut state = self.state.write();
        let generation = self.generation.fetch_add(1, std::sync::atomic::Ordering::Release) + 1;
        match change {
            AccessChange::PutUser { name, password, tags } => {
                let user = state.users.entry(name.clone()).or_insert_with(|| User {
                    name: name.clone(),
                    password: None,
                    tags: Vec::new(),
                });
                let before = user.clone();
                match password {
                    PasswordChange::Keep => {}
                    PasswordChange::Clear => user.password = None,
                    PasswordChange::Hash { hashing_algorithm, password_hash } => {
                        let hash = PasswordHash::from_definition(hashing_algorithm, password_hash)
                            .map_err(|e| BrokerError::precondition_failed(e.to_string()))?;
                        user.password = Some(hash);
                    }
                }
                if let Some(tags) = tags {
                    user.tags = tags.clone();
                }
                if *user != before {
                    state.revise(name, generation);
                }
            }
            AccessChange::DeleteUser { name } => {
                state.users.remove(name);
                state.revisions.remove(name);
                for grants in state.grants.values_mut() {
                    grants.remove(name);
                }
                for grants in state.topic_grants.values_mut() {
                    grants.remove(name);
                }
                state.user_limits.remove(name);
            }
            AccessChange::PutVhost { name, description } => {
                state.vhosts.entry(name.clone()).or_default().description = description.clone();
            }
            AccessChange::DeleteVhost { name } => {
                state.vhosts.remove(name);
                state.policies.remove(name);
                state.topic_grants.remove(name);
                let users: Vec<String> = state.grants.remove(name).into_iter().flat_map(|g| g.into_keys()).collect();
                for user in users {
                    state.revise(&user, generation);
                }
            }
            AccessChange::SetPermissions { vhost, user, permissions } => {
                let compiled = Arc::new(Permissions::compile(permissions)?);
                let grant = Grant { spec: permissions.clone(), compiled };
                let grants = state.grants.entry(vhost.clone()).or_default();
                let changed = grants.get(user).is_none_or(|old| old.spec != *permissions);
                grants.insert(user.clone(), grant);
                if changed {
                    state.revise(user, generation);
                }
            }
            AccessChange::ClearPermissions { vhost, user } => {
                let removed = state.grants.get_mut(vhost).and_then(|grants| grants.remove(user));
                if removed.is_some() {
                    state.revise(user, generation);
                }
            }
            AccessChange::SetVhostLimits { vhost, limits } => {
                if let Some(entry) = state.vhosts.get_mut(vhost) {
                    entry.limits = *limits;
                }
            }
            AccessChange::SetPolicy { vhost, kind, name, spec } => {
                let policy = Policy::compile(*kind, name, spec.clone())?;
                let without: Vec<String> = policy.without_effect().into_iter().map(|(key, _)| key).collect();
                if !without.is_empty() {
                    tracing::info!(vhost = %vhost, policy = %name, keys = ?without, "policy keys that have no effect in Warren");
                }
                let policies = state.policies.entry(vhost.clone()).or_default();
                Arc::make_mut(policies).put(policy);
            }
            AccessChange::ClearPolicy { vhost, kind, name } => {
                if let Some(policies) = state.policies.get_mut(vhost) {
                    Arc::make_mut(policies).remove(*kind, name);
                }
            }
            AccessChange::SetGlobalParameter { name, value } => {
                state.global_parameters.insert(name.clone(), value.clone());
            }
            AccessChange::ClearGlobalParameter { name } => {
                state.global_parameters.remove(name);
            }
            AccessChange::SetUserLimits { user, limits } => {
                if limits.is_empty() {
                    state.user_limits.remove(user);
                } else if state.users.contains_key(user) {
                    state.user_limits.insert(user.clone(), *limits);
                }
            }
            AccessChange::SetTopicPermissions { vhost, user, permissions } => {
                let compiled = Arc::new(TopicPermissions::compile(permissions, user, vhost)?);
                let grant = TopicGrant { spec: permissions.clone(), compiled };
                let of_user = state.topic_grants.entry(vhost.clone()).or_default().entry(user.clone()).or_default();
                of_user.insert(permissions.exchange.clone(), grant);
            }
            AccessChange::ClearTopicPermissions { vhost, user, exchange } => {
                let of_user = state.topic_grants.get_mut(vhost).and_then(|users| users.get_mut(user));
                match (of_user, exchange) {
                    (Some(of_user), Some(exchange)) => drop(of_user.remove(exchange)),
                    (Some(of_user), None) => of_user.clear(),
                    (None, _) => {}
                }
            }
        }
        Ok(())
    }

    fn save(&self) -> BrokerResult<()> {
        let Some(file) = &self.file else { return Ok(()) };
        let bytes = stored::encode(&self.as_changes())?;
        file.write(&bytes).map_err(|e| crate::error::internal_error("cannot store access control", e))
    }

    /// The whole state as the changes that rebuild it (what the file and the catalog's
    /// snapshot hold).
    pub(crate) fn as_changes(&self) -> Vec<AccessChange> {
        let state = self.state.read();
        let users = state.users.values().map(|user| AccessChange::PutUser {
            name: user.name.clone(),
            password: match &user.password {
                Some(hash) => PasswordChange::Hash {
                    hashing_algorithm: hash.algorithm().name().to_string(),
                    password_hash: hash.to_base64(),
                },
                None => PasswordChange::Clear,
            },
            tags: Some(user.tags.clone()),
        });
        let vhosts = state.vhosts.iter().flat_map(|(name, entry)| {
            [
                AccessChange::PutVhost { name: name.clone(), description: entry.description.clone() },
                AccessChange::SetVhostLimits { vhost: name.clone(), limits: entry.limits },
            ]
        });
        let grants = state.grants.iter().flat_map(|(vhost, grants)| {
            grants.iter().map(|(user, grant)| AccessChange::SetPermissions {
                vhost: vhost.clone(),
                user: user.clone(),
                permissions: grant.spec.clone(),
            })
        });
        let policies = state.policies.iter().flat_map(|(vhost, policies)| {
            let every = [PolicyKind::User, PolicyKind::Operator].into_iter().flat_map(|kind| policies.of_kind(kind));
            every.map(|policy| AccessChange::SetPolicy {
                vhost: vhost.clone(),
                kind: policy.kind,
                name: policy.name.clone(),
                spec: policy.spec.clone(),
            })
        });
        let topic = state.every_topic_grant().map(|(vhost, user, permissions)| AccessChange::SetTopicPermissions {
            vhost,
            user,
            permissions,
        });
        let limits = state
            .user_limits
            .iter()
            .map(|(user, limits)| AccessChange::SetUserLimits { user: user.clone(), limits: *limits });
        let parameters = state
            .global_parameters
            .iter()
            .map(|(name, value)| AccessChange::SetGlobalParameter { name: name.clone(), value: value.clone() });
        users.chain(vhosts).chain(grants).chain(policies).chain(topic).chain(limits).chain(parameters).collect()
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

/// Longest user or vhost name: they reach logs, paths (vhosts, hex-encoded) and the API.
const MAX_NAME_BYTES: usize = 255;

/// Global runtime parameters at most (they come through the API).
const MAX_GLOBAL_PARAMETERS: usize = 1024;
/// The longest value of a global runtime parameter, as JSON text.
const MAX_GLOBAL_PARAMETER_BYTES: usize = 64 * 1024;

fn validate_name(what: &str, name: &str) -> BrokerResult<()> {
    if name.is_empty() || name.len() > MAX_NAME_BYTES || name.chars().any(char::is_control) {
        return Err(BrokerError::new(
            ReplyCode::PreconditionFailed,
            format!("a {what} name must be 1 to {MAX_NAME_BYTES} bytes with no control characters"),
        ));
    }
    Ok(())
}

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
