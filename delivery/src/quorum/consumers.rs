//! A quorum queue's consumers: who is attached, what each holds, and which one the next
//! ready message goes to (consumer priorities, round robin among equals, and the single
//! active consumer). Deterministic: choices depend only on the state, never on time or
//! hashing.

use super::command::{ConsumerId, ConsumerSpec, MessageId};
use super::effect::Effect;
use crate::tag_filter::TagFilter;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// A consumer's internal key: its registration number (older consumers have lower keys).
pub(super) type ConsumerKey = u64;

/// Where a consumer stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum Status {
    /// Takes deliveries (within its credit).
    Up,
    /// Cancelled: takes nothing more, kept until what it holds is settled or returned.
    Cancelled,
    /// A channel's `basic.get` holder: never takes pushed deliveries.
    Getter,
}

/// One attached consumer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Consumer {
    pub(super) id: ConsumerId,
    pub(super) spec: ConsumerSpec,
    pub(super) status: Status,
    /// When it was last served (the service counter then): round robin among equals.
    pub(super) last_served: u64,
    /// The messages it holds unsettled (derived from the messages' holders in a snapshot).
    #[serde(skip)]
    pub(super) held: BTreeSet<MessageId>,
}

impl Consumer {
    /// Whether it may take one more message now.
    fn has_credit(&self) -> bool {
        self.status == Status::Up && (self.spec.prefetch == 0 || self.held.len() < self.spec.prefetch as usize)
    }

    /// Whether nothing keeps it once it takes no more deliveries.
    pub(super) fn is_finished(&self) -> bool {
        self.status != Status::Up && self.held.is_empty()
    }
}

/// Every consumer of the queue.
#[derive(Debug, Clone, Default)]
pub(super) struct Consumers {
    by_key: BTreeMap<ConsumerKey, Consumer>,
    by_id: BTreeMap<ConsumerId, ConsumerKey>,
    next_key: ConsumerKey,
    /// Bumped on every delivery, stamped on the consumer served.
    service_counter: u64,
    /// The single active consumer, when the queue has one.
    active: Option<ConsumerKey>,
    /// The tag filters of the consumers that have one.
    filters: BTreeMap<ConsumerKey, TagFilter>,
}

/// The consumer table's own counters, for snapshots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Counters {
    pub(super) next_key: ConsumerKey,
    pub(super) service_counter: u64,
    pub(super) active: Option<ConsumerKey>,
}

impl Consumers {
    /// Rebuilds the table from a snapshot's consumers and their filters (what they hold is
    /// added after).
    pub(super) fn restore(
        consumers: Vec<(ConsumerKey, Consumer)>,
        counters: Counters,
        filters: Vec<(ConsumerKey, TagFilter)>,
    ) -> Self {
        let by_id = consumers.iter().map(|(key, c)| (c.id.clone(), *key)).collect();
        Consumers {
            by_key: consumers.into_iter().collect(),
            by_id,
            next_key: counters.next_key,
            service_counter: counters.service_counter,
            active: counters.active,
            filters: filters.into_iter().collect(),
        }
    }

    /// The counters a snapshot keeps.
    pub(super) fn counters(&self) -> Counters {
        Counters { next_key: self.next_key, service_counter: self.service_counter, active: self.active }
    }

    /// Every consumer, by key.
    pub(super) fn iter(&self) -> impl Iterator<Item = (ConsumerKey, &Consumer)> {
        self.by_key.iter().map(|(key, c)| (*key, c))
    }

    /// The key of `id`, if attached.
    pub(super) fn key_of(&self, id: &ConsumerId) -> Option<ConsumerKey> {
        self.by_id.get(id).copied()
    }

    pub(super) fn get(&self, key: ConsumerKey) -> Option<&Consumer> {
        self.by_key.get(&key)
    }

    pub(super) fn get_mut(&mut self, key: ConsumerKey) -> Option<&mut Consumer> {
        self.by_key.get_mut(&key)
    }

    /// Consumers taking deliveries (not cancelled ones, not getters).
    pub(super) fn up_count(&self) -> usize {
        self.by_key.values().filter(|c| c.status == Status::Up).count()
    }

    /// Attaches `id` with `status`, or updates it if attached; returns its key.
    pub(super) fn attach(&mut self, id: &ConsumerId, spec: ConsumerSpec, status: Status) -> ConsumerKey {
        if let Some(key) = self.key_of(id) {
            if let Some(consumer) = self.by_key.get_mut(&key) {
                consumer.spec = spec;
                consumer.status = status;
            }
            return key;
        }
        let key = self.next_key;
        self.next_key += 1;
        let consumer = Consumer { id: id.clone(), spec, status, last_served: 0, held: BTreeSet::new() };
        self.by_key.insert(key, consumer);
        self.by_id.insert(id.clone(), key);
        key
    }

    /// Removes `key` if nothing keeps it any more.
    pub(super) fn remove_if_finished(&mut self, key: ConsumerKey) {
        if self.by_key.get(&key).is_some_and(Consumer::is_finished) {
            self.remove(key);
        }
    }

    /// Gives `key` a tag filter, or takes it away.
    pub(super) fn set_filter(&mut self, key: ConsumerKey, filter: Option<TagFilter>) {
        match filter {
            Some(filter) => self.filters.insert(key, filter),
            None => self.filters.remove(&key),
        };
    }

