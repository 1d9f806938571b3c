//! [`DedupWindow`]: the deduplication keys a quorum queue or a stream has seen lately
//! (`x-message-deduplication`, an extension with the names of RabbitMQ's deduplication plugin
//! and of LavinMQ). A quorum queue's window is part of its replicated state: every replica
//! sees the same keys at the same command times, so a publish retried after a leader failover
//! is recognised by the new leader. A stream's is rebuilt from the tail of its log when it
//! opens, so a restart keeps it.
//!
//! The window is bounded by `x-cache-size` keys (the oldest goes first) and, if set, by
//! `x-cache-ttl`: a key is forgotten that long after it was first seen. Time is the caller's
//! clock (a command's, a record's), never read here. Keys are kept as SHA-256 digests, so a
//! key's length costs nothing.

use crate::field_value::{exact_whole_number_of, string_of};
use crate::properties::Properties;
use amq_protocol::types::AMQPValue;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};

/// Messages dropped as duplicates on this node since it started: by its streams, and by the
/// quorum queues it proposed them to (the metrics' `warren_deduplicated_messages_total`).
static DROPPED_TOTAL: AtomicU64 = AtomicU64::new(0);

/// Counts a message dropped as a duplicate.
pub fn note_dropped() {
    DROPPED_TOTAL.fetch_add(1, Ordering::Relaxed);
}

/// Messages dropped as duplicates on this node since it started.
pub fn dropped_total() -> u64 {
    DROPPED_TOTAL.load(Ordering::Relaxed)
}

/// The header whose value is a message's key unless `x-deduplication-header` names another.
pub const DEFAULT_DEDUPLICATION_HEADER: &str = "x-deduplication-header";

/// What a queue's deduplication obeys, from its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DedupSettings {
    /// The header carrying a message's key.
    pub header: String,
    /// Keys remembered at most (`x-cache-size`).
    pub cache_size: u64,
    /// How long a key is remembered (`x-cache-ttl`), if not until pushed out.
    pub cache_ttl_ms: Option<u64>,
}

/// A message's deduplication key: the digest of its header's value.
pub type DedupKey = [u8; 32];

/// The key of a message with `properties` under `settings`: its header's value's, if the
/// header is there and its value is a key.
pub fn key_in(properties: &Properties, settings: &DedupSettings) -> Option<DedupKey> {
    properties.headers()?.inner().get(settings.header.as_str()).and_then(key_of)
}

/// The key of a header value: strings and byte arrays by their bytes, numbers by their whole
/// value (1 and 1.0 are one key, as RabbitMQ compares values). Other values are no key: the
/// message is not deduplicated.
pub fn key_of(value: &AMQPValue) -> Option<DedupKey> {
    let (kind, bytes): (u8, Vec<u8>) = if let Some(text) = string_of(value) {
        (b's', text.to_vec())
    } else if let AMQPValue::ByteArray(bytes) = value {
        (b's', bytes.as_slice().to_vec())
    } else {
        (b'n', exact_whole_number_of(value)?.to_string().into_bytes())
    };
    let mut digest = Sha256::new();
    digest.update([kind]);
    digest.update(&bytes);
    Some(digest.finalize().into())
}

/// The keys seen within the window, each with the time it was first seen.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DedupWindow {
    seen: BTreeMap<DedupKey, u64>,
    /// The same keys, oldest first.
    order: VecDeque<(DedupKey, u64)>,
}

/// A window as data, for snapshots: the keys oldest first, each with when it was seen.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DedupEntries(pub Vec<(DedupKey, u64)>);

impl DedupWindow {
    /// Whether `key` is in the window at `now_ms`.
    pub fn contains(&mut self, key: &DedupKey, now_ms: u64, settings: &DedupSettings) -> bool {
        self.forget_expired(now_ms, settings);
        self.seen.contains_key(key)
    }

    /// Puts `key`, seen at `now_ms`, in the window (pushing the oldest out of a full one).
    /// The caller asked [`DedupWindow::contains`] first: a key already there stays as it was.
    pub fn insert(&mut self, key: DedupKey, now_ms: u64, settings: &DedupSettings) {
        if self.seen.contains_key(&key) {
            return;
        }
        self.seen.insert(key, now_ms);
        self.order.push_back((key, now_ms));
        while self.order.len() as u64 > settings.cache_size {
            if let Some((oldest, _)) = self.order.pop_front() {
                self.seen.remove(&oldest);
            }
        }
    }

