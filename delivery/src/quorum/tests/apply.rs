//! `QueueState::apply`, one command and one argument at a time.

use super::*;
use crate::dead_letter::DeathReason;
use crate::overflow::Overflow;
use crate::quorum::{Dequeued, PolicySettings, DEFAULT_DELIVERY_LIMIT};

fn dead_letters(effects: &[Effect]) -> Vec<(MessageId, DeathReason)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::DeadLetter { id, reason, confirm: false } => Some((*id, *reason)),
            _ => None,
        })
        .collect()
}

/// Settings obeying `policy`, the rest as a queue declared without arguments.
fn obeying(policy: PolicySettings) -> Settings {
    Settings { policy, ..Settings::default() }
}

/// Dead-lettering on, no limits.
fn dlx() -> PolicySettings {
    PolicySettings { dead_letter: true, ..PolicySettings::default() }
}

fn with_dlx() -> Settings {
    obeying(dlx())
}

#[test]
fn an_enqueued_message_is_identified_by_where_it_is_in_the_log() {
    let mut q = Harness::new(Settings::default());
    q.next_index = 41;
    let (a, b) = (message_id(41, 0), message_id(42, 0));
    assert_eq!(q.run(enqueue("a", None, None)).0, Response::Enqueued(a));
    assert_eq!(q.run(enqueue("bb", None, None)).0, Response::Enqueued(b));
    assert_eq!((q.state.ready_count(), q.state.ready_bytes(), q.state.unacked_count()), (2, 3, 0));
    assert_eq!(q.state.ready_ids(), vec![a, b]);
    assert_eq!(entry_of(message_id(7, 4095)), (7, 4095));
}

#[test]
fn checkout_delivers_within_prefetch_and_settling_tops_the_credit_up() {
    let mut q = Harness::new(Settings::default());
    let ids = q.publish(5);
    let c = consumer(1, "c");
    let (response, effects) = q.run(checkout(&c, 2, 0));
    assert_eq!(response, Response::Done);
    assert_eq!(delivered_to(&effects, &c), vec![(ids[0], 0, false), (ids[1], 0, false)]);
    assert_eq!((q.state.ready_count(), q.state.unacked_count(), q.state.consumer_count()), (3, 2, 1));
    let (_, effects) = q.run(Op::Settle { consumer: c.clone(), ids: vec![ids[0]] });
    assert_eq!(delivered_ids(&effects), vec![ids[2]]);
    assert_eq!(q.state.held_by(&c), vec![ids[1], ids[2]]);
    assert_eq!(q.state.delivery_count(ids[0]), None, "settled messages leave");
}

#[test]
fn a_prefetch_of_zero_is_no_limit() {
    let mut q = Harness::new(Settings::default());
    q.publish(100);
    let c = consumer(1, "c");
    let (_, effects) = q.run(checkout(&c, 0, 0));
    assert_eq!(delivered_ids(&effects).len(), 100);
}

#[test]
fn a_returned_message_goes_back_in_place_with_one_more_delivery() {
    let mut q = Harness::new(Settings::default());
    let ids = q.publish(3);
    let c = consumer(1, "c");
    q.run(checkout(&c, 1, 0));
    q.run(Op::Cancel { consumer: c.clone() });
    let (_, effects) = q.run(Op::Return { consumer: c.clone(), ids: vec![ids[0]] });
    assert!(delivered_ids(&effects).is_empty(), "a cancelled consumer takes nothing");
    assert_eq!(q.state.ready_ids(), ids, "back at the head");
    assert_eq!(q.state.delivery_count(ids[0]), Some(1));
    assert_eq!(q.state.consumer_count(), 0);
    let d = consumer(2, "d");
    let (_, effects) = q.run(checkout(&d, 1, 0));
    assert_eq!(delivered_to(&effects, &d), vec![(ids[0], 1, true)]);
}

