//! Every metric family Warren serves, declared once: its name, kind, help and how it is read,
//! in the groups RabbitMQ's Prometheus plugin gives them (a group's name is what
//! `/metrics/detailed?family=` selects). A family of RabbitMQ's is named without its prefix
//! (`rabbitmq_`, `rabbitmq_detailed_` or `rabbitmq_cluster_`, by endpoint); Warren's own are
//! named in full (`warren_*`).
//!
//! Families of RabbitMQ's that Warren has no counterpart for are listed, with why, in
//! [`NOT_SERVED`]; `tests/rabbitmq_families.rs` holds the two lists against RabbitMQ 3.10.8's.

use super::exposition::Kind;
use super::objects::{ChannelObject, NodeFigures};
use warren_delivery::connections::ConnectionInfo;
use warren_delivery::dead_letter::DeathReason;
use warren_delivery::latency::HistogramSnapshot;
use warren_delivery::node_counters::{self as counters, QueueTypeCounters};
use warren_delivery::quorum::RaftFigures;
use warren_delivery::{Queue, VirtualHost};

/// How a family is read.
#[derive(Clone, Copy)]
pub enum Read {
    /// One figure of the node.
    Node(fn(&NodeFigures) -> f64),
    /// A node counter by protocol (only AMQP 0-9-1 so far), as RabbitMQ's global counters.
    ByProtocol(fn() -> u64),
    /// A node counter by protocol and queue type.
    ByQueueType(fn(&QueueTypeCounters) -> u64),
    /// Messages dead-lettered for a reason, by queue type and dead-letter strategy.
    DeadLettered(DeathReason),
    /// Dead-letter copies confirmed by their targets (at-least-once), by queue type.
    DeadLetteredConfirmed,
    /// Publishers and consumers by protocol.
    Clients(fn(&NodeFigures) -> f64),
    /// A histogram of the node.
    Histogram(fn() -> HistogramSnapshot),
    /// A figure of each queue.
    Queue(fn(&Queue) -> f64),
    /// A figure of each channel.
    Channel(fn(&ChannelObject) -> f64),
    /// A figure of each client connection.
    Connection(fn(&ConnectionInfo) -> f64),
    /// A figure of each Raft member on this node.
    Raft(fn(&RaftFigures) -> f64),
    /// How far behind the leader each follower is, on the leaders here.
    FollowersBehind,
    /// A figure of each virtual host.
    Vhost(fn(&VirtualHost) -> f64),
    /// A figure of each exchange.
    Exchange(fn(&warren_delivery::exchange::Exchange) -> f64),
    /// A figure of each consumer group of each stream (each partition of a super stream).
    StreamGroup(fn(&warren_delivery::stream::GroupLag) -> f64),
}

/// How a figure of many objects is one figure in the aggregated `/metrics`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Aggregate {
    Sum,
    Mean,
    /// Not aggregated: a sample per object on every endpoint (few objects, and each one is
    /// what a user watches, as a consumer group's lag).
    PerObject,
}

/// One family.
pub struct Family {
    pub name: &'static str,
    pub kind: Kind,
    pub help: &'static str,
    pub read: Read,
    pub aggregate: Aggregate,
}

/// Whose names a group's families carry.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Naming {
    /// RabbitMQ's: prefixed `rabbitmq_` (`rabbitmq_detailed_` on `/metrics/detailed`).
    RabbitMq,
    /// RabbitMQ's cluster-wide families, prefixed `rabbitmq_cluster_`, only on
    /// `/metrics/detailed`.
    Cluster,
    /// Warren's own, named in full.
    Warren,
}

/// A group of families, as RabbitMQ's plugin groups them.
pub struct Group {
    pub name: &'static str,
    pub naming: Naming,
    pub families: &'static [Family],
}

const fn family(name: &'static str, kind: Kind, help: &'static str, read: Read) -> Family {
    Family { name, kind, help, read, aggregate: Aggregate::Sum }
}

const fn gauge(name: &'static str, help: &'static str, read: Read) -> Family {
    family(name, Kind::Gauge, help, read)
}

const fn counter(name: &'static str, help: &'static str, read: Read) -> Family {
    family(name, Kind::Counter, help, read)
}

fn total(counter: &counters::Counter) -> f64 {
    counter.total() as f64
}

