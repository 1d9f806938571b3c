//! The broker's settings: command-line flags, then an optional TOML file, then environment
//! variables, then defaults, in that order of precedence.
//!
//! clap reads flags and environment variables together; `ArgMatches::value_source` tells which
//! one a value came from, so that a value from the TOML file can beat an environment variable
//! but not a flag.

use crate::logging::{LogFormat, LogSettings};
use crate::tls::TlsSettings;
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use warren_amqp::tls::CertLoginFrom;
use warren_amqp::ProtocolConfig;
use warren_delivery::access::AccessSettings;
use warren_delivery::resource_alarm::{parse_size_bytes, MemoryWatermark, ResourceLimits};
use warren_storage::FlushPolicy;

use crate::cluster::peer_address::check_name;
use crate::cluster::secret::{SecretError, MIN_SECRET_BYTES};
use crate::cluster::{ClusterSecret, PeerAddress};

/// The cluster name when none is configured.
pub const DEFAULT_CLUSTER_NAME: &str = "warren";

/// When appends to durable queues are fsynced, and so when publisher confirms go out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fsync {
    /// Every append is fsynced before it is confirmed (slowest, one fsync per write).
    Always,
    /// Appends are fsynced in groups every few milliseconds; confirms wait for their group.
    Batch,
    /// Never fsync explicitly; confirms go out once the page cache has the data.
    Never,
}

impl Fsync {
    /// The storage engine's policy.
    pub fn flush_policy(self) -> FlushPolicy {
        match self {
            Fsync::Always => FlushPolicy::Always,
            Fsync::Batch => FlushPolicy::Batch,
            Fsync::Never => FlushPolicy::Never,
        }
    }
}

/// Warren: an AMQP 0-9-1 message broker. Settings come from flags, then the TOML file given
/// with --config (keys named like the flags, with underscores: amqp_listen = "0.0.0.0:5672"),
/// then the WARREN_* environment variables, then the defaults shown. Log level: RUST_LOG.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "warren",
    version,
    about,
    long_about = None,
    after_help = "A running broker is managed with `warren ctl VERB ...`, rabbitmqctl's verbs (`warren ctl help` lists them)."
)]
pub struct Cli {
    /// TOML configuration file.
    #[arg(long, env = "WARREN_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Address the AMQP listener binds (port 0 picks a free port).
    #[arg(long, env = "WARREN_AMQP_LISTEN", default_value = "0.0.0.0:5672")]
    pub amqp_listen: SocketAddr,

    /// Address of the management HTTP API (RabbitMQ's shapes; what `warren ctl` talks to), or
    /// `none`. A port that cannot be bound is logged and the broker runs without the API.
    #[arg(long, env = "WARREN_HTTP_LISTEN", default_value = "0.0.0.0:15672", value_parser = parse_http_listen)]
    pub http_listen: HttpListen,

    /// Directory for the broker's data; created if missing.
    #[arg(long, env = "WARREN_DATA_DIR", default_value = "./data")]
    pub data_dir: PathBuf,

    /// When durable queues fsync: always, batch (group commit, the default) or never.
    #[arg(long, env = "WARREN_FSYNC", value_enum, default_value = "batch")]
    pub fsync: Fsync,

    /// Most channels a connection may have open at once, whatever their numbers (offered in connection.tune).
    #[arg(long, env = "WARREN_CHANNEL_MAX", default_value_t = 2047)]
    pub channel_max: u16,

