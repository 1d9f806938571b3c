//! Memory and disk alarms, as RabbitMQ raises them: when the broker's resident memory crosses
//! its high watermark, or the free space of its data directory's disk falls below the limit,
//! the alarm is set, and every connection that publishes is blocked (`connection.blocked`,
//! then no more is read from it) until the alarm clears. Consumers keep draining meanwhile,
//! which is what clears a memory alarm.
//!
//! This module owns the limits, the alarm state (a watch channel the connections follow) and
//! the check that samples usage ([`crate::resource_usage`]) and sets or clears the alarms.

use crate::resource_usage;
use parking_lot::Mutex;
use std::fmt;
use std::path::Path;
use std::str::FromStr;
use tokio::sync::watch;

/// RabbitMQ's default high watermark: 40% of the memory available.
pub const DEFAULT_MEMORY_HIGH_WATERMARK: MemoryWatermark = MemoryWatermark::Fraction(0.4);
/// RabbitMQ's default disk free limit: 50 MB.
pub const DEFAULT_DISK_FREE_LIMIT_BYTES: u64 = 50_000_000;
/// How often usage is sampled: a publisher flood grows memory by hundreds of MB a second,
/// so the alarm overshoots the watermark by about this much of it.
pub const ALARM_CHECK_INTERVAL_MS: u64 = 250;

/// The memory high watermark: a fraction of the memory available (RAM, or the cgroup's limit
/// if lower), or an absolute size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MemoryWatermark {
    /// A fraction of the memory available, above 0 and at most 1.
    Fraction(f64),
    /// An absolute number of bytes.
    Bytes(u64),
}

impl MemoryWatermark {
    /// The watermark in bytes, given the memory available.
    pub fn bytes(self, available_bytes: u64) -> u64 {
        match self {
            MemoryWatermark::Fraction(fraction) => (available_bytes as f64 * fraction) as u64,
            MemoryWatermark::Bytes(bytes) => bytes,
        }
    }
}

impl fmt::Display for MemoryWatermark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemoryWatermark::Fraction(fraction) => write!(f, "{fraction}"),
            MemoryWatermark::Bytes(bytes) => write!(f, "{bytes}B"),
        }
    }
}

/// A size or a watermark that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a size (like 500MB, 2GiB or 1048576) or a fraction from 0 to 1 (like 0.4)")]
pub struct BadSize(pub String);

impl FromStr for MemoryWatermark {
    type Err = BadSize;

    /// `0.4` is a fraction; a whole number with or without a unit (`1073741824`, `512MB`,
    /// `2GiB`) is a size, as RabbitMQ's `vm_memory_high_watermark.absolute`.
    fn from_str(text: &str) -> Result<Self, BadSize> {
        let text = text.trim();
        if text.contains('.') {
            return match text.parse::<f64>() {
                Ok(fraction) if fraction > 0.0 && fraction <= 1.0 => Ok(MemoryWatermark::Fraction(fraction)),
                _ => Err(BadSize(text.to_string())),
            };
        }
        parse_size_bytes(text).map(MemoryWatermark::Bytes)
    }
}

/// Reads a size: digits, then an optional unit as RabbitMQ's configuration takes them (`kB`,
/// `MB`, `GB` are powers of 1000; `KiB`, `MiB`, `GiB` powers of 1024; `B` or none is bytes).
pub fn parse_size_bytes(text: &str) -> Result<u64, BadSize> {
    let bad = || BadSize(text.to_string());
    let text = text.trim();
    let digits = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let number: u64 = number.parse().map_err(|_| bad())?;
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "m" | "mb" => 1_000_000,
        "g" | "gb" => 1_000_000_000,
        "t" | "tb" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        _ => return Err(bad()),
    };
    number.checked_mul(multiplier).ok_or_else(bad)
}

/// What the alarms are measured against.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ResourceLimits {
    /// Memory above this sets the memory alarm.
    pub memory_high_watermark: MemoryWatermark,
    /// Free disk below this sets the disk alarm.
    pub disk_free_limit_bytes: u64,
}

impl Default for ResourceLimits {
    fn default() -> Self {
        ResourceLimits {
            memory_high_watermark: DEFAULT_MEMORY_HIGH_WATERMARK,
            disk_free_limit_bytes: DEFAULT_DISK_FREE_LIMIT_BYTES,
        }
    }
}

/// Which alarms are in effect.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AlarmState {
    /// Memory is above the high watermark.
    pub memory: bool,
    /// Free disk space is below the limit.
    pub disk: bool,
}

impl AlarmState {
    /// Whether publishers are blocked.
    pub fn any(self) -> bool {
        self.memory || self.disk
    }

    /// The reason `connection.blocked` gives, as RabbitMQ words it.
    pub fn reason(self) -> Option<&'static str> {
        match (self.memory, self.disk) {
            (true, true) => Some("low on memory and disk"),
            (true, false) => Some("low on memory"),
            (false, true) => Some("low on disk"),
            (false, false) => None,
        }
    }

    /// The resources in alarm, as RabbitMQ's health checks name them.
    pub fn resources(self) -> Vec<&'static str> {
        [(self.memory, "memory"), (self.disk, "disk")].into_iter().filter(|(on, _)| *on).map(|(_, r)| r).collect()
    }
}

