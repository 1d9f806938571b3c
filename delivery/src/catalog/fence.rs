//! [`DefinitionsFence`]: what a group's new leader passes before it routes by this node's
//! copy of the definitions.
//!
//! A leader that fires delayed messages, or dead-letters at least once, routes by the
//! bindings this node has applied, and a node may lag behind the catalog group: a `-ok`
//! waits only for the nodes that are reachable, and a node that was unreachable or
//! restarting learns later. Routed by stale bindings, a message would go
//! where a binding since deleted sent it, miss a queue bound since, or be dropped for an
//! exchange this node has not learnt yet. So once per term, before its first routing, the
//! leader waits until it has applied every definition change committed before then.

use crate::vhost::VirtualHost;
use std::time::{Duration, Instant};

/// How long a leader waits to catch up with the definitions before it reports that it has
/// not (its caller tries again later).
const DEFINITIONS_WAIT_MS: u64 = 5_000;
/// After a failed catch-up, how long routings are refused without asking again: so that a
/// thousand pending messages ask the catalog group (and log) once, not a thousand times.
const RETRY_AFTER_FAILURE_MS: u64 = 1_000;

/// Remembers the leader term in which this node caught up with the definitions.
#[derive(Debug, Default)]
pub struct DefinitionsFence {
    /// Concurrent routings wait on one catch-up.
    state: tokio::sync::Mutex<FenceState>,
}

#[derive(Debug, Default)]
struct FenceState {
    /// The term of the leadership that passed.
    passed_in_term: Option<u64>,
    /// When the last catch-up failed.
    failed_at: Option<Instant>,
}

impl DefinitionsFence {
    /// Whether the routing of a leader in term `term` (`None`: this node does not lead) may
    /// go on by `vhost`'s definitions: they hold every change committed before the term's
    /// first routing. Always so on a node outside a cluster.
    pub async fn pass(&self, term: Option<u64>, vhost: &VirtualHost) -> bool {
        let Some(term) = term else { return false };
        let mut state = self.state.lock().await;
        if state.passed_in_term == Some(term) {
            return true;
        }
        let retry_after = Duration::from_millis(RETRY_AFTER_FAILURE_MS);
        if state.failed_at.is_some_and(|at| at.elapsed() < retry_after) {
            return false;
        }
        let caught_up = match vhost.catalog() {
            Some(catalog) => catalog.caught_up(Duration::from_millis(DEFINITIONS_WAIT_MS)).await,
            None => true,
        };
        if caught_up {
            tracing::debug!(vhost = vhost.name(), term, "a new leader caught up with the definitions");
            *state = FenceState { passed_in_term: Some(term), failed_at: None };
        } else {
            tracing::warn!(vhost = vhost.name(), term, "a new leader's definitions may lag: its routing waits");
            state.failed_at = Some(Instant::now());
        }
        caught_up
    }
}