/// Every group, in the order they are written.
pub const GROUPS: &[Group] = &[
    Group { name: "global", naming: Naming::RabbitMq, families: GLOBAL },
    Group { name: "connection_churn_metrics", naming: Naming::RabbitMq, families: CHURN },
    Group { name: "node_coarse_metrics", naming: Naming::RabbitMq, families: NODE_COARSE },
    Group { name: "node_metrics", naming: Naming::RabbitMq, families: NODE },
    Group { name: "node_persister_metrics", naming: Naming::RabbitMq, families: PERSISTER },
    Group { name: "alarms", naming: Naming::RabbitMq, families: ALARMS },
    Group { name: "auth_attempt_metrics", naming: Naming::RabbitMq, families: AUTH },
    Group { name: "ra_metrics", naming: Naming::RabbitMq, families: RAFT },
    Group { name: "queue_coarse_metrics", naming: Naming::RabbitMq, families: QUEUE_COARSE },
    Group { name: "queue_metrics", naming: Naming::RabbitMq, families: QUEUE },
    Group { name: "channel_queue_exchange_metrics", naming: Naming::RabbitMq, families: QUEUE_PUBLISHED },
    Group { name: "channel_metrics", naming: Naming::RabbitMq, families: CHANNEL },
    Group { name: "channel_exchange_metrics", naming: Naming::RabbitMq, families: CHANNEL_EXCHANGE },
    Group { name: "channel_queue_metrics", naming: Naming::RabbitMq, families: CHANNEL_QUEUE },
    Group { name: "connection_coarse_metrics", naming: Naming::RabbitMq, families: CONNECTION_COARSE },
    Group { name: "connection_metrics", naming: Naming::RabbitMq, families: CONNECTION },
    Group { name: "vhost_status", naming: Naming::Cluster, families: VHOST_STATUS },
    Group { name: "exchange_bindings", naming: Naming::Cluster, families: EXCHANGE_BINDINGS },
    Group { name: "exchange_names", naming: Naming::Cluster, families: EXCHANGE_NAMES },
    Group { name: "warren", naming: Naming::Warren, families: WARREN },
];

