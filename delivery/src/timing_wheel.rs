//! A hierarchical timing wheel: timers for message TTLs, delayed messages and queue expiry.
//!
//! Four levels of 256 slots; level 0 has one slot per tick, each slot of level `n` spans
//! 256^n ticks. A timer goes into the level whose span fits its distance from now, and moves
//! down a level each time the level above turns over (cascading), until it fires from level 0.
//! Timers beyond the top level's horizon wait in an overflow list that is re-examined each
//! time the top level turns over. Insert and cancel are O(1); advancing costs O(1) per tick
//! plus the work of the timers that move or fire. There is no per-timer task and no sorted
//! scan. A timer never fires before its deadline and fires at most one tick after it.

/// Slots per level (a power of two, so a slot index is a mask of the tick).
const SLOTS: usize = 256;
const SLOT_BITS: u32 = 8;
/// Levels of the wheel.
const LEVELS: usize = 4;

/// Identifies an inserted timer, for cancelling it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimerId {
    index: usize,
    generation: u64,
}

#[derive(Debug)]
struct Entry<T> {
    deadline_tick: u64,
    generation: u64,
    value: Option<T>,
}

/// The wheel. `T` is what a timer carries back when it fires.
#[derive(Debug)]
pub struct TimingWheel<T> {
    tick_ms: u64,
    /// The last tick processed.
    now_tick: u64,
    /// `levels[level][slot]` holds indices into `entries`.
    levels: Vec<Vec<Vec<usize>>>,
    /// Indices held by each level, so that empty stretches of time are skipped at once.
    level_len: [usize; LEVELS],
    overflow: Vec<usize>,
    entries: Vec<Entry<T>>,
    free: Vec<usize>,
    next_generation: u64,
    len: usize,
}

impl<T> TimingWheel<T> {
    /// A wheel whose tick is `tick_ms` long, starting at time `now_ms`.
    pub fn new(tick_ms: u64, now_ms: u64) -> Self {
        let tick_ms = tick_ms.max(1);
        TimingWheel {
            tick_ms,
            now_tick: now_ms / tick_ms,
            levels: (0..LEVELS).map(|_| (0..SLOTS).map(|_| Vec::new()).collect()).collect(),
            level_len: [0; LEVELS],
            overflow: Vec::new(),
            entries: Vec::new(),
            free: Vec::new(),
            next_generation: 0,
            len: 0,
        }
    }

    /// Timers waiting.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no timer waits.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The tick length.
    pub fn tick_ms(&self) -> u64 {
        self.tick_ms
    }

    /// Adds a timer due at `deadline_ms`; a deadline already past fires on the next advance.
    pub fn insert(&mut self, deadline_ms: u64, value: T) -> TimerId {
        // Round up: a timer must never fire before its deadline.
        let deadline_tick = deadline_ms.div_ceil(self.tick_ms).max(self.now_tick + 1);
        self.next_generation += 1;
        let entry = Entry { deadline_tick, generation: self.next_generation, value: Some(value) };
        let index = match self.free.pop() {
            Some(index) => {
                self.entries[index] = entry;
                index
            }
            None => {
                self.entries.push(entry);
                self.entries.len() - 1
            }
        };
        self.place(index);
        self.len += 1;
        TimerId { index, generation: self.next_generation }
    }

    /// Cancels a timer; returns its value if it had not fired yet.
    pub fn cancel(&mut self, id: TimerId) -> Option<T> {
        let entry = self.entries.get_mut(id.index).filter(|e| e.generation == id.generation)?;
        let value = entry.value.take();
        if value.is_some() {
            // The slot still lists the index; it is recycled when that slot is next visited.
            self.len -= 1;
        }
        value
    }

    fn place(&mut self, index: usize) {
        let deadline = self.entries[index].deadline_tick;
        let distance = deadline.saturating_sub(self.now_tick);
        for level in 0..LEVELS {
            if distance < (SLOTS as u64) << (SLOT_BITS * level as u32) {
                let slot = ((deadline >> (SLOT_BITS * level as u32)) as usize) & (SLOTS - 1);
                self.levels[level][slot].push(index);
                self.level_len[level] += 1;
                return;
            }
        }
        self.overflow.push(index);
    }

    /// Advances to `now_ms`, returning the values of the timers that fell due, in deadline order
    /// (by tick; insertion order within a tick).
    pub fn advance(&mut self, now_ms: u64) -> Vec<T> {
        let target = now_ms / self.tick_ms;
        let mut fired = Vec::new();
        while self.now_tick < target {
            if self.len == 0 {
                self.now_tick = target;
                break;
            }
            self.skip_empty_ticks(target);
            self.now_tick += 1;
            self.cascade();
            let slot = (self.now_tick as usize) & (SLOTS - 1);
            let due = std::mem::take(&mut self.levels[0][slot]);
            self.level_len[0] -= due.len();
            for index in due {
                self.fire_or_keep(index, &mut fired);
            }
        }
        fired
    }

    /// While the lowest levels are empty nothing can happen before the next level above turns
    /// over, so time jumps to just before that boundary (never past `target`).
    fn skip_empty_ticks(&mut self, target: u64) {
        let empty_levels = self.level_len.iter().take_while(|len| **len == 0).count();
        if empty_levels == 0 {
            return;
        }
        let span = 1u64 << (SLOT_BITS * empty_levels as u32);
        let boundary = (self.now_tick / span + 1) * span;
        self.now_tick = self.now_tick.max((boundary - 1).min(target - 1));
    }

