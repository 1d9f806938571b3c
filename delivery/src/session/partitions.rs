//! A consumer of a super stream: one consumer per partition under one tag, started
//! together (and cancelled together, by [`Session::cancel`]); each part's deliveries carry
//! the partition they came from.

use super::{reused_tag, Session};
use crate::consumer::{Consumer, ConsumerOptions, PARTITION_HEADER};
use crate::error::BrokerResult;
use crate::message::Message;
use crate::queue::{Queue, Reply};
use amq_protocol::types::ShortString;
use std::sync::Arc;

impl Session {
    /// Starts a consumer of a super stream: one consumer of each partition (in partition
    /// order), all under `tag`. A tag already used on this channel is 530 NOT_ALLOWED; if a
    /// partition refuses, the parts started are cancelled.
    pub fn consume_partitions(
        self: &Arc<Self>,
        partitions: Vec<Arc<Queue>>,
        tag: ShortString,
        options: ConsumerOptions,
    ) -> Reply<BrokerResult<Vec<Arc<Consumer>>>> {
        let consumers = match self.new_partition_consumers(&partitions, tag.clone(), options) {
            Ok(consumers) => consumers,
            Err(error) => return Reply::Now(Err(error)),
        };
        let mut later = Vec::new();
        for consumer in &consumers {
            match consumer.queue().add_consumer(Arc::clone(consumer)) {
                Reply::Now(Ok(())) => {}
                Reply::Now(Err(error)) => {
                    self.cancel(tag.as_str());
                    return Reply::Now(Err(error));
                }
                Reply::Later(started) => later.push(started),
            }
        }
        if later.is_empty() {
            return Reply::Now(Ok(consumers));
        }
        let session = Arc::clone(self);
        Reply::Later(Box::pin(async move {
            for started in later {
                if let Err(error) = started.await {
                    session.cancel(tag.as_str());
                    return Err(error);
                }
            }
            Ok(consumers)
        }))
    }

    fn new_partition_consumers(
        self: &Arc<Self>,
        partitions: &[Arc<Queue>],
        tag: ShortString,
        options: ConsumerOptions,
    ) -> BrokerResult<Vec<Arc<Consumer>>> {
        let mut state = self.state.lock();
        if state.has_tag(tag.as_str()) {
            return Err(reused_tag(tag.as_str()));
        }
        let prefetch = state.consumer_prefetch;
        let mut consumers = Vec::with_capacity(partitions.len());
        for (index, queue) in partitions.iter().enumerate() {
            let consumer = Consumer::new(tag.clone(), Arc::clone(queue), Arc::clone(self), options.clone(), prefetch)?;
            consumers.push(Arc::new(consumer.in_partition(index as u32)));
        }
        state.consumers.extend(consumers.iter().cloned());
        Ok(consumers)
    }
}

/// `message` with the super stream partition it came from in its headers.
pub(super) fn with_partition_header(message: Arc<Message>, partition: u32) -> Arc<Message> {
    match message.properties.with_long_long_header(PARTITION_HEADER, i64::from(partition)) {
        Ok(properties) => Arc::new(Message { properties, ..Message::clone(&message) }),
        Err(error) => {
            tracing::warn!(partition, %error, "cannot add the partition header; delivering without it");
            message
        }
    }
}