/// RabbitMQ's global counters: what became of publishes and deliveries on this node, kept
/// whatever becomes of the connections, channels and queues that counted them.
const GLOBAL: &[Family] = &[
    counter(
        "global_messages_received_total",
        "Total number of messages received from publishers",
        Read::ByProtocol(|| counters::MESSAGES_RECEIVED.total()),
    ),
    counter(
        "global_messages_received_confirm_total",
        "Total number of messages received from publishers expecting confirmations",
        Read::ByProtocol(|| counters::MESSAGES_RECEIVED_CONFIRM.total()),
    ),
    counter(
        "global_messages_routed_total",
        "Total number of messages routed to queues or streams",
        Read::ByProtocol(|| counters::MESSAGES_ROUTED.total()),
    ),
    counter(
        "global_messages_unroutable_dropped_total",
        "Total number of messages published as non-mandatory into an exchange and dropped as unroutable",
        Read::ByProtocol(|| counters::MESSAGES_UNROUTABLE_DROPPED.total()),
    ),
    counter(
        "global_messages_unroutable_returned_total",
        "Total number of messages published as mandatory into an exchange and returned to the publisher as unroutable",
        Read::ByProtocol(|| counters::MESSAGES_UNROUTABLE_RETURNED.total()),
    ),
    counter(
        "global_messages_confirmed_total",
        "Total number of messages confirmed to publishers",
        Read::ByProtocol(|| counters::MESSAGES_CONFIRMED.total()),
    ),
    gauge("global_publishers", "Current number of publishers", Read::Clients(|node| node.publishers as f64)),
    gauge("global_consumers", "Current number of consumers", Read::Clients(|node| node.consumers as f64)),
    counter(
        "global_messages_delivered_total",
        "Total number of messages delivered to consumers",
        Read::ByQueueType(QueueTypeCounters::delivered),
    ),
    counter(
        "global_messages_delivered_consume_manual_ack_total",
        "Total number of messages delivered to consumers using basic.consume with manual acknowledgment",
        Read::ByQueueType(|c| c.delivered_consume_manual_ack.total()),
    ),
    counter(
        "global_messages_delivered_consume_auto_ack_total",
        "Total number of messages delivered to consumers using basic.consume with automatic acknowledgment",
        Read::ByQueueType(|c| c.delivered_consume_auto_ack.total()),
    ),
    counter(
        "global_messages_delivered_get_manual_ack_total",
        "Total number of messages delivered to consumers using basic.get with manual acknowledgment",
        Read::ByQueueType(|c| c.delivered_get_manual_ack.total()),
    ),
    counter(
        "global_messages_delivered_get_auto_ack_total",
        "Total number of messages delivered to consumers using basic.get with automatic acknowledgment",
        Read::ByQueueType(|c| c.delivered_get_auto_ack.total()),
    ),
    counter(
        "global_messages_get_empty_total",
        "Total number of times basic.get operations fetched no message",
        Read::ByQueueType(|c| c.get_empty.total()),
    ),
    counter(
        "global_messages_redelivered_total",
        "Total number of messages redelivered to consumers",
        Read::ByQueueType(|c| c.redelivered.total()),
    ),
    counter(
        "global_messages_acknowledged_total",
        "Total number of messages acknowledged by consumers",
        Read::ByQueueType(|c| c.acknowledged.total()),
    ),
    counter(
        "global_messages_dead_lettered_expired_total",
        "Total number of messages dead-lettered due to message TTL exceeded",
        Read::DeadLettered(DeathReason::Expired),
    ),
    counter(
        "global_messages_dead_lettered_rejected_total",
        "Total number of messages dead-lettered due to basic.reject or basic.nack",
        Read::DeadLettered(DeathReason::Rejected),
    ),
    counter(
        "global_messages_dead_lettered_maxlen_total",
        "Total number of messages dead-lettered due to overflow drop-head or reject-publish-dlx",
        Read::DeadLettered(DeathReason::Maxlen),
    ),
    counter(
        "global_messages_dead_lettered_delivery_limit_total",
        "Total number of messages dead-lettered due to delivery-limit exceeded",
        Read::DeadLettered(DeathReason::DeliveryLimit),
    ),
    counter(
        "global_messages_dead_lettered_confirmed_total",
        "Total number of messages dead-lettered and confirmed by target queues",
        Read::DeadLetteredConfirmed,
    ),
];

const CHURN: &[Family] = &[
    counter(
        "connections_opened_total",
        "Total number of connections opened",
        Read::Node(|_| total(&counters::CONNECTIONS_OPENED)),
    ),
    counter(
        "connections_closed_total",
        "Total number of connections closed or terminated",
        Read::Node(|_| total(&counters::CONNECTIONS_CLOSED)),
    ),
    counter(
        "channels_opened_total",
        "Total number of channels opened",
        Read::Node(|_| total(&counters::CHANNELS_OPENED)),
    ),
    counter(
        "channels_closed_total",
        "Total number of channels closed",
        Read::Node(|_| total(&counters::CHANNELS_CLOSED)),
    ),
    counter(
        "queues_declared_total",
        "Total number of queues declared (passive declares and those of queues that existed included)",
        Read::Node(|_| total(&counters::QUEUES_DECLARED)),
    ),
    counter("queues_created_total", "Total number of queues created", Read::Node(|_| total(&counters::QUEUES_CREATED))),
    counter(
        "queues_deleted_total",
        "Total number of queues deleted, however they went",
        Read::Node(|_| total(&counters::QUEUES_DELETED)),
    ),
];

const NODE_COARSE: &[Family] = &[
    gauge("process_open_fds", "Open file descriptors", Read::Node(|node| node.process.open_fds as f64)),
    gauge(
        "process_open_tcp_sockets",
        "Open TCP sockets (client connections, inter-node links, listeners)",
        Read::Node(|node| node.process.open_sockets as f64),
    ),
    gauge(
        "process_resident_memory_bytes",
        "Memory used in bytes",
        Read::Node(|node| node.process.resident_bytes as f64),
    ),
    gauge(
        "disk_space_available_bytes",
        "Disk space available in bytes",
        Read::Node(|node| node.usage.disk_free_bytes as f64),
    ),
];

