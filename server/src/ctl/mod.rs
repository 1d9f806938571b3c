//! `warren ctl`: the command line of a running broker. One grammar for every verb:
//! rabbitmqctl's and rabbitmq-queues' verb names where they have one (`list_queues`,
//! `purge_queue`, `cluster_status`, `add_member`, ...), the same style where they have none
//! (`declare_queue`, `publish`, `browse`, ...). It speaks the management HTTP API.
//!
//! Where the API is and who speaks: `--url`, `--user`, `--password`, `--vhost`, else the same
//! keys in the TOML file of `--config` (`url`, `user`, `password`, `vhost`), else the
//! environment (`WARREN_CTL_URL`, ...), else the local node as guest. A flag beats the file,
//! the file beats the environment, as for the broker's own settings.
//!
//! - `client`: the HTTP client and its errors; `output`: tables and JSON;
//! - `lists`: the list verbs; `node`: `status`, `environment`, `set_log_level`;
//!   `stream_consumers`: `list_stream_group_consumers`; `actions`: the others; `cluster`: the cluster verbs;
//!   `super_streams`: `add_super_stream`, `add_partitions` and `delete_super_stream`;
//!   `health`: rabbitmq-diagnostics' health checks (`ping`, `check_*`, `await_startup`).

mod access;
mod actions;
mod client;
mod cluster;
#[cfg(test)]
mod grammar_tests;
mod health;
mod lists;
mod node;
mod output;
mod policies;
mod stream_consumers;
mod super_streams;

use clap::{Parser, Subcommand};
/// Percent-encodes a path segment of the management API (`/` is `%2F`): what `warren ctl` and
/// the tests address objects with.
pub use client::encode as encode_path_segment;
use client::Client;
use cluster::Replicated;
use output::{say, Format};
use serde::Deserialize;

/// warren ctl: manage a running Warren through its management API.
///
/// The options that say where the API is, who speaks and in which vhost are global: they may
/// come before the verb (`warren ctl -p prod list_queues`) or after it, among its arguments,
/// as rabbitmqctl takes them (`warren ctl set_permissions -p prod app '.*' '.*' '.*'`). Their
/// ids are not their flags' names: verbs have arguments called `user`, `password` and `vhost`.
#[derive(Debug, Parser)]
#[command(
    name = "warren ctl",
    about = "Manages a running Warren through its management HTTP API, with rabbitmqctl's and rabbitmq-queues' verbs.",
    long_about = None
)]
pub struct Ctl {
    /// The management API to talk to [default: http://127.0.0.1:15672]; as rabbitmqctl's
    /// `-n`, a node (`warren@host`, `host`, `host:port`) stands for its API on port 15672.
    #[arg(id = "api_url", long = "url", short = 'n', value_name = "URL", visible_alias = "node", global = true)]
    url: Option<String>,
    /// User name [default: guest].
    #[arg(id = "api_user", long = "user", value_name = "USER", visible_alias = "username", global = true)]
    user: Option<String>,
    /// Password [default: guest].
    #[arg(id = "api_password", long = "password", value_name = "PASSWORD", global = true)]
    password: Option<String>,
    /// Virtual host of the verbs that name queues, exchanges or bindings [default: /].
    #[arg(id = "api_vhost", long = "vhost", short = 'p', value_name = "VHOST", global = true)]
    vhost: Option<String>,
    /// A TOML file with `url`, `user`, `password` and `vhost`.
    #[arg(long, global = true)]
    config: Option<std::path::PathBuf>,
    /// How lists and messages are printed.
    #[arg(long, visible_alias = "formatter", value_enum, default_value = "table", global = true)]
    format: Format,
    /// Accepted as rabbitmqctl takes it; `warren ctl` prints no informational messages.
    #[arg(short = 'q', long, global = true)]
    quiet: bool,
    /// Tables without their header row (and, as `--quiet`, no informational messages).
    #[arg(short = 's', long, global = true)]
    silent: bool,
    #[command(subcommand)]
    verb: Verb,
}

/// The settings `--config` names.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CtlFile {
    url: Option<String>,
    user: Option<String>,
    password: Option<String>,
    vhost: Option<String>,
}

