//! Tests of the quorum queue state machine: `apply` command by command, properties against
//! a reference model and across snapshots, and a single-node openraft group.

mod apply;
mod model;
mod raft_node;

use super::{
    entry_of, message_id, Command, ConsumerId, ConsumerSpec, Effect, Enqueue, MessageId, Op, QueueState, Response,
    Settings,
};
use bytes::Bytes;

/// `basic` property flags (AMQP 0-9-1): priority and expiration.
const PRIORITY_FLAG: u16 = 0x0800;
const EXPIRATION_FLAG: u16 = 0x0100;

/// A content-header property list with only `priority` and `expiration` (ms) set.
pub(super) fn properties(priority: Option<u8>, expiration_ms: Option<u64>) -> Bytes {
    let flags = priority.map_or(0, |_| PRIORITY_FLAG) | expiration_ms.map_or(0, |_| EXPIRATION_FLAG);
    let mut raw = flags.to_be_bytes().to_vec();
    raw.extend(priority);
    if let Some(ms) = expiration_ms {
        let text = ms.to_string();
        raw.push(text.len() as u8);
        raw.extend_from_slice(text.as_bytes());
    }
    Bytes::from(raw)
}

/// `properties` with the deduplication header set to `key`, if given.
pub(super) fn with_dedup_key(properties: Bytes, key: Option<u8>) -> Bytes {
    let Some(key) = key else { return properties };
    let decoded = crate::properties::Properties::decode(properties).expect("test properties decode");
    let keyed =
        decoded.with_long_long_header(crate::dedup_window::DEFAULT_DEDUPLICATION_HEADER, i64::from(key)).expect("adds");
    keyed.raw().clone()
}

/// An Enqueue of `body` with the given priority and per-message TTL.
pub(super) fn enqueue(body: &str, priority: Option<u8>, expiration_ms: Option<u64>) -> Op {
    Op::Enqueue(Enqueue {
        exchange: "amq.direct".into(),
        routing_key: "q".into(),
        properties: properties(priority, expiration_ms),
        body: Bytes::copy_from_slice(body.as_bytes()),
    })
}

/// An Enqueue of `body` tagged `tag` (its `x-stream-filter-value` header).
pub(super) fn tagged(body: &str, tag: &str) -> Op {
    const HEADERS_FLAG: u16 = 0x2000;
    let key = crate::tag_filter::TAG_HEADER.as_bytes();
    let mut table = vec![key.len() as u8];
    table.extend_from_slice(key);
    table.push(b'S');
    table.extend_from_slice(&(tag.len() as u32).to_be_bytes());
    table.extend_from_slice(tag.as_bytes());
    let mut raw = HEADERS_FLAG.to_be_bytes().to_vec();
    raw.extend_from_slice(&(table.len() as u32).to_be_bytes());
    raw.extend(table);
    Op::Enqueue(Enqueue {
        exchange: "amq.direct".into(),
        routing_key: "q".into(),
        properties: Bytes::from(raw),
        body: Bytes::copy_from_slice(body.as_bytes()),
    })
}

pub(super) fn consumer(channel: u64, tag: &str) -> ConsumerId {
    ConsumerId::new(0, channel, tag)
}

pub(super) fn checkout(c: &ConsumerId, prefetch: u32, priority: i32) -> Op {
    Op::Checkout { consumer: c.clone(), spec: ConsumerSpec { prefetch, priority } }
}

/// A state and the log position and clock of the next command.
pub(super) struct Harness {
    pub(super) state: QueueState,
    pub(super) next_index: u64,
    pub(super) now_ms: u64,
    /// Every effect so far, in order.
    pub(super) effects: Vec<Effect>,
}

impl Harness {
    pub(super) fn new(settings: Settings) -> Self {
        Harness { state: QueueState::new(settings), next_index: 1, now_ms: 1_000, effects: Vec::new() }
    }

    /// Applies `op` at the next index and the current time.
    pub(super) fn run(&mut self, op: Op) -> (Response, Vec<Effect>) {
        let index = self.next_index;
        self.next_index += 1;
        let (response, effects) = self.state.apply(message_id(index, 0), &Command::new(self.now_ms, op));
        self.effects.extend(effects.iter().cloned());
        (response, effects)
    }

    /// The id the next command's message gets (one command per entry here).
    pub(super) fn next_id(&self) -> MessageId {
        message_id(self.next_index, 0)
    }

    /// Enqueues plain messages; returns their ids.
    pub(super) fn publish(&mut self, n: usize) -> Vec<MessageId> {
        (0..n)
            .map(|i| match self.run(enqueue(&format!("m{i}"), None, None)).0 {
                Response::Enqueued(id) => id,
                other => panic!("not enqueued: {other:?}"),
            })
            .collect()
    }
}

/// The message ids delivered to `c` in `effects`, with (delivery count, redelivered).
pub(super) fn delivered_to(effects: &[Effect], c: &ConsumerId) -> Vec<(MessageId, u32, bool)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Deliver { consumer, id, delivery_count, redelivered } if consumer == c => {
                Some((*id, *delivery_count, *redelivered))
            }
            _ => None,
        })
        .collect()
}

/// The ids delivered to anyone in `effects`.
pub(super) fn delivered_ids(effects: &[Effect]) -> Vec<MessageId> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Deliver { id, .. } => Some(*id),
            _ => None,
        })
        .collect()
}