const NODE: &[Family] = &[
    gauge("process_max_fds", "Open file descriptors limit", Read::Node(|node| node.process.max_fds as f64)),
    gauge(
        "process_max_tcp_sockets",
        "Open TCP sockets limit (each takes a file descriptor: the descriptors' limit)",
        Read::Node(|node| node.process.max_fds as f64),
    ),
    gauge(
        "resident_memory_limit_bytes",
        "Memory high watermark in bytes",
        Read::Node(|node| node.usage.memory_limit_bytes as f64),
    ),
    gauge(
        "disk_space_available_limit_bytes",
        "Free disk space low watermark in bytes",
        Read::Node(|node| node.usage.disk_free_limit_bytes as f64),
    ),
    gauge("erlang_uptime_seconds", "Node uptime", Read::Node(|node| node.uptime_seconds)),
];

const PERSISTER: &[Family] = &[
    counter(
        "io_read_bytes_total",
        "Total number of I/O bytes read from storage (the kernel's count for the process)",
        Read::Node(|node| node.process.storage_read_bytes as f64),
    ),
    counter(
        "io_write_bytes_total",
        "Total number of I/O bytes written to storage (the kernel's count for the process)",
        Read::Node(|node| node.process.storage_written_bytes as f64),
    ),
    counter("io_sync_ops_total", "Total number of I/O sync operations", Read::Node(|node| node.fsync.count as f64)),
    counter("io_sync_time_seconds_total", "Total I/O sync time", Read::Node(|node| node.fsync.sum_seconds)),
];

const ALARMS: &[Family] = &[
    gauge(
        "alarms_memory_used_watermark",
        "is set to 1 when the memory high watermark alarm is in effect (0 otherwise)",
        Read::Node(|node| f64::from(u8::from(node.alarms.memory))),
    ),
    gauge(
        "alarms_free_disk_space_watermark",
        "is set to 1 when the free disk space alarm is in effect (0 otherwise)",
        Read::Node(|node| f64::from(u8::from(node.alarms.disk))),
    ),
];

const AUTH: &[Family] = &[
    counter(
        "auth_attempts_total",
        "Total number of authentication attempts (AMQP and management API)",
        Read::Node(|node| (node.logins_succeeded + node.logins_failed) as f64),
    ),
    counter(
        "auth_attempts_succeeded_total",
        "Total number of successful authentication attempts",
        Read::Node(|node| node.logins_succeeded as f64),
    ),
    counter(
        "auth_attempts_failed_total",
        "Total number of failed authentication attempts",
        Read::Node(|node| node.logins_failed as f64),
    ),
];

const RAFT: &[Family] = &[
    counter("raft_term_total", "Current Raft term number", Read::Raft(|raft| raft.term as f64)),
    gauge("raft_log_snapshot_index", "Raft log snapshot index", Read::Raft(|raft| raft.snapshot_index as f64)),
    gauge(
        "raft_log_last_applied_index",
        "Raft log last applied index",
        Read::Raft(|raft| raft.last_applied_index as f64),
    ),
    gauge(
        "raft_log_commit_index",
        "Raft log commit index (a follower reports the last it applied)",
        Read::Raft(|raft| raft.commit_index as f64),
    ),
    gauge(
        "raft_log_last_written_index",
        "Raft log last written index",
        Read::Raft(|raft| raft.last_written_index as f64),
    ),
    Family {
        name: "raft_entry_commit_latency_seconds",
        kind: Kind::Gauge,
        help: "Time taken for a log entry to be committed (the member's last own proposal)",
        read: Read::Raft(|raft| raft.commit_latency_seconds),
        aggregate: Aggregate::Mean,
    },
];

const QUEUE_COARSE: &[Family] = &[
    gauge(
        "queue_messages_ready",
        "Messages ready to be delivered to consumers",
        Read::Queue(|queue| f64::from(queue.message_count())),
    ),
    gauge(
        "queue_messages_unacked",
        "Messages delivered to consumers but not yet acknowledged",
        Read::Queue(|queue| f64::from(queue.unacked_count())),
    ),
    gauge(
        "queue_messages",
        "Sum of ready and unacknowledged messages - total queue depth",
        Read::Queue(|queue| f64::from(queue.message_count()) + f64::from(queue.unacked_count())),
    ),
];

const QUEUE: &[Family] =
    &[gauge("queue_consumers", "Consumers on a queue", Read::Queue(|queue| f64::from(queue.consumer_count())))];

