//! Giving freed memory back to the operating system.
//!
//! The binary's allocator (mimalloc) returns freed memory lazily by default: it schedules a
//! purge a second ahead (mimalloc v3's default) and runs the purges that are due only when the thread that freed the
//! memory allocates or frees again. A broker that has just purged or drained gigabytes and
//! then sits idle would keep them all resident, and so would the worker threads that set up a
//! thousand quorum queues and went quiet. So the broker purges at once
//! ([`purge_freed_memory_at_once`]: a thousand idle quorum queues took 151 KB of RSS each
//! without it, 86 KB with it, measured on 2026-12-01; message throughput within the noise),
//! and the timer task also asks, every [`COLLECT_INTERVAL`], to free what is left.

use std::time::Duration;

/// How often due purges are run.
pub(crate) const COLLECT_INTERVAL: Duration = Duration::from_secs(1);

/// Turns transparent huge pages off for this process. mimalloc asks for huge pages for its
/// segments (`MADV_HUGEPAGE`), and a huge page is resident whole as soon as it is touched: a
/// thousand idle quorum queues took 980 MB with them and 310 MB without (measured on 2026-12-01,
/// Linux 6.18, THP `madvise` mode). Returns the error if the kernel refuses.
pub fn disable_transparent_huge_pages() -> std::io::Result<()> {
    // SAFETY: PR_SET_THP_DISABLE takes integer arguments only and affects this process's
    // future mappings; no memory is touched.
    match unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// mimalloc's `mi_option_purge_delay`, which libmimalloc-sys does not name (its place in
/// mimalloc's `mi_option_t`, the same in its v2 and v3; a test checks that it holds v3's
/// default).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Makes mimalloc give freed memory back to the system when it is freed, not a second later on
/// the freeing thread's next allocation.
pub fn purge_freed_memory_at_once() {
    // SAFETY: mi_option_set takes an option number and a value; no pointers.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) }
}

/// Runs the allocator's due purges (and frees its empty pages). Harmless when mimalloc is not
/// the global allocator (in tests): it then collects an empty heap.
pub(crate) fn return_freed_memory() {
    // SAFETY: mi_collect takes no pointers and may be called from any thread at any time.
    unsafe { libmimalloc_sys::mi_collect(false) }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_purge_delay_option_is_where_we_think() {
        // mimalloc v3's default purge delay is 1,000 ms (options.c).
        // SAFETY: reads an option by number.
        assert_eq!(unsafe { libmimalloc_sys::mi_option_get(super::MI_OPTION_PURGE_DELAY) }, 1_000);
    }
}