    /// The consumers' tag filters, by key.
    pub(super) fn filters(&self) -> &BTreeMap<ConsumerKey, TagFilter> {
        &self.filters
    }

    /// Whether a consumer that takes deliveries filters by tag.
    pub(super) fn any_filter(&self) -> bool {
        self.filters.keys().any(|key| self.by_key.get(key).is_some_and(|c| c.status == Status::Up))
    }

    /// Whether a consumer could take a message now.
    pub(super) fn any_with_credit(&self) -> bool {
        self.by_key.values().any(Consumer::has_credit)
    }

    /// Whether `key` wants a message tagged `tag` (or untagged).
    fn wants(&self, key: ConsumerKey, tag: Option<&[u8]>) -> bool {
        self.filters.get(&key).is_none_or(|filter| filter.matches(tag))
    }

    /// Removes `key`, returning it.
    pub(super) fn remove(&mut self, key: ConsumerKey) -> Option<Consumer> {
        self.filters.remove(&key);
        let consumer = self.by_key.remove(&key)?;
        self.by_id.remove(&consumer.id);
        if self.active == Some(key) {
            self.active = None;
        }
        Some(consumer)
    }

    /// The keys of every consumer of `channel` on `node`.
    pub(super) fn of_channel(&self, node: u64, channel: u64) -> Vec<ConsumerKey> {
        self.by_id
            .range(ConsumerId::getter(node, channel)..)
            .take_while(|(id, _)| id.node == node && id.channel == channel)
            .map(|(_, key)| *key)
            .collect()
    }

    /// Who takes the next ready message, if anyone can; stamps it as served.
    pub(super) fn next_target(&mut self, single_active: bool, effects: &mut Vec<Effect>) -> Option<ConsumerKey> {
        let key = if single_active { self.active_target(effects)? } else { self.round_robin_target(|_| true)? };
        self.serve(key);
        Some(key)
    }

    /// Who takes a ready message tagged `tag`, if anyone wants it and can take it now; stamps
    /// it as served.
    pub(super) fn next_target_for(
        &mut self,
        single_active: bool,
        tag: Option<&[u8]>,
        effects: &mut Vec<Effect>,
    ) -> Option<ConsumerKey> {
        let key = if single_active {
            self.active_target(effects).filter(|key| self.wants(*key, tag))?
        } else {
            self.round_robin_target(|key| self.wants(key, tag))?
        };
        self.serve(key);
        Some(key)
    }

    fn serve(&mut self, key: ConsumerKey) {
        self.service_counter += 1;
        if let Some(consumer) = self.by_key.get_mut(&key) {
            consumer.last_served = self.service_counter;
        }
    }

    /// Of the consumers with credit that `wanted` accepts: highest priority first, then the
    /// one served longest ago, then the oldest.
    fn round_robin_target(&self, wanted: impl Fn(ConsumerKey) -> bool) -> Option<ConsumerKey> {
        self.by_key
            .iter()
            .filter(|(key, c)| c.has_credit() && wanted(**key))
            .max_by_key(|(key, c)| (c.spec.priority, std::cmp::Reverse((c.last_served, **key))))
            .map(|(key, _)| *key)
    }

    /// The consumer that should be active: highest priority, then the oldest.
    fn best_up(&self) -> Option<ConsumerKey> {
        self.by_key
            .iter()
            .filter(|(_, c)| c.status == Status::Up)
            .max_by_key(|(key, c)| (c.spec.priority, std::cmp::Reverse(**key)))
            .map(|(key, _)| *key)
    }

    /// With a single active consumer: the active one if it has credit. A consumer of higher
    /// priority takes over once the active one holds nothing (RabbitMQ's behaviour: the
    /// active consumer gets nothing new meanwhile); a cancelled active one is replaced at once.
    pub(super) fn active_target(&mut self, effects: &mut Vec<Effect>) -> Option<ConsumerKey> {
        let best = self.best_up();
        let current = self.active.filter(|key| self.by_key.get(key).is_some_and(|c| c.status == Status::Up));
        let next = match (current, best) {
            (Some(current), Some(best)) if best != current => {
                let (c, b) = (self.by_key.get(&current)?, self.by_key.get(&best)?);
                if b.spec.priority <= c.spec.priority {
                    current
                } else if c.held.is_empty() {
                    best
                } else {
                    return None;
                }
            }
            (Some(current), _) => current,
            (None, best) => best?,
        };
        if self.active != Some(next) {
            self.switch_active(next, effects);
        }
        self.by_key.get(&next).filter(|c| c.has_credit()).map(|_| next)
    }

    fn switch_active(&mut self, next: ConsumerKey, effects: &mut Vec<Effect>) {
        if let Some(previous) = self.active.and_then(|key| self.by_key.get(&key)) {
            effects.push(Effect::ConsumerActive { consumer: previous.id.clone(), active: false });
        }
        if let Some(consumer) = self.by_key.get(&next) {
            effects.push(Effect::ConsumerActive { consumer: consumer.id.clone(), active: true });
        }
        self.active = Some(next);
    }

    /// The single active consumer's id, if there is one.
    pub(super) fn active(&self) -> Option<&ConsumerId> {
        self.active.and_then(|key| self.by_key.get(&key)).map(|c| &c.id)
    }
}