const QUEUE_PUBLISHED: &[Family] = &[counter(
    "queue_messages_published_total",
    "Total number of messages published to queues",
    Read::Queue(|queue| queue.stats().counts().publish as f64),
)];

const CHANNEL: &[Family] = &[
    gauge(
        "channel_consumers",
        "Consumers on a channel",
        Read::Channel(|channel| channel.session.consumers().len() as f64),
    ),
    gauge(
        "channel_messages_unacked",
        "Delivered but not yet acknowledged messages",
        Read::Channel(|channel| f64::from(channel.session.unacked_count())),
    ),
    gauge(
        "consumer_prefetch",
        "Limit of unacknowledged messages for each consumer",
        Read::Channel(|channel| f64::from(channel.session.consumer_prefetch())),
    ),
    gauge(
        "channel_prefetch",
        "Total limit of unacknowledged messages for all consumers on a channel",
        Read::Channel(|channel| f64::from(channel.session.channel_prefetch())),
    ),
];

const CHANNEL_EXCHANGE: &[Family] = &[
    counter(
        "channel_messages_published_total",
        "Total number of messages published into an exchange on a channel",
        Read::Channel(|channel| total(&channel.session.stats().published)),
    ),
    counter(
        "channel_messages_confirmed_total",
        "Total number of messages published into an exchange and confirmed on the channel",
        Read::Channel(|channel| total(&channel.session.stats().confirmed)),
    ),
    counter(
        "channel_messages_unroutable_returned_total",
        "Total number of messages published as mandatory into an exchange and returned to the publisher as unroutable",
        Read::Channel(|channel| total(&channel.session.stats().unroutable_returned)),
    ),
    counter(
        "channel_messages_unroutable_dropped_total",
        "Total number of messages published as non-mandatory into an exchange and dropped as unroutable",
        Read::Channel(|channel| total(&channel.session.stats().unroutable_dropped)),
    ),
];

const CHANNEL_QUEUE: &[Family] = &[
    counter(
        "channel_get_ack_total",
        "Total number of messages fetched with basic.get in manual acknowledgement mode",
        Read::Channel(|channel| total(&channel.session.stats().get_ack)),
    ),
    counter(
        "channel_get_total",
        "Total number of messages fetched with basic.get in automatic acknowledgement mode",
        Read::Channel(|channel| total(&channel.session.stats().get_no_ack)),
    ),
    counter(
        "channel_messages_delivered_ack_total",
        "Total number of messages delivered to consumers in manual acknowledgement mode",
        Read::Channel(|channel| total(&channel.session.stats().delivered_ack)),
    ),
    counter(
        "channel_messages_delivered_total",
        "Total number of messages delivered to consumers in automatic acknowledgement mode",
        Read::Channel(|channel| total(&channel.session.stats().delivered_no_ack)),
    ),
    counter(
        "channel_messages_redelivered_total",
        "Total number of messages redelivered to consumers",
        Read::Channel(|channel| total(&channel.session.stats().redelivered)),
    ),
    counter(
        "channel_messages_acked_total",
        "Total number of messages acknowledged by consumers",
        Read::Channel(|channel| total(&channel.session.stats().acked)),
    ),
    counter(
        "channel_get_empty_total",
        "Total number of times basic.get operations fetched no message",
        Read::Channel(|channel| total(&channel.session.stats().get_empty)),
    ),
];

const CONNECTION_COARSE: &[Family] = &[
    counter(
        "connection_incoming_bytes_total",
        "Total number of bytes received on a connection",
        Read::Connection(|connection| connection.traffic_bytes().0 as f64),
    ),
    counter(
        "connection_outgoing_bytes_total",
        "Total number of bytes sent on a connection",
        Read::Connection(|connection| connection.traffic_bytes().1 as f64),
    ),
];

const CONNECTION: &[Family] = &[gauge(
    "connection_channels",
    "Channels on a connection",
    Read::Connection(|connection| connection.channels().len() as f64),
)];

const VHOST_STATUS: &[Family] = &[gauge("vhost_status", "Whether a given vhost is running", Read::Vhost(|_| 1.0))];

const EXCHANGE_BINDINGS: &[Family] = &[gauge(
    "exchange_bindings",
    "Number of bindings for an exchange. This value is cluster-wide.",
    Read::Exchange(|exchange| exchange.binding_count() as f64),
)];

