//! What the resource alarms measure, read from the operating system: the process's resident
//! memory, the memory available to it (RAM, or its cgroup's limit when that is lower, as in a
//! container), and the free space of a directory's file system. Linux's `/proc` and
//! `/sys/fs/cgroup`; elsewhere memory reads as unknown (0 used, unlimited available).

use std::path::Path;

/// The process's resident set, in bytes (0 if unknown).
pub fn resident_memory_bytes() -> u64 {
    // statm's second field is the resident set in pages.
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|statm| statm.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()))
        .unwrap_or(0);
    pages.saturating_mul(page_size_bytes())
}

fn page_size_bytes() -> u64 {
    // SAFETY: sysconf reads a configuration value; it has no memory effects.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).ok().filter(|s| *s > 0).unwrap_or(4096)
}

/// The memory the process may use: the machine's RAM, or the cgroup's limit if it has a lower
/// one (`u64::MAX` if neither can be read).
pub fn available_memory_bytes() -> u64 {
    let ram = std::fs::read_to_string("/proc/meminfo").ok().and_then(|info| mem_total_bytes(&info));
    let cgroup = cgroup_limit_bytes();
    match (ram, cgroup) {
        (Some(ram), Some(limit)) => ram.min(limit),
        (Some(bytes), None) | (None, Some(bytes)) => bytes,
        (None, None) => u64::MAX,
    }
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
fn mem_total_bytes(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|line| line.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// The memory limit of this process's cgroup (v2 `memory.max`, or v1 `memory.limit_in_bytes`),
/// if it has one.
fn cgroup_limit_bytes() -> Option<u64> {
    let v2 = std::fs::read_to_string("/sys/fs/cgroup/memory.max");
    let v1 = || std::fs::read_to_string("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    // "max" (v2) or a huge number (v1) means no limit: parse fails or the RAM is lower.
    v2.or_else(|_| v1()).ok().and_then(|text| text.trim().parse().ok())
}

/// Free space for unprivileged users on the file system holding `dir`.
pub fn disk_free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: zeroed is a valid statvfs (plain integers), which statvfs fills in.
    let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a NUL-terminated string and `stats` a statvfs we own.
    if unsafe { libc::statvfs(path.as_ptr(), &mut stats) } != 0 {
        return None;
    }
    // Both are 64-bit on 64-bit Linux, narrower on some other targets.
    #[allow(clippy::useless_conversion)]
    let (blocks, block_bytes) = (u64::from(stats.f_bavail), u64::from(stats.f_frsize));
    blocks.checked_mul(block_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process_and_this_disk() {
        assert!(resident_memory_bytes() > 0);
        assert!(available_memory_bytes() > resident_memory_bytes());
        let dir = std::env::temp_dir();
        assert!(disk_free_bytes(&dir).is_some_and(|free| free > 0));
        assert_eq!(disk_free_bytes(Path::new("/no/such/dir")), None);
        assert_eq!(mem_total_bytes("MemTotal:       24000000 kB\nMemFree: 1 kB"), Some(24_000_000 * 1024));
    }
}
