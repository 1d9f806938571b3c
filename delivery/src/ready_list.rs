//! The messages of a queue waiting for a consumer, in the order they are to be delivered.
//!
//! A plain queue is one FIFO. A priority queue (`x-max-priority`) keeps one FIFO per priority
//! level and serves the highest non-empty level first, as RabbitMQ's classic priority queues do;
//! a bitmap of non-empty levels finds it in a few instructions. Within a level, messages are
//! ordered by their position in the queue, so a requeued message goes back to its place.

use crate::message_ref::MessageRef;
use std::collections::VecDeque;

/// Priority levels a priority queue can have (0..=255).
const PRIORITY_LEVELS: usize = 256;
/// Entries an empty level may keep room for. A drained or purged backlog of millions would
/// otherwise leave its whole buffer allocated (16 bytes per message, for good).
const EMPTY_LEVEL_KEEP_ENTRIES: usize = 4096;

/// Ready messages, FIFO or by priority.
#[derive(Debug)]
pub struct ReadyList {
    /// One level for a plain queue; `max_priority + 1` levels for a priority queue.
    levels: Vec<VecDeque<MessageRef>>,
    /// Bit `p` set when level `p` holds messages.
    non_empty: [u64; PRIORITY_LEVELS / 64],
    len: usize,
}

impl ReadyList {
    /// A list for a queue with `max_priority` (`None`: a plain FIFO).
    pub fn new(max_priority: Option<u8>) -> Self {
        let levels = max_priority.map_or(1, |max| usize::from(max) + 1);
        ReadyList { levels: (0..levels).map(|_| VecDeque::new()).collect(), non_empty: [0; 4], len: 0 }
    }

    /// Messages waiting.
    pub fn len(&self) -> usize {
        self.len
    }

    fn level_of(&self, message: MessageRef) -> usize {
        usize::from(message.priority()).min(self.levels.len() - 1)
    }

    fn mark(&mut self, level: usize) {
        let deque = &mut self.levels[level];
        if deque.is_empty() {
            if deque.capacity() > EMPTY_LEVEL_KEEP_ENTRIES {
                *deque = VecDeque::new();
            }
            self.non_empty[level / 64] &= !(1 << (level % 64));
        } else {
            self.non_empty[level / 64] |= 1 << (level % 64);
        }
    }

    fn highest_level(&self) -> Option<usize> {
        (0..self.non_empty.len())
            .rev()
            .find(|&word| self.non_empty[word] != 0)
            .map(|word| word * 64 + 63 - self.non_empty[word].leading_zeros() as usize)
    }

    /// Makes room for `additional` plain (priority 0) messages at once: recovery knows how many
    /// it will push, and growing by doubling would briefly need twice the memory.
    pub fn reserve_plain(&mut self, additional: usize) {
        self.levels[0].reserve_exact(additional);
    }

    /// Adds a newly published message (the highest position so far).
    pub fn push_back(&mut self, message: MessageRef) {
        let level = self.level_of(message);
        self.levels[level].push_back(message);
        self.mark(level);
        self.len += 1;
    }

    /// Puts a message back at its place by position.
    pub fn insert(&mut self, message: MessageRef) {
        let level = self.level_of(message);
        let place = self.levels[level].partition_point(|m| m.position < message.position);
        self.levels[level].insert(place, message);
        self.mark(level);
        self.len += 1;
    }

    /// The next message to deliver.
    pub fn front(&self) -> Option<MessageRef> {
        self.highest_level().and_then(|level| self.levels[level].front().copied())
    }

    /// Takes the next message to deliver.
    pub fn pop_front(&mut self) -> Option<MessageRef> {
        let level = self.highest_level()?;
        let message = self.levels[level].pop_front();
        self.mark(level);
        self.len -= usize::from(message.is_some());
        message
    }

    /// The oldest message (lowest position) of all levels: what drop-head overflow drops.
    pub fn pop_oldest(&mut self) -> Option<MessageRef> {
        let level = (0..self.levels.len())
            .filter_map(|level| self.levels[level].front().map(|m| (m.position, level)))
            .min()
            .map(|(_, level)| level)?;
        let message = self.levels[level].pop_front();
        self.mark(level);
        self.len -= usize::from(message.is_some());
        message
    }

