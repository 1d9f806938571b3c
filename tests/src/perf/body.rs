//! The message body: its first 16 bytes say when and by whom it was sent.
//!
//! | bytes | content |
//! | --- | --- |
//! | 0..8 | send time, nanoseconds since the UNIX epoch, little-endian |
//! | 8..16 | producer id (high 16 bits) and sequence number (low 48 bits), little-endian |
//! | 16.. | zeros, up to the message size |
//!
//! The wall clock (not a monotonic one) is used so that producers and consumers in different
//! processes on one machine agree.

use std::time::{SystemTime, UNIX_EPOCH};

const SEQUENCE_BITS: u32 = 48;

/// Nanoseconds since the UNIX epoch.
pub fn now_nanos() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|elapsed| elapsed.as_nanos() as u64).unwrap_or(0)
}

/// A body of `size` bytes stamped with the current time.
pub fn stamped(size: usize, producer: usize, sequence: u64) -> Vec<u8> {
    let mut body = vec![0u8; size];
    stamp(&mut body, producer, sequence, now_nanos());
    body
}

/// Writes the stamp (send time `sent_nanos`, producer, sequence) into the first 16 bytes of
/// `body`; a shorter body gets what fits.
pub fn stamp(body: &mut [u8], producer: usize, sequence: u64, sent_nanos: u64) {
    let tag = ((producer as u64) << SEQUENCE_BITS) | (sequence & ((1 << SEQUENCE_BITS) - 1));
    let mut stamp = [0u8; 16];
    stamp[0..8].copy_from_slice(&sent_nanos.to_le_bytes());
    stamp[8..16].copy_from_slice(&tag.to_le_bytes());
    let len = body.len().min(stamp.len());
    body[..len].copy_from_slice(&stamp[..len]);
}

/// The send time written by [`stamped`], if the body is long enough to carry one.
pub fn sent_at_nanos(body: &[u8]) -> Option<u64> {
    let bytes: [u8; 8] = body.get(0..8)?.try_into().ok()?;
    Some(u64::from_le_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamp_round_trips() {
        let before = now_nanos();
        let body = stamped(32, 3, 7);
        assert_eq!(body.len(), 32);
        let sent = sent_at_nanos(&body).unwrap();
        assert!(sent >= before && sent <= now_nanos());
        assert_eq!(u64::from_le_bytes(body[8..16].try_into().unwrap()), (3 << 48) | 7);
    }
}
