//! Properties of `apply` over random command sequences: two replicas, or one rebuilt from
//! a snapshot at a random point plus the rest of the log, end identical; and ready order
//! and delivery counts follow a simple reference model.

use super::*;
use crate::dedup_window::{DedupSettings, DEFAULT_DEDUPLICATION_HEADER};
use crate::overflow::Overflow;
use crate::quorum::{DeadLetterStrategy, Dequeued, PolicySettings, StateSnapshot};
use proptest::prelude::*;
use proptest::sample::Index;
use std::collections::BTreeMap;

/// A command before it meets a state: which consumer, which of its messages.
#[derive(Debug, Clone)]
enum Step {
    Enqueue { priority: Option<u8>, ttl_ms: Option<u64>, size: usize, key: Option<u8> },
    Checkout { consumer: u8, prefetch: u32, priority: i32 },
    Cancel { consumer: u8 },
    Down { channel: u8 },
    Dequeue { channel: u8, settle: bool },
    Settle { consumer: u8, pick: Index, kind: u8 },
    Purge,
    Wait { ms: u64 },
    DeadLettered { pick: Index },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (prop::option::of(0u8..12), prop::option::of(0u64..50), 0usize..8, prop::option::of(0u8..5))
            .prop_map(|(priority, ttl_ms, size, key)| Step::Enqueue { priority, ttl_ms, size, key }),
        1 => (0u8..6, 0u32..3, 0i32..3).prop_map(|(consumer, prefetch, priority)| Step::Checkout { consumer, prefetch, priority }),
        1 => (0u8..6).prop_map(|consumer| Step::Cancel { consumer }),
        1 => (0u8..3).prop_map(|channel| Step::Down { channel }),
        1 => (0u8..3, any::<bool>()).prop_map(|(channel, settle)| Step::Dequeue { channel, settle }),
        4 => (0u8..9, any::<Index>(), 0u8..3).prop_map(|(consumer, pick, kind)| Step::Settle { consumer, pick, kind }),
        1 => Just(Step::Purge),
        1 => (0u64..40).prop_map(|ms| Step::Wait { ms }),
        1 => any::<Index>().prop_map(|pick| Step::DeadLettered { pick }),
    ]
}

fn settings() -> impl Strategy<Value = Settings> {
    (
        prop::option::of(1u8..10),
        prop::option::of(0u64..60),
        prop::option::of(0u64..8),
        prop::option::of(0u64..40),
        prop::sample::select(vec![Overflow::DropHead, Overflow::RejectPublish, Overflow::RejectPublishDlx]),
        any::<bool>(),
        0u32..4,
        any::<bool>(),
        prop::sample::select(vec![DeadLetterStrategy::AtMostOnce, DeadLetterStrategy::AtLeastOnce]),
        prop::option::of((1u64..4, prop::option::of(1u64..60))),
    )
        .prop_map(
            |(
                max_priority,
                message_ttl_ms,
                max_length,
                max_length_bytes,
                overflow,
                dead_letter,
                limit,
                sac,
                strategy,
                dedup,
            )| {
                let policy = PolicySettings {
                    message_ttl_ms,
                    max_length,
                    max_length_bytes,
                    overflow,
                    dead_letter,
                    dead_letter_strategy: strategy,
                    delivery_limit: limit,
                };
                Settings {
                    max_priority,
                    policy,
                    single_active_consumer: sac,
                    ttl_from_delay: false,
                    deduplication: dedup.map(|(cache_size, cache_ttl_ms)| DedupSettings {
                        header: DEFAULT_DEDUPLICATION_HEADER.into(),
                        cache_size,
                        cache_ttl_ms,
                    }),
                }
            },
        )
}

/// Consumers 0..6 are tags of channels 0..3; 6..9 are the channels' getters.
fn consumer_of(n: u8) -> ConsumerId {
    if n >= 6 {
        ConsumerId::getter(0, u64::from(n - 6))
    } else {
        ConsumerId::new(0, u64::from(n % 3), format!("c{n}"))
    }
}