    /// Largest frame in bytes, at least 4096 (offered in connection.tune).
    #[arg(long, env = "WARREN_FRAME_MAX", default_value_t = 131_072,
          value_parser = clap::value_parser!(u32).range(4096..))]
    pub frame_max: u32,

    /// Heartbeat interval in seconds offered to clients (0 disables heartbeats).
    #[arg(long, env = "WARREN_HEARTBEAT", default_value_t = 60)]
    pub heartbeat: u16,

    /// Milliseconds a delivery may stay unacknowledged before its channel is closed with 406
    /// (0: never), as RabbitMQ's consumer_timeout; queues and consumers may set their own
    /// with the x-consumer-timeout argument.
    #[arg(long, env = "WARREN_CONSUMER_TIMEOUT", value_name = "MS", default_value_t = warren_amqp::config::DEFAULT_CONSUMER_TIMEOUT_MS)]
    pub consumer_timeout: u64,

    /// Log lines as text, or as one JSON object a line (timestamp, level, target, fields).
    #[arg(long, env = "WARREN_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,

    /// File the log is appended to instead of standard error; reopened on SIGUSR1, so that
    /// logrotate can move it away (as after RabbitMQ's rotate_logs).
    #[arg(long, env = "WARREN_LOG_FILE", value_name = "PATH")]
    pub log_file: Option<PathBuf>,

    /// Largest message body accepted, in bytes; larger publishes get 406 PRECONDITION_FAILED.
    #[arg(long, env = "WARREN_MAX_MESSAGE_SIZE", default_value_t = 128 * 1024 * 1024)]
    pub max_message_size: u64,

    /// Milliseconds a client has from connecting to connection.open.
    #[arg(long, env = "WARREN_HANDSHAKE_TIMEOUT_MS", default_value_t = 10_000)]
    pub handshake_timeout_ms: u64,

    /// This node's name in the cluster; peers list it in --peers. Default: warren@<host name>.
    #[arg(long, env = "WARREN_NODE_NAME", default_value_t = warren_delivery::node::default_name())]
    pub node_name: String,

    /// The cluster's name; nodes of another cluster are refused.
    #[arg(long, env = "WARREN_CLUSTER_NAME", default_value = DEFAULT_CLUSTER_NAME)]
    pub cluster_name: String,

    /// Metadata changes between two snapshots of the cluster's catalog; the metadata log is
    /// purged behind each (a node that fell further behind receives the snapshot).
    #[arg(long, env = "WARREN_METADATA_SNAPSHOT_INTERVAL", value_name = "ENTRIES", default_value_t = warren_delivery::metadata::DEFAULT_SNAPSHOT_INTERVAL_ENTRIES)]
    pub metadata_snapshot_interval: u64,

    /// Test-only: this node knows machine versions as the release before the newest feature
    /// flags did (for tests of clusters of mixed releases).
    #[arg(long, hide = true)]
    pub pretend_previous_release: bool,

    /// Address of the inter-node listener; none (the default) and no --peers is a one-node cluster.
    #[arg(long, env = "WARREN_CLUSTER_LISTEN", value_name = "ADDR")]
    pub cluster_listen: Option<SocketAddr>,

    /// Seed list of other nodes, comma-separated: name@host:port (node names may hold @:
    /// warren@a@10.0.0.1:25672). An entry naming this node is skipped.
    #[arg(long, env = "WARREN_PEERS", value_delimiter = ',', value_name = "NAME@HOST:PORT,...")]
    pub peers: Vec<PeerAddress>,

    /// File holding the cluster's shared secret, the same on every node; required with
    /// --cluster-listen or --peers.
    #[arg(long, env = "WARREN_CLUSTER_SECRET_FILE", value_name = "PATH")]
    pub cluster_secret_file: Option<PathBuf>,

    /// Most client connections at once; one more is refused with 530 NOT_ALLOWED at
    /// connection.open, and logged. Default: no limit but the open-files limit.
    #[arg(long, env = "WARREN_MAX_CONNECTIONS", value_name = "N")]
    pub max_connections: Option<usize>,

    /// Most management API connections (WebSockets included) at once, an eighth of them from
    /// one address; more are answered 503. Never more than an eighth of the open-files limit.
    #[arg(long, env = "WARREN_HTTP_MAX_CONNECTIONS", default_value_t = warren_webui::http_listener::DEFAULT_MAX_CONNECTIONS, value_name = "N")]
    pub http_max_connections: usize,

    /// Memory use above which publishers are blocked (the memory alarm): a fraction of the
    /// RAM, or of the cgroup's limit if lower (0.4), or a size (2GiB, 512MB, 1073741824).
    #[arg(long, env = "WARREN_VM_MEMORY_HIGH_WATERMARK", default_value = "0.4", value_name = "FRACTION|SIZE")]
    pub vm_memory_high_watermark: MemoryWatermark,

    /// Free space on the data directory's disk below which publishers are blocked (the disk
    /// alarm): a size (50MB, 1GiB, bytes).
    #[arg(long, env = "WARREN_DISK_FREE_LIMIT", default_value = "50MB", value_name = "SIZE",
          value_parser = parse_size_bytes)]
    pub disk_free_limit: u64,

    /// Memory a classic queue's transient messages may take (bodies, properties, headers, plus 320 bytes each)
    /// before the rest is paged to disk: a size (512MiB, 64MB, bytes).
    #[arg(long, env = "WARREN_QUEUE_MEMORY_BUDGET", default_value = "512MiB", value_name = "SIZE",
          value_parser = parse_size_bytes)]
    pub queue_memory_budget: u64,

    /// The user a first start creates (tagged administrator, every permission in the default
    /// vhost); ignored once the data directory has users.
    #[arg(long, env = "WARREN_DEFAULT_USER", default_value = warren_delivery::access::user::DEFAULT_USER)]
    pub default_user: String,

    /// That user's password.
    #[arg(long, env = "WARREN_DEFAULT_PASS", default_value = warren_delivery::access::user::DEFAULT_PASSWORD,
          hide_default_value = true)]
    pub default_pass: String,

    /// The virtual host a first start creates.
    #[arg(long, env = "WARREN_DEFAULT_VHOST", default_value = warren_delivery::DEFAULT_VHOST)]
    pub default_vhost: String,

    /// Address of the AMQPS (AMQP over TLS) listener, conventionally 0.0.0.0:5671; none (the
    /// default): no TLS listener. Needs --ssl-cert-file and --ssl-key-file.
    #[arg(long, env = "WARREN_AMQPS_LISTEN", value_name = "ADDR")]
    pub amqps_listen: Option<SocketAddr>,

    /// Address of the management API over HTTPS (same TLS settings); none (the default): off.
    #[arg(long, env = "WARREN_HTTPS_LISTEN", value_name = "ADDR")]
    pub https_listen: Option<SocketAddr>,

    /// The TLS listeners' certificate chain (PEM).
    #[arg(long, env = "WARREN_SSL_CERT_FILE", value_name = "PATH")]
    pub ssl_cert_file: Option<PathBuf>,

    /// The TLS listeners' private key (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "WARREN_SSL_KEY_FILE", value_name = "PATH")]
    pub ssl_key_file: Option<PathBuf>,

    /// CA certificates (PEM) that client certificates are verified against; without it,
    /// clients are not asked for one.
    #[arg(long, env = "WARREN_SSL_CA_FILE", value_name = "PATH")]
    pub ssl_ca_file: Option<PathBuf>,

    /// Refuse TLS clients that present no certificate (needs --ssl-ca-file).
    #[arg(long, env = "WARREN_SSL_FAIL_IF_NO_PEER_CERT")]
    pub ssl_fail_if_no_peer_cert: bool,

    /// Which part of a client certificate's subject is the user name for SASL EXTERNAL:
    /// distinguished_name (RFC 4514, `CN=alice,O=Example`) or common_name.
    #[arg(long, env = "WARREN_SSL_CERT_LOGIN_FROM", default_value = "distinguished_name", value_name = "PART")]
    pub ssl_cert_login_from: CertLoginFrom,

    /// Users that may connect only from loopback, comma-separated; `none` for nobody.
    #[arg(
        long,
        env = "WARREN_LOOPBACK_USERS",
        value_delimiter = ',',
        default_value = "guest",
        value_name = "USER,..."
    )]
    pub loopback_users: Vec<String>,
}