#[derive(Debug, PartialEq, Subcommand)]
enum Verb {
    /// The broker's overview (version, listeners, totals, rates) and this node's memory and
    /// watermark, disk free and limit, file descriptors, alarms, data directory, config file.
    Status,
    /// Every setting of the node: its value and where it came from (default, environment,
    /// flag or file); the default user's password is hidden.
    Environment,
    /// Changes the node's log filter while it runs: a level (error, warn, info, debug,
    /// trace) or RUST_LOG directives per module ('info,warren_amqp=debug'); until restart.
    #[command(name = "set_log_level")]
    SetLogLevel {
        /// The level, or directives.
        level: String,
    },
    /// Checks that USER logs in with PASSWORD (exit code 2 if not).
    #[command(name = "authenticate_user")]
    AuthenticateUser {
        /// The user.
        user: String,
        /// Its password.
        password: String,
    },
    /// Queues, with the columns asked for (default: name messages).
    #[command(name = "list_queues")]
    ListQueues { columns: Vec<String> },
    /// Exchanges (default columns: name type).
    #[command(name = "list_exchanges")]
    ListExchanges { columns: Vec<String> },
    /// Bindings (default columns: source_name source_kind destination_name destination_kind routing_key arguments).
    #[command(name = "list_bindings")]
    ListBindings { columns: Vec<String> },
    /// Client connections (default columns: user peer_host peer_port state).
    #[command(name = "list_connections")]
    ListConnections { columns: Vec<String> },
    /// Channels (default columns: name user consumer_count messages_unacknowledged).
    #[command(name = "list_channels")]
    ListChannels { columns: Vec<String> },
    /// Consumers (default columns: queue_name channel_name consumer_tag ack_required prefetch_count active arguments).
    #[command(name = "list_consumers")]
    ListConsumers { columns: Vec<String> },
    /// Users and their tags.
    #[command(name = "list_users")]
    ListUsers { columns: Vec<String> },
    /// Virtual hosts.
    #[command(name = "list_vhosts")]
    ListVhosts { columns: Vec<String> },
    /// Permissions in the vhost (-p).
    #[command(name = "list_permissions")]
    ListPermissions { columns: Vec<String> },
    /// A user's permissions in every vhost (default columns: vhost configure write read).
    #[command(name = "list_user_permissions")]
    ListUserPermissions { user: String, columns: Vec<String> },
    /// The vhost's (-p) limits.
    #[command(name = "list_vhost_limits")]
    ListVhostLimits { columns: Vec<String> },
    /// Adds a user (no tags, no permissions: see set_user_tags and set_permissions).
    #[command(name = "add_user")]
    AddUser {
        /// Its name.
        user: String,
        /// Its password.
        password: String,
    },
    /// Deletes a user and its permissions.
    #[command(name = "delete_user")]
    DeleteUser {
        /// Its name.
        user: String,
    },
    /// Changes a user's password.
    #[command(name = "change_password")]
    ChangePassword {
        /// Its name.
        user: String,
        /// The new password.
        password: String,
    },
    /// Clears a user's password: it logs in only with a TLS client certificate (EXTERNAL).
    #[command(name = "clear_password")]
    ClearPassword {
        /// Its name.
        user: String,
    },
    /// Sets a user's tags (administrator, monitoring, management, policymaker; none clears them).
    #[command(name = "set_user_tags")]
    SetUserTags {
        /// Its name.
        user: String,
        /// The tags.
        tags: Vec<String>,
    },
    /// Adds a virtual host.
    #[command(name = "add_vhost")]
    AddVhost {
        /// Its name.
        vhost: String,
        /// What it is for.
        #[arg(long, default_value = "")]
        description: String,
    },
    /// Deletes a virtual host with everything in it; its connections are closed.
    #[command(name = "delete_vhost")]
    DeleteVhost {
        /// Its name.
        vhost: String,
    },
    /// Sets a user's permissions in the vhost (-p): three regular expressions.
    #[command(name = "set_permissions")]
    SetPermissions {
        /// The user.
        user: String,
        /// What it may declare and delete.
        #[arg(allow_hyphen_values = true)]
        configure: String,
        /// What it may publish to and bind to.
        #[arg(allow_hyphen_values = true)]
        write: String,
        /// What it may consume, get, purge and bind from.
        #[arg(allow_hyphen_values = true)]
        read: String,
    },
    /// Takes a user's permissions in the vhost (-p) away.
    #[command(name = "clear_permissions")]
    ClearPermissions {
        /// The user.
        user: String,
    },
    /// Sets a user's topic permission on a topic exchange of the vhost (-p): the routing keys it
    /// may publish with (WRITE) and bind with (READ), regular expressions in which {username}
    /// and {vhost} stand for the names.
    #[command(name = "set_topic_permissions")]
    SetTopicPermissions {
        /// The user.
        user: String,
        /// The topic exchange.
        exchange: String,
        /// Routing keys it may publish with.
        #[arg(allow_hyphen_values = true)]
        write: String,
        /// Binding keys it may bind with.
        #[arg(allow_hyphen_values = true)]
        read: String,
    },
    /// Takes a user's topic permissions in the vhost (-p) away: on EXCHANGE, or on all.
    #[command(name = "clear_topic_permissions")]
    ClearTopicPermissions {
        /// The user.
        user: String,
        /// The exchange (all if not given).
        exchange: Option<String>,
    },
    /// The vhost's (-p) topic permissions (columns: user, vhost, exchange, write, read).
    #[command(name = "list_topic_permissions")]
    ListTopicPermissions { columns: Vec<String> },
    /// Sets a user's limits: '{"max-connections": N, "max-channels": N}' (negative: none),
    /// merged into those it has, as rabbitmqctl does.
    #[command(name = "set_user_limits")]
    SetUserLimits {
        /// The user.
        user: String,
        /// The limits, as JSON.
        definition: String,
    },
    /// Clears one of a user's limits (max-connections, max-channels), or all.
    #[command(name = "clear_user_limits")]
    ClearUserLimits {
        /// The user.
        user: String,
        /// The limit, or all.
        limit: String,
    },
    /// Users' limits (columns: user, limits).
    #[command(name = "list_user_limits")]
    ListUserLimits { columns: Vec<String> },
    /// Sets a global runtime parameter to a JSON value (cluster_name names the cluster in the
    /// API, as in RabbitMQ).
    #[command(name = "set_global_parameter")]
    SetGlobalParameter {
        /// Its name.
        name: String,
        /// Its value, as JSON ('"prod-eu"', '{"a": 1}').
        value: String,
    },
    /// Clears a global runtime parameter.
    #[command(name = "clear_global_parameter")]
    ClearGlobalParameter {
        /// Its name.
        name: String,
    },
    /// The global runtime parameters (columns: name, value).
    #[command(name = "list_global_parameters")]
    ListGlobalParameters { columns: Vec<String> },
    /// Sets the vhost's (-p) limits: '{"max-connections": N, "max-queues": N}' (negative: none).
    #[command(name = "set_vhost_limits")]
    SetVhostLimits {
        /// The limits, as JSON.
        definition: String,
    },
    /// Sets a policy in the vhost (-p): queues and exchanges whose names PATTERN matches run
    /// with DEFINITION ('{"message-ttl": 60000}'), the highest priority winning.
    #[command(name = "set_policy")]
    SetPolicy(policies::PolicyArgs),
    /// Clears a policy of the vhost (-p).
    #[command(name = "clear_policy")]
    ClearPolicy {
        /// Its name.
        name: String,
    },
    /// The vhost's (-p) policies (columns: vhost, name, pattern, apply-to, definition, priority,
    /// no_effect).
    #[command(name = "list_policies")]
    ListPolicies { columns: Vec<String> },
    /// Sets an operator policy in the vhost (-p): limits that policies cannot lift (only the
    /// keys RabbitMQ lets operators set).
    #[command(name = "set_operator_policy")]
    SetOperatorPolicy(policies::PolicyArgs),
    /// Clears an operator policy of the vhost (-p).
    #[command(name = "clear_operator_policy")]
    ClearOperatorPolicy {
        /// Its name.
        name: String,
    },
    /// The vhost's (-p) operator policies (the columns of list_policies).
    #[command(name = "list_operator_policies")]
    ListOperatorPolicies { columns: Vec<String> },
    /// Declares a queue.
    #[command(name = "declare_queue")]
    DeclareQueue {
        /// The queue.
        queue: String,
        /// Its kind.
        #[arg(long = "type", default_value = "classic", value_parser = ["classic", "quorum", "stream"])]
        kind: String,
        /// Whether it survives a restart.
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
        durable: bool,
        /// Its arguments, as a JSON object (`{"x-max-length": 1000}`).
        #[arg(long)]
        arguments: Option<String>,
    },
    /// Deletes a queue.
    #[command(name = "delete_queue")]
    DeleteQueue {
        /// The queue.
        queue: String,
        /// Only if it holds no message.
        #[arg(long)]
        if_empty: bool,
        /// Only if it has no consumer.
        #[arg(long)]
        if_unused: bool,
    },
    /// Sets the memory high watermark at run time (until restart): a fraction of the RAM
    /// (0.4) or a size (2GiB); publishers are blocked above it.
    #[command(name = "set_vm_memory_high_watermark")]
    SetVmMemoryHighWatermark {
        /// A fraction from 0 to 1, or a size.
        watermark: String,
    },
    /// Sets the disk free limit at run time (until restart): a size (50MB, 1GiB); publishers
    /// are blocked below it.
    #[command(name = "set_disk_free_limit")]
    SetDiskFreeLimit {
        /// A size.
        limit: String,
    },
    /// Removes every ready message of a queue.
    #[command(name = "purge_queue")]
    PurgeQueue {
        /// The queue.
        queue: String,
    },
    /// Declares an exchange.
    #[command(name = "declare_exchange")]
    DeclareExchange {
        /// The exchange.
        exchange: String,
        /// Its type: direct, fanout, topic, headers, x-delayed-message.
        #[arg(default_value = "direct")]
        kind: String,
        /// Whether it survives a restart.
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
        durable: bool,
        /// Its arguments, as a JSON object.
        #[arg(long)]
        arguments: Option<String>,
    },
    /// Binds a queue (or, with --destination-type exchange, an exchange) to an exchange.
    Bind {
        /// The exchange messages come from.
        source: String,
        /// The queue or exchange they go to.
        destination: String,
        /// The binding key.
        #[arg(long, default_value = "")]
        routing_key: String,
        /// What the destination is.
        #[arg(long, default_value = "queue", value_parser = ["queue", "exchange"])]
        destination_type: String,
        /// The binding's arguments, as a JSON object.
        #[arg(long)]
        arguments: Option<String>,
    },
    /// Closes a client connection, telling it why.
    #[command(name = "close_connection")]
    CloseConnection {
        /// The connection's name (as list_connections name shows it).
        name: String,
        /// What the client is told.
        #[arg(default_value = "Closed via warren ctl")]
        reason: String,
    },
    /// Closes every client connection of the vhost (-p), or of every vhost with --global,
    /// telling each why.
    #[command(name = "close_all_connections")]
    CloseAllConnections {
        /// What the clients are told.
        explanation: String,
        /// Every vhost's connections, not the vhost's (-p) alone.
        #[arg(long)]
        global: bool,
    },
    /// Publishes a message to an exchange ("" for the default exchange).
    Publish {
        /// The exchange.
        exchange: String,
        /// The routing key.
        routing_key: String,
        /// The body, as text.
        payload: String,
        /// Not persistent (delivery mode 1).
        #[arg(long)]
        transient: bool,
        /// A header with a text value, as NAME=VALUE (repeatable), e.g. x-stream-filter-value=eu.
        #[arg(long = "header", value_name = "NAME=VALUE", value_parser = header_pair)]
        headers: Vec<(String, String)>,
    },
    /// Takes messages from a queue (by default puts them back, as rabbitmqadmin get).
    Get {
        /// The queue.
        queue: String,
        /// How many at most.
        #[arg(long, default_value_t = 1)]
        count: u32,
        /// What to do with them: ack_requeue_true, ack_requeue_false, reject_requeue_true, reject_requeue_false.
        #[arg(long, default_value = "ack_requeue_true")]
        ackmode: String,
    },
    /// Reads a stream, or a durable queue's log, from an offset without consuming it.
    Browse {
        /// The stream or durable queue.
        queue: String,
        /// Where to start: an offset, first, last or next.
        #[arg(long, default_value = "first")]
        offset: String,
        /// How many messages at most.
        #[arg(long, default_value_t = 20)]
        count: u32,
        /// Only messages with this tag (x-stream-filter-value).
        #[arg(long)]
        filter: Option<String>,
    },
    /// Writes the broker's definitions to FILE (- for standard output), in RabbitMQ's format.
    #[command(name = "export_definitions")]
    ExportDefinitions { file: String },
    /// Loads definitions from FILE (- for standard input), as RabbitMQ's import does.
    #[command(name = "import_definitions")]
    ImportDefinitions { file: String },
    /// The cluster's nodes and which are running.
    #[command(name = "cluster_status")]
    ClusterStatus,
    /// This node's member of the catalog: its Raft state, term, log, applied, snapshot and
    /// purged indexes, and machine version (rabbitmq-diagnostics' verb).
    #[command(name = "metadata_store_status")]
    MetadataStoreStatus,
    /// The feature flags and whether each is enabled (columns: name, state, stability,
    /// provided_by, desc, machine, machine_version).
    #[command(name = "list_feature_flags")]
    ListFeatureFlags { columns: Vec<String> },
    /// Enables feature flag NAME (all: every flag) once every node of the cluster supports it.
    #[command(name = "enable_feature_flag")]
    EnableFeatureFlag { name: String },
    /// Health check: the node answers (exit code 69 when a check fails, as rabbitmq-diagnostics).
    Ping,
    /// Health check: the node is running.
    #[command(name = "check_running")]
    CheckRunning,
    /// Health check: no resource alarm on this node.
    #[command(name = "check_local_alarms")]
    CheckLocalAlarms,
    /// Health check: no resource alarm in the cluster.
    #[command(name = "check_alarms")]
    CheckAlarms,
    /// Health check: a listener is active on PORT.
    #[command(name = "check_port_listener")]
    CheckPortListener { port: u16 },
    /// Health check: a listener for PROTOCOL (amqp, amqp/ssl, http, https, clustering) is active.
    #[command(name = "check_protocol_listener")]
    CheckProtocolListener { protocol: String },
    /// Health check: every listener of the node accepts a connection.
    #[command(name = "check_port_connectivity")]
    CheckPortConnectivity,
    /// Health check: every virtual host is running.
    #[command(name = "check_virtual_hosts")]
    CheckVirtualHosts,
    /// Health check: stopping this node would cost no quorum queue its quorum.
    #[command(name = "check_if_node_is_quorum_critical")]
    CheckIfNodeIsQuorumCritical,
    /// Waits until the node answers.
    #[command(name = "await_startup")]
    AwaitStartup {
        /// How long to wait, in seconds.
        #[arg(long, short = 't', default_value_t = 300)]
        timeout: u64,
    },
    /// A quorum queue's members and leader.
    #[command(name = "quorum_status")]
    QuorumStatus {
        /// The queue.
        queue: String,
    },
    /// Adds a replica of a quorum queue on a node.
    #[command(name = "add_member")]
    AddMember {
        /// The queue.
        queue: String,
        /// The node (its name, e.g. warren@b).
        node: String,
    },
    /// Removes a quorum queue's replica from a node.
    #[command(name = "delete_member")]
    DeleteMember {
        /// The queue.
        queue: String,
        /// The node.
        node: String,
    },
    /// A replicated stream's replicas: the writer (its group's leader) and the others
    /// (rabbitmq-streams' verb).
    #[command(name = "stream_status")]
    StreamStatus {
        /// The stream.
        stream: String,
    },
    /// Adds a replica of a stream on a node; it catches up from the others, then counts in
    /// the majority that confirms a publish (rabbitmq-streams' verb).
    #[command(name = "add_replica")]
    AddReplica {
        /// The stream.
        stream: String,
        /// The node (its name, e.g. warren@b).
        node: String,
    },
    /// Removes a stream's replica from a node (rabbitmq-streams' verb).
    #[command(name = "delete_replica")]
    DeleteReplica {
        /// The stream.
        stream: String,
        /// The node.
        node: String,
    },
    /// Adds a replica on a node to every quorum queue without one there.
    Grow {
        /// The node.
        node: String,
        /// Which queues: `all` (RabbitMQ's `even` is not offered).
        #[arg(default_value = "all", value_parser = ["all"])]
        strategy: String,
    },
    /// Removes every quorum queue's replica from a node.
    Shrink {
        /// The node.
        node: String,
    },
    /// Declares a super stream (a partitioned stream), as rabbitmq-streams does: a direct
    /// exchange NAME with x-super-stream and streams NAME-0 .. NAME-(N-1) bound with keys 0 ..
    /// N-1, or NAME-KEY bound with KEY for --routing-keys.
    #[command(name = "add_super_stream")]
    AddSuperStream {
        /// The super stream.
        name: String,
        /// How many partitions [default: 3].
        #[arg(long, conflicts_with = "routing_keys")]
        partitions: Option<u32>,
        /// The partitions' routing keys, comma-separated (a,b,c), instead of numbers.
        #[arg(long, value_delimiter = ',')]
        routing_keys: Option<Vec<String>>,
        /// Each partition's x-max-age, e.g. 7D.
        #[arg(long)]
        max_age: Option<String>,
        /// Each partition's x-max-length-bytes.
        #[arg(long)]
        max_length_bytes: Option<u64>,
        /// Each partition's x-stream-max-segment-size-bytes.
        #[arg(long)]
        stream_max_segment_size_bytes: Option<u64>,
    },
    /// Adds partitions to a super stream, bound after its last, with its first partition's
    /// arguments. Keys are hashed over the new number of partitions from then on (new
    /// messages only).
    #[command(name = "add_partitions")]
    AddPartitions {
        /// The super stream.
        name: String,
        /// How many partitions to add, numbered after the existing ones [default: 1].
        #[arg(long, conflicts_with = "routing_keys")]
        partitions: Option<u32>,
        /// The new partitions' routing keys, comma-separated, instead of numbers.
        #[arg(long, value_delimiter = ',')]
        routing_keys: Option<Vec<String>>,
    },
    /// Stream consumers in the vhost (-p), with their offsets and lag (default columns:
    /// connection_name stream consumer_tag offset offset_lag active activity_status properties;
    /// rabbitmq-streams' verb).
    #[command(name = "list_stream_consumers")]
    ListStreamConsumers { columns: Vec<String> },
    /// Consumer groups of the vhost's (-p) streams, per partition of a super stream, with
    /// their committed offset and lag (default columns: stream reference partition_index
    /// committed_offset last_offset offset_lag; rabbitmq-streams' verb).
    #[command(name = "list_stream_consumer_groups")]
    ListStreamConsumerGroups { columns: Vec<String> },
    /// The consumers of one consumer group (default columns: consumer_tag connection_name
    /// stream state offset; rabbitmq-streams' verb).
    #[command(name = "list_stream_group_consumers")]
    ListStreamGroupConsumers {
        /// The stream, or the super stream.
        #[arg(long)]
        stream: String,
        /// The group's name (x-consumer-group).
        #[arg(long)]
        reference: String,
        /// The columns.
        columns: Vec<String>,
    },
    /// Deletes a super stream: its partitions and its exchange.
    #[command(name = "delete_super_stream")]
    DeleteSuperStream {
        /// The super stream.
        name: String,
    },
    /// Makes this node, on its own so far and empty, a node of another node's cluster.
    #[command(name = "join_cluster")]
    JoinCluster {
        /// The node to join through, with its inter-node address: name@host:port (as in --peers).
        node: String,
    },
    /// Removes a stopped node from the cluster (its quorum queue replicas first).
    #[command(name = "forget_cluster_node")]
    ForgetClusterNode {
        /// The node.
        node: String,
    },
}

