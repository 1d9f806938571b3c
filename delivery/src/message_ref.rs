//! Where a queued message is: its place in the queue, its priority and which store holds it,
//! packed in 16 bytes so that a deep backlog costs little memory.

/// Bits of [`MessageRef::location`]: the store offset, the priority, and which store.
const OFFSET_MASK: u64 = (1 << 55) - 1;
const PRIORITY_SHIFT: u32 = 55;
const IN_MEMORY_BIT: u64 = 1 << 63;

/// A queued message: its place in the queue, its priority, and where it is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageRef {
    pub(crate) position: u64,
    location: u64,
}

impl MessageRef {
    pub(crate) fn new(position: u64, offset: u64, in_memory: bool, priority: u8) -> Self {
        let store = if in_memory { IN_MEMORY_BIT } else { 0 };
        MessageRef { position, location: (offset & OFFSET_MASK) | (u64::from(priority) << PRIORITY_SHIFT) | store }
    }

    pub(crate) fn offset(self) -> u64 {
        self.location & OFFSET_MASK
    }

    /// Its place in the queue: what orders it within its priority level.
    pub(crate) fn position(self) -> u64 {
        self.position
    }

    pub(crate) fn priority(self) -> u8 {
        ((self.location >> PRIORITY_SHIFT) & 0xff) as u8
    }

    pub(crate) fn in_memory(self) -> bool {
        self.location & IN_MEMORY_BIT != 0
    }
}
