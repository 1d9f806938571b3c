//! A queue that is a stream (`x-queue-type: stream`): its construction, its retention timer
//! and the settlement of its deliveries. Everything else a stream does is in `crate::stream`.

use super::{MessageRef, Queue, QueueArguments, QueueContext, QueueDefinition};
use crate::consumer::Consumer;
use crate::error::BrokerResult;
use crate::scheduler::{now_ms, TimerEvent};
use crate::stream::{Stream, RETENTION_CHECK_INTERVAL_MS};
use std::sync::Arc;

impl Queue {
    /// A stream (`x-queue-type: stream`) over its opened log.
    pub fn new_stream(definition: QueueDefinition, stream: Stream, context: QueueContext) -> BrokerResult<Arc<Self>> {
        let arguments = QueueArguments::parse(&definition.arguments)?;
        let checks_age = stream.arguments().max_age.is_some();
        let queue = Self::build(definition, arguments, None, Some(stream), context, |_| {});
        if checks_age {
            queue.schedule_retention_check();
        }
        Ok(queue)
    }

    fn schedule_retention_check(self: &Arc<Self>) {
        let state = self.state.lock();
        let event = TimerEvent::StreamRetention { queue: Arc::downgrade(self) };
        state.scheduler.schedule(now_ms() + RETENTION_CHECK_INTERVAL_MS, event);
    }

    /// A stream's timer: applies its retention now, then checks again later.
    pub fn check_stream_retention(self: &Arc<Self>) {
        if let Some(stream) = &self.stream {
            if self.state.lock().deleted {
                return;
            }
            stream.enforce_retention();
            self.schedule_retention_check();
        }
    }

    /// The stream, if this queue is one: for reads by offset.
    pub fn stream(&self) -> Option<&Stream> {
        self.stream.as_ref()
    }

    /// A stream's deliveries were settled: nothing is removed or requeued (see
    /// [`Stream::settle`] for what it means to a consumer group).
    pub(super) fn settle_stream(
        self: &Arc<Self>,
        stream: &Stream,
        consumer: Option<&Arc<Consumer>>,
        messages: &[MessageRef],
        requeued: bool,
    ) {
        let offsets: Vec<u64> = messages.iter().map(|m| m.offset()).collect();
        stream.settle(self, consumer, &offsets, requeued);
    }
}