#[test]
fn past_the_default_delivery_limit_a_message_is_dead_lettered() {
    let mut q = Harness::new(with_dlx());
    let id = q.publish(1)[0];
    let c = consumer(1, "c");
    q.run(checkout(&c, 1, 0));
    for count in 1..=DEFAULT_DELIVERY_LIMIT {
        let (_, effects) = q.run(Op::Return { consumer: c.clone(), ids: vec![id] });
        assert_eq!(delivered_to(&effects, &c), vec![(id, count, true)], "return {count}");
    }
    let (_, effects) = q.run(Op::Return { consumer: c.clone(), ids: vec![id] });
    assert_eq!(dead_letters(&effects), vec![(id, DeathReason::DeliveryLimit)]);
    assert_eq!((q.state.ready_count(), q.state.unacked_count()), (0, 0));
}

#[test]
fn a_delivery_limit_of_zero_drops_on_the_first_return_without_a_dead_letter_exchange() {
    let mut q = Harness::new(obeying(PolicySettings { delivery_limit: 0, ..PolicySettings::default() }));
    let id = q.publish(1)[0];
    let c = consumer(1, "c");
    q.run(checkout(&c, 1, 0));
    let (_, effects) = q.run(Op::Return { consumer: c.clone(), ids: vec![id] });
    assert!(effects.is_empty(), "dropped: {effects:?}");
    assert_eq!((q.state.ready_count(), q.state.unacked_count()), (0, 0));
}

#[test]
fn discard_dead_letters_as_rejected_or_drops() {
    for dead_letter in [true, false] {
        let mut q = Harness::new(obeying(PolicySettings { dead_letter, ..PolicySettings::default() }));
        let ids = q.publish(2);
        let c = consumer(1, "c");
        q.run(checkout(&c, 1, 0));
        let (_, effects) = q.run(Op::Discard { consumer: c.clone(), ids: vec![ids[0]] });
        let expected = if dead_letter { vec![(ids[0], DeathReason::Rejected)] } else { vec![] };
        assert_eq!(dead_letters(&effects), expected);
        assert_eq!(delivered_ids(&effects), vec![ids[1]], "credit freed");
    }
}

#[test]
fn purge_removes_the_ready_messages_only() {
    let mut q = Harness::new(with_dlx());
    let ids = q.publish(5);
    let c = consumer(1, "c");
    q.run(checkout(&c, 2, 0));
    q.run(Op::Cancel { consumer: c.clone() });
    let (response, effects) = q.run(Op::Purge);
    assert_eq!(response, Response::Purged(3));
    assert!(effects.is_empty(), "purged messages are not dead-lettered");
    assert_eq!((q.state.ready_count(), q.state.ready_bytes(), q.state.unacked_count()), (0, 0, 2));
    q.run(Op::Settle { consumer: c.clone(), ids: vec![ids[0], ids[1]] });
    assert_eq!(q.state.unacked_count(), 0);
}

#[test]
fn message_ttl_expires_ready_messages_by_the_command_time() {
    let mut q = Harness::new(obeying(PolicySettings { message_ttl_ms: Some(100), ..dlx() }));
    let ids = q.publish(2);
    assert_eq!(q.state.next_expiry_ms(), Some(1_100));
    q.now_ms = 1_099;
    assert!(q.run(Op::Expire).1.is_empty());
    q.now_ms = 1_100;
    let (_, effects) = q.run(Op::Expire);
    assert_eq!(dead_letters(&effects), vec![(ids[0], DeathReason::Expired), (ids[1], DeathReason::Expired)]);
    assert_eq!(q.state.ready_count(), 0);
    assert_eq!(q.state.next_expiry_ms(), None);
}

#[test]
fn the_shorter_of_queue_and_message_ttl_applies_and_held_messages_do_not_expire() {
    let mut q = Harness::new(obeying(PolicySettings { message_ttl_ms: Some(1_000), ..dlx() }));
    let short = match q.run(enqueue("short", None, Some(10))).0 {
        Response::Enqueued(id) => id,
        other => panic!("{other:?}"),
    };
    let long = q.publish(1)[0];
    let c = consumer(1, "c");
    q.run(checkout(&c, 1, 0));
    assert_eq!(q.state.held_by(&c), vec![short]);
    q.now_ms += 500;
    assert!(q.run(Op::Expire).1.is_empty(), "the held one is not expired, the ready one not yet");
    let (_, effects) = q.run(Op::Return { consumer: c.clone(), ids: vec![short] });
    assert_eq!(dead_letters(&effects), vec![(short, DeathReason::Expired)], "expired once back");
    assert_eq!(delivered_ids(&effects), vec![long]);
}