/// Partitions of `add_super_stream` when neither --partitions nor --routing-keys is given
/// (rabbitmq-streams' default).
const DEFAULT_PARTITIONS: u32 = 3;

/// A ctl run failed; the text says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    /// The verb could not be carried out (exit code 2).
    #[error("{0}")]
    Failed(String),
    /// A health check found the node unhealthy (exit code 69, EX_UNAVAILABLE, as
    /// rabbitmq-diagnostics' checks exit).
    #[error("{0}")]
    Unhealthy(String),
}

impl CtlError {
    /// The process's exit code for this failure.
    pub fn exit_code(&self) -> i32 {
        match self {
            CtlError::Failed(_) => 2,
            CtlError::Unhealthy(_) => 69,
        }
    }
}

/// A `--header NAME=VALUE` of `publish`.
fn header_pair(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_string(), value.to_string())),
        _ => Err(format!("expected NAME=VALUE, got {text:?}")),
    }
}

/// The first of `flag`, `file` and environment variable `env` that is set, else `default`.
fn setting(flag: &Option<String>, file: &Option<String>, env: &str, default: &str) -> String {
    flag.clone().or_else(|| file.clone()).or_else(|| std::env::var(env).ok()).unwrap_or_else(|| default.to_string())
}

/// Runs `warren ctl` with `args` (after `ctl`); prints the answer to stdout.
pub fn run(args: impl IntoIterator<Item = String>) -> Result<(), CtlError> {
    let ctl = match Ctl::try_parse_from(std::iter::once("warren ctl".to_string()).chain(args)) {
        Ok(ctl) => ctl,
        Err(help) if !help.use_stderr() => {
            say(&help.to_string());
            return Ok(());
        }
        Err(error) => return Err(CtlError::Failed(error.to_string())),
    };
    let file: CtlFile = match &ctl.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| CtlError::Failed(format!("cannot read {}: {e}", path.display())))?;
            toml::from_str(&text).map_err(|e| CtlError::Failed(format!("{}: {e}", path.display())))?
        }
        None => CtlFile::default(),
    };
    let url = client::api_url(&setting(&ctl.url, &file.url, "WARREN_CTL_URL", "http://127.0.0.1:15672"));
    let user = setting(&ctl.user, &file.user, "WARREN_CTL_USER", "guest");
    let password = setting(&ctl.password, &file.password, "WARREN_CTL_PASSWORD", "guest");
    let vhost = setting(&ctl.vhost, &file.vhost, "WARREN_CTL_VHOST", "/");
    let client = Client::new(&url, &user, &password);
    let format = if ctl.silent { ctl.format.silenced() } else { ctl.format };
    dispatch(&client, &vhost, format, &ctl.verb)
}

