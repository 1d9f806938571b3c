//! The one place that knows which kind of queue `x-queue-type` names: new queues at declare,
//! stored ones at recovery. Everything else holds a [`Queue`] and does not ask its kind.

use super::context::QueueContext;
use super::{classic, quorum_queue, remote_queue, stream_queue, Queue, QueueArguments, QueueDefinition, QueueType};
use crate::definitions::VhostStorage;
use crate::error::BrokerResult;
use std::sync::Arc;

/// A new queue for `queue.declare` running with `arguments` (its own, checked, with the
/// policies that apply), with its files created in `storage` if it keeps any (`None`: a broker
/// without a data directory).
pub(crate) fn declare(
    definition: QueueDefinition,
    arguments: QueueArguments,
    storage: Option<&VhostStorage>,
    context: QueueContext,
) -> BrokerResult<Arc<Queue>> {
    match arguments.queue_type {
        QueueType::Classic => classic::declare(definition, arguments, storage, context),
        QueueType::Stream => stream_queue::declare(definition, arguments, storage, context),
        QueueType::Quorum => quorum_queue::declare(definition, arguments, storage, context),
    }
}

/// A stand-in on this node for a queue that lives on `homes` (of any kind: the home nodes
/// know it).
pub(crate) fn remote(
    definition: QueueDefinition,
    arguments: QueueArguments,
    homes: Vec<u64>,
    context: QueueContext,
) -> Arc<Queue> {
    remote_queue::declare(definition, arguments, homes, context)
}

/// A stored queue reopened from its files at startup (or a stand-in, if it lives on `homes`).
pub(crate) fn recover(
    definition: QueueDefinition,
    arguments: QueueArguments,
    homes: Vec<u64>,
    storage: &VhostStorage,
    context: QueueContext,
) -> BrokerResult<Arc<Queue>> {
    if !homes.is_empty() {
        return Ok(remote(definition, arguments, homes, context));
    }
    match arguments.queue_type {
        QueueType::Classic => classic::recover(definition, arguments, storage, context),
        QueueType::Stream => stream_queue::recover(definition, arguments, storage, context),
        QueueType::Quorum => quorum_queue::recover(definition, arguments, storage, context),
    }
}
