//! Names, declaration and clean-up of the exchange and queues a run uses.
//!
//! The exchange PREFIX.TYPE routes to queues PREFIX-0 .. PREFIX-(N-1):
//! - direct: queue i is bound with key PREFIX-i, and a message for queue i carries that key;
//! - topic: queue i is bound with `PREFIX.i.#`, and a message for it carries `PREFIX.i.perf`;
//! - fanout: every queue is bound, and every message reaches all of them.
//!
//! Stream queues cannot be purged (a stream keeps its messages for every consumer), so a run
//! that publishes starts from empty streams by deleting and declaring them again.

use super::options::{ExchangeType, Options, QueueType};
use anyhow::Context;
use lapin::options::{ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::options::{QueueDeleteOptions, QueuePurgeOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{Channel, ExchangeKind};

/// The exchange and queues of a run, and how producers address each queue.
#[derive(Debug, Clone)]
pub struct Topology {
    pub exchange: ShortString,
    pub exchange_type: ExchangeType,
    pub queues: Vec<ShortString>,
    /// The routing key that reaches queue i (all the same for fanout).
    pub routing_keys: Vec<ShortString>,
    pub durable: bool,
    pub queue_type: QueueType,
    /// x-stream-max-segment-size-bytes of stream queues, if given.
    pub stream_max_segment_size_bytes: Option<u64>,
}

impl Topology {
    pub fn new(options: &Options) -> anyhow::Result<Self> {
        let prefix = &options.queue_prefix;
        let short = |text: String| ShortString::try_new(text).context("a name longer than 255 bytes");
        let queues = (0..options.queues).map(|i| short(format!("{prefix}-{i}"))).collect::<anyhow::Result<Vec<_>>>()?;
        let routing_keys = (0..options.queues)
            .map(|i| match options.exchange_type {
                ExchangeType::Direct => short(format!("{prefix}-{i}")),
                ExchangeType::Topic => short(format!("{prefix}.{i}.perf")),
                ExchangeType::Fanout => short(String::new()),
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Topology {
            exchange: short(format!("{prefix}.{}", options.exchange_type.name()))?,
            exchange_type: options.exchange_type,
            queues,
            routing_keys,
            durable: options.durable_queues(),
            queue_type: options.queue_type,
            stream_max_segment_size_bytes: options.stream_max_segment_size_bytes,
        })
    }

    /// Declares the exchange and queues and binds them (idempotent).
    pub async fn declare(&self, channel: &Channel) -> anyhow::Result<()> {
        let kind = match self.exchange_type {
            ExchangeType::Direct => ExchangeKind::Direct,
            ExchangeType::Fanout => ExchangeKind::Fanout,
            ExchangeType::Topic => ExchangeKind::Topic,
        };
        let exchange_options = ExchangeDeclareOptions { durable: self.durable, ..Default::default() };
        channel
            .exchange_declare(self.exchange.clone(), kind, exchange_options, FieldTable::default())
            .await
            .with_context(|| format!("declaring exchange {}", self.exchange))?;
        for (i, queue) in self.queues.iter().enumerate() {
            let queue_options = QueueDeclareOptions { durable: self.durable, ..Default::default() };
            channel
                .queue_declare(queue.clone(), queue_options, self.queue_arguments())
                .await
                .with_context(|| format!("declaring queue {queue} (a leftover with other settings? delete it)"))?;
            channel
                .queue_bind(
                    queue.clone(),
                    self.exchange.clone(),
                    self.binding_key(i)?,
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await
                .with_context(|| format!("binding queue {queue}"))?;
        }
        Ok(())
    }

    /// Empties the queues; returns how many messages were dropped. Streams are deleted and
    /// declared again: the broker cannot purge them.
    pub async fn purge(&self, channel: &Channel) -> anyhow::Result<u64> {
        if self.queue_type == QueueType::Stream {
            let dropped = self.delete_queues(channel).await?;
            self.declare(channel).await?;
            return Ok(dropped);
        }
        let mut dropped = 0;
        for queue in &self.queues {
            let count = channel
                .queue_purge(queue.clone(), QueuePurgeOptions::default())
                .await
                .with_context(|| format!("purging queue {queue}"))?;
            dropped += u64::from(count);
        }
        Ok(dropped)
    }

    /// Deletes the queues and the exchange.
    pub async fn delete(&self, channel: &Channel) -> anyhow::Result<()> {
        self.delete_queues(channel).await?;
        channel
            .exchange_delete(self.exchange.clone(), ExchangeDeleteOptions::default())
            .await
            .with_context(|| format!("deleting exchange {}", self.exchange))?;
        Ok(())
    }

    /// Deletes the queues; returns how many messages they held.
    async fn delete_queues(&self, channel: &Channel) -> anyhow::Result<u64> {
        let mut dropped = 0;
        for queue in &self.queues {
            let count = channel
                .queue_delete(queue.clone(), QueueDeleteOptions::default())
                .await
                .with_context(|| format!("deleting queue {queue}"))?;
            dropped += u64::from(count);
        }
        Ok(dropped)
    }

    fn binding_key(&self, queue: usize) -> anyhow::Result<ShortString> {
        match self.exchange_type {
            ExchangeType::Topic => {
                let key = format!("{}.#", self.routing_keys[queue].as_str().trim_end_matches(".perf"));
                ShortString::try_new(key).context("a binding key longer than 255 bytes")
            }
            ExchangeType::Direct | ExchangeType::Fanout => Ok(self.routing_keys[queue].clone()),
        }
    }

    fn queue_arguments(&self) -> FieldTable {
        let mut arguments = FieldTable::default();
        if self.queue_type != QueueType::Classic {
            arguments.insert("x-queue-type".into(), AMQPValue::LongString(LongString::from(self.queue_type.name())));
        }
        if let Some(bytes) = self.stream_max_segment_size_bytes {
            let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
            arguments.insert("x-stream-max-segment-size-bytes".into(), AMQPValue::LongLongInt(bytes));
        }
        arguments
    }
}
