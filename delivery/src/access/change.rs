//! [`AccessChange`]: one change to users, vhosts, permissions, vhost limits or policies, as it travels
//! through the catalog (every node applies it to its own copy) or is applied
//! at once on a broker without a cluster. Password hashes are made before the change is
//! proposed, so every node stores the same hash.

use super::permission::PermissionSpec;
use super::topic_permission::TopicPermissionSpec;
use crate::policy::{PolicyKind, PolicySpec};
use crate::user_limits::UserLimits;
use crate::vhost_limits::VhostLimits;
use serde::{Deserialize, Serialize};

/// A password as a change carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PasswordChange {
    /// The user keeps the password it has (none, for a new user).
    Keep,
    /// A hash, as definitions carry it.
    Hash {
        /// RabbitMQ's algorithm name (`rabbit_password_hashing_sha256`, ...).
        hashing_algorithm: String,
        /// Base64 of salt and digest.
        password_hash: String,
    },
    /// No password: the user logs in only by other means (a client certificate).
    Clear,
}

/// One change of who may do what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum AccessChange {
    /// Creates a user or updates one (`add_user`, `change_password`, `set_user_tags`,
    /// `PUT /api/users/{name}`).
    PutUser {
        /// The login name.
        name: String,
        /// Its password.
        password: PasswordChange,
        /// Its tags; `None` keeps those it has.
        tags: Option<Vec<String>>,
    },
    /// Deletes a user and its permissions.
    DeleteUser {
        /// The login name.
        name: String,
    },
    /// Creates a vhost (or updates its description).
    PutVhost {
        /// Its name.
        name: String,
        /// What it is for.
        description: String,
    },
    /// Deletes a vhost with everything in it; its connections are closed.
    DeleteVhost {
        /// Its name.
        name: String,
    },
    /// Sets a user's permissions in a vhost.
    SetPermissions {
        /// The vhost.
        vhost: String,
        /// The user.
        user: String,
        /// The three patterns.
        permissions: PermissionSpec,
    },
    /// Takes a user's permissions in a vhost away.
    ClearPermissions {
        /// The vhost.
        vhost: String,
        /// The user.
        user: String,
    },
    /// Replaces a vhost's limits.
    SetVhostLimits {
        /// The vhost.
        vhost: String,
        /// Its new limits.
        limits: VhostLimits,
    },
    /// Adds or replaces a policy or operator policy of a vhost (`set_policy`,
    /// `set_operator_policy`). (After the other changes, so that what was written before it
    /// existed still decodes; only proposed once the `policies` feature flag is enabled.)
    SetPolicy {
        /// The vhost.
        vhost: String,
        /// A user's or an operator's.
        kind: PolicyKind,
        /// Its name.
        name: String,
        /// What it is.
        spec: PolicySpec,
    },
    /// Removes a policy or operator policy (`clear_policy`, `clear_operator_policy`).
    ClearPolicy {
        /// The vhost.
        vhost: String,
        /// A user's or an operator's.
        kind: PolicyKind,
        /// Its name.
        name: String,
    },
    /// Sets a user's topic permission on one exchange of a vhost (`set_topic_permissions`).
    SetTopicPermissions {
        /// The vhost.
        vhost: String,
        /// The user.
        user: String,
        /// The exchange and the two patterns.
        permissions: TopicPermissionSpec,
    },
    /// Takes a user's topic permissions in a vhost away: on one exchange, or on all
    /// (`clear_topic_permissions`).
    ClearTopicPermissions {
        /// The vhost.
        vhost: String,
        /// The user.
        user: String,
        /// The exchange; `None`: every exchange.
        exchange: Option<String>,
    },
    /// Replaces a user's limits (`set_user_limits`, `clear_user_limits`).
    SetUserLimits {
        /// The user.
        user: String,
        /// Its new limits.
        limits: UserLimits,
    },
    /// Sets a global runtime parameter (`set_global_parameter`): any JSON value, kept as text.
    SetGlobalParameter {
        /// Its name.
        name: String,
        /// Its value, as JSON text.
        value: String,
    },
    /// Clears a global runtime parameter (`clear_global_parameter`).
    ClearGlobalParameter {
        /// Its name.
        name: String,
    },
}

impl AccessChange {
    /// Whether a node of a release before policies could not read it: the `policies` feature
    /// flag must be enabled before it is proposed.
    pub fn needs_policies_flag(&self) -> bool {
        matches!(
            self,
            AccessChange::SetPolicy { .. }
                | AccessChange::ClearPolicy { .. }
                | AccessChange::SetTopicPermissions { .. }
                | AccessChange::ClearTopicPermissions { .. }
                | AccessChange::SetUserLimits { .. }
                | AccessChange::SetGlobalParameter { .. }
                | AccessChange::ClearGlobalParameter { .. }
        )
    }
}
