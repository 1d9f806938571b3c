//! The open-files limit: raised at startup from the soft limit to the hard one.
//!
//! Every connection is a descriptor, and every durable queue and stream keeps its active
//! segment's files open. At the soft limit many distributions set (1024), about a thousand
//! connections exhaust the broker: accepts fail and a durable declare fails with "Too many
//! open files". The hard limit is the administrator's; the soft one is only a default.
//!
//! Segment data files then get half of the limit ([`segment_file_share`]), through the
//! storage layer's cache of open files, and connections and everything else the other half:
//! ten thousand durable queues cost descriptors only while they are in use.

/// What the limit became.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFiles {
    /// The soft limit found at startup.
    pub before: u64,
    /// The soft limit now.
    pub now: u64,
}

/// Raises the soft limit on open files to the hard limit (or, if that is unlimited, to the
/// kernel's `nr_open`). Returns the limits, or the OS error if they cannot be read or set.
pub fn raise_to_hard_limit() -> std::io::Result<OpenFiles> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one rlimit into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let before = limit.rlim_cur;
    let target = if limit.rlim_max == libc::RLIM_INFINITY { kernel_max_open() } else { limit.rlim_max };
    if target > before {
        let raised = libc::rlimit { rlim_cur: target, rlim_max: limit.rlim_max };
        // SAFETY: setrlimit reads one rlimit from a struct we own.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(OpenFiles { before, now: target.max(before) })
}

/// Least number of segment files kept open, whatever the limit.
const MIN_SEGMENT_FILES: u64 = 64;

/// How many segment data files may be open at once under a limit of `open_files`
/// descriptors: half of them.
pub fn segment_file_share(open_files: u64) -> usize {
    (open_files / 2).max(MIN_SEGMENT_FILES).try_into().unwrap_or(usize::MAX)
}

/// The soft limit on open files now, if it can be read.
pub fn current_limit() -> Option<u64> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one rlimit into the struct we own.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0).then_some(limit.rlim_cur)
}

/// Least number of management API connections allowed, whatever the limit.
const MIN_HTTP_CONNECTIONS: u64 = 16;

/// How many management API connections may be open at once under a limit of `open_files`
/// descriptors: an eighth, so that HTTP clients can never take what AMQP clients need.
pub fn http_connection_share(open_files: u64) -> usize {
    (open_files / 8).max(MIN_HTTP_CONNECTIONS).try_into().unwrap_or(usize::MAX)
}

/// The most descriptors a process may have (`/proc/sys/fs/nr_open`), 1,048,576 if unreadable.
fn kernel_max_open() -> u64 {
    const DEFAULT_NR_OPEN: u64 = 1 << 20;
    std::fs::read_to_string("/proc/sys/fs/nr_open").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(DEFAULT_NR_OPEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> libc::rlimit {
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: as above.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) }, 0);
        limit
    }

    #[test]
    fn segment_files_get_half_the_limit() {
        assert_eq!(segment_file_share(1024), 512);
        assert_eq!(segment_file_share(20), 64);
    }

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let hard = limits().rlim_max;
        let low = libc::rlimit { rlim_cur: 512.min(hard), rlim_max: hard };
        // SAFETY: as above. A lower soft limit is always allowed.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &low) }, 0);
        let raised = raise_to_hard_limit().expect("raise");
        assert_eq!(raised.before, 512.min(hard));
        let expected = if hard == libc::RLIM_INFINITY { kernel_max_open() } else { hard };
        assert_eq!(raised.now, expected);
        assert_eq!(limits().rlim_cur, expected);
    }
}
