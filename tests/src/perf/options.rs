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
/// message must be consumed, or the run fails with exit status 1. On stream queues every
/// consumer reads its whole queue (from where --stream-offset starts it), so each must receive
/// every message of its queue.
#[derive(Debug, Clone, Parser)]
#[command(name = "warren-perf", version)]
pub struct Options {
    /// AMQP URI of the broker.
    #[arg(long, default_value = "amqp://guest:guest@127.0.0.1:5672/%2f")]
    pub uri: String,

    /// Client of the producers and consumers: raw (warren-perf's own lean AMQP data path, so the
    /// client is not the bottleneck) or lapin. Declarations always go through lapin.
    #[arg(long, value_enum, default_value_t = Engine::Raw)]
    pub engine: Engine,

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

    /// Consume with no_ack (auto-ack) instead of manual acks (not with stream queues).
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

    /// Stream queues: where consumers start, sent as the x-stream-offset consume argument: first,
    /// last, next, an offset (e.g. 5000) or an interval (e.g. 30s, 10m, 1h, 7D; units Y M D h m s).
    /// Default: next (with --backlog: first or an offset).
    #[arg(long, value_name = "SPEC", value_parser = parse_stream_offset)]
    pub stream_offset: Option<StreamOffset>,

    /// Stream queues: the consumers read as consumer group NAME (the x-consumer-group consume
    /// argument): one active per stream, its acked offset committed, its lag in the metrics.
    #[arg(long, value_name = "NAME")]
    pub consumer_group: Option<String>,

    /// Stream queues: segment file size, sent as the x-stream-max-segment-size-bytes argument.
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(1..=i64::MAX as u64))]
    pub stream_max_segment_size_bytes: Option<u64>,

    /// Exchange type; the exchange is named PREFIX.TYPE.
    #[arg(short = 't', long, value_enum, default_value_t = ExchangeType::Direct)]
    pub exchange_type: ExchangeType,

    /// Messages per second per producer (0: as fast as possible).
    #[arg(short = 'r', long, default_value_t = 0)]
    pub rate: u64,

    /// Publishing time in seconds (default 10 when --count is not given).
    #[arg(short = 'z', long)]
    pub duration: Option<f64>,

    /// Messages to publish in all (split between producers); with no producers, messages to consume
    /// (in all; with stream queues, by each consumer).
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

/// The AMQP client that producers and consumers use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Engine {
    /// warren-perf's own data path (`raw/`): hand-encoded frames over a buffered socket.
    Raw,
    /// The lapin client library.
    Lapin,
}

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Engine::Raw => "raw",
            Engine::Lapin => "lapin",
        }
    }
}

/// The x-queue-type of the declared queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum QueueType {
    Classic,
    Quorum,
    Stream,
}

/// Where a stream consumer starts reading (x-stream-offset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamOffset {
    /// The oldest message the stream holds.
    First,
    /// The last chunk of messages written.
    Last,
    /// The next message written after the consumer attaches.
    Next,
    /// The message with this offset (the first message of a stream has offset 0).
    Offset(u64),
    /// Messages written within this time before attaching, as given ("1h"): sent as a string.
    Interval(String),
}

impl StreamOffset {
    /// The specification as given on the command line.
    pub fn spec(&self) -> String {
        match self {
            StreamOffset::First => "first".into(),
            StreamOffset::Last => "last".into(),
            StreamOffset::Next => "next".into(),
            StreamOffset::Offset(offset) => offset.to_string(),
            StreamOffset::Interval(interval) => interval.clone(),
        }
    }
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

    /// Whether the queues are streams.
    pub fn streams(&self) -> bool {
        self.queue_type == QueueType::Stream
    }

    /// Where stream consumers start: the given offset, else next; `None` for other queue types.
    pub fn stream_offset(&self) -> Option<StreamOffset> {
        self.streams().then(|| self.stream_offset.clone().unwrap_or(StreamOffset::Next))
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
        self.validate_streams()
    }

    fn validate_streams(&self) -> Result<(), String> {
        if !self.streams() {
            if self.stream_offset.is_some() || self.stream_max_segment_size_bytes.is_some() {
                return Err("--stream-offset and --stream-max-segment-size-bytes need --queue-type stream".into());
            }
            return Ok(());
        }
        if self.auto_ack {
            return Err("--auto-ack cannot be used with --queue-type stream: \
                 stream consumers need manual acks (and a --prefetch above 0)"
                .into());
        }
        if self.prefetch == 0 {
            return Err("--prefetch 0 cannot be used with --queue-type stream: \
                 stream consumers need a prefetch (basic.qos) above 0"
                .into());
        }
        let starts_after_publishing = self.backlog && self.producers > 0 && self.consumers > 0;
        match self.stream_offset() {
            Some(offset @ (StreamOffset::Next | StreamOffset::Last | StreamOffset::Interval(_)))
                if starts_after_publishing =>
            {
                Err(format!(
                    "--backlog with --queue-type stream starts the consumers after publishing: with \
                     --stream-offset {} the count they must receive is unknown; use --stream-offset first \
                     (or an offset)",
                    offset.spec()
                ))
            }
            _ => Ok(()),
        }
    }
}

