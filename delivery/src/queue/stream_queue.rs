//! A queue that is a stream (`x-queue-type: stream`): the [`QueueKind`] over a [`Stream`],
//! with its retention timer. What a stream does is in `crate::stream`.

use super::kind::{Holder, QueueKind, QueueTimer};
use super::{GetResult, MessageRef, Published, Queue, QueueArguments, QueueContext, QueueDefinition, Reply};
use crate::consumer::Consumer;
use crate::definitions::VhostStorage;
use crate::error::{internal_error, BrokerError, BrokerResult};
use crate::message::Message;
use crate::message_store::StoreError;
use crate::scheduler::{now_ms, SchedulerHandle, TimerEvent};
use crate::session::Session;
use crate::stream::{Stream, StreamArguments, RETENTION_CHECK_INTERVAL_MS};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A stream's queue kind.
pub(crate) struct StreamQueue {
    stream: Stream,
    scheduler: SchedulerHandle,
    deleted: AtomicBool,
}

/// A new stream: durable, not exclusive, not auto-delete (406 otherwise, as in RabbitMQ), on a
/// broker with a data directory (540 otherwise).
pub(super) fn declare(
    definition: QueueDefinition,
    arguments: QueueArguments,
    storage: Option<&VhostStorage>,
    context: QueueContext,
) -> BrokerResult<Arc<Queue>> {
    let storage = super::require_log_of_its_own(&definition, storage, "stream", "streams")?;
    let stream = storage
        .create_stream(&definition.name, stream_arguments(&arguments))
        .map_err(|e| internal_error("cannot create stream", e))?;
    Ok(build(definition, arguments, stream, context))
}

/// A stream reopened from its log at startup.
pub(super) fn recover(
    definition: QueueDefinition,
    arguments: QueueArguments,
    storage: &VhostStorage,
    context: QueueContext,
) -> BrokerResult<Arc<Queue>> {
    let stream = storage
        .open_stream(&definition.name, stream_arguments(&arguments))
        .map_err(|e| internal_error("cannot recover a stream", e))?;
    Ok(build(definition, arguments, stream, context))
}

/// What the stream itself obeys: retention and segments, and deduplication.
fn stream_arguments(arguments: &QueueArguments) -> StreamArguments {
    StreamArguments { deduplication: arguments.deduplication(), ..arguments.stream.clone() }
}

fn build(definition: QueueDefinition, arguments: QueueArguments, stream: Stream, context: QueueContext) -> Arc<Queue> {
    let checks_age = stream.arguments().max_age.is_some();
    let scheduler = Arc::clone(&context.scheduler);
    let kind = StreamQueue { stream, scheduler: context.scheduler, deleted: AtomicBool::new(false) };
    let queue = Queue::with_kind(definition, arguments, context.vhost, |_, _| Box::new(kind));
    if checks_age {
        schedule_retention_check(&scheduler, &queue);
    }
    queue
}

fn schedule_retention_check(scheduler: &SchedulerHandle, queue: &Arc<Queue>) {
    let event = TimerEvent::StreamRetention { queue: Arc::downgrade(queue) };
    scheduler.schedule(now_ms() + RETENTION_CHECK_INTERVAL_MS, event);
}

impl StreamQueue {
    /// Deliveries were settled: nothing is removed or requeued (see [`Stream::settle`] for
    /// what it means to a consumer group).
    fn settle_offsets(
        &self,
        queue: &Arc<Queue>,
        consumer: Option<&Arc<Consumer>>,
        messages: &[MessageRef],
        requeued: bool,
    ) {
        let offsets: Vec<u64> = messages.iter().map(|m| m.offset()).collect();
        self.stream.settle(queue, consumer, &offsets, requeued);
    }
}

impl QueueKind for StreamQueue {
    fn publish(&self, queue: &Arc<Queue>, message: Arc<Message>) -> Result<Published, StoreError> {
        self.stream.publish(queue, &message)
    }

    fn dispatch(&self, queue: &Arc<Queue>) {
        self.stream.dispatch(queue);
    }

    fn add_consumer(&self, _queue: &Arc<Queue>, consumer: Arc<Consumer>) -> Reply<BrokerResult<()>> {
        Reply::Now(self.stream.add_consumer(consumer))
    }

    fn remove_consumer(&self, _queue: &Arc<Queue>, consumer: &Arc<Consumer>) -> bool {
        self.stream.remove_consumer(consumer)
    }

    /// Streams refuse `basic.get` (406): they are read by consumers from an offset.
    fn get(
        &self,
        queue: &Arc<Queue>,
        _session: &Arc<Session>,
        _no_ack: bool,
    ) -> Reply<BrokerResult<Option<GetResult>>> {
        Reply::Now(Err(BrokerError::precondition_failed(format!(
            "basic.get is not supported on stream '{}': consume with basic.consume (after basic.qos) and an \
             x-stream-offset argument",
            queue.name()
        ))))
    }

    fn settle(&self, queue: &Arc<Queue>, messages: &[MessageRef], holder: Holder<'_>) {
        self.settle_offsets(queue, holder.consumer, messages, false);
    }

    fn reject(&self, queue: &Arc<Queue>, messages: &[MessageRef], holder: Holder<'_>) {
        self.settle_offsets(queue, holder.consumer, messages, false);
    }

    fn requeue(&self, queue: &Arc<Queue>, messages: &[MessageRef], holder: Holder<'_>) {
        self.settle_offsets(queue, holder.consumer, messages, true);
    }

    /// A stream keeps its messages (0, as RabbitMQ answers): only retention removes them.
    fn purge(&self, _queue: &Arc<Queue>) -> Reply<BrokerResult<u32>> {
        Reply::Now(Ok(0))
    }

    fn message_count(&self) -> u32 {
        u32::try_from(self.stream.message_count()).unwrap_or(u32::MAX)
    }

    fn unacked_count(&self) -> u32 {
        self.stream.unacked_count()
    }

    fn consumer_count(&self) -> u32 {
        self.stream.consumer_count() as u32
    }

    fn touch(&self) {}

    fn timer_fired(&self, queue: &Arc<Queue>, timer: QueueTimer) {
        if timer == QueueTimer::Retention && !self.deleted.load(Ordering::Acquire) {
            self.stream.enforce_retention();
            schedule_retention_check(&self.scheduler, queue);
        }
    }

    fn close(&self, _queue: &Arc<Queue>) {
        self.stream.close();
    }

    fn mark_deleted(&self, _queue: &Arc<Queue>) -> (u32, Vec<Arc<Consumer>>) {
        self.deleted.store(true, Ordering::Release);
        (self.message_count(), self.stream.destroy())
    }

    fn as_stream(&self) -> Option<&Stream> {
        Some(&self.stream)
    }
}
