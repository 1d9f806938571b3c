//! The command line of `warren-perf`.

use clap::{Parser, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;

/// Smallest body: 8 bytes of send time, then 8 bytes of producer id and sequence number.
pub const MIN_MESSAGE_SIZE: usize = 16;

/// Run length when neither `--duration` nor `--count` is given.
const DEFAULT_DURATION_SECS: f64 = 10.0;

/// A load generator for AMQP 0-9-1 brokers, in the spirit of RabbitMQ's PerfTest.
///
/// Producers publish to an exchange that routes to the queues; consumers read them back. Every
/// body carries its send time, so the consumers measure end-to-end latency. At the end the
/// counts must add up: with manual acks, every confirmed (or, without confirms, published)
/// message must be consumed, or the run fails with exit status 1.
#[derive(Debug, Clone, Parser)]
#[command(name = "warren-perf", version)]
pub struct Options {
    /// AMQP URI of the broker.
    #[arg(long, default_value = "amqp://guest:guest@127.0.0.1:5672/%2f")]
    pub uri: String,

    /// Publishing connections, each with one channel.
    #[arg(short = 'x', long, default_value_t = 1)]
    pub producers: usize,

    /// Consuming connections, each with one channel and one consumer; consumer i reads queue i mod QUEUES.
    #[arg(short = 'y', long, default_value_t = 1)]
    pub consumers: usize,

    /// Queues, named PREFIX-0 .. PREFIX-(N-1), all bound to the exchange.
    #[arg(short = 'u', long, default_value_t = 1)]
    pub queues: usize,

    /// Prefix of the queue and exchange names.
    #[arg(long, default_value = "warren-perf")]
    pub queue_prefix: String,

    /// Body size in bytes (at least 16: send time and sequence number).
    #[arg(short = 's', long, default_value_t = MIN_MESSAGE_SIZE, value_parser = parse_size)]
    pub size: usize,

    /// basic.qos prefetch count per consumer (0: unlimited).
    #[arg(short = 'q', long, default_value_t = 1000)]
    pub prefetch: u16,

    /// Consume with no_ack (auto-ack) instead of manual acks.
    #[arg(short = 'a', long)]
    pub auto_ack: bool,

    /// With manual acks, ack every N deliveries at once (multiple = true); 1 acks each one.
    #[arg(short = 'A', long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub multi_ack_every: u64,

    /// Publisher-confirm window: at most N unconfirmed messages per producer (0: no confirms).
    #[arg(short = 'c', long, default_value_t = 0)]
    pub confirm: usize,

    /// Publish persistent messages (delivery_mode 2).
    #[arg(short = 'f', long)]
    pub persistent: bool,

    /// Declare durable queues and exchange (quorum and stream queues always are).
    #[arg(short = 'd', long)]
    pub durable: bool,

    /// Queue type, sent as the x-queue-type argument.
    #[arg(long, value_enum, default_value_t = QueueType::Classic)]
    pub queue_type: QueueType,

    /// Exchange type; the exchange is named PREFIX.TYPE.
    #[arg(short = 't', long, value_enum, default_value_t = ExchangeType::Direct)]
    pub exchange_type: ExchangeType,

    /// Messages per second per producer (0: as fast as possible).
    #[arg(short = 'r', long, default_value_t = 0)]
    pub rate: u64,

    /// Publishing time in seconds (default 10 when --count is not given).
    #[arg(short = 'z', long)]
    pub duration: Option<f64>,

    /// Messages to publish in all (split between producers); with no producers, messages to consume.
    #[arg(short = 'C', long)]
    pub count: Option<u64>,

    /// Publish everything first with no consumer running, then start the consumers and drain.
    #[arg(long)]
    pub backlog: bool,

    /// After publishing, how long consumers may go without a delivery before missing messages count as lost.
    #[arg(long, default_value_t = 10.0)]
    pub grace_secs: f64,

    /// Seconds between progress lines on stderr (0: none).
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,

    /// Print the summary as one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,

    /// Label copied into the JSON summary (used by `--report`).
    #[arg(long)]
    pub scenario: Option<String>,

    /// Label copied into the JSON summary (used by `--report`).
    #[arg(long)]
    pub broker: Option<String>,

    /// Leave the queues and exchange in place at the end (e.g. to drain them in a later run).
    #[arg(long)]
    pub keep_queues: bool,

    /// Idle mode: open N connections, each with a channel and a consumer, and hold them.
    #[arg(long)]
    pub connections: Option<usize>,

    /// Idle mode: seconds to hold the connections.
    #[arg(long, default_value_t = 10.0)]
    pub idle_secs: f64,

    /// Idle mode: process id of the broker, whose resident memory is read before and after connecting.
    #[arg(long)]
    pub rss_pid: Option<u32>,

    /// Report mode: read JSON summaries (one per line) and print medians per scenario and broker as markdown.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
}

/// The x-queue-type of the declared queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum QueueType {
    Classic,
    Quorum,
    Stream,
}

/// The type of the exchange the producers publish to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExchangeType {
    Direct,
    Fanout,
    Topic,
}

impl QueueType {
    pub fn name(self) -> &'static str {
        match self {
            QueueType::Classic => "classic",
            QueueType::Quorum => "quorum",
            QueueType::Stream => "stream",
        }
    }
}

impl ExchangeType {
    pub fn name(self) -> &'static str {
        match self {
            ExchangeType::Direct => "direct",
            ExchangeType::Fanout => "fanout",
            ExchangeType::Topic => "topic",
        }
    }
}

impl Options {
    /// How long producers publish: the given duration, none when only a count is given, else the default.
    pub fn publish_duration(&self) -> Option<Duration> {
        match (self.duration, self.count) {
            (Some(secs), _) => Some(Duration::from_secs_f64(secs)),
            (None, Some(_)) => None,
            (None, None) => Some(Duration::from_secs_f64(DEFAULT_DURATION_SECS)),
        }
    }

    /// Whether the queues and exchange are durable.
    pub fn durable_queues(&self) -> bool {
        self.durable || self.queue_type != QueueType::Classic
    }

    /// How many queues each published message reaches.
    pub fn copies_per_message(&self) -> u64 {
        match self.exchange_type {
            ExchangeType::Fanout => self.queues as u64,
            ExchangeType::Direct | ExchangeType::Topic => 1,
        }
    }

    /// Rejects combinations that cannot give a meaningful run.
    pub fn validate(&self) -> Result<(), String> {
        if self.queues == 0 {
            return Err("--queues must be at least 1".into());
        }
        if self.consumers > 0 && self.consumers < self.queues {
            return Err(format!(
                "{} consumers cannot read {} queues: messages in unread queues would count as lost",
                self.consumers, self.queues
            ));
        }
        if !self.auto_ack && self.prefetch > 0 && self.multi_ack_every > u64::from(self.prefetch) {
            return Err("--multi-ack-every above --prefetch would stall the consumers".into());
        }
        if self.producers == 0 && self.consumers == 0 {
            return Err("nothing to do: no producers and no consumers".into());
        }
        if self.backlog && self.count.is_none() && self.duration.is_none() {
            return Err("--backlog needs --count or --duration to end the publishing phase".into());
        }
        Ok(())
    }
}

fn parse_size(text: &str) -> Result<usize, String> {
    let size: usize = text.parse().map_err(|error| format!("{error}"))?;
    if size < MIN_MESSAGE_SIZE {
        return Err(format!("at least {MIN_MESSAGE_SIZE} bytes: the body carries the send time and a sequence number"));
    }
    Ok(size)
}
