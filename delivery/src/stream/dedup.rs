//! A stream's deduplication window (`x-message-deduplication`, see [`crate::dedup_window`]):
//! the keys of the messages it appended lately. It needs no file of its own: on opening, the
//! window is replayed from the tail of the log, each record at the time it was appended, so
//! a restart keeps it. The replay reads at most [`REPLAY_FACTOR`] times `x-cache-size`
//! records back (and nothing older than `x-cache-ttl`): a stream whose keyed messages are
//! rarer than that among the others remembers fewer keys after a restart.

use crate::dedup_window::{key_in, DedupSettings, DedupWindow};
use crate::message_store::log_browser::LogBrowser;
use crate::message_store::StoreError;
use crate::stream::OffsetSpec;

/// Records read back per key the window holds, at most, when the window is replayed.
pub const REPLAY_FACTOR: u64 = 4;
/// Records read per batch of the replay.
const REPLAY_BATCH_RECORDS: usize = 4096;
/// Payload bytes read per batch of the replay, about.
const REPLAY_BATCH_BYTES: usize = 4 << 20;

/// The window of a stream reopened at `now_ms`, from the tail of its log.
pub(super) fn replay(browser: &LogBrowser, settings: &DedupSettings, now_ms: u64) -> Result<DedupWindow, StoreError> {
    let (first, end) = browser.bounds();
    let mut from = end.saturating_sub(settings.cache_size.saturating_mul(REPLAY_FACTOR)).max(first);
    if let Some(ttl_ms) = settings.cache_ttl_ms {
        let oldest_ms = now_ms.saturating_sub(ttl_ms);
        from = from.max(browser.offset_of(OffsetSpec::Timestamp(oldest_ms as i64))?);
    }
    let mut window = DedupWindow::default();
    while from < end {
        let batch = browser.read(from, REPLAY_BATCH_RECORDS, REPLAY_BATCH_BYTES, None)?;
        for record in &batch.messages {
            let Some(key) = key_in(&record.message.properties, settings) else { continue };
            let at_ms = record.timestamp_ms.max(0) as u64;
            if !window.contains(&key, at_ms, settings) {
                window.insert(key, at_ms, settings);
            }
        }
        if batch.next_offset <= from {
            break;
        }
        from = batch.next_offset;
    }
    Ok(window)
}
