//! The background flusher shared by many logs: a small pool of threads working through
//! a deadline queue of logs that have pending appends. One pool serves every log in the
//! process, so a broker with thousands of queues pays for a few threads, not thousands.
//! Logs are held weakly: a dropped log simply falls out of the queue.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, OnceLock, Weak};
use std::thread;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use crate::error::{Result, StorageError};

/// Threads in the process-wide flusher: fsyncs of different logs overlap on a device with
/// several queues, and a slow fsync must not delay every other log.
pub const SHARED_FLUSHER_THREADS: usize = 4;

/// Something the flusher can flush: implemented by a log's shared state.
pub(crate) trait FlushTarget: Send + Sync {
    /// Writes out and (per policy) fsyncs pending appends, then publishes durability.
    fn flush_due(&self);
}

struct Job {
    due: Instant,
    seq: u64,
    target: Weak<dyn FlushTarget>,
}

impl PartialEq for Job {
    fn eq(&self, other: &Self) -> bool {
        (self.due, self.seq) == (other.due, other.seq)
    }
}
impl Eq for Job {}
impl PartialOrd for Job {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Job {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.due, self.seq).cmp(&(other.due, other.seq))
    }
}

#[derive(Default)]
struct QueueState {
    heap: BinaryHeap<Reverse<Job>>,
    seq: u64,
    shutdown: bool,
}

#[derive(Default)]
struct Queue {
    state: Mutex<QueueState>,
    wake: Condvar,
}

/// Owns the worker threads; dropping the last handle stops them.
struct Workers {
    queue: Arc<Queue>,
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.queue.state.lock().shutdown = true;
        self.queue.wake.notify_all();
    }
}

/// A handle to a flusher thread pool. Cheap to clone.
#[derive(Clone)]
pub struct Flusher {
    workers: Arc<Workers>,
}

impl std::fmt::Debug for Flusher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flusher").finish_non_exhaustive()
    }
}

impl Flusher {
    /// Starts a pool of `threads` flusher threads (at least one).
    pub fn new(threads: usize) -> Result<Flusher> {
        let queue = Arc::new(Queue::default());
        for i in 0..threads.max(1) {
            let q = Arc::clone(&queue);
            thread::Builder::new()
                .name(format!("warren-flush-{i}"))
                .spawn(move || run(&q))
                .map_err(|e| StorageError::Io { path: "<flusher thread>".into(), source: e })?;
        }
        Ok(Flusher { workers: Arc::new(Workers { queue }) })
    }

    /// The process-wide flusher, started on first use.
    pub fn shared() -> Result<Flusher> {
        static SHARED: OnceLock<std::result::Result<Flusher, String>> = OnceLock::new();
        SHARED
            .get_or_init(|| Flusher::new(SHARED_FLUSHER_THREADS).map_err(|e| e.to_string()))
            .clone()
            .map_err(StorageError::Failed)
    }

    /// Queues `target` to be flushed at `due`.
    pub(crate) fn schedule(&self, target: Weak<dyn FlushTarget>, due: Instant) {
        let queue = &self.workers.queue;
        let mut st = queue.state.lock();
        st.seq += 1;
        let seq = st.seq;
        let earliest = st.heap.peek().is_none_or(|Reverse(j)| due < j.due);
        st.heap.push(Reverse(Job { due, seq, target }));
        drop(st);
        if earliest {
            queue.wake.notify_one();
        }
    }
}

fn run(queue: &Queue) {
    while let Some(job) = next_job(queue) {
        if let Some(target) = job.target.upgrade() {
            target.flush_due();
        }
    }
}

/// Blocks until a job is due; `None` once the pool shuts down.
fn next_job(queue: &Queue) -> Option<Job> {
    let mut st = queue.state.lock();
    loop {
        if st.shutdown {
            return None;
        }
        let due = match st.heap.peek() {
            None => {
                queue.wake.wait(&mut st);
                continue;
            }
            Some(Reverse(job)) => job.due,
        };
        if due <= Instant::now() {
            let job = st.heap.pop().map(|Reverse(j)| j);
            // Another worker may be needed for the next job that is already due.
            if st.heap.peek().is_some_and(|Reverse(j)| j.due <= Instant::now()) {
                queue.wake.notify_one();
            }
            return job;
        }
        queue.wake.wait_until(&mut st, due);
    }
}