const EXCHANGE_NAMES: &[Family] = &[gauge(
    "exchange_name",
    "Enumerates exchanges without any additional info. This value is cluster-wide.",
    Read::Exchange(|_| 1.0),
)];

/// Warren's own figures.
const WARREN: &[Family] = &[
    gauge(
        "warren_queue_disk_bytes",
        "Bytes the queues keep on disk on this node",
        Read::Queue(|queue| queue.disk_bytes() as f64),
    ),
    Family {
        aggregate: Aggregate::PerObject,
        ..gauge(
            "warren_stream_group_offset_lag",
            "Messages of a stream its consumer group has not acked, from the group's committed offset to the end \
             (stream: the stream, or the super stream of partition; partition: the partition's stream)",
            Read::StreamGroup(|group| group.lag as f64),
        )
    },
    Family {
        aggregate: Aggregate::PerObject,
        ..gauge(
            "warren_stream_group_committed_offset",
            "The offset below which a stream's consumer group acked every message (labels as warren_stream_group_offset_lag)",
            Read::StreamGroup(|group| group.committed as f64),
        )
    },
    gauge(
        "warren_raft_follower_entries_behind",
        "On a Raft group's leader here: how many entries each follower is behind its log",
        Read::FollowersBehind,
    ),
    counter(
        "warren_deduplicated_messages_total",
        "Messages dropped by deduplication (their key was seen within the window), and confirmed",
        Read::Node(|_| warren_delivery::dedup_window::dropped_total() as f64),
    ),
    gauge("warren_delayed_messages", "Messages delayed exchanges hold until they are due", Read::Node(|node| node.delayed as f64)),
    counter(
        "warren_delayed_refired_total",
        "Due messages of replicated delayed exchanges routed again by a new leader (each may have been routed twice)",
        Read::Node(|_| warren_delivery::exchange::replicated_delays::refired_total() as f64),
    ),
    counter(
        "warren_raft_leader_changes_total",
        "New leaders seen by this node's Raft members (quorum queues, streams, delayed exchanges, metadata) since it started",
        Read::Node(|_| warren_delivery::quorum::leader_changes::leader_changes_total() as f64),
    ),
    gauge(
        "warren_timers_pending",
        "Timers waiting in the broker's wheel (message TTLs: one per queue; queue expiry; delayed messages)",
        Read::Node(|node| node.timers_pending as f64),
    ),
    gauge(
        "warren_open_segment_files",
        "Segment data files open now (durable queues, streams and Raft logs open theirs on use)",
        Read::Node(|_| warren_delivery::open_segment_files() as f64),
    ),
    gauge(
        "warren_max_open_segment_files",
        "Segment data files that may be open at once; the least recently used close first",
        Read::Node(|_| warren_delivery::max_open_segment_files() as f64),
    ),
    family(
        "warren_fsync_seconds",
        Kind::Histogram,
        "How long fsyncs of the logs take",
        Read::Histogram(|| warren_delivery::latency::FSYNC_LATENCY.snapshot()),
    ),
    family(
        "warren_delayed_message_lateness_seconds",
        Kind::Histogram,
        "How late delayed messages are routed after their due time",
        Read::Histogram(|| warren_delivery::scheduler::FIRING_LATENESS.snapshot()),
    ),
    family(
        "warren_confirm_latency_seconds",
        Kind::Histogram,
        "Time from a publish to its publisher confirm",
        Read::Histogram(|| warren_delivery::message_store::CONFIRM_LATENCY.snapshot()),
    ),
];