/// `--http-listen`: an address, or `none` (the API off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpListen(pub Option<SocketAddr>);

fn parse_http_listen(value: &str) -> Result<HttpListen, String> {
    if value == "none" {
        return Ok(HttpListen(None));
    }
    value
        .parse()
        .map(|addr| HttpListen(Some(addr)))
        .map_err(|_| format!("'{value}' is not an address like 0.0.0.0:15672, or none"))
}

impl<'de> Deserialize<'de> for HttpListen {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        parse_http_listen(&text).map_err(serde::de::Error::custom)
    }
}

/// The TOML file: every key optional, named like the flags.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSettings {
    amqp_listen: Option<SocketAddr>,
    http_listen: Option<HttpListen>,
    data_dir: Option<PathBuf>,
    fsync: Option<Fsync>,
    channel_max: Option<u16>,
    frame_max: Option<u32>,
    heartbeat: Option<u16>,
    consumer_timeout: Option<u64>,
    log_format: Option<LogFormat>,
    log_file: Option<PathBuf>,
    max_message_size: Option<u64>,
    handshake_timeout_ms: Option<u64>,
    node_name: Option<String>,
    cluster_name: Option<String>,
    metadata_snapshot_interval: Option<u64>,
    cluster_listen: Option<SocketAddr>,
    peers: Option<Vec<PeerAddress>>,
    cluster_secret_file: Option<PathBuf>,
    max_connections: Option<usize>,
    http_max_connections: Option<usize>,
    #[serde(default, deserialize_with = "watermark_setting")]
    vm_memory_high_watermark: Option<MemoryWatermark>,
    #[serde(default, deserialize_with = "size_setting")]
    disk_free_limit: Option<u64>,
    #[serde(default, deserialize_with = "size_setting")]
    queue_memory_budget: Option<u64>,
    default_user: Option<String>,
    default_pass: Option<String>,
    default_vhost: Option<String>,
    loopback_users: Option<Vec<String>>,
    amqps_listen: Option<SocketAddr>,
    https_listen: Option<SocketAddr>,
    ssl_cert_file: Option<PathBuf>,
    ssl_key_file: Option<PathBuf>,
    ssl_ca_file: Option<PathBuf>,
    ssl_fail_if_no_peer_cert: Option<bool>,
    #[serde(default, deserialize_with = "login_from_setting")]
    ssl_cert_login_from: Option<CertLoginFrom>,
}