/// The last sample of what the alarms watch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResourceUsage {
    /// The broker's resident memory.
    pub memory_used_bytes: u64,
    /// The memory high watermark, in bytes.
    pub memory_limit_bytes: u64,
    /// Free space on the data directory's disk (for unprivileged users).
    pub disk_free_bytes: u64,
    /// The disk free limit.
    pub disk_free_limit_bytes: u64,
}

/// The broker's alarms: their limits, their state, and the last usage sampled.
#[derive(Debug)]
pub struct ResourceAlarms {
    limits: Mutex<ResourceLimits>,
    usage: Mutex<ResourceUsage>,
    state: watch::Sender<AlarmState>,
}

impl Default for ResourceAlarms {
    fn default() -> Self {
        ResourceAlarms {
            limits: Mutex::new(ResourceLimits::default()),
            usage: Mutex::new(ResourceUsage::default()),
            state: watch::Sender::new(AlarmState::default()),
        }
    }
}

impl ResourceAlarms {
    /// Follows the alarm state: connections block and unblock on its changes.
    pub fn subscribe(&self) -> watch::Receiver<AlarmState> {
        self.state.subscribe()
    }

    /// The alarms in effect.
    pub fn state(&self) -> AlarmState {
        *self.state.borrow()
    }

    /// The limits.
    pub fn limits(&self) -> ResourceLimits {
        *self.limits.lock()
    }

    /// Changes the limits (at startup, or at run time as `set_vm_memory_high_watermark`);
    /// the next check applies them.
    pub fn set_limits(&self, limits: ResourceLimits) {
        *self.limits.lock() = limits;
    }

    /// The last usage sampled.
    pub fn usage(&self) -> ResourceUsage {
        *self.usage.lock()
    }

    /// Samples memory and the disk of `data_dir`, and sets or clears the alarms.
    pub fn check(&self, data_dir: &Path) {
        let limits = self.limits();
        let usage = ResourceUsage {
            memory_used_bytes: resource_usage::resident_memory_bytes(),
            memory_limit_bytes: limits.memory_high_watermark.bytes(resource_usage::available_memory_bytes()),
            // A disk that cannot be measured is not reported full.
            disk_free_bytes: resource_usage::disk_free_bytes(data_dir).unwrap_or(u64::MAX),
            disk_free_limit_bytes: limits.disk_free_limit_bytes,
        };
        *self.usage.lock() = usage;
        self.apply(usage);
    }

    /// Sets the alarms `usage` calls for, logging each change.
    fn apply(&self, usage: ResourceUsage) {
        let next = AlarmState {
            memory: usage.memory_used_bytes > usage.memory_limit_bytes,
            disk: usage.disk_free_bytes < usage.disk_free_limit_bytes,
        };
        let before = self.state();
        if next == before {
            return;
        }
        log_change("memory", before.memory, next.memory, usage.memory_used_bytes, usage.memory_limit_bytes);
        log_change("disk", before.disk, next.disk, usage.disk_free_bytes, usage.disk_free_limit_bytes);
        self.state.send_replace(next);
    }
}

fn log_change(resource: &str, before: bool, now: bool, value: u64, limit: u64) {
    match (before, now) {
        (false, true) => tracing::warn!(resource, value, limit, "resource alarm set: publishers are blocked"),
        (true, false) => tracing::info!(resource, value, limit, "resource alarm cleared"),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watermarks_are_fractions_or_sizes() {
        assert_eq!("0.4".parse(), Ok(MemoryWatermark::Fraction(0.4)));
        assert_eq!("512MB".parse(), Ok(MemoryWatermark::Bytes(512_000_000)));
        assert_eq!("2GiB".parse(), Ok(MemoryWatermark::Bytes(2 << 30)));
        assert_eq!("1048576".parse(), Ok(MemoryWatermark::Bytes(1 << 20)));
        for bad in ["1.5", "0.0", "-1", "lots", "12 parsecs", "99999999999999999999TB"] {
            assert!(bad.parse::<MemoryWatermark>().is_err(), "{bad}");
        }
        assert_eq!(MemoryWatermark::Fraction(0.5).bytes(1_000), 500);
    }

    #[test]
    fn alarms_follow_usage_and_name_their_reason() {
        let alarms = ResourceAlarms::default();
        let changes = alarms.subscribe();
        let usage = |memory, disk| ResourceUsage {
            memory_used_bytes: memory,
            memory_limit_bytes: 100,
            disk_free_bytes: disk,
            disk_free_limit_bytes: 50,
        };
        alarms.apply(usage(10, 1_000));
        assert!(!changes.has_changed().unwrap_or(true), "no alarm, no change");
        alarms.apply(usage(101, 1_000));
        assert_eq!(alarms.state().reason(), Some("low on memory"));
        alarms.apply(usage(101, 10));
        assert_eq!(alarms.state().resources(), ["memory", "disk"]);
        alarms.apply(usage(10, 1_000));
        assert!(!alarms.state().any());
        assert!(changes.has_changed().unwrap_or(false));
    }
}
