//! [`AccessState`]: the users, vhosts, permissions, policies, limits and parameters access
//! control holds, how a change is checked ([`AccessState::validate`], with the bounds on what
//! a client may make it hold) and made ([`AccessState::apply`]), and the changes that rebuild
//! it ([`AccessState::as_changes`], what `access.json` and the catalog's snapshot hold).

use super::change::{AccessChange, PasswordChange};
use super::password::PasswordHash;
use super::permission::{PermissionSpec, Permissions};
use super::topic_permission::{TopicPermissionSpec, TopicPermissions};
use super::user::User;
use super::{not_found, VhostEntry};
use crate::error::{BrokerError, BrokerResult, ReplyCode};
use crate::policy::{Policy, PolicyKind, VhostPolicies};
use crate::user_limits::UserLimits;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A user's permissions in a vhost: as given, and compiled.
#[derive(Debug, Clone)]
pub(super) struct Grant {
    pub(super) spec: PermissionSpec,
    pub(super) compiled: Arc<Permissions>,
}

/// A user's topic permission on one exchange: as given, and compiled.
#[derive(Debug, Clone)]
pub(super) struct TopicGrant {
    pub(super) spec: TopicPermissionSpec,
    pub(super) compiled: Arc<TopicPermissions>,
}

/// What access control holds; changed only by [`AccessState::apply`].
#[derive(Debug, Default)]
pub(super) struct AccessState {
    pub(super) users: BTreeMap<String, User>,
    pub(super) vhosts: BTreeMap<String, VhostEntry>,
    /// By vhost, then user.
    pub(super) grants: BTreeMap<String, BTreeMap<String, Grant>>,
    /// By vhost: handed out whole to the vhost, which resolves its queues against them.
    pub(super) policies: BTreeMap<String, Arc<VhostPolicies>>,
    /// By user: those with any limit.
    pub(super) user_limits: BTreeMap<String, UserLimits>,
    /// Global runtime parameters, by name: their values as JSON text.
    pub(super) global_parameters: BTreeMap<String, String>,
    /// By vhost, then user, then exchange.
    pub(super) topic_grants: BTreeMap<String, BTreeMap<String, BTreeMap<String, TopicGrant>>>,
    /// By user: the generation of the last change to its password, tags or permissions, so
    /// that what was decided under an older one (a UI session, a live feed) is known stale.
    pub(super) revisions: std::collections::HashMap<String, u64>,
}

impl AccessState {
    /// Every topic permission: (vhost, user, exchange and patterns).
    pub(super) fn every_topic_grant(&self) -> impl Iterator<Item = (String, String, TopicPermissionSpec)> + '_ {
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

    /// Whether `change` can be made: what it names exists, its hash and patterns are valid, and
    /// what it adds stays within the bounds below.
    pub(super) fn validate(&self, change: &AccessChange) -> BrokerResult<()> {
        let state = self;
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
                state.check_room_for_policy(vhost, *kind, name)?;
                Policy::compile(*kind, name, spec.clone()).map(drop)
            }
            AccessChange::SetTopicPermissions { vhost, user, permissions } => {
                user_exists(user)?;
                vhost_exists(vhost)?;
                state.check_room_for_topic_permission(vhost, user, &permissions.exchange)?;
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

    /// Refuses a new policy of `kind` in `vhost` once the vhost has [`MAX_POLICIES_PER_VHOST`]
    /// of that kind (each is matched against every queue and exchange it may apply to);
    /// replacing one is always allowed.
    fn check_room_for_policy(&self, vhost: &str, kind: PolicyKind, name: &str) -> BrokerResult<()> {
        let Some(policies) = self.policies.get(vhost) else { return Ok(()) };
        if policies.get(kind, name).is_some() || policies.of_kind(kind).count() < MAX_POLICIES_PER_VHOST {
            return Ok(());
        }
        Err(BrokerError::precondition_failed(format!(
            "vhost '{vhost}' may have at most {MAX_POLICIES_PER_VHOST} of kind '{}', and has that many: clear one first",
            kind.noun()
        )))
    }

    /// Refuses a new topic permission in `vhost` once the vhost has
    /// [`MAX_TOPIC_PERMISSIONS_PER_VHOST`]; replacing one is always allowed.
    fn check_room_for_topic_permission(&self, vhost: &str, user: &str, exchange: &str) -> BrokerResult<()> {
        let Some(users) = self.topic_grants.get(vhost) else { return Ok(()) };
        let replaces = users.get(user).is_some_and(|of_user| of_user.contains_key(exchange));
        if replaces || users.values().map(BTreeMap::len).sum::<usize>() < MAX_TOPIC_PERMISSIONS_PER_VHOST {
            return Ok(());
        }
        Err(BrokerError::precondition_failed(format!(
            "vhost '{vhost}' may have at most {MAX_TOPIC_PERMISSIONS_PER_VHOST} topic permissions, and has that many: clear one first"
        )))
    }

    /// Makes `change`, counted as the change of `generation`.
    pub(super) fn apply(&mut self, change: &AccessChange, generation: u64) -> BrokerResult<()> {
        let state = self;
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

    /// The whole state as the changes that rebuild it (what the file and the catalog's
    /// snapshot hold).
    pub(super) fn as_changes(&self) -> Vec<AccessChange> {
        let state = self;
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
}

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
/// Policies of one kind (user or operator) a vhost may have: every one is matched against each
/// queue and exchange declared in it, and the API lists them whole.
pub(super) const MAX_POLICIES_PER_VHOST: usize = 1024;
/// Topic permissions (user and exchange pairs) a vhost may have.
pub(super) const MAX_TOPIC_PERMISSIONS_PER_VHOST: usize = 4096;