fn login_from_setting<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<CertLoginFrom>, D::Error> {
    let text: Option<String> = Option::deserialize(deserializer)?;
    text.map(|text| text.parse().map_err(serde::de::Error::custom)).transpose()
}

/// A TOML value read as its text would be on the command line (`0.4` and `"0.4"` alike).
fn setting_text<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Setting {
        Text(String),
        Whole(u64),
        Fraction(f64),
    }
    Ok(match Setting::deserialize(deserializer)? {
        Setting::Text(text) => text,
        Setting::Whole(n) => n.to_string(),
        Setting::Fraction(f) => format!("{f:?}"),
    })
}

fn watermark_setting<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<MemoryWatermark>, D::Error> {
    setting_text(deserializer)?.parse().map(Some).map_err(serde::de::Error::custom)
}

fn size_setting<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    parse_size_bytes(&setting_text(deserializer)?).map(Some).map_err(serde::de::Error::custom)
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file given with --config cannot be read.
    #[error("cannot read configuration file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has unknown keys or bad values.
    #[error("invalid configuration file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong, from the TOML parser.
        message: String,
    },
    /// A value is out of range.
    #[error("invalid setting {key}: {message}")]
    Invalid {
        /// The setting.
        key: &'static str,
        /// What is wrong.
        message: String,
    },
    /// Clustering is asked for without a secret.
    #[error(
        "--cluster-listen and --peers need --cluster-secret-file PATH (TOML cluster_secret_file, \
         env WARREN_CLUSTER_SECRET_FILE): a file, readable only by the broker's user, holding the \
         same secret of at least {MIN_SECRET_BYTES} bytes on every node; for example \
         `head -c 32 /dev/urandom | base64 > PATH && chmod 600 PATH`, copied to every node"
    )]
    ClusterSecretRequired,
    /// The secret file cannot be used.
    #[error(transparent)]
    ClusterSecret(#[from] SecretError),
}

/// This node's identity and its peers.
#[derive(Debug, Clone)]
pub struct ClusterSettings {
    /// This node's name.
    pub node_name: String,
    /// The cluster's name.
    pub cluster_name: String,
    /// Metadata changes between two snapshots of the catalog.
    pub metadata_snapshot_interval_entries: u64,
    /// Test-only: the node knows machine versions as the previous release did.
    pub pretend_previous_release: bool,
    /// Inter-node listener address, if any.
    pub listen: Option<SocketAddr>,
    /// The seed list, without this node.
    pub peers: Vec<PeerAddress>,
    /// The shared secret: present whenever `listen` or `peers` is set.
    pub secret: Option<ClusterSecret>,
}

impl ClusterSettings {
    /// Whether this node talks to other nodes at all (otherwise it is a one-node cluster).
    pub fn is_networked(&self) -> bool {
        self.listen.is_some() || !self.peers.is_empty()
    }
}

impl Default for ClusterSettings {
    fn default() -> Self {
        ClusterSettings {
            node_name: warren_delivery::node::default_name(),
            cluster_name: DEFAULT_CLUSTER_NAME.to_string(),
            metadata_snapshot_interval_entries: warren_delivery::metadata::DEFAULT_SNAPSHOT_INTERVAL_ENTRIES,
            pretend_previous_release: false,
            listen: None,
            peers: Vec::new(),
            secret: None,
        }
    }
}

