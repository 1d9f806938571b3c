//! What the consumers must receive, and whether they did.
//!
//! Classic and quorum queues hand each message to one consumer of its queue, so only the total
//! is known: every accepted message (confirmed, or published without confirms) times the queues
//! it reaches. A stream keeps its messages, and each of its consumers reads all of it from where
//! `--stream-offset` starts it, so each consumer has a count of its own: what its queue accepted
//! (every message with a fanout exchange), less the offsets it skips. The run starts from empty
//! streams (see `Topology::purge`), and the offsets of a stream start at 0. Consumers that
//! attach before publishing (no `--backlog`) see every message whatever their offset (first,
//! last and next of an empty stream, or an interval, all start at its end); in backlog mode
//! the options allow only first and fixed offsets, whose counts are known. With no producers,
//! each stream consumer must receive `--count`.

use super::options::{ExchangeType, Options, StreamOffset};
use super::stats::Counters;

/// Deliveries the consumers must receive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expectation {
    /// Nothing says how many (no consumers, or no producers and no `--count`).
    Unknown,
    /// In all, between the consumers (queues that share messages between their consumers).
    Total(u64),
    /// Each consumer's own, by consumer id (streams).
    PerConsumer(Vec<u64>),
}

/// The verdict on the counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CountCheck {
    /// Deliveries expected in all, if known.
    pub expected: Option<u64>,
    /// Expected but not delivered (summed over the consumers for streams).
    pub lost: u64,
    /// Delivered beyond what was expected (summed over the consumers for streams).
    pub extra: u64,
    /// Stream consumers whose count is off: one line each.
    pub details: Vec<String>,
}

impl Expectation {
    /// What the consumers must receive, given what the producers have had accepted so far.
    pub fn of(options: &Options, counters: &Counters) -> Self {
        if options.consumers == 0 {
            return Expectation::Unknown;
        }
        match options.stream_offset() {
            None => Self::shared(options, counters),
            Some(offset) => Self::per_stream_consumer(options, &offset, &counters.accepted_by_queue()),
        }
    }

    fn shared(options: &Options, counters: &Counters) -> Self {
        if options.producers == 0 {
            return options.count.map_or(Expectation::Unknown, Expectation::Total);
        }
        let totals = counters.totals();
        let accepted = if options.confirm > 0 { totals.confirmed } else { totals.published };
        Expectation::Total(accepted * options.copies_per_message())
    }

    fn per_stream_consumer(options: &Options, offset: &StreamOffset, accepted_by_queue: &[u64]) -> Self {
        if options.producers == 0 {
            return options
                .count
                .map_or(Expectation::Unknown, |count| Expectation::PerConsumer(vec![count; options.consumers]));
        }
        // With fanout every message reaches every queue; producers count it on the one they addressed.
        let all: u64 = accepted_by_queue.iter().sum();
        let in_queue = |queue: usize| match options.exchange_type {
            ExchangeType::Fanout => all,
            ExchangeType::Direct | ExchangeType::Topic => accepted_by_queue.get(queue).copied().unwrap_or(0),
        };
        let skipped = match offset {
            StreamOffset::Offset(offset) => *offset,
            StreamOffset::First | StreamOffset::Last | StreamOffset::Next | StreamOffset::Interval(_) => 0,
        };
        let queues = accepted_by_queue.len().max(1);
        Expectation::PerConsumer(
            (0..options.consumers).map(|consumer| in_queue(consumer % queues).saturating_sub(skipped)).collect(),
        )
    }

    /// Whether the consumers have received at least what they must.
    pub fn met(&self, counters: &Counters) -> bool {
        match self {
            Expectation::Unknown => false,
            Expectation::Total(expected) => counters.consumed.get() >= *expected,
            Expectation::PerConsumer(expected) => {
                expected.iter().zip(counters.consumed_by_consumer()).all(|(expected, consumed)| consumed >= *expected)
            }
        }
    }

    /// Deliveries still to come (the consumers' lag), if known.
    pub fn outstanding(&self, counters: &Counters) -> Option<u64> {
        match self {
            Expectation::Unknown => None,
            Expectation::Total(expected) => Some(expected.saturating_sub(counters.consumed.get())),
            Expectation::PerConsumer(expected) => Some(
                expected
                    .iter()
                    .zip(counters.consumed_by_consumer())
                    .map(|(expected, consumed)| expected.saturating_sub(consumed))
                    .sum(),
            ),
        }
    }