#[test]
fn a_ttl_of_zero_reaches_only_a_waiting_consumer() {
    let mut q = Harness::new(obeying(PolicySettings { message_ttl_ms: Some(0), ..dlx() }));
    let (_, effects) = q.run(enqueue("gone", None, None));
    assert_eq!(dead_letters(&effects).len(), 1);
    let c = consumer(1, "c");
    q.run(checkout(&c, 1, 0));
    let (response, effects) = q.run(enqueue("taken", None, None));
    let Response::Enqueued(id) = response else { panic!("{response:?}") };
    assert_eq!(delivered_ids(&effects), vec![id]);
    assert!(dead_letters(&effects).is_empty());
}

#[test]
fn the_clock_never_goes_back() {
    let mut q = Harness::new(obeying(PolicySettings { message_ttl_ms: Some(100), ..PolicySettings::default() }));
    q.now_ms = 5_000;
    q.run(Op::Expire);
    q.now_ms = 1_000;
    q.publish(1);
    assert_eq!(q.state.clock_ms(), 5_000);
    assert_eq!(q.state.next_expiry_ms(), Some(5_100));
}

#[test]
fn drop_head_drops_the_oldest_past_the_length_limits() {
    let mut q = Harness::new(obeying(PolicySettings { max_length: Some(2), ..dlx() }));
    let ids = q.publish(2);
    let (response, effects) = q.run(enqueue("third", None, None));
    assert!(matches!(response, Response::Enqueued(_)));
    assert_eq!(dead_letters(&effects), vec![(ids[0], DeathReason::Maxlen)]);
    assert_eq!(q.state.ready_count(), 2);

    let mut q = Harness::new(obeying(PolicySettings { max_length_bytes: Some(5), ..PolicySettings::default() }));
    let ids = q.publish(3); // 2 bytes each
    assert_eq!(q.state.ready_ids(), vec![ids[1], ids[2]]);
    assert_eq!(q.state.ready_bytes(), 4);
}

#[test]
fn reject_publish_refuses_and_reject_publish_dlx_also_dead_letters() {
    let mut q =
        Harness::new(obeying(PolicySettings { max_length: Some(1), overflow: Overflow::RejectPublish, ..dlx() }));
    q.publish(1);
    let (response, effects) = q.run(enqueue("refused", None, None));
    assert_eq!(response, Response::Rejected);
    assert!(effects.is_empty());
    assert_eq!(q.state.ready_count(), 1);

    let mut q =
        Harness::new(obeying(PolicySettings { max_length: Some(1), overflow: Overflow::RejectPublishDlx, ..dlx() }));
    q.publish(1);
    let id = q.next_id();
    let (response, effects) = q.run(enqueue("refused", None, None));
    assert_eq!(response, Response::Rejected);
    assert_eq!(dead_letters(&effects), vec![(id, DeathReason::Maxlen)]);
    let mut q =
        Harness::new(obeying(PolicySettings { max_length_bytes: Some(3), overflow: Overflow::RejectPublish, ..dlx() }));
    q.publish(1);
    assert_eq!(q.run(enqueue("12", None, None)).0, Response::Rejected);
}