    fn forget_expired(&mut self, now_ms: u64, settings: &DedupSettings) {
        let Some(ttl_ms) = settings.cache_ttl_ms else { return };
        while let Some(&(key, seen_ms)) = self.order.front() {
            if seen_ms.saturating_add(ttl_ms) > now_ms {
                break;
            }
            self.order.pop_front();
            self.seen.remove(&key);
        }
    }

    /// Keys in the window.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether it holds no key.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The window as data.
    pub fn entries(&self) -> DedupEntries {
        DedupEntries(self.order.iter().copied().collect())
    }

    /// The window `entries` describe.
    pub fn restore(entries: DedupEntries) -> Self {
        let mut window = DedupWindow::default();
        for (key, seen_ms) in entries.0 {
            if window.seen.insert(key, seen_ms).is_none() {
                window.order.push_back((key, seen_ms));
            }
        }
        window
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use amq_protocol::types::{LongString, ShortString};

    fn settings(cache_size: u64, cache_ttl_ms: Option<u64>) -> DedupSettings {
        DedupSettings { header: DEFAULT_DEDUPLICATION_HEADER.into(), cache_size, cache_ttl_ms }
    }

    /// What the state does with a message: a duplicate if in the window, else remembered.
    fn seen_before(window: &mut DedupWindow, key: DedupKey, now_ms: u64, settings: &DedupSettings) -> bool {
        let seen = window.contains(&key, now_ms, settings);
        if !seen {
            window.insert(key, now_ms, settings);
        }
        seen
    }

    fn key(text: &str) -> DedupKey {
        key_of(&AMQPValue::LongString(LongString::from(text))).expect("a string is a key")
    }

    #[test]
    fn a_key_seen_again_is_a_duplicate() {
        let mut window = DedupWindow::default();
        let settings = settings(10, None);
        assert!(!seen_before(&mut window, key("a"), 0, &settings));
        assert!(!seen_before(&mut window, key("b"), 0, &settings));
        assert!(seen_before(&mut window, key("a"), 5, &settings));
        assert_eq!(window.len(), 2);
    }

    #[test]
    fn the_oldest_key_leaves_a_full_window() {
        let mut window = DedupWindow::default();
        let settings = settings(2, None);
        for name in ["a", "b", "c"] {
            assert!(!seen_before(&mut window, key(name), 0, &settings));
        }
        assert!(!seen_before(&mut window, key("a"), 0, &settings), "a was pushed out by c");
        assert!(seen_before(&mut window, key("c"), 0, &settings));
        assert_eq!(window.len(), 2);
    }

    #[test]
    fn a_key_is_forgotten_its_ttl_after_it_was_first_seen() {
        let mut window = DedupWindow::default();
        let settings = settings(10, Some(1_000));
        assert!(!seen_before(&mut window, key("a"), 1_000, &settings));
        assert!(seen_before(&mut window, key("a"), 1_999, &settings), "a duplicate does not refresh the key");
        assert!(!seen_before(&mut window, key("a"), 2_000, &settings), "gone 1 s after it was first seen");
        assert!(seen_before(&mut window, key("a"), 2_500, &settings));
    }

    #[test]
    fn values_that_users_mean_alike_are_one_key() {
        let short = key_of(&AMQPValue::ShortString(ShortString::from("id-1"))).expect("key");
        assert_eq!(short, key("id-1"));
        let small = key_of(&AMQPValue::ShortShortUInt(7)).expect("key");
        assert_eq!(small, key_of(&AMQPValue::LongLongInt(7)).expect("key"));
        assert_eq!(key_of(&AMQPValue::Double(7.0)), Some(small));
        assert_ne!(key_of(&AMQPValue::LongInt(-7)), Some(small));
        assert_ne!(small, key("7"), "the number 7 and the string \"7\" are different keys");
        assert_eq!(key_of(&AMQPValue::Boolean(true)), None);
    }

    #[test]
    fn a_restored_window_is_the_same_window() {
        let mut window = DedupWindow::default();
        let settings = settings(3, Some(100));
        for (name, at) in [("a", 1), ("b", 2), ("c", 3)] {
            seen_before(&mut window, key(name), at, &settings);
        }
        let restored = DedupWindow::restore(window.entries());
        assert_eq!(restored, window);
        let mut again = restored;
        assert!(seen_before(&mut again, key("b"), 50, &settings));
        assert!(!seen_before(&mut again, key("a"), 101, &settings), "a expired at 101");
    }
}