fn dispatch(client: &Client, vhost: &str, format: Format, verb: &Verb) -> Result<(), CtlError> {
    let list = |listing: &lists::Listing, columns: &[String]| lists::list(client, listing, vhost, columns, format);
    match verb {
        Verb::Status => node::status(client, format),
        Verb::Environment => node::environment(client, format),
        Verb::SetLogLevel { level } => node::set_log_level(client, level),
        Verb::AuthenticateUser { user, password } => access::authenticate_user(client, user, password),
        Verb::ListQueues { columns } => list(&lists::QUEUES, columns),
        Verb::ListExchanges { columns } => list(&lists::EXCHANGES, columns),
        Verb::ListBindings { columns } => list(&lists::BINDINGS, columns),
        Verb::ListConnections { columns } => list(&lists::CONNECTIONS, columns),
        Verb::ListChannels { columns } => list(&lists::CHANNELS, columns),
        Verb::ListConsumers { columns } => list(&lists::CONSUMERS, columns),
        Verb::ListUsers { columns } => list(&lists::USERS, columns),
        Verb::ListVhosts { columns } => list(&lists::VHOSTS, columns),
        Verb::ListPermissions { columns } => list(&lists::PERMISSIONS, columns),
        Verb::ListUserPermissions { user, columns } => {
            lists::list(client, &lists::USER_PERMISSIONS, user, columns, format)
        }
        Verb::ListVhostLimits { columns } => list(&lists::VHOST_LIMITS, columns),
        Verb::AddUser { user, password } => access::add_user(client, user, password),
        Verb::DeleteUser { user } => access::delete_user(client, user),
        Verb::ChangePassword { user, password } => access::change_password(client, user, password),
        Verb::ClearPassword { user } => access::clear_password(client, user),
        Verb::SetUserTags { user, tags } => access::set_user_tags(client, user, tags),
        Verb::AddVhost { vhost, description } => access::add_vhost(client, vhost, description),
        Verb::DeleteVhost { vhost } => access::delete_vhost(client, vhost),
        Verb::SetPermissions { user, configure, write, read } => {
            access::set_permissions(client, vhost, user, [configure, write, read])
        }
        Verb::ClearPermissions { user } => access::clear_permissions(client, vhost, user),
        Verb::SetVhostLimits { definition } => access::set_vhost_limits(client, vhost, definition),
        Verb::SetGlobalParameter { name, value } => access::set_global_parameter(client, name, value),
        Verb::ClearGlobalParameter { name } => access::clear_global_parameter(client, name),
        Verb::ListGlobalParameters { columns } => list(&lists::GLOBAL_PARAMETERS, columns),
        Verb::SetUserLimits { user, definition } => access::set_user_limits(client, user, definition),
        Verb::ClearUserLimits { user, limit } => access::clear_user_limits(client, user, limit),
        Verb::ListUserLimits { columns } => list(&lists::USER_LIMITS, columns),
        Verb::SetTopicPermissions { user, exchange, write, read } => {
            access::set_topic_permissions(client, vhost, user, [exchange, write, read])
        }
        Verb::ClearTopicPermissions { user, exchange } => {
            access::clear_topic_permissions(client, vhost, user, exchange.as_deref())
        }
        Verb::ListTopicPermissions { columns } => list(&lists::TOPIC_PERMISSIONS, columns),
        Verb::SetPolicy(policy) => policies::set(client, policies::Kind::User, vhost, policy),
        Verb::ClearPolicy { name } => policies::clear(client, policies::Kind::User, vhost, name),
        Verb::ListPolicies { columns } => list(&lists::POLICIES, columns),
        Verb::SetOperatorPolicy(policy) => policies::set(client, policies::Kind::Operator, vhost, policy),
        Verb::ClearOperatorPolicy { name } => policies::clear(client, policies::Kind::Operator, vhost, name),
        Verb::ListOperatorPolicies { columns } => list(&lists::OPERATOR_POLICIES, columns),
        Verb::DeclareQueue { queue, kind, durable, arguments } => {
            actions::declare_queue(client, vhost, queue, kind, *durable, arguments)
        }
        Verb::DeleteQueue { queue, if_empty, if_unused } => {
            actions::delete_queue(client, vhost, queue, *if_empty, *if_unused)
        }
        Verb::PurgeQueue { queue } => actions::purge_queue(client, vhost, queue),
        Verb::SetVmMemoryHighWatermark { watermark } => {
            actions::set_resource_limit(client, "vm_memory_high_watermark", watermark)
        }
        Verb::SetDiskFreeLimit { limit } => actions::set_resource_limit(client, "disk_free_limit", limit),
        Verb::DeclareExchange { exchange, kind, durable, arguments } => {
            actions::declare_exchange(client, vhost, exchange, kind, *durable, arguments)
        }
        Verb::Bind { source, destination, routing_key, destination_type, arguments } => {
            actions::bind(client, vhost, source, destination, destination_type == "exchange", routing_key, arguments)
        }
        Verb::CloseConnection { name, reason } => actions::close_connection(client, name, reason),
        Verb::CloseAllConnections { explanation, global } => {
            actions::close_all_connections(client, (!global).then_some(vhost), explanation)
        }
        Verb::Publish { exchange, routing_key, payload, transient, headers } => {
            actions::publish(client, vhost, exchange, routing_key, payload, !transient, headers)
        }
        Verb::Get { queue, count, ackmode } => actions::get(client, vhost, queue, *count, ackmode, format),
        Verb::Browse { queue, offset, count, filter } => {
            actions::browse(client, vhost, queue, offset, *count, filter, format)
        }
        Verb::ExportDefinitions { file } => actions::export_definitions(client, file),
        Verb::ImportDefinitions { file } => actions::import_definitions(client, file),
        Verb::AddSuperStream {
            name,
            partitions,
            routing_keys,
            max_age,
            max_length_bytes,
            stream_max_segment_size_bytes,
        } => {
            let partitions = super_streams::Partitions::given(routing_keys, *partitions, DEFAULT_PARTITIONS);
            let arguments = super_streams::PartitionArguments {
                max_age: max_age.clone(),
                max_length_bytes: *max_length_bytes,
                max_segment_size_bytes: *stream_max_segment_size_bytes,
            };
            super_streams::add_super_stream(client, vhost, name, &partitions, &arguments)
        }
        Verb::AddPartitions { name, partitions, routing_keys } => {
            let partitions = super_streams::Partitions::given(routing_keys, *partitions, 1);
            super_streams::add_partitions(client, vhost, name, &partitions)
        }
        Verb::DeleteSuperStream { name } => super_streams::delete_super_stream(client, vhost, name),
        Verb::ListStreamConsumers { columns } => list(&lists::STREAM_CONSUMERS, columns),
        Verb::ListStreamConsumerGroups { columns } => list(&lists::STREAM_CONSUMER_GROUPS, columns),
        Verb::ListStreamGroupConsumers { stream, reference, columns } => {
            stream_consumers::list_group_consumers(client, vhost, stream, reference, columns, format)
        }
        Verb::ClusterStatus => cluster::cluster_status(client),
        Verb::MetadataStoreStatus => cluster::metadata_store_status(client),
        Verb::ListFeatureFlags { columns } => list(&lists::FEATURE_FLAGS, columns),
        Verb::EnableFeatureFlag { name } => cluster::enable_feature_flag(client, name),
        Verb::Ping | Verb::CheckRunning => health::run(client, &health::Check::Running),
        Verb::CheckLocalAlarms => health::run(client, &health::Check::LocalAlarms),
        Verb::CheckAlarms => health::run(client, &health::Check::Alarms),
        Verb::CheckPortListener { port } => health::run(client, &health::Check::PortListener(*port)),
        Verb::CheckProtocolListener { protocol } => {
            health::run(client, &health::Check::ProtocolListener(protocol.clone()))
        }
        Verb::CheckPortConnectivity => health::port_connectivity(client),
        Verb::CheckVirtualHosts => health::run(client, &health::Check::VirtualHosts),
        Verb::CheckIfNodeIsQuorumCritical => health::run(client, &health::Check::QuorumCritical),
        Verb::AwaitStartup { timeout } => health::await_startup(client, std::time::Duration::from_secs(*timeout)),
        Verb::QuorumStatus { queue } => cluster::replica_status(client, vhost, queue, Replicated::QuorumQueue),
        Verb::AddMember { queue, node } => {
            cluster::change_member(client, vhost, queue, node, Replicated::QuorumQueue, true)
        }
        Verb::DeleteMember { queue, node } => {
            cluster::change_member(client, vhost, queue, node, Replicated::QuorumQueue, false)
        }
        Verb::StreamStatus { stream } => cluster::replica_status(client, vhost, stream, Replicated::Stream),
        Verb::AddReplica { stream, node } => {
            cluster::change_member(client, vhost, stream, node, Replicated::Stream, true)
        }
        Verb::DeleteReplica { stream, node } => {
            cluster::change_member(client, vhost, stream, node, Replicated::Stream, false)
        }
        Verb::Grow { node, .. } => cluster::grow(client, node),
        Verb::Shrink { node } => cluster::shrink(client, node),
        Verb::JoinCluster { node } => cluster::join_cluster(client, node),
        Verb::ForgetClusterNode { node } => cluster::forget_cluster_node(client, node),
    }
}
