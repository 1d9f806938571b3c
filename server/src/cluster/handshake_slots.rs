//! Slots for incoming connections in the handshake: a global cap, and a smaller cap per
//! source, so that sockets from one source that connect and say nothing cannot hold every
//! slot and keep real peers out (security issue #28: 200 such sockets from one address kept
//! a peer from joining for 45 s).
//!
//! A source is an IPv4 address, or an IPv6 /64 prefix: one host usually has a whole /64 to
//! pick addresses from. An IPv4-mapped IPv6 address counts as its IPv4 address.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex, PoisonError};

/// Leading bits of an IPv6 address that name its source.
const IPV6_SOURCE_PREFIX_BITS: u32 = 64;

/// The source `ip` counts against: the address itself for IPv4, its /64 for IPv6.
pub(crate) fn source_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mask = u128::MAX << (128 - IPV6_SOURCE_PREFIX_BITS);
                IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
            }
        },
    }
}

/// Why a connection got no slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NoSlot {
    /// Every slot is taken.
    #[error("too many handshakes in progress ({0}); connection closed")]
    AllTaken(usize),
    /// The connection's source holds its share.
    #[error("too many handshakes in progress from this address ({0}); connection closed")]
    SourceTaken(usize),
}

#[derive(Debug, Default)]
struct Held {
    total: usize,
    by_source: HashMap<IpAddr, usize>,
}

#[derive(Debug)]
struct Inner {
    max_total: usize,
    max_per_source: usize,
    held: Mutex<Held>,
}

/// The slots of one listener. Cheap to clone; clones share the slots.
#[derive(Debug, Clone)]
pub(crate) struct HandshakeSlots {
    inner: Arc<Inner>,
}

/// A slot held until dropped.
#[derive(Debug)]
pub(crate) struct Slot {
    inner: Arc<Inner>,
    source: IpAddr,
}

impl HandshakeSlots {
    /// `max_total` slots, at most `max_per_source` of them for one source at once.
    pub(crate) fn new(max_total: usize, max_per_source: usize) -> Self {
        HandshakeSlots { inner: Arc::new(Inner { max_total, max_per_source, held: Mutex::default() }) }
    }

    /// A slot for a connection from `ip`, unless the source or the listener holds its cap.
    /// The table of sources holds only sources with a slot, so it is bounded by `max_total`.
    pub(crate) fn try_take(&self, ip: IpAddr) -> Result<Slot, NoSlot> {
        let source = source_of(ip);
        let mut held = self.inner.held.lock().unwrap_or_else(PoisonError::into_inner);
        if held.total >= self.inner.max_total {
            return Err(NoSlot::AllTaken(self.inner.max_total));
        }
        let of_source = held.by_source.get(&source).copied().unwrap_or(0);
        if of_source >= self.inner.max_per_source {
            return Err(NoSlot::SourceTaken(self.inner.max_per_source));
        }
        held.by_source.insert(source, of_source + 1);
        held.total += 1;
        Ok(Slot { inner: Arc::clone(&self.inner), source })
    }

    /// Slots held now.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.inner.held.lock().unwrap_or_else(PoisonError::into_inner).total
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self.inner.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.total = held.total.saturating_sub(1);
        if let Some(of_source) = held.by_source.get_mut(&self.source) {
            *of_source = of_source.saturating_sub(1);
            if *of_source == 0 {
                held.by_source.remove(&self.source);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("an address")
    }

    #[test]
    fn one_source_holds_at_most_its_share_and_others_still_get_slots() {
        let slots = HandshakeSlots::new(8, 2);
        let a: Vec<Slot> = (0..2).map(|_| slots.try_take(ip("10.0.0.1")).expect("a slot")).collect();
        assert_eq!(slots.try_take(ip("10.0.0.1")).err(), Some(NoSlot::SourceTaken(2)));
        let _b = slots.try_take(ip("10.0.0.2")).expect("another source gets a slot");
        drop(a);
        assert_eq!(slots.held(), 1);
        let _a = slots.try_take(ip("10.0.0.1")).expect("slots come back when dropped");
    }

    #[test]
    fn the_global_cap_holds_whatever_the_sources() {
        let slots = HandshakeSlots::new(3, 2);
        let held: Vec<Slot> =
            ["10.0.0.1", "10.0.0.2", "10.0.0.3"].iter().map(|a| slots.try_take(ip(a)).expect("a slot")).collect();
        assert_eq!(slots.try_take(ip("10.0.0.4")).err(), Some(NoSlot::AllTaken(3)));
        drop(held);
        assert_eq!(slots.held(), 0);
        assert!(slots.inner.held.lock().expect("not poisoned").by_source.is_empty());
    }

    #[test]
    fn an_ipv6_64_is_one_source_and_a_mapped_ipv4_is_its_ipv4() {
        assert_eq!(source_of(ip("2001:db8:1:2:aaaa::1")), source_of(ip("2001:db8:1:2:bbbb::2")));
        assert_ne!(source_of(ip("2001:db8:1:2::1")), source_of(ip("2001:db8:1:3::1")));
        assert_eq!(source_of(ip("::ffff:10.0.0.1")), ip("10.0.0.1"));
        let slots = HandshakeSlots::new(8, 1);
        let _held = slots.try_take(ip("2001:db8::1")).expect("a slot");
        assert_eq!(slots.try_take(ip("2001:db8::2")).err(), Some(NoSlot::SourceTaken(1)));
    }
}