#[test]
fn a_policy_applies_from_its_entry_at_the_version_that_has_it_and_is_nothing_before() {
    use crate::quorum::QUEUE_POLICIES_GROUP_VERSION;
    let mut q = Harness::new(with_dlx());
    let ids = q.publish(3);
    let policy = PolicySettings { max_length: Some(1), ..dlx() };
    let (_, effects) = q.run(Op::ApplyPolicy { settings: policy });
    assert!(effects.is_empty() && q.state.settings().policy.max_length.is_none(), "no such op at the first version");

    q.run(Op::SetMachineVersion { version: QUEUE_POLICIES_GROUP_VERSION });
    let (response, effects) = q.run(Op::ApplyPolicy { settings: policy });
    assert_eq!(response, Response::Done);
    let dropped = vec![(ids[0], DeathReason::Maxlen), (ids[1], DeathReason::Maxlen)];
    assert_eq!(dead_letters(&effects), dropped, "drop-head applies a lower limit at once");
    assert_eq!(q.state.ready_ids(), vec![ids[2]]);

    // Under reject-publish the messages stay, and the next one is refused.
    let stricter = PolicySettings { max_length: Some(0), overflow: Overflow::RejectPublish, ..policy };
    let (_, effects) = q.run(Op::ApplyPolicy { settings: stricter });
    assert!(effects.is_empty());
    assert_eq!(q.run(enqueue("refused", None, None)).0, Response::Rejected);
    assert_eq!(q.state.ready_ids(), vec![ids[2]]);

    // Cleared: the queue's own arguments again.
    q.run(Op::ApplyPolicy { settings: dlx() });
    assert!(matches!(q.run(enqueue("taken", None, None)).0, Response::Enqueued(_)));
}

#[test]
fn max_priority_orders_ready_messages_strictly_and_plain_queues_ignore_priority() {
    let mut q = Harness::new(Settings { max_priority: Some(255), ..Settings::default() });
    let mut ids = Vec::new();
    for priority in [0u8, 200, 5, 255, 5] {
        ids.push(q.next_id());
        q.run(enqueue("p", Some(priority), None));
    }
    assert_eq!(q.state.ready_ids(), vec![ids[3], ids[1], ids[2], ids[4], ids[0]]);
    let c = consumer(1, "c");
    q.run(checkout(&c, 2, 0));
    q.run(Op::Cancel { consumer: c.clone() });
    q.run(Op::Return { consumer: c, ids: vec![ids[3], ids[1]] });
    assert_eq!(q.state.ready_ids(), vec![ids[3], ids[1], ids[2], ids[4], ids[0]], "returned to their places");

    let mut q = Harness::new(Settings::default());
    q.run(enqueue("p", Some(9), None));
    q.run(enqueue("p", Some(0), None));
    assert_eq!(q.state.ready_ids(), vec![message_id(1, 0), message_id(2, 0)]);
}