/// The families of RabbitMQ 3.10's `/metrics` that Warren does not serve, each with why.
/// Erlang-VM internals, Mnesia and the Erlang distribution are left out as a group
/// (`ERLANG_ONLY_PREFIXES`).
pub const NOT_SERVED: &[(&str, &str)] = &[
    ("rabbitmq_channel_acks_uncommitted", "transactions' pending acks are not counted yet"),
    ("rabbitmq_channel_messages_uncommitted", "transactions' pending publishes are not counted yet"),
    ("rabbitmq_channel_messages_unconfirmed", "publishes awaiting their confirm are not counted per channel yet"),
    ("rabbitmq_connection_incoming_packets_total", "Warren counts bytes per connection, not reads"),
    ("rabbitmq_connection_outgoing_packets_total", "Warren counts bytes per connection, not writes"),
    ("rabbitmq_connection_pending_packets", "a connection's outbox is bounded in bytes, not packets"),
    ("rabbitmq_io_read_ops_total", "storage reads go through mmap: there are no read calls to count"),
    ("rabbitmq_io_read_time_seconds_total", "storage reads go through mmap: there are no read calls to time"),
    ("rabbitmq_io_write_ops_total", "the kernel's write count for the process includes sockets"),
    ("rabbitmq_io_write_time_seconds_total", "appends are not timed, fsyncs are (io_sync_time_seconds_total)"),
    ("rabbitmq_io_seek_ops_total", "logs are appended and mapped, never seeked"),
    ("rabbitmq_io_seek_time_seconds_total", "logs are appended and mapped, never seeked"),
    (
        "rabbitmq_io_reopen_ops_total",
        "RabbitMQ's file handle cache; Warren's open segment files are warren_open_segment_files",
    ),
    ("rabbitmq_msg_store_read_total", "there is no shared message store: each queue has its log"),
    ("rabbitmq_msg_store_write_total", "there is no shared message store: each queue has its log"),
    ("rabbitmq_queue_index_read_ops_total", "there is no queue index: a queue's log is its index"),
    ("rabbitmq_queue_index_write_ops_total", "there is no queue index: a queue's log is its index"),
    ("rabbitmq_queue_consumer_utilisation", "consumer utilisation is not measured yet"),
    ("rabbitmq_queue_disk_reads_total", "reads go through mmap: not counted per queue"),
    ("rabbitmq_queue_disk_writes_total", "appends are not counted per queue yet"),
    ("rabbitmq_queue_messages_bytes", "message bytes are not kept per queue yet"),
    ("rabbitmq_queue_messages_ready_bytes", "message bytes are not kept per queue yet"),
    ("rabbitmq_queue_messages_unacked_bytes", "message bytes are not kept per queue yet"),
    ("rabbitmq_queue_messages_persistent", "message bytes and persistence are not kept per queue yet"),
    ("rabbitmq_queue_messages_persistent_bytes", "message bytes and persistence are not kept per queue yet"),
    ("rabbitmq_queue_messages_paged_out", "messages are read from the log through mmap: nothing is paged out"),
    ("rabbitmq_queue_messages_paged_out_bytes", "messages are read from the log through mmap: nothing is paged out"),
    ("rabbitmq_queue_messages_ram", "messages are read from the log through mmap: no RAM/disk split"),
    ("rabbitmq_queue_messages_ram_bytes", "messages are read from the log through mmap: no RAM/disk split"),
    ("rabbitmq_queue_messages_ready_ram", "messages are read from the log through mmap: no RAM/disk split"),
    ("rabbitmq_queue_messages_unacked_ram", "messages are read from the log through mmap: no RAM/disk split"),
    ("rabbitmq_queue_process_memory_bytes", "a queue is not a process with its own heap"),
    ("telemetry_scrape_duration_seconds", "the Prometheus client library's own telemetry"),
    ("telemetry_scrape_encoded_size_bytes", "the Prometheus client library's own telemetry"),
    ("telemetry_scrape_size_bytes", "the Prometheus client library's own telemetry"),
    ("rabbitmq_global_stream_error_*", "the Stream protocol (issue 34)"),
];

/// Families of RabbitMQ's about the Erlang VM, Mnesia and the Erlang distribution, which
/// have no counterpart in a broker that is not an Erlang node.
pub const ERLANG_ONLY: &[&str] = &[
    "rabbitmq_erlang_gc_reclaimed_bytes_total",
    "rabbitmq_erlang_gc_runs_total",
    "rabbitmq_erlang_net_ticktime_seconds",
    "rabbitmq_erlang_processes_limit",
    "rabbitmq_erlang_processes_used",
    "rabbitmq_erlang_scheduler_context_switches_total",
    "rabbitmq_erlang_scheduler_run_queue",
    "rabbitmq_schema_db_disk_tx_total",
    "rabbitmq_schema_db_ram_tx_total",
    "rabbitmq_channel_process_reductions_total",
    "rabbitmq_connection_process_reductions_total",
    "rabbitmq_queue_process_reductions_total",
];
