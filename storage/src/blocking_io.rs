//! Blocking file I/O (an fsync, a rename) on an async runtime's thread, done so that it holds
//! up no other task: on a multi-thread runtime the worker thread first hands its other tasks
//! to another worker, so that a thousand Raft groups saving their votes at once sync in
//! parallel instead of one after another on two workers. Elsewhere (a current-thread runtime,
//! or no runtime) the work just runs.

use tokio::runtime::{Handle, RuntimeFlavor};

/// Runs `work`, which blocks, without holding up the runtime's other tasks.
pub fn run<T>(work: impl FnOnce() -> T) -> T {
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(work),
        _ => work(),
    }
}
