//! A stream's `x-` arguments as the stream uses them: retention and segment size, with
//! RabbitMQ's names and units. They are read, with every other queue argument, by the queue
//! layer's `QueueArguments` (one table of arguments for every kind of queue).

use crate::dedup_window::DedupSettings;
use warren_storage::Retention;

/// The smallest segment a stream may ask for: the storage engine's lower bound.
pub const MIN_SEGMENT_BYTES: u64 = 1024;

/// How long and how large a stream grows, and the size of its segments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamArguments {
    /// `x-max-age` (whole segments whose newest message is older are deleted) and
    /// `x-max-length-bytes` (oldest whole segments are deleted while the stream is larger):
    /// what the stream's log keeps. A policy may change them on a live stream.
    pub retention: Retention,
    /// `x-stream-max-segment-size-bytes`: a new segment starts at this size.
    pub max_segment_size_bytes: Option<u64>,
    /// `x-message-deduplication` with its window, if on (filled in from the queue's
    /// arguments: `QueueArguments::deduplication` in the queue layer).
    pub deduplication: Option<DedupSettings>,
}

/// An interval as RabbitMQ writes them, a whole number and a unit: `Y` (years), `M`
/// (months), `D` (days), `h`, `m`, `s`; in milliseconds. `None` if malformed.
pub fn parse_interval_ms(text: &str) -> Option<u64> {
    const SECOND_MS: u64 = 1000;
    const DAY_MS: u64 = 24 * 3600 * SECOND_MS;
    let unit = text.chars().last()?;
    let count: u64 = text[..text.len() - unit.len_utf8()].parse().ok()?;
    let unit_ms = match unit {
        'Y' => 365 * DAY_MS,
        'M' => 30 * DAY_MS,
        'D' => DAY_MS,
        'h' => 3600 * SECOND_MS,
        'm' => 60 * SECOND_MS,
        's' => SECOND_MS,
        _ => return None,
    };
    count.checked_mul(unit_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_use_rabbitmq_units() {
        assert_eq!(parse_interval_ms("7D"), Some(7 * 24 * 3600 * 1000));
        assert_eq!(parse_interval_ms("12h"), Some(12 * 3600 * 1000));
        assert_eq!(parse_interval_ms("30m"), Some(30 * 60 * 1000));
        assert_eq!(parse_interval_ms("10s"), Some(10_000));
        assert_eq!(parse_interval_ms("1Y"), Some(365 * 24 * 3600 * 1000));
        for bad in ["", "h", "10", "10x", "-1h", "1.5h", "ten s"] {
            assert_eq!(parse_interval_ms(bad), None, "{bad}");
        }
    }
}