/// The settings the broker runs with.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address of the AMQP listener.
    pub amqp_listen: SocketAddr,
    /// Address of the management HTTP API, if it is on.
    pub http_listen: Option<SocketAddr>,
    /// The management API's connection limits and timeouts.
    pub http_limits: warren_webui::HttpLimits,
    /// Data directory.
    pub data_dir: PathBuf,
    /// fsync policy of durable queues.
    pub fsync: Fsync,
    /// Protocol limits.
    pub protocol: ProtocolConfig,
    /// Node identity and peers.
    pub cluster: ClusterSettings,
    /// Memory and disk alarm thresholds.
    pub resource_limits: ResourceLimits,
    /// The first start's user and vhost, and the loopback-only users.
    pub access: AccessSettings,
    /// Memory a classic queue's transient messages may take before the rest is paged.
    pub queue_memory_budget_bytes: usize,
    /// Address of the AMQPS listener, if it is on.
    pub amqps_listen: Option<SocketAddr>,
    /// Address of the management API over HTTPS, if it is on.
    pub https_listen: Option<SocketAddr>,
    /// Certificate, key and client verification of the TLS listeners.
    pub tls: TlsSettings,
    /// The log's format and file.
    pub log: LogSettings,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            amqp_listen: ([0, 0, 0, 0], 5672).into(),
            http_listen: Some(([0, 0, 0, 0], 15672).into()),
            http_limits: warren_webui::HttpLimits::default(),
            data_dir: PathBuf::from("./data"),
            fsync: Fsync::Batch,
            protocol: ProtocolConfig::default(),
            cluster: ClusterSettings::default(),
            resource_limits: ResourceLimits::default(),
            access: AccessSettings::default(),
            queue_memory_budget_bytes: warren_delivery::message_store::TRANSIENT_MEMORY_BUDGET_BYTES,
            amqps_listen: None,
            https_listen: None,
            tls: TlsSettings::default(),
            log: LogSettings::default(),
        }
    }
}

impl Config {
    /// Reads flags from the process's arguments and environment, then the TOML file.
    pub fn from_args() -> Result<Self, ConfigError> {
        Self::from_matches(Cli::command().get_matches())
    }

    /// Like [`Config::from_args`] with explicit arguments (the first is the program name).
    pub fn try_parse_from<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let matches = Cli::command().try_get_matches_from(args)?;
        Self::from_matches(matches).map_err(|e| Cli::command().error(clap::error::ErrorKind::ValueValidation, e))
    }

    fn from_matches(matches: ArgMatches) -> Result<Self, ConfigError> {
        let cli = Cli::from_arg_matches(&matches)
            .map_err(|e| ConfigError::Invalid { key: "arguments", message: e.to_string() })?;
        let file = match &cli.config {
            Some(path) => read_file(path)?,
            None => FileSettings::default(),
        };
        let m = &matches;
        let cluster = cluster_settings(m, &cli, &file)?;
        let frame_max = pick(m, "frame_max", cli.frame_max, file.frame_max);
        if frame_max < 4096 {
            return Err(ConfigError::Invalid { key: "frame_max", message: format!("{frame_max} is below 4096") });
        }
        let protocol = ProtocolConfig {
            channel_max: pick(m, "channel_max", cli.channel_max, file.channel_max),
            frame_max,
            heartbeat_secs: pick(m, "heartbeat", cli.heartbeat, file.heartbeat),
            consumer_timeout_ms: Some(pick(m, "consumer_timeout", cli.consumer_timeout, file.consumer_timeout))
                .filter(|ms| *ms > 0),
            max_message_bytes: pick(m, "max_message_size", cli.max_message_size, file.max_message_size),
            handshake_timeout: Duration::from_millis(pick(
                m,
                "handshake_timeout_ms",
                cli.handshake_timeout_ms,
                file.handshake_timeout_ms,
            )),
            max_connections: pick_optional(m, "max_connections", cli.max_connections, file.max_connections),
            ..ProtocolConfig::default()
        };
        let access = access_settings(m, &cli, &file);
        let tls = TlsSettings {
            cert_file: pick_optional(m, "ssl_cert_file", cli.ssl_cert_file.clone(), file.ssl_cert_file.clone()),
            key_file: pick_optional(m, "ssl_key_file", cli.ssl_key_file.clone(), file.ssl_key_file.clone()),
            ca_file: pick_optional(m, "ssl_ca_file", cli.ssl_ca_file.clone(), file.ssl_ca_file.clone()),
            fail_if_no_peer_cert: pick(
                m,
                "ssl_fail_if_no_peer_cert",
                cli.ssl_fail_if_no_peer_cert,
                file.ssl_fail_if_no_peer_cert,
            ),
            login_from: pick(m, "ssl_cert_login_from", cli.ssl_cert_login_from, file.ssl_cert_login_from),
        };
        let amqps_listen = pick_optional(m, "amqps_listen", cli.amqps_listen, file.amqps_listen);
        let https_listen = pick_optional(m, "https_listen", cli.https_listen, file.https_listen);
        Ok(Config {
            amqp_listen: pick(m, "amqp_listen", cli.amqp_listen, file.amqp_listen),
            http_listen: pick(m, "http_listen", cli.http_listen, file.http_listen).0,
            http_limits: warren_webui::HttpLimits::with_max_connections(pick(
                m,
                "http_max_connections",
                cli.http_max_connections,
                file.http_max_connections,
            )),
            data_dir: pick(m, "data_dir", cli.data_dir, file.data_dir),
            fsync: pick(m, "fsync", cli.fsync, file.fsync),
            protocol,
            cluster,
            resource_limits: ResourceLimits {
                memory_high_watermark: pick(
                    m,
                    "vm_memory_high_watermark",
                    cli.vm_memory_high_watermark,
                    file.vm_memory_high_watermark,
                ),
                disk_free_limit_bytes: pick(m, "disk_free_limit", cli.disk_free_limit, file.disk_free_limit),
            },
            access,
            queue_memory_budget_bytes: usize::try_from(pick(
                m,
                "queue_memory_budget",
                cli.queue_memory_budget,
                file.queue_memory_budget,
            ))
            .unwrap_or(usize::MAX),
            amqps_listen,
            https_listen,
            tls,
            log: LogSettings {
                format: pick(m, "log_format", cli.log_format, file.log_format),
                file: pick_optional(m, "log_file", cli.log_file.clone(), file.log_file.clone()),
            },
        })
    }
}