#[test]
fn higher_priority_consumers_are_served_first_and_equals_in_turn() {
    let mut q = Harness::new(Settings::default());
    let (low, high_a, high_b) = (consumer(1, "low"), consumer(2, "a"), consumer(3, "b"));
    q.run(checkout(&low, 10, 0));
    q.run(checkout(&high_a, 2, 5));
    q.run(checkout(&high_b, 2, 5));
    let ids = q.publish(6);
    let order: Vec<ConsumerId> = q
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::Deliver { consumer, .. } => Some(consumer.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(order, vec![high_a.clone(), high_b.clone(), high_a, high_b, low.clone(), low.clone()]);
    assert_eq!(q.state.held_by(&low), vec![ids[4], ids[5]]);
}

#[test]
fn a_single_active_consumer_gets_everything_until_it_goes() {
    let mut q = Harness::new(Settings { single_active_consumer: true, ..Settings::default() });
    let (a, b) = (consumer(1, "a"), consumer(2, "b"));
    let (_, effects) = q.run(checkout(&a, 1, 0));
    assert_eq!(effects, vec![Effect::ConsumerActive { consumer: a.clone(), active: true }]);
    q.run(checkout(&b, 1, 0));
    let ids = q.publish(3);
    assert_eq!(delivered_to(&q.effects, &a), vec![(ids[0], 0, false)]);
    assert!(delivered_to(&q.effects, &b).is_empty(), "b waits even with credit");
    let (_, effects) = q.run(Op::Cancel { consumer: a.clone() });
    assert!(effects.contains(&Effect::ConsumerActive { consumer: b.clone(), active: true }), "{effects:?}");
    assert_eq!(delivered_to(&effects, &b), vec![(ids[1], 0, false)]);
    assert_eq!(q.state.active_consumer(), Some(&b));
    q.run(Op::Settle { consumer: a.clone(), ids: vec![ids[0]] });
    assert_eq!(q.state.unacked_count(), 1);
}

#[test]
fn a_higher_priority_single_active_consumer_takes_over_once_the_active_one_holds_nothing() {
    let mut q = Harness::new(Settings { single_active_consumer: true, ..Settings::default() });
    let (a, b) = (consumer(1, "a"), consumer(2, "b"));
    q.run(checkout(&a, 1, 0));
    let ids = q.publish(3);
    let (_, effects) = q.run(checkout(&b, 1, 9));
    assert!(effects.is_empty(), "a still holds {}: {effects:?}", ids[0]);
    let (_, effects) = q.run(Op::Settle { consumer: a.clone(), ids: vec![ids[0]] });
    assert_eq!(
        effects,
        vec![
            Effect::ConsumerActive { consumer: a.clone(), active: false },
            Effect::ConsumerActive { consumer: b.clone(), active: true },
            Effect::Deliver { consumer: b.clone(), id: ids[1], delivery_count: 0, redelivered: false },
        ]
    );
}

#[test]
fn a_cancelled_consumer_keeps_what_it_holds_until_settled() {
    let mut q = Harness::new(Settings::default());
    let ids = q.publish(3);
    let c = consumer(1, "c");
    q.run(checkout(&c, 2, 0));
    q.run(Op::Cancel { consumer: c.clone() });
    assert_eq!((q.state.consumer_count(), q.state.unacked_count()), (0, 2));
    q.run(Op::Settle { consumer: c.clone(), ids: vec![ids[0], ids[1]] });
    assert_eq!(q.state.held_by(&c), Vec::<MessageId>::new());
    // The same tag consuming again is a new consumer.
    let (_, effects) = q.run(checkout(&c, 2, 0));
    assert_eq!(delivered_ids(&effects), vec![ids[2]]);
}

#[test]
fn a_channel_going_down_returns_everything_it_held_counting_a_failed_delivery() {
    let mut q = Harness::new(Settings::default());
    let ids = q.publish(4);
    let (a, b, other) = (consumer(7, "a"), consumer(7, "b"), consumer(8, "x"));
    q.run(checkout(&a, 1, 0));
    q.run(checkout(&b, 1, 0));
    q.run(Op::Dequeue { consumer: ConsumerId::getter(0, 7), settle: false });
    assert_eq!(q.state.unacked_count(), 3);
    let (_, effects) = q.run(Op::Down { node: 0, channel: 7 });
    assert!(effects.is_empty(), "nobody to deliver to");
    assert_eq!(q.state.ready_ids(), ids);
    assert_eq!((q.state.consumer_count(), q.state.unacked_count()), (0, 0));
    assert_eq!(q.state.delivery_count(ids[0]), Some(1));
    let (_, effects) = q.run(checkout(&other, 1, 0));
    assert_eq!(delivered_to(&effects, &other), vec![(ids[0], 1, true)]);
}

#[test]
fn dequeue_takes_the_next_message_settled_or_held_by_the_getter() {
    let mut q = Harness::new(Settings::default());
    let ids = q.publish(3);
    let getter = ConsumerId::getter(0, 3);
    let (response, _) = q.run(Op::Dequeue { consumer: getter.clone(), settle: true });
    let taken = Dequeued { id: ids[0], delivery_count: 0, redelivered: false, ready_after: 2 };
    assert_eq!(response, Response::Dequeued(Some(taken)));
    assert_eq!(q.state.unacked_count(), 0, "no-ack: settled at once");
    q.run(Op::Dequeue { consumer: getter.clone(), settle: false });
    assert_eq!(q.state.held_by(&getter), vec![ids[1]]);
    assert_eq!(q.state.consumer_count(), 0, "a getter is not a consumer");
    q.run(Op::Return { consumer: getter.clone(), ids: vec![ids[1]] });
    let (response, _) = q.run(Op::Dequeue { consumer: getter.clone(), settle: false });
    let again = Dequeued { id: ids[1], delivery_count: 1, redelivered: true, ready_after: 1 };
    assert_eq!(response, Response::Dequeued(Some(again)));
    q.run(Op::Settle { consumer: getter.clone(), ids: vec![ids[1]] });
    q.run(Op::Dequeue { consumer: getter.clone(), settle: true });
    assert_eq!(q.run(Op::Dequeue { consumer: getter, settle: true }).0, Response::Dequeued(None));
}

#[test]
fn settling_what_another_consumer_holds_or_twice_changes_nothing() {
    let mut q = Harness::new(Settings::default());
    let ids = q.publish(2);
    let (a, b) = (consumer(1, "a"), consumer(2, "b"));
    q.run(checkout(&a, 1, 0));
    q.run(checkout(&b, 1, 0));
    q.run(Op::Settle { consumer: b.clone(), ids: vec![ids[0]] });
    q.run(Op::Settle { consumer: consumer(9, "nobody"), ids: vec![ids[0]] });
    q.run(Op::Return { consumer: b.clone(), ids: vec![ids[0]] });
    assert_eq!(q.state.held_by(&a), vec![ids[0]]);
    q.run(Op::Settle { consumer: a.clone(), ids: vec![ids[0]] });
    q.run(Op::Settle { consumer: a.clone(), ids: vec![ids[0]] });
    assert_eq!(q.state.unacked_count(), 1);
}

#[test]
fn the_release_cursor_is_just_below_the_oldest_live_message() {
    let mut q = Harness::new(Settings::default());
    assert_eq!(q.state.release_cursor(10), 10, "nothing live");
    let ids = q.publish(3);
    let c = consumer(1, "c");
    q.run(checkout(&c, 3, 0));
    assert_eq!(q.state.release_cursor(q.next_index - 1), entry_of(ids[0]).0 - 1);
    q.run(Op::Settle { consumer: c.clone(), ids: vec![ids[1]] });
    assert_eq!(q.state.release_cursor(q.next_index - 1), entry_of(ids[0]).0 - 1, "the oldest is still held");
    q.run(Op::Settle { consumer: c.clone(), ids: vec![ids[0]] });
    assert_eq!(q.state.release_cursor(q.next_index - 1), entry_of(ids[2]).0 - 1);
    q.run(Op::Settle { consumer: c, ids: vec![ids[2]] });
    assert_eq!(q.state.release_cursor(q.next_index - 1), q.next_index - 1);
}

#[test]
fn settings_come_from_the_queue_arguments_with_rabbitmq_4_defaults() {
    let arguments = crate::queue::QueueArguments {
        max_priority: Some(9),
        dead_letter_exchange: Some("dlx".into()),
        single_active_consumer: true,
        ..Default::default()
    };
    let settings = Settings::from(&arguments);
    assert_eq!(settings.policy.delivery_limit, DEFAULT_DELIVERY_LIMIT);
    assert_eq!(DEFAULT_DELIVERY_LIMIT, 20);
    assert!(settings.policy.dead_letter && settings.single_active_consumer);
    assert_eq!(settings.max_priority, Some(9));
    let limited = crate::queue::QueueArguments { delivery_limit: Some(3), ..Default::default() };
    assert_eq!(Settings::from(&limited).policy.delivery_limit, 3);
}

#[test]
fn at_least_once_dead_letters_stay_until_the_target_confirms() {
    let settings = obeying(PolicySettings {
        dead_letter_strategy: crate::quorum::DeadLetterStrategy::AtLeastOnce,
        overflow: Overflow::RejectPublish,
        max_length: Some(2),
        ..dlx()
    });
    let mut q = Harness::new(settings);
    let ids = q.publish(2);
    let c = consumer(1, "c");
    q.run(checkout(&c, 1, 0));
    let (_, effects) = q.run(Op::Discard { consumer: c.clone(), ids: vec![ids[0]] });
    assert!(effects.contains(&Effect::DeadLetter { id: ids[0], reason: DeathReason::Rejected, confirm: true }));
    assert_eq!(q.state.dead_lettering(), vec![(ids[0], DeathReason::Rejected)]);
    assert_eq!(q.state.release_cursor(q.next_index - 1), entry_of(ids[0]).0 - 1, "still live until confirmed");
    assert!(matches!(q.run(enqueue("fits", None, None)).0, Response::Enqueued(_)), "1 ready + 1 waiting");
    assert_eq!(q.run(enqueue("full", None, None)).0, Response::Rejected, "the waiting one counts against the limit");
    q.run(Op::DeadLettered { ids: vec![ids[0]] });
    assert!(q.state.dead_lettering().is_empty());
    assert!(matches!(q.run(enqueue("room", None, None)).0, Response::Enqueued(_)));

    // Without reject-publish, RabbitMQ falls back to at-most-once.
    let settings =
        obeying(PolicySettings { dead_letter_strategy: crate::quorum::DeadLetterStrategy::AtLeastOnce, ..dlx() });
    assert!(!settings.dead_letters_at_least_once());
}

#[test]
fn a_filtered_consumer_takes_only_the_tags_it_wants_and_a_snapshot_keeps_its_filter() {
    let mut q = Harness::new(Settings::default());
    let publish = |q: &mut Harness, op: Op| {
        let id = q.next_id();
        q.run(op);
        id
    };
    let red = publish(&mut q, tagged("r1", "red"));
    let plain = publish(&mut q, enqueue("p", None, None));
    let blue = publish(&mut q, tagged("b", "blue"));
    let red2 = publish(&mut q, tagged("r2", "red"));
    let f = consumer(1, "f");
    let spec = ConsumerSpec { prefetch: 0, priority: 0 };
    let filter = crate::tag_filter::TagFilter::new(vec![b"red".to_vec()], false);
    let (_, effects) = q.run(Op::CheckoutFiltered { consumer: f.clone(), spec, filter });
    assert_eq!(delivered_ids(&effects), vec![red, red2], "only the red ones, in order");
    assert_eq!(q.state.ready_ids(), vec![plain, blue], "the others stay");

    let encoded = crate::quorum::StateSnapshot::of(&q.state).encode().expect("encodes");
    let decoded = crate::quorum::StateSnapshot::decode(&encoded).expect("decodes");
    q.state = decoded.restore(Settings::default()).expect("restores");
    let red3 = publish(&mut q, tagged("r3", "red"));
    assert_eq!(delivered_to(&q.effects, &f).last().map(|d| d.0), Some(red3), "the filter survived the snapshot");
    let green = publish(&mut q, tagged("g", "green"));
    assert_eq!(q.state.ready_ids(), vec![plain, blue, green], "green is not for f");

    let c = consumer(2, "c");
    let (_, effects) = q.run(checkout(&c, 0, 0));
    let to_c: Vec<MessageId> = delivered_to(&effects, &c).into_iter().map(|d| d.0).collect();
    assert_eq!(to_c, vec![plain, blue, green], "an unfiltered consumer takes what nobody else wants");
}

fn deduplicating(cache_size: u64, cache_ttl_ms: Option<u64>) -> Settings {
    let deduplication = crate::dedup_window::DedupSettings {
        header: crate::dedup_window::DEFAULT_DEDUPLICATION_HEADER.into(),
        cache_size,
        cache_ttl_ms,
    };
    Settings { deduplication: Some(deduplication), ..Settings::default() }
}

fn keyed(body: &str, key: u8) -> Op {
    let Op::Enqueue(mut message) = enqueue(body, None, None) else { unreachable!("enqueue builds an Enqueue") };
    message.properties = with_dedup_key(message.properties, Some(key));
    Op::Enqueue(message)
}

#[test]
fn a_message_whose_key_was_seen_is_dropped_and_confirmed() {
    let mut q = Harness::new(deduplicating(10, None));
    assert!(matches!(q.run(keyed("first", 1)).0, Response::Enqueued(_)));
    assert_eq!(q.run(keyed("again", 1)).0, Response::Duplicate);
    assert!(matches!(q.run(keyed("other", 2)).0, Response::Enqueued(_)));
    assert!(matches!(q.run(enqueue("no key", None, None)).0, Response::Enqueued(_)));
    assert!(matches!(q.run(enqueue("no key", None, None)).0, Response::Enqueued(_)), "no header, no dedup");
    assert_eq!(q.state.ready_count(), 4);

    let mut plain = Harness::new(Settings::default());
    plain.run(keyed("first", 1));
    assert!(matches!(plain.run(keyed("again", 1)).0, Response::Enqueued(_)), "off unless the queue asks");
}

#[test]
fn the_window_is_the_commands_clock_and_survives_a_snapshot() {
    let mut q = Harness::new(deduplicating(10, Some(1_000)));
    q.run(keyed("first", 1));
    q.now_ms += 999;
    assert_eq!(q.run(keyed("again", 1)).0, Response::Duplicate);

    let encoded = crate::quorum::StateSnapshot::of(&q.state).encode().expect("encodes");
    let decoded = crate::quorum::StateSnapshot::decode(&encoded).expect("decodes");
    let mut restored = decoded.restore(q.state.settings().clone()).expect("restores");
    let (index, now_ms) = (q.next_index, q.now_ms);
    let retry = restored.apply(message_id(index, 0), &Command::new(now_ms, keyed("retry", 1))).0;
    assert_eq!(retry, Response::Duplicate, "the restored window still holds the key");
    let later = restored.apply(message_id(index + 1, 0), &Command::new(now_ms + 1, keyed("later", 1))).0;
    assert!(matches!(later, Response::Enqueued(_)), "1 s after it was first seen, the key is free");
}

#[test]
fn a_message_refused_for_overflow_leaves_its_key_free() {
    let mut q = Harness::new(Settings {
        policy: PolicySettings { max_length: Some(1), overflow: Overflow::RejectPublish, ..PolicySettings::default() },
        ..deduplicating(10, None)
    });
    q.run(keyed("fills", 1));
    assert_eq!(q.run(keyed("refused", 2)).0, Response::Rejected);
    q.run(Op::Purge);
    assert!(matches!(q.run(keyed("sent again", 2)).0, Response::Enqueued(_)));
}

/// An Enqueue of `body` with header `x-delay: delay_ms`.
fn delayed(body: &str, delay_ms: i64) -> Op {
    let Op::Enqueue(mut message) = enqueue(body, None, None) else { unreachable!("an enqueue") };
    let decoded = crate::properties::Properties::decode(message.properties).expect("test properties decode");
    let with_delay = decoded.with_long_long_header(crate::exchange::delayed::DELAY_HEADER, delay_ms).expect("adds");
    message.properties = with_delay.raw().clone();
    Op::Enqueue(message)
}

#[test]
fn a_delayed_exchanges_pending_set_hands_each_message_on_at_its_delay_and_keeps_it_until_recorded() {
    let mut q = Harness::new(Settings::delayed_exchange());
    let start = q.now_ms;
    let ids: Vec<MessageId> = [300, 100, 0, 200]
        .into_iter()
        .map(|delay| {
            let id = q.next_id();
            q.run(delayed(&format!("after {delay}"), delay));
            id
        })
        .collect();
    // No delay (0) is due at once, as an exchange routes it.
    assert_eq!(q.state.dead_lettering(), vec![(ids[2], DeathReason::Expired)]);
    assert_eq!(q.state.next_expiry_ms(), Some(start + 100));
    q.now_ms = start + 99;
    assert!(q.run(Op::Expire).1.is_empty(), "nothing before its time");
    q.now_ms = start + 200;
    let (_, effects) = q.run(Op::Expire);
    let handed_on = [ids[1], ids[3]].map(|id| Effect::DeadLetter { id, reason: DeathReason::Expired, confirm: true });
    assert_eq!(effects, handed_on.to_vec(), "in due order, at least once");
    // Handed on, not yet recorded: a new leader would hand them on again.
    assert_eq!(q.state.dead_lettering().len(), 3);
    q.run(Op::DeadLettered { ids: vec![ids[1], ids[2], ids[3]] });
    assert!(q.state.dead_lettering().is_empty());
    assert_eq!(q.state.next_expiry_ms(), Some(start + 300), "the last one still held");
}