    /// When lower levels turn over, the matching slot of the level above moves down.
    fn cascade(&mut self) {
        for level in 1..LEVELS {
            let shift = SLOT_BITS * level as u32;
            if self.now_tick & ((1 << shift) - 1) != 0 {
                return;
            }
            let slot = ((self.now_tick >> shift) as usize) & (SLOTS - 1);
            let moving = std::mem::take(&mut self.levels[level][slot]);
            self.level_len[level] -= moving.len();
            for index in moving {
                self.replace_or_recycle(index);
            }
        }
        if self.now_tick & ((1u64 << (SLOT_BITS * LEVELS as u32)) - 1) == 0 {
            for index in std::mem::take(&mut self.overflow) {
                self.replace_or_recycle(index);
            }
        }
    }

    fn replace_or_recycle(&mut self, index: usize) {
        if self.entries[index].value.is_some() {
            self.place(index);
        } else {
            self.free.push(index);
        }
    }

    fn fire_or_keep(&mut self, index: usize, fired: &mut Vec<T>) {
        let entry = &mut self.entries[index];
        if entry.value.is_none() {
            self.free.push(index);
        } else if entry.deadline_tick <= self.now_tick {
            if let Some(value) = entry.value.take() {
                fired.push(value);
                self.len -= 1;
            }
            self.free.push(index);
        } else {
            // Landed in this slot from a later turn of the wheel: not due yet.
            self.place(index);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn fires_at_the_deadline_not_before() {
        let mut wheel = TimingWheel::new(5, 1000);
        wheel.insert(1012, "a");
        assert!(wheel.advance(1014).is_empty());
        assert_eq!(wheel.advance(1015), vec!["a"]);
        assert!(wheel.is_empty());
    }

    #[test]
    fn past_deadlines_fire_on_the_next_tick() {
        let mut wheel = TimingWheel::new(1, 500);
        wheel.insert(10, 1);
        assert_eq!(wheel.advance(501), vec![1]);
    }

    #[test]
    fn cancel_is_once_and_stale_ids_do_nothing() {
        let mut wheel = TimingWheel::new(1, 0);
        let a = wheel.insert(10, "a");
        assert_eq!(wheel.cancel(a), Some("a"));
        assert_eq!(wheel.cancel(a), None);
        let b = wheel.insert(10, "b");
        assert_eq!(wheel.cancel(a), None, "a's slot now belongs to b");
        assert_eq!(wheel.advance(20), vec!["b"]);
        assert_eq!(wheel.cancel(b), None);
    }

    #[test]
    fn far_timers_cascade_and_overflow() {
        let mut wheel = TimingWheel::new(1, 0);
        let horizon = 1u64 << 32;
        wheel.insert(300, "level 1");
        wheel.insert(70_000, "level 2");
        wheel.insert(horizon + 5, "overflow");
        assert_eq!(wheel.advance(299), Vec::<&str>::new());
        assert_eq!(wheel.advance(300), vec!["level 1"]);
        assert_eq!(wheel.advance(70_000), vec!["level 2"]);
        assert_eq!(wheel.advance(horizon + 4), Vec::<&str>::new());
        assert_eq!(wheel.advance(horizon + 5), vec!["overflow"]);
    }

    proptest! {
        /// Against a sorted reference: every live timer fires exactly once, never early, at
        /// most one tick late, and in deadline-tick order; cancelled timers never fire.
        #[test]
        fn agrees_with_a_sorted_reference(
            tick_ms in 1u64..8,
            start in 0u64..1_000_000,
            timers in prop::collection::vec((0u64..200_000, any::<bool>()), 1..200),
            steps in prop::collection::vec(1u64..20_000, 1..40),
        ) {
            let mut wheel = TimingWheel::new(tick_ms, start);
            let mut ids = Vec::new();
            for (i, (delay, _)) in timers.iter().enumerate() {
                ids.push(wheel.insert(start + delay, i));
            }
            let mut live: Vec<(u64, usize)> = Vec::new();
            for (i, (delay, cancel)) in timers.iter().enumerate() {
                if *cancel {
                    prop_assert_eq!(wheel.cancel(ids[i]), Some(i));
                } else {
                    live.push((start + delay, i));
                }
            }
            let mut now = start;
            let mut fired = Vec::new();
            for step in steps.iter().chain(std::iter::once(&300_000)) {
                now += step;
                let batch = wheel.advance(now);
                for &i in &batch {
                    let deadline = start + timers[i].0;
                    prop_assert!(deadline <= now, "timer {} fired early", i);
                    prop_assert!(now - step < deadline + tick_ms, "timer {} fired late", i);
                }
                let ticks: Vec<u64> = batch.iter().map(|&i| (start + timers[i].0).div_ceil(tick_ms)).collect();
                prop_assert!(ticks.windows(2).all(|w| w[0] <= w[1]), "out of order: {:?}", ticks);
                fired.extend(batch);
            }
            fired.sort_unstable();
            let mut expected: Vec<usize> = live.iter().map(|(_, i)| *i).collect();
            expected.sort_unstable();
            prop_assert_eq!(fired, expected);
            prop_assert!(wheel.is_empty());
        }
    }
}
