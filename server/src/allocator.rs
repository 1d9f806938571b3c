//! Giving freed memory back to the operating system.
//!
//! The binary's allocator (mimalloc) returns freed memory lazily: it schedules a purge and runs
//! the purges that are due only when memory is allocated or freed again in the right place. A
//! broker that has just purged or drained gigabytes and then sits idle would keep them all
//! resident. So the timer task asks it, every [`COLLECT_INTERVAL`], to run what is due.

use std::time::Duration;

/// How often due purges are run.
pub(crate) const COLLECT_INTERVAL: Duration = Duration::from_secs(1);

/// Runs the allocator's due purges (and frees its empty pages). Harmless when mimalloc is not
/// the global allocator (in tests): it then collects an empty heap.
pub(crate) fn return_freed_memory() {
    // SAFETY: mi_collect takes no pointers and may be called from any thread at any time.
    unsafe { libmimalloc_sys::mi_collect(false) }
}