/// Turns steps into the commands a leader would log, resolving picks against `state` as
/// it applies them; returns the log (index, command) and each command's effects.
fn run_leader(settings: &Settings, steps: &[Step]) -> (QueueState, Vec<(u64, Command)>, Vec<Vec<Effect>>) {
    let mut state = QueueState::new(settings.clone());
    let mut now = 1_000;
    let mut log = Vec::new();
    let mut all_effects = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let op = match step {
            Step::Enqueue { priority, ttl_ms, size, key } => Op::Enqueue(Enqueue {
                exchange: String::new(),
                routing_key: "k".into(),
                properties: with_dedup_key(properties(*priority, *ttl_ms), *key),
                body: Bytes::from(vec![7; *size]),
            }),
            Step::Checkout { consumer, prefetch, priority } => {
                checkout(&consumer_of(*consumer % 6), *prefetch, *priority)
            }
            Step::Cancel { consumer } => Op::Cancel { consumer: consumer_of(*consumer) },
            Step::Down { channel } => Op::Down { node: 0, channel: u64::from(*channel) },
            Step::Dequeue { channel, settle } => {
                Op::Dequeue { consumer: ConsumerId::getter(0, u64::from(*channel)), settle: *settle }
            }
            Step::Settle { consumer, pick, kind } => {
                let consumer = consumer_of(*consumer);
                let held = state.held_by(&consumer);
                // Sometimes an id it does not hold: ignored.
                let ids =
                    if held.is_empty() { vec![pick.index(64) as u64] } else { vec![held[pick.index(held.len())]] };
                match kind {
                    0 => Op::Settle { consumer, ids },
                    1 => Op::Return { consumer, ids },
                    _ => Op::Discard { consumer, ids },
                }
            }
            Step::Purge => Op::Purge,
            Step::DeadLettered { pick } => {
                let waiting = state.dead_lettering();
                let ids = if waiting.is_empty() {
                    vec![pick.index(64) as u64]
                } else {
                    vec![waiting[pick.index(waiting.len())].0]
                };
                Op::DeadLettered { ids }
            }
            Step::Wait { ms } => {
                now += ms;
                Op::Expire
            }
        };
        let index = i as u64 + 1;
        let command = Command::new(now, op);
        let (_, effects) = state.apply(index, &command);
        if let Err(broken) = state.check_invariants() {
            panic!("after {command:?}: {broken}");
        }
        log.push((index, command));
        all_effects.push(effects);
    }
    (state, log, all_effects)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// A second replica applying the same log, and one restored from a snapshot taken at a
    /// random point then applying the rest, end in the same state with the same effects.
    #[test]
    fn replicas_and_snapshots_agree(
        settings in settings(),
        steps in prop::collection::vec(step(), 0..120),
        cut in any::<Index>(),
    ) {
        let (leader, log, effects) = run_leader(&settings, &steps);
        let expected = StateSnapshot::of(&leader);

        let mut follower = QueueState::new(settings.clone());
        let mut follower_effects = Vec::new();
        for (index, command) in &log {
            follower_effects.push(follower.apply(*index, command).1);
        }
        prop_assert_eq!(&StateSnapshot::of(&follower), &expected);
        prop_assert_eq!(&follower_effects, &effects);

        let cut = cut.index(log.len() + 1);
        let mut before = QueueState::new(settings.clone());
        for (index, command) in &log[..cut] {
            before.apply(*index, command);
        }
        let encoded = StateSnapshot::of(&before).encode().expect("encodes");
        let mut restored = StateSnapshot::decode(&encoded).expect("decodes").restore(settings).expect("restores");
        prop_assert_eq!(StateSnapshot::of(&restored), StateSnapshot::of(&before));
        for (i, (index, command)) in log[cut..].iter().enumerate() {
            let (_, restored_effects) = restored.apply(*index, command);
            prop_assert_eq!(&restored_effects, &effects[cut + i]);
        }
        prop_assert_eq!(StateSnapshot::of(&restored), expected);
    }

    /// Ready order (priority capped at the maximum, then id) and delivery counts against a
    /// map of ready messages, through enqueue, get, return, settle and purge.
    #[test]
    fn ready_order_and_delivery_counts_follow_the_reference_model(
        max_priority in prop::option::of(1u8..10),
        delivery_limit in 0u32..4,
        steps in prop::collection::vec((0u8..5, 0u8..12, any::<Index>()), 0..200),
    ) {
        let policy = PolicySettings { delivery_limit, ..PolicySettings::default() };
        let settings = Settings { max_priority, policy, ..Settings::default() };
        let mut q = Harness::new(settings);
        let getter = ConsumerId::getter(0, 1);
        // Reference: ready (-priority, id) -> delivery count; held id -> (priority, count).
        let mut ready: BTreeMap<(i16, u64), u32> = BTreeMap::new();
        let mut held: BTreeMap<u64, (u8, u32)> = BTreeMap::new();
        let level = |p: u8| max_priority.map_or(0, |max| p.min(max));
        for (kind, priority, pick) in steps {
            match kind {
                0 | 1 => {
                    let id = q.next_id();
                    q.run(enqueue("m", Some(priority), None));
                    ready.insert((-i16::from(level(priority)), id), 0);
                }
                2 => {
                    let expected = ready.pop_first();
                    let (response, _) = q.run(Op::Dequeue { consumer: getter.clone(), settle: false });
                    let got = match response {
                        Response::Dequeued(got) => got.map(|Dequeued { id, delivery_count, .. }| (id, delivery_count)),
                        other => panic!("{other:?}"),
                    };
                    prop_assert_eq!(got, expected.map(|((_, id), count)| (id, count)));
                    if let Some(((p, id), count)) = expected {
                        held.insert(id, ((-p) as u8, count));
                    }
                }
                3 if !held.is_empty() => {
                    let id = *held.keys().nth(pick.index(held.len())).expect("in range");
                    let (p, count) = held.remove(&id).expect("held");
                    q.run(Op::Return { consumer: getter.clone(), ids: vec![id] });
                    if count < delivery_limit {
                        ready.insert((-i16::from(p), id), count + 1);
                    }
                }
                3 => {
                    let (response, _) = q.run(Op::Purge);
                    prop_assert_eq!(response, Response::Purged(ready.len() as u64));
                    ready.clear();
                }
                _ if !held.is_empty() => {
                    let id = *held.keys().nth(pick.index(held.len())).expect("in range");
                    held.remove(&id);
                    q.run(Op::Settle { consumer: getter.clone(), ids: vec![id] });
                }
                _ => {}
            }
            let expected_order: Vec<u64> = ready.keys().map(|(_, id)| *id).collect();
            prop_assert_eq!(q.state.ready_ids(), expected_order);
            for ((_, id), count) in &ready {
                prop_assert_eq!(q.state.delivery_count(*id), Some(*count));
            }
            prop_assert_eq!(q.state.held_by(&getter), held.keys().copied().collect::<Vec<_>>());
        }
    }
}