    /// Compares what the consumers received with what they should have; `queues[i]` names the
    /// queue consumer i read.
    pub fn check(&self, counters: &Counters, queues: &[&str]) -> CountCheck {
        match self {
            Expectation::Unknown => CountCheck::default(),
            Expectation::Total(expected) => {
                let consumed = counters.consumed.get();
                CountCheck {
                    expected: Some(*expected),
                    lost: expected.saturating_sub(consumed),
                    extra: consumed.saturating_sub(*expected),
                    details: Vec::new(),
                }
            }
            Expectation::PerConsumer(expected) => {
                let mut check = CountCheck { expected: Some(expected.iter().sum()), ..CountCheck::default() };
                for (consumer, (expected, consumed)) in expected.iter().zip(counters.consumed_by_consumer()).enumerate()
                {
                    check.lost += expected.saturating_sub(consumed);
                    check.extra += consumed.saturating_sub(*expected);
                    if consumed != *expected {
                        let queue = queues.get(consumer).copied().unwrap_or("?");
                        check.details.push(format!(
                            "consumer {consumer} (stream {queue}) received {consumed} of its {expected} messages"
                        ));
                    }
                }
                check
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::stats::{Outcome, PublishTally};
    use super::*;
    use clap::Parser;

    fn options(arguments: &[&str]) -> Options {
        Options::try_parse_from(std::iter::once("warren-perf").chain(arguments.iter().copied())).unwrap()
    }

    /// Counters after `accepted[q]` messages were accepted for queue q, and `consumed[i]` were delivered to consumer i.
    fn counters(accepted: &[u64], consumed: &[u64]) -> Counters {
        let counters = Counters::new(accepted.len(), consumed.len());
        let mut tally = PublishTally::new(accepted.len());
        for (queue, count) in accepted.iter().enumerate() {
            for _ in 0..*count {
                tally.settle(Outcome::Sent, queue);
            }
        }
        tally.flush(&counters);
        for (consumer, count) in consumed.iter().enumerate() {
            counters.delivered_n(consumer, *count);
        }
        counters
    }

    #[test]
    fn shared_queues_expect_a_total() {
        let fanout = options(&["--exchange-type", "fanout", "--queues", "2", "--consumers", "2"]);
        let counters = counters(&[3, 2], &[5, 4]);
        let expectation = Expectation::of(&fanout, &counters);
        assert_eq!(expectation, Expectation::Total(10));
        assert!(!expectation.met(&counters));
        let check = expectation.check(&counters, &["q0", "q1"]);
        assert_eq!((check.expected, check.lost, check.extra), (Some(10), 1, 0));
        assert_eq!(Expectation::of(&options(&["--consumers", "0"]), &counters), Expectation::Unknown);
    }

    #[test]
    fn each_stream_consumer_expects_its_whole_queue() {
        let direct = options(&["--queue-type", "stream", "--queues", "2", "--consumers", "3"]);
        let seen = counters(&[5, 4], &[5, 4, 5]);
        let expectation = Expectation::of(&direct, &seen);
        assert_eq!(expectation, Expectation::PerConsumer(vec![5, 4, 5]));
        assert!(expectation.met(&seen));
        assert_eq!(expectation.outstanding(&seen), Some(0));
        let check = expectation.check(&seen, &["s0", "s1", "s0"]);
        assert_eq!(check, CountCheck { expected: Some(14), ..CountCheck::default() });

        let fanout =
            options(&["--queue-type", "stream", "--exchange-type", "fanout", "--queues", "2", "--consumers", "2"]);
        assert_eq!(Expectation::of(&fanout, &seen), Expectation::PerConsumer(vec![9, 9]));

        let skipping = options(&["--queue-type", "stream", "--stream-offset", "3", "--backlog", "--count", "9"]);
        assert_eq!(Expectation::of(&skipping, &counters(&[9], &[6])), Expectation::PerConsumer(vec![6]));
        assert_eq!(Expectation::of(&skipping, &counters(&[2], &[0])), Expectation::PerConsumer(vec![0]));
    }

    #[test]
    fn a_duplicate_does_not_hide_a_loss() {
        let two = options(&["--queue-type", "stream", "--consumers", "2"]);
        let counters = counters(&[10], &[11, 9]);
        let check = Expectation::of(&two, &counters).check(&counters, &["s", "s"]);
        assert_eq!((check.expected, check.lost, check.extra), (Some(20), 1, 1));
        assert_eq!(check.details.len(), 2);
        assert!(check.details[1].contains("received 9 of its 10"), "{:?}", check.details);
    }

    #[test]
    fn replaying_an_existing_stream_expects_count_per_consumer() {
        let replay = options(&["--queue-type", "stream", "--producers", "0", "--consumers", "2", "--count", "7"]);
        assert_eq!(Expectation::of(&replay, &Counters::new(1, 2)), Expectation::PerConsumer(vec![7, 7]));
        let unbounded = options(&["--queue-type", "stream", "--producers", "0"]);
        assert_eq!(Expectation::of(&unbounded, &Counters::new(1, 1)), Expectation::Unknown);
    }
}