/// The first start's user and vhost, and who may connect from loopback only.
fn access_settings(m: &ArgMatches, cli: &Cli, file: &FileSettings) -> AccessSettings {
    let mut loopback_users = pick(m, "loopback_users", cli.loopback_users.clone(), file.loopback_users.clone());
    loopback_users.retain(|user| !user.is_empty() && user != "none");
    AccessSettings {
        default_user: pick(m, "default_user", cli.default_user.clone(), file.default_user.clone()),
        default_pass: pick(m, "default_pass", cli.default_pass.clone(), file.default_pass.clone()),
        default_vhost: pick(m, "default_vhost", cli.default_vhost.clone(), file.default_vhost.clone()),
        loopback_users,
    }
}

/// Node identity, listener, seed list and secret, checked; the secret is read only when the
/// node talks to others, and is then required.
fn cluster_settings(m: &ArgMatches, cli: &Cli, file: &FileSettings) -> Result<ClusterSettings, ConfigError> {
    let node_name = pick(m, "node_name", cli.node_name.clone(), file.node_name.clone());
    let cluster_name = pick(m, "cluster_name", cli.cluster_name.clone(), file.cluster_name.clone());
    for (key, name) in [("node_name", &node_name), ("cluster_name", &cluster_name)] {
        check_name(name).map_err(|e| ConfigError::Invalid { key, message: e.to_string() })?;
    }
    let listen = pick_optional(m, "cluster_listen", cli.cluster_listen, file.cluster_listen);
    let mut peers = pick(m, "peers", cli.peers.clone(), file.peers.clone());
    peers.retain(|peer| peer.name != node_name);
    let secret_file =
        pick_optional(m, "cluster_secret_file", cli.cluster_secret_file.clone(), file.cluster_secret_file.clone());
    let metadata_snapshot_interval_entries =
        pick(m, "metadata_snapshot_interval", cli.metadata_snapshot_interval, file.metadata_snapshot_interval);
    if metadata_snapshot_interval_entries == 0 {
        let message = "must be at least 1 (metadata changes between two snapshots)".to_string();
        return Err(ConfigError::Invalid { key: "metadata_snapshot_interval", message });
    }
    let mut settings = ClusterSettings {
        node_name,
        cluster_name,
        metadata_snapshot_interval_entries,
        pretend_previous_release: cli.pretend_previous_release,
        listen,
        peers,
        secret: None,
    };
    if settings.is_networked() {
        let path = secret_file.ok_or(ConfigError::ClusterSecretRequired)?;
        settings.secret = Some(ClusterSecret::read(&path)?);
    }
    Ok(settings)
}