fn parse_stream_offset(text: &str) -> Result<StreamOffset, String> {
    const INTERVAL_UNITS: &str = "YMDhms";
    match text {
        "first" => return Ok(StreamOffset::First),
        "last" => return Ok(StreamOffset::Last),
        "next" => return Ok(StreamOffset::Next),
        _ => {}
    }
    let all_digits = |digits: &str| !digits.is_empty() && digits.bytes().all(|byte| byte.is_ascii_digit());
    if all_digits(text) {
        return match text.parse::<u64>() {
            Ok(offset) if offset <= i64::MAX as u64 => Ok(StreamOffset::Offset(offset)),
            _ => Err(format!("offset {text} is too large (a signed 64-bit integer)")),
        };
    }
    if let Some(amount) = text.strip_suffix(|unit| INTERVAL_UNITS.contains(unit)) {
        if all_digits(amount) {
            return Ok(StreamOffset::Interval(text.to_string()));
        }
    }
    Err(format!(
        "{text:?}: expected first, last, next, an offset (e.g. 5000) or an interval (e.g. 30s, 10m, 1h, 7D; \
         units Y M D h m s)"
    ))
}

fn parse_size(text: &str) -> Result<usize, String> {
    let size: usize = text.parse().map_err(|error| format!("{error}"))?;
    if size < MIN_MESSAGE_SIZE {
        return Err(format!("at least {MIN_MESSAGE_SIZE} bytes: the body carries the send time and a sequence number"));
    }
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(arguments: &[&str]) -> Options {
        Options::try_parse_from(std::iter::once("warren-perf").chain(arguments.iter().copied())).unwrap()
    }

    #[test]
    fn stream_offsets_parse() {
        assert_eq!(parse_stream_offset("first"), Ok(StreamOffset::First));
        assert_eq!(parse_stream_offset("last"), Ok(StreamOffset::Last));
        assert_eq!(parse_stream_offset("next"), Ok(StreamOffset::Next));
        assert_eq!(parse_stream_offset("0"), Ok(StreamOffset::Offset(0)));
        assert_eq!(parse_stream_offset("5000"), Ok(StreamOffset::Offset(5000)));
        assert_eq!(parse_stream_offset("1h"), Ok(StreamOffset::Interval("1h".into())));
        assert_eq!(parse_stream_offset("30s"), Ok(StreamOffset::Interval("30s".into())));
        assert_eq!(parse_stream_offset("7D"), Ok(StreamOffset::Interval("7D".into())));
        for bad in ["", "h", "-1", "1x", "1.5h", "First", "9223372036854775808"] {
            assert!(parse_stream_offset(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn the_raw_engine_is_the_default() {
        assert_eq!(parse(&[]).engine, Engine::Raw);
        assert_eq!(parse(&["--engine", "lapin"]).engine, Engine::Lapin);
        assert!(Options::try_parse_from(["warren-perf", "--engine", "java"]).is_err());
    }

    #[test]
    fn stream_offset_defaults_to_next_on_streams_only() {
        assert_eq!(parse(&["--queue-type", "stream"]).stream_offset(), Some(StreamOffset::Next));
        let first = parse(&["--queue-type", "stream", "--stream-offset", "first"]);
        assert_eq!(first.stream_offset(), Some(StreamOffset::First));
        assert_eq!(parse(&[]).stream_offset(), None);
        assert!(parse(&["--queue-type", "stream"]).durable_queues());
    }

    #[test]
    fn stream_combinations_are_checked() {
        let stream = ["--queue-type", "stream"];
        let valid = |extra: &[&str]| parse(&[&stream[..], extra].concat()).validate();
        assert!(valid(&[]).is_ok());
        assert!(valid(&["--auto-ack"]).unwrap_err().contains("--auto-ack"));
        assert!(valid(&["--prefetch", "0"]).unwrap_err().contains("prefetch"));
        assert!(valid(&["--backlog", "--count", "10"]).unwrap_err().contains("first"));
        assert!(valid(&["--backlog", "--count", "10", "--stream-offset", "last"]).is_err());
        assert!(valid(&["--backlog", "--count", "10", "--stream-offset", "first"]).is_ok());
        assert!(valid(&["--backlog", "--count", "10", "--stream-offset", "100"]).is_ok());
        assert!(valid(&["--stream-max-segment-size-bytes", "1000000"]).is_ok());
        assert!(parse(&["--stream-offset", "first"]).validate().is_err());
        assert!(parse(&["--stream-max-segment-size-bytes", "1000"]).validate().is_err());
    }
}
