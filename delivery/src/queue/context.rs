//! What a queue kind is built with: the broker around it (its virtual host, the timers,
//! replication and forwarding), handed in by the virtual host at declare and recovery.
//!
//! Apart from `queue/mod.rs` so that [`super::Queue`] itself names no forwarding type: only
//! the kinds that forward (`remote_queue.rs`) or replicate use those parts.

use super::QueueHost;
use crate::scheduler::SchedulerHandle;
use std::sync::{Arc, Weak};

/// What a queue needs from the broker around it.
#[derive(Debug, Clone)]
pub struct QueueContext {
    /// Its virtual host, where dead letters are routed.
    pub vhost: Weak<dyn QueueHost>,
    /// That virtual host's name.
    pub vhost_name: String,
    /// The broker's timers.
    pub scheduler: SchedulerHandle,
    /// The cluster quorum queues are replicated in.
    pub replication: Arc<dyn crate::quorum::Replication>,
    /// This node's end of forwarding, to queues that live on other nodes.
    pub forwarder: Arc<crate::remote::Forwarder>,
}
