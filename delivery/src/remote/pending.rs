//! Forwarded requests waiting for their answers, by id; failed at once when the link to
//! their node goes.

use super::wire::{RemoteAnswer, RequestId};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// How long a forwarded request may wait for its answer: a home node that is connected but
/// never answers (it was still starting, say) fails the request instead of holding it, and
/// a publish waiting on it is nacked.
pub const FORWARDED_REQUEST_TIMEOUT_MS: u64 = 30_000;

/// Requests sent and not answered.
#[derive(Debug)]
pub(super) struct PendingRequests {
    next_id: AtomicU64,
    waiting: Mutex<HashMap<RequestId, Waiting>>,
}

#[derive(Debug)]
struct Waiting {
    node: u64,
    answer: oneshot::Sender<Result<RemoteAnswer, String>>,
}

impl Default for PendingRequests {
    fn default() -> Self {
        PendingRequests { next_id: AtomicU64::new(1), waiting: Mutex::new(HashMap::new()) }
    }
}

impl PendingRequests {
    /// A new request to `node`: its id, and its answer once it comes (an error after
    /// [`FORWARDED_REQUEST_TIMEOUT_MS`]).
    pub(super) fn open(
        self: &Arc<Self>,
        node: u64,
    ) -> (RequestId, impl std::future::Future<Output = Result<RemoteAnswer, String>> + Send + 'static) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (answer, receiver) = oneshot::channel();
        self.waiting.lock().insert(id, Waiting { node, answer });
        let pending = Arc::downgrade(self);
        let answer = async move {
            let limit = Duration::from_millis(FORWARDED_REQUEST_TIMEOUT_MS);
            match tokio::time::timeout(limit, receiver).await {
                Ok(answer) => answer.unwrap_or_else(|_| Err("the broker is stopping".to_string())),
                Err(_) => {
                    if let Some(pending) = pending.upgrade() {
                        pending.waiting.lock().remove(&id);
                    }
                    Err(format!("node {node} did not answer within {limit:?}"))
                }
            }
        };
        (id, answer)
    }

    /// The answer to request `id` came (an unknown id was failed already, and is ignored).
    pub(super) fn answer(&self, id: RequestId, answer: RemoteAnswer) {
        if let Some(waiting) = self.waiting.lock().remove(&id) {
            let _ = waiting.answer.send(Ok(answer));
        }
    }

    /// The link to `node` went: its requests will not be answered.
    pub(super) fn node_down(&self, node: u64) {
        let failed: Vec<Waiting> = {
            let mut waiting = self.waiting.lock();
            let ids: Vec<RequestId> = waiting.iter().filter(|(_, w)| w.node == node).map(|(id, _)| *id).collect();
            ids.into_iter().filter_map(|id| waiting.remove(&id)).collect()
        };
        for waiting in failed {
            let _ = waiting.answer.send(Err(format!("the link to node {node} was lost")));
        }
    }
}