/// A flag given on the command line wins; otherwise the file's value; otherwise clap's value
/// (from the environment variable, or the default).
fn pick<T>(matches: &ArgMatches, id: &str, from_clap: T, from_file: Option<T>) -> T {
    if matches.value_source(id) == Some(ValueSource::CommandLine) {
        from_clap
    } else {
        from_file.unwrap_or(from_clap)
    }
}

/// [`pick`] for a setting with no default.
fn pick_optional<T>(matches: &ArgMatches, id: &str, from_clap: Option<T>, from_file: Option<T>) -> Option<T> {
    if matches.value_source(id) == Some(ValueSource::CommandLine) {
        from_clap
    } else {
        from_file.or(from_clap)
    }
}

fn read_file(path: &Path) -> Result<FileSettings, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.into(), source })?;
    toml::from_str(&text).map_err(|e| ConfigError::Parse { path: path.into(), message: e.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn flags_beat_the_file_and_the_file_beats_defaults() {
        let mut file = tempfile_in_target();
        writeln!(file.1, "heartbeat = 7\nchannel_max = 9").expect("write");
        let path = file.0.to_str().expect("utf-8 path").to_string();
        let config = Config::try_parse_from(["warren", "--config", &path, "--heartbeat", "3"]).expect("valid");
        assert_eq!(config.protocol.heartbeat_secs, 3);
        assert_eq!(config.protocol.channel_max, 9);
        assert_eq!(config.protocol.frame_max, 131_072);
        let _ = std::fs::remove_file(&file.0);
    }

    #[test]
    fn alarm_thresholds_come_from_flags_or_the_file_as_fractions_or_sizes() {
        let defaults = Config::try_parse_from(["warren"]).expect("valid");
        assert_eq!(defaults.resource_limits, ResourceLimits::default());
        let mut file = tempfile_in_target();
        writeln!(file.1, "vm_memory_high_watermark = 0.6\ndisk_free_limit = \"2GB\"").expect("write");
        let path = file.0.to_str().expect("utf-8 path").to_string();
        let from_file = Config::try_parse_from(["warren", "--config", &path]).expect("valid");
        assert_eq!(from_file.resource_limits.memory_high_watermark, MemoryWatermark::Fraction(0.6));
        assert_eq!(from_file.resource_limits.disk_free_limit_bytes, 2_000_000_000);
        let flags = Config::try_parse_from(["warren", "--config", &path, "--vm-memory-high-watermark", "1GiB"]);
        assert_eq!(flags.expect("valid").resource_limits.memory_high_watermark, MemoryWatermark::Bytes(1 << 30));
        let _ = std::fs::remove_file(&file.0);
        let err = Config::try_parse_from(["warren", "--disk-free-limit", "plenty"]).expect_err("not a size");
        assert!(err.to_string().contains("not a size"), "{err}");
    }

    #[test]
    fn bad_values_are_refused_with_a_message() {
        let err = Config::try_parse_from(["warren", "--frame-max", "100"]).expect_err("too small");
        assert!(err.to_string().contains("4096"), "{err}");
        let mut file = tempfile_in_target();
        writeln!(file.1, "no_such_key = 1").expect("write");
        let path = file.0.to_str().expect("utf-8 path").to_string();
        let err = Config::try_parse_from(["warren", "--config", &path]).expect_err("unknown key");
        assert!(err.to_string().contains("no_such_key"), "{err}");
        let _ = std::fs::remove_file(&file.0);
    }

    /// Serializes the tests that set or depend on WARREN_* cluster variables.
    static ENV_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn secret_file(tag: &str) -> String {
        let path = std::env::temp_dir().join(format!("warren-secret-{}-{tag}", std::process::id()));
        std::fs::write(&path, "a secret of at least sixteen bytes\n").expect("write secret");
        path.to_str().expect("utf-8 path").to_string()
    }

    #[test]
    fn without_cluster_settings_a_node_is_alone_and_needs_no_secret() {
        let _env = ENV_LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let config = Config::try_parse_from(["warren"]).expect("valid");
        assert_eq!(config.cluster.node_name, warren_delivery::node::default_name());
        assert_eq!(config.cluster.cluster_name, DEFAULT_CLUSTER_NAME);
        assert!(!config.cluster.is_networked());
        assert!(config.cluster.secret.is_none());
    }

    #[test]
    fn cluster_flags_are_parsed_and_this_node_is_dropped_from_the_seeds() {
        let secret = secret_file("flags");
        let config = Config::try_parse_from([
            "warren",
            "--node-name",
            "warren@a",
            "--cluster-listen",
            "127.0.0.1:25672",
            "--peers",
            "warren@a@127.0.0.1:25672,warren@b@10.0.0.2:25672, warren@c@node-c:25672",
            "--cluster-secret-file",
            &secret,
        ])
        .expect("valid");
        let cluster = &config.cluster;
        assert_eq!(cluster.node_name, "warren@a");
        assert_eq!(cluster.listen, Some(([127, 0, 0, 1], 25672).into()));
        let peers: Vec<String> = cluster.peers.iter().map(ToString::to_string).collect();
        assert_eq!(peers, ["warren@b@10.0.0.2:25672", "warren@c@node-c:25672"]);
        assert!(cluster.secret.is_some());
        let _ = std::fs::remove_file(&secret);
    }

    #[test]
    fn clustering_without_a_secret_file_is_refused_with_what_to_do() {
        for args in [["--cluster-listen", "127.0.0.1:25672"], ["--peers", "warren@b@127.0.0.1:25672"]] {
            let err = Config::try_parse_from(["warren", args[0], args[1]]).expect_err("no secret");
            let text = err.to_string();
            assert!(text.contains("--cluster-secret-file PATH") && text.contains("chmod 600"), "{text}");
        }
        let err = Config::try_parse_from([
            "warren",
            "--peers",
            "warren@b@127.0.0.1:25672",
            "--cluster-secret-file",
            "/nonexistent/secret",
        ])
        .expect_err("missing file");
        assert!(err.to_string().contains("cannot read the cluster secret file"), "{err}");
    }

    #[test]
    fn malformed_peers_and_names_are_cli_errors() {
        let err = Config::try_parse_from(["warren", "--peers", "127.0.0.1:25672"]).expect_err("no name");
        assert!(err.to_string().contains("name@host:port"), "{err}");
        let err = Config::try_parse_from(["warren", "--peers", "warren@b@127.0.0.1"]).expect_err("no port");
        assert!(err.to_string().contains("host:port"), "{err}");
        let err = Config::try_parse_from(["warren", "--node-name", "has space"]).expect_err("bad name");
        assert!(err.to_string().contains("node_name"), "{err}");
    }

    #[test]
    fn cluster_settings_follow_flag_file_env_precedence() {
        let _env = ENV_LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let secret = secret_file("precedence");
        let mut file = tempfile_in_target();
        writeln!(
            file.1,
            "cluster_name = \"from-file\"\npeers = [\"warren@f@127.0.0.1:4000\"]\ncluster_secret_file = {secret:?}"
        )
        .expect("write");
        let path = file.0.to_str().expect("utf-8 path").to_string();
        std::env::set_var("WARREN_CLUSTER_NAME", "from-env");
        std::env::set_var("WARREN_NODE_NAME", "warren@env");
        let from_file = Config::try_parse_from(["warren", "--config", &path]);
        let from_flag = Config::try_parse_from(["warren", "--config", &path, "--cluster-name", "from-flag"]);
        std::env::remove_var("WARREN_CLUSTER_NAME");
        std::env::remove_var("WARREN_NODE_NAME");
        let from_file = from_file.expect("valid");
        assert_eq!(from_file.cluster.cluster_name, "from-file");
        assert_eq!(from_file.cluster.node_name, "warren@env");
        assert_eq!(from_file.cluster.peers.len(), 1);
        assert!(from_file.cluster.secret.is_some());
        assert_eq!(from_flag.expect("valid").cluster.cluster_name, "from-flag");
        let _ = std::fs::remove_file(&file.0);
        let _ = std::fs::remove_file(&secret);
    }

    fn tempfile_in_target() -> (PathBuf, std::fs::File) {
        let path = std::env::temp_dir().join(format!(
            "warren-config-{}-{:?}.toml",
            std::process::id(),
            std::thread::current().id()
        ));
        let file = std::fs::File::create(&path).expect("create temp file");
        (path, file)
    }
}
