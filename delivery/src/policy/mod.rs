//! Policies, as RabbitMQ has them (issue 31): per virtual host, a named regular expression over
//! object names, the objects it applies to, a priority and a definition of keys (TTLs, limits,
//! dead-lettering, retention, ...), which the queues and exchanges it matches run with, existing
//! and future ones, without being redeclared. Operator policies set limits that user policies
//! cannot lift.
//!
//! - `apply_to`: [`ApplyTo`] and [`Target`], which objects a policy is for;
//! - `keys`: [`POLICY_KEYS`], every key once: what it sets, which value wins, what operators
//!   may set;
//! - `policy_spec`: [`PolicySpec`] as given and stored, [`Policy`] checked and compiled;
//! - `vhost_policies`: [`VhostPolicies`], which policy applies to an object and what a queue
//!   runs with.

mod apply_to;
mod keys;
mod policy_spec;
mod vhost_policies;

pub use apply_to::{ApplyTo, Target};
pub use keys::{Effect, Merge, PolicyKey, Precedence, POLICY_KEYS};
pub use policy_spec::{Policy, PolicyKind, PolicySpec, MAX_POLICY_NAME_BYTES};
pub use vhost_policies::{AppliedPolicy, ResolvedQueue, VhostPolicies};