    /// Removes `message` (known to be ready), cheaply when it is at the front of its level,
    /// as it is when dispatch takes the next message.
    pub fn remove_ref(&mut self, message: MessageRef) -> Option<MessageRef> {
        let level = self.level_of(message);
        let deque = &mut self.levels[level];
        let removed = if deque.front() == Some(&message) {
            deque.pop_front()
        } else {
            let index = deque.binary_search_by_key(&message.position, |m| m.position).ok()?;
            deque.remove(index)
        };
        self.mark(level);
        self.len -= usize::from(removed.is_some());
        removed
    }

    /// Removes the message at `position`, if ready.
    pub fn remove(&mut self, position: u64) -> Option<MessageRef> {
        for level in 0..self.levels.len() {
            let deque = &mut self.levels[level];
            if let Ok(index) = deque.binary_search_by_key(&position, |m| m.position) {
                let message = deque.remove(index);
                self.mark(level);
                self.len -= usize::from(message.is_some());
                return message;
            }
        }
        None
    }

    /// Messages in delivery order (highest priority first, then by position).
    pub fn iter(&self) -> impl Iterator<Item = MessageRef> + '_ {
        self.levels.iter().rev().flat_map(|level| level.iter().copied())
    }

    /// Removes and returns every message.
    pub fn take_all(&mut self) -> Vec<MessageRef> {
        let mut all = Vec::with_capacity(self.len);
        for level in self.levels.iter_mut().rev() {
            all.extend(std::mem::take(level));
        }
        self.non_empty = [0; 4];
        self.len = 0;
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn message(position: u64, priority: u8) -> MessageRef {
        MessageRef::new(position, position, false, priority)
    }

    #[test]
    fn an_emptied_level_gives_its_memory_back() {
        let mut list = ReadyList::new(None);
        for position in 0..100_000 {
            list.push_back(message(position, 0));
        }
        while list.pop_front().is_some() {}
        assert!(list.levels[0].capacity() <= EMPTY_LEVEL_KEEP_ENTRIES);
        for position in 0..100_000 {
            list.push_back(message(position, 0));
        }
        assert_eq!(list.take_all().len(), 100_000);
        assert_eq!(list.levels[0].capacity(), 0);
    }

    #[test]
    fn plain_queues_are_fifo_whatever_the_priority() {
        let mut list = ReadyList::new(None);
        list.push_back(message(0, 9));
        list.push_back(message(1, 0));
        assert_eq!(list.pop_front().map(|m| m.position), Some(0));
        assert_eq!(list.pop_front().map(|m| m.position), Some(1));
    }

    #[test]
    fn priorities_above_the_maximum_count_as_the_maximum() {
        let mut list = ReadyList::new(Some(5));
        list.push_back(message(0, 5));
        list.push_back(message(1, 200));
        list.push_back(message(2, 9));
        let order: Vec<u64> = std::iter::from_fn(|| list.pop_front()).map(|m| m.position).collect();
        assert_eq!(order, vec![0, 1, 2], "all at level 5: FIFO");
    }

    proptest! {
        /// Against a reference sort: by priority (capped) descending, then position.
        #[test]
        fn delivers_by_priority_then_position(
            max in 1u8..=255,
            priorities in prop::collection::vec(any::<u8>(), 0..200),
            requeued in prop::collection::vec(any::<prop::sample::Index>(), 0..20),
        ) {
            let mut list = ReadyList::new(Some(max));
            for (position, priority) in priorities.iter().enumerate() {
                list.push_back(message(position as u64, *priority));
            }
            let mut taken = Vec::new();
            for _ in 0..priorities.len() / 2 {
                taken.extend(list.pop_front());
            }
            for index in &requeued {
                if !taken.is_empty() {
                    let m = taken.remove(index.index(taken.len()));
                    list.insert(m);
                }
            }
            let mut expected: Vec<(std::cmp::Reverse<u8>, u64)> = list
                .iter()
                .map(|m| (std::cmp::Reverse(m.priority().min(max)), m.position))
                .collect();
            expected.sort();
            let drained: Vec<(std::cmp::Reverse<u8>, u64)> = std::iter::from_fn(|| list.pop_front())
                .map(|m| (std::cmp::Reverse(m.priority().min(max)), m.position))
                .collect();
            prop_assert_eq!(drained, expected);
            prop_assert_eq!(list.len(), 0);
        }
    }
}
