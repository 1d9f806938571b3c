//! The broker's settings: command-line flags, then an optional TOML file, then environment
//! variables, then defaults, in that order of precedence.
//!
//! Each setting is declared once, as a field of [`Cli`]: its flag, environment variable,
//! default and help; the TOML file's keys are the fields' names, and README's settings table is
//! made from the same declarations. The file's settings are read as flags placed before the
//! command line's: a flag given twice takes its last value, so a flag beats the file, and a
//! setting the file gives is present, so the environment variable (read only for an absent
//! flag) does not replace it.

use crate::logging::{LogFormat, LogSettings};
use crate::tls::TlsSettings;
use clap::builder::BoolishValueParser;
use clap::{Arg, ArgMatches, Command, CommandFactory, FromArgMatches, Parser};
use std::ffi::OsString;
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
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
    /// TOML configuration file: keys as the flags' names with underscores (`amqp_listen =
    /// "127.0.0.1:5673"`).
    #[arg(long, env = "WARREN_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// AMQP listener address (port 0: any free port).
    #[arg(long, value_name = "ADDR", env = "WARREN_AMQP_LISTEN", default_value = "0.0.0.0:5672")]
    pub amqp_listen: SocketAddr,

    /// Management HTTP API address (what `warren ctl` talks to), or `none`; an address that cannot
    /// be bound is logged and the broker runs without the API.
    #[arg(long, value_name = "ADDR", env = "WARREN_HTTP_LISTEN", default_value = "0.0.0.0:15672", value_parser = parse_optional_listen)]
    pub http_listen: OptionalListen,

    /// Stream protocol listener address (RabbitMQ's stream plugin; see Stream protocol), or
    /// `none`; an address that cannot be bound is logged and the broker runs without it.
    #[arg(long, value_name = "ADDR", env = "WARREN_STREAM_LISTEN", default_value = "0.0.0.0:5552", value_parser = parse_optional_listen)]
    pub stream_listen: OptionalListen,

    /// The host stream clients are told to connect to (RabbitMQ's `stream.advertised_host`).
    /// Default: this machine's host name.
    #[arg(long, value_name = "HOST", env = "WARREN_STREAM_ADVERTISED_HOST")]
    pub stream_advertised_host: Option<String>,

    /// The port stream clients are told (RabbitMQ's `stream.advertised_port`). Default: the
    /// stream listener's.
    #[arg(long, value_name = "PORT", env = "WARREN_STREAM_ADVERTISED_PORT")]
    pub stream_advertised_port: Option<u16>,

    /// Largest Stream protocol frame, proposed in its Tune (at least 65536); larger frames close
    /// the connection with FRAME_TOO_LARGE.
    #[arg(long, value_name = "BYTES", env = "WARREN_STREAM_FRAME_MAX", default_value_t = warren_stream_protocol::settings::DEFAULT_FRAME_MAX_BYTES,
          value_parser = clap::value_parser!(u32).range(65_536..))]
    pub stream_frame_max: u32,

    /// Heartbeat interval proposed to stream clients; 0 disables heartbeats.
    #[arg(long, value_name = "SECS", env = "WARREN_STREAM_HEARTBEAT", default_value_t = warren_stream_protocol::settings::DEFAULT_HEARTBEAT_SECS)]
    pub stream_heartbeat: u32,

    /// Data directory, created if missing.
    #[arg(long, value_name = "DIR", env = "WARREN_DATA_DIR", default_value = "./data")]
    pub data_dir: PathBuf,

    /// `always`, `batch` (group commit) or `never`: when durable queues fsync, and so when
    /// publisher confirms go out (see Durability).
    #[arg(long, value_name = "POLICY", env = "WARREN_FSYNC", value_enum, default_value = "batch")]
    pub fsync: Fsync,

    /// Most channels a connection may have open at once (any numbers), offered in
    /// `connection.tune`.
    #[arg(long, value_name = "N", env = "WARREN_CHANNEL_MAX", default_value_t = 2047)]
    pub channel_max: u16,

    /// Largest frame offered in `connection.tune`, at least 4096; larger frames are 501
    /// FRAME_ERROR.
    #[arg(long, value_name = "BYTES", env = "WARREN_FRAME_MAX", default_value_t = 131_072,
          value_parser = clap::value_parser!(u32).range(4096..))]
    pub frame_max: u32,

    /// Heartbeat interval offered to clients; a client silent for two intervals is disconnected; 0
    /// disables heartbeats.
    #[arg(long, value_name = "SECS", env = "WARREN_HEARTBEAT", default_value_t = 60)]
    pub heartbeat: u16,

    /// How long a delivery may stay unacknowledged before its channel is closed with 406
    /// PRECONDITION_FAILED (RabbitMQ's `consumer_timeout`); 0 never; a queue or consumer argument
    /// `x-consumer-timeout` overrides it.
    #[arg(long, env = "WARREN_CONSUMER_TIMEOUT", value_name = "MS", default_value_t = warren_amqp::config::DEFAULT_CONSUMER_TIMEOUT_MS)]
    pub consumer_timeout: u64,

    /// `text`, or `json`: one JSON object a line (`timestamp`, `level`, `target`, `fields` with
    /// `message`), for log shippers.
    #[arg(long, value_name = "FORMAT", env = "WARREN_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,

    /// The file the log is appended to; reopened on SIGUSR1, so logrotate can move it away
    /// (`postrotate: kill -USR1 <pid>`, as after RabbitMQ's `rotate_logs`); Warren does not rotate
    /// it itself. Default: standard error.
    #[arg(long, env = "WARREN_LOG_FILE", value_name = "PATH")]
    pub log_file: Option<PathBuf>,

    /// Largest message body accepted; larger publishes get 406 PRECONDITION_FAILED.
    #[arg(long, value_name = "BYTES", env = "WARREN_MAX_MESSAGE_SIZE", default_value_t = 128 * 1024 * 1024)]
    pub max_message_size: u64,

    /// Time a client has from connecting to `connection.open`.
    #[arg(long, value_name = "MS", env = "WARREN_HANDSHAKE_TIMEOUT_MS", default_value_t = 10_000)]
    pub handshake_timeout_ms: u64,

    /// This node's name in the cluster (and in direct reply-to addresses); 1-255 bytes, no spaces
    /// or commas. Default: `warren@<host name>`.
    #[arg(long, value_name = "NAME", env = "WARREN_NODE_NAME", default_value_t = warren_delivery::node::default_name())]
    pub node_name: String,

    /// The cluster's name; a peer of another cluster is refused.
    #[arg(long, value_name = "NAME", env = "WARREN_CLUSTER_NAME", default_value = DEFAULT_CLUSTER_NAME)]
    pub cluster_name: String,

    /// Catalog changes between two snapshots of the catalog; its log is purged behind each, and
    /// a node that fell further behind receives the snapshot.
    #[arg(long, env = "WARREN_METADATA_SNAPSHOT_INTERVAL", value_name = "ENTRIES", default_value_t = warren_delivery::catalog::DEFAULT_SNAPSHOT_INTERVAL_ENTRIES)]
    pub metadata_snapshot_interval: u64,

    /// Test-only: this node knows machine versions as the release before the newest feature
    /// flags did (for tests of clusters of mixed releases).
    #[arg(long, hide = true, num_args = 0..=1, default_value = "false", default_missing_value = "true",
          value_parser = BoolishValueParser::new(), action = clap::ArgAction::Set)]
    pub pretend_previous_release: bool,

    /// Inter-node listener address; with no `--peers` either, the node is a one-node cluster.
    #[arg(long, env = "WARREN_CLUSTER_LISTEN", value_name = "ADDR")]
    pub cluster_listen: Option<SocketAddr>,

    /// Seed list of other nodes, `name@host:port` each, split at the last `@`
    /// (`warren@b@10.0.0.2:25672`); an entry naming this node is skipped, so every node can be
    /// given the same list.
    #[arg(long, env = "WARREN_PEERS", value_delimiter = ',', value_name = "NAME@HOST:PORT,...",
          action = clap::ArgAction::Set)]
    pub peers: Vec<PeerAddress>,

    /// The cluster's shared secret (16-4096 bytes, trailing whitespace ignored), the same on every
    /// node; required with `--cluster-listen` or `--peers`; a warning is logged if other users may
    /// read it.
    #[arg(long, env = "WARREN_CLUSTER_SECRET_FILE", value_name = "PATH")]
    pub cluster_secret_file: Option<PathBuf>,

    /// Most client connections at once; one more is refused at `connection.open` with 530
    /// NOT_ALLOWED "connection limit (N) is reached", and logged. Default: no limit but the
    /// open-files limit.
    #[arg(long, env = "WARREN_MAX_CONNECTIONS", value_name = "N")]
    pub max_connections: Option<usize>,

    /// Most management API connections at once (WebSockets included), an eighth of them from one
    /// address, never more than an eighth of the open-files limit; more are answered 503.
    #[arg(long, env = "WARREN_HTTP_MAX_CONNECTIONS", default_value_t = warren_webui::http_listener::DEFAULT_MAX_CONNECTIONS, value_name = "N")]
    pub http_max_connections: usize,

    /// The memory alarm's threshold, above which publishers are blocked: a fraction of the RAM (or
    /// of the cgroup's memory limit when lower), or a size (`2GiB`, `512MB`, bytes); see Resource
    /// alarms.
    #[arg(long, env = "WARREN_VM_MEMORY_HIGH_WATERMARK", default_value = "0.4", value_name = "FRACTION|SIZE")]
    pub vm_memory_high_watermark: MemoryWatermark,

    /// The disk alarm's threshold: free space on the data directory's disk below which publishers
    /// are blocked (`kB`/`MB`/`GB` are powers of 1000, `KiB`/`MiB`/`GiB` of 1024).
    #[arg(long, env = "WARREN_DISK_FREE_LIMIT", default_value = "50MB", value_name = "SIZE",
          value_parser = parse_size_bytes)]
    pub disk_free_limit: u64,

    /// Memory a classic queue's transient messages may take (bodies, properties and headers, plus
    /// 320 bytes each) before the rest is paged to disk; see Flow control and paging.
    #[arg(long, env = "WARREN_QUEUE_MEMORY_BUDGET", default_value = "512MiB", value_name = "SIZE",
          value_parser = parse_size_bytes)]
    pub queue_memory_budget: u64,

    /// The user a first start creates (tagged `administrator`, every permission in the default
    /// vhost); ignored once the data directory has users.
    #[arg(long, value_name = "NAME", env = "WARREN_DEFAULT_USER", default_value = warren_delivery::access::user::DEFAULT_USER)]
    pub default_user: String,

    /// That user's password (stored hashed).
    #[arg(long, value_name = "PASSWORD", env = "WARREN_DEFAULT_PASS", default_value = warren_delivery::access::user::DEFAULT_PASSWORD)]
    pub default_pass: String,

    /// The virtual host a first start creates.
    #[arg(long, value_name = "NAME", env = "WARREN_DEFAULT_VHOST", default_value = warren_delivery::DEFAULT_VHOST)]
    pub default_vhost: String,

    /// AMQP over TLS listener (conventionally `0.0.0.0:5671`); needs `--ssl-cert-file` and
    /// `--ssl-key-file`; see TLS.
    #[arg(long, env = "WARREN_AMQPS_LISTEN", value_name = "ADDR")]
    pub amqps_listen: Option<SocketAddr>,

    /// The management API and UI over HTTPS, with the same certificate.
    #[arg(long, env = "WARREN_HTTPS_LISTEN", value_name = "ADDR")]
    pub https_listen: Option<SocketAddr>,

    /// The TLS listeners' certificate chain, PEM.
    #[arg(long, env = "WARREN_SSL_CERT_FILE", value_name = "PATH")]
    pub ssl_cert_file: Option<PathBuf>,

    /// Its private key, PEM (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "WARREN_SSL_KEY_FILE", value_name = "PATH")]
    pub ssl_key_file: Option<PathBuf>,

    /// CA certificates, PEM, that client certificates are verified against; without it clients are
    /// not asked for one.
    #[arg(long, env = "WARREN_SSL_CA_FILE", value_name = "PATH")]
    pub ssl_ca_file: Option<PathBuf>,

    /// Refuse TLS clients without a certificate (needs `--ssl-ca-file`).
    #[arg(long, env = "WARREN_SSL_FAIL_IF_NO_PEER_CERT", num_args = 0..=1, default_value = "false",
          default_missing_value = "true", value_parser = BoolishValueParser::new(), action = clap::ArgAction::Set, value_name = "BOOL")]
    pub ssl_fail_if_no_peer_cert: bool,

    /// The user name SASL EXTERNAL takes from a client certificate: the subject's DN (RFC 4514,
    /// `CN=alice,O=Example`) or `common_name`.
    #[arg(long, env = "WARREN_SSL_CERT_LOGIN_FROM", default_value = "distinguished_name", value_name = "PART")]
    pub ssl_cert_login_from: CertLoginFrom,

    /// Users that may log in only from loopback, as RabbitMQ's `loopback_users`; `none` for nobody.
    #[arg(
        long,
        env = "WARREN_LOOPBACK_USERS",
        value_delimiter = ',',
        default_value = "guest",
        value_name = "USER,...",
        action = clap::ArgAction::Set
    )]
    pub loopback_users: Vec<String>,
}

/// `--http-listen`, `--stream-listen`: an address, or `none` (that listener off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionalListen(pub Option<SocketAddr>);

fn parse_optional_listen(value: &str) -> Result<OptionalListen, String> {
    if value == "none" {
        return Ok(OptionalListen(None));
    }
    value
        .parse()
        .map(|addr| OptionalListen(Some(addr)))
        .map_err(|_| format!("'{value}' is not an address like 0.0.0.0:15672, or none"))
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
    /// Catalog changes between two snapshots of the catalog.
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

/// The settings the broker runs with.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address of the AMQP listener.
    pub amqp_listen: SocketAddr,
    /// Address of the management HTTP API, if it is on.
    pub http_listen: Option<SocketAddr>,
    /// Address of the Stream protocol listener, if it is on.
    pub stream_listen: Option<SocketAddr>,
    /// What stream clients are offered and told, but the port to advertise (the listener's
    /// unless `stream_advertised_port` says).
    pub stream: warren_stream_protocol::StreamSettings,
    /// The port stream clients are told, when not the listener's.
    pub stream_advertised_port: Option<u16>,
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
    /// The TOML file the settings were read from, if any.
    pub config_file: Option<PathBuf>,
    /// Every setting's value and where it came from, as `warren ctl environment` shows them.
    pub shown: Vec<warren_webui::EnvironmentSetting>,
}

impl Default for Config {
    /// The defaults the flags declare, whatever the environment holds.
    fn default() -> Self {
        let command = Cli::command().mut_args(|arg| arg.env(None));
        let matches = command
            .try_get_matches_from(["warren"])
            .map_err(|e| ConfigError::Invalid { key: "defaults", message: e.to_string() });
        // The declared defaults are valid (tested): no file, no environment, no secret to read.
        matches
            .and_then(|matches| Config::from_matches(&matches))
            .expect("the declared defaults are a valid configuration")
    }
}

impl Config {
    /// Reads flags from the process's arguments and environment, then the TOML file. `--help`,
    /// `--version` and a flag clap refuses print and exit, as clap does.
    pub fn from_args() -> Result<Self, ConfigError> {
        let args: Vec<OsString> = std::env::args_os().collect();
        match matches_with_file(&args) {
            Ok(matches) => Self::from_matches(&matches),
            Err(SettingsError::Usage(error)) => error.exit(),
            Err(SettingsError::Config(error)) => Err(error),
        }
    }

    /// Like [`Config::from_args`] with explicit arguments (the first is the program name).
    pub fn try_parse_from<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
        let invalid = |error: ConfigError| Cli::command().error(clap::error::ErrorKind::ValueValidation, error);
        let matches = matches_with_file(&args).map_err(|error| match error {
            SettingsError::Usage(error) => error,
            SettingsError::Config(error) => invalid(error),
        })?;
        Self::from_matches(&matches).map_err(invalid)
    }

    fn from_matches(matches: &ArgMatches) -> Result<Self, ConfigError> {
        let cli = Cli::from_arg_matches(matches)
            .map_err(|e| ConfigError::Invalid { key: "arguments", message: e.to_string() })?;
        let cluster = cluster_settings(&cli)?;
        if cli.frame_max < 4096 {
            return Err(ConfigError::Invalid { key: "frame_max", message: format!("{} is below 4096", cli.frame_max) });
        }
        let protocol = ProtocolConfig {
            channel_max: cli.channel_max,
            frame_max: cli.frame_max,
            heartbeat_secs: cli.heartbeat,
            consumer_timeout_ms: Some(cli.consumer_timeout).filter(|ms| *ms > 0),
            max_message_bytes: cli.max_message_size,
            handshake_timeout: Duration::from_millis(cli.handshake_timeout_ms),
            max_connections: cli.max_connections,
            ..ProtocolConfig::default()
        };
        let access = access_settings(&cli);
        Ok(Config {
            amqp_listen: cli.amqp_listen,
            http_listen: cli.http_listen.0,
            stream_listen: cli.stream_listen.0,
            stream: warren_stream_protocol::StreamSettings {
                frame_max_bytes: cli.stream_frame_max,
                heartbeat_secs: cli.stream_heartbeat,
                advertised_host: cli.stream_advertised_host.clone().unwrap_or_else(warren_delivery::node::host_name),
                advertised_port: 0,
            },
            stream_advertised_port: cli.stream_advertised_port,
            http_limits: warren_webui::HttpLimits::with_max_connections(cli.http_max_connections),
            data_dir: cli.data_dir,
            fsync: cli.fsync,
            protocol,
            cluster,
            resource_limits: ResourceLimits {
                memory_high_watermark: cli.vm_memory_high_watermark,
                disk_free_limit_bytes: cli.disk_free_limit,
            },
            access,
            queue_memory_budget_bytes: usize::try_from(cli.queue_memory_budget).unwrap_or(usize::MAX),
            amqps_listen: cli.amqps_listen,
            https_listen: cli.https_listen,
            tls: TlsSettings {
                cert_file: cli.ssl_cert_file,
                key_file: cli.ssl_key_file,
                ca_file: cli.ssl_ca_file,
                fail_if_no_peer_cert: cli.ssl_fail_if_no_peer_cert,
                login_from: cli.ssl_cert_login_from,
            },
            log: LogSettings { format: cli.log_format, file: cli.log_file },
            config_file: cli.config,
            shown: shown_settings(matches),
        })
    }
}

/// Settings whose values `environment` does not show (it says they are set).
const HIDDEN_SETTINGS: &[&str] = &["default_pass"];

/// What `environment` shows of a hidden setting.
const HIDDEN_VALUE: &str = "(hidden)";

/// Every setting of the file (every flag but `--config` and clap's own), as given or defaulted.
fn shown_settings(matches: &ArgMatches) -> Vec<warren_webui::EnvironmentSetting> {
    let command = Cli::command();
    let settings = command.get_arguments().filter(|arg| is_file_setting(arg));
    settings
        .map(|arg| {
            let key = arg.get_id().as_str();
            let raw = matches.get_raw(key).into_iter().flatten();
            let value: Vec<String> = raw.map(|v| v.to_string_lossy().into_owned()).collect();
            let value = if HIDDEN_SETTINGS.contains(&key) { HIDDEN_VALUE.to_string() } else { value.join(",") };
            let source = match matches.value_source(key) {
                Some(clap::parser::ValueSource::DefaultValue) => "default",
                Some(clap::parser::ValueSource::EnvVariable) => "environment",
                Some(_) => "flag or file",
                None => "unset",
            };
            warren_webui::EnvironmentSetting { key: key.to_string(), value, source }
        })
        .collect()
}

/// The first start's user and vhost, and who may connect from loopback only.
fn access_settings(cli: &Cli) -> AccessSettings {
    let mut loopback_users = cli.loopback_users.clone();
    loopback_users.retain(|user| !user.is_empty() && user != "none");
    AccessSettings {
        default_user: cli.default_user.clone(),
        default_pass: cli.default_pass.clone(),
        default_vhost: cli.default_vhost.clone(),
        loopback_users,
    }
}

/// Node identity, listener, seed list and secret, checked; the secret is read only when the
/// node talks to others, and is then required.
fn cluster_settings(cli: &Cli) -> Result<ClusterSettings, ConfigError> {
    for (key, name) in [("node_name", &cli.node_name), ("cluster_name", &cli.cluster_name)] {
        check_name(name).map_err(|e| ConfigError::Invalid { key, message: e.to_string() })?;
    }
    if cli.metadata_snapshot_interval == 0 {
        let message = "must be at least 1 (catalog changes between two snapshots)".to_string();
        return Err(ConfigError::Invalid { key: "metadata_snapshot_interval", message });
    }
    let mut peers = cli.peers.clone();
    peers.retain(|peer| peer.name != cli.node_name);
    let mut settings = ClusterSettings {
        node_name: cli.node_name.clone(),
        cluster_name: cli.cluster_name.clone(),
        metadata_snapshot_interval_entries: cli.metadata_snapshot_interval,
        pretend_previous_release: cli.pretend_previous_release,
        listen: cli.cluster_listen,
        peers,
        secret: None,
    };
    if settings.is_networked() {
        let path = cli.cluster_secret_file.as_ref().ok_or(ConfigError::ClusterSecretRequired)?;
        settings.secret = Some(ClusterSecret::read(path)?);
    }
    Ok(settings)
}

/// Why the arguments and the file make no settings.
enum SettingsError {
    /// What clap says of the arguments (`--help` and `--version` included).
    Usage(clap::Error),
    /// The file cannot be used.
    Config(ConfigError),
}

/// The matches of `args` with the settings of the TOML file they name (`--config`, or its
/// environment variable) placed before them (see the module documentation).
fn matches_with_file(args: &[OsString]) -> Result<ArgMatches, SettingsError> {
    let command = Cli::command().args_override_self(true);
    let given = command.clone().try_get_matches_from(args).map_err(SettingsError::Usage)?;
    let Some(path) = given.get_one::<PathBuf>("config") else { return Ok(given) };
    let from_file = file_arguments(path, &command).map_err(SettingsError::Config)?;
    let program = args.first().cloned().unwrap_or_else(|| OsString::from("warren"));
    // The file's settings alone first, so that a bad value is blamed on the file.
    let file_only = std::iter::once(program.clone()).chain(from_file.iter().cloned());
    if let Err(error) = command.clone().try_get_matches_from(file_only) {
        let rendered = error.render().to_string();
        let message = rendered.lines().next().unwrap_or_default().trim_start_matches("error: ").to_string();
        return Err(SettingsError::Config(ConfigError::Parse { path: path.clone(), message }));
    }
    let together = std::iter::once(program).chain(from_file).chain(args.iter().skip(1).cloned());
    command.try_get_matches_from(together).map_err(SettingsError::Usage)
}

/// The settings of the TOML file at `path` as flags of `command`: a key is a flag's name with
/// underscores, and its value what the flag takes (a list for a comma-separated flag).
fn file_arguments(path: &Path, command: &Command) -> Result<Vec<OsString>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.into(), source })?;
    let parse = |message: String| ConfigError::Parse { path: path.into(), message };
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| parse(e.to_string()))?;
    let settings: Vec<&Arg> = command.get_arguments().filter(|arg| is_file_setting(arg)).collect();
    let mut arguments = Vec::with_capacity(table.len());
    for (key, value) in &table {
        let Some(arg) = settings.iter().find(|arg| arg.get_id() == key.as_str()) else {
            let known: Vec<&str> =
                settings.iter().filter(|arg| !arg.is_hide_set()).map(|arg| arg.get_id().as_str()).collect();
            return Err(parse(format!("unknown key '{key}' (the keys are the flags' names: {})", known.join(", "))));
        };
        let text = setting_text(arg, value).map_err(|message| parse(format!("{key}: {message}")))?;
        let long = arg.get_long().unwrap_or(key);
        arguments.push(OsString::from(format!("--{long}={text}")));
    }
    Ok(arguments)
}

/// Whether `arg` may be set in the TOML file (every flag but the file itself and clap's own).
pub fn is_file_setting(arg: &Arg) -> bool {
    arg.get_long().is_some() && !matches!(arg.get_id().as_str(), "config" | "help" | "version")
}

/// A TOML value as its flag takes it: `0.4` and `"0.4"` alike; a list, for a comma-separated
/// flag, joined with commas.
fn setting_text(arg: &Arg, value: &toml::Value) -> Result<String, String> {
    match value {
        toml::Value::String(text) => Ok(text.clone()),
        toml::Value::Integer(n) => Ok(n.to_string()),
        toml::Value::Float(f) => Ok(format!("{f:?}")),
        toml::Value::Boolean(b) => Ok(b.to_string()),
        toml::Value::Array(items) if arg.get_value_delimiter() == Some(',') => {
            let item = |item: &toml::Value| match item {
                toml::Value::String(text) if !text.contains(',') => Ok(text.clone()),
                _ => Err("each item of the list must be a string without commas".to_string()),
            };
            Ok(items.iter().map(item).collect::<Result<Vec<_>, _>>()?.join(","))
        }
        other => Err(format!("a {} is not a value of this setting", other.type_str())),
    }
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
    fn the_defaults_are_the_declared_ones_whatever_the_environment() {
        let _env = ENV_LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        std::env::set_var("WARREN_HEARTBEAT", "5");
        let defaults = Config::default();
        std::env::remove_var("WARREN_HEARTBEAT");
        assert_eq!(defaults.protocol.heartbeat_secs, 60);
        assert_eq!(defaults.amqp_listen, SocketAddr::from(([0, 0, 0, 0], 5672)));
        assert_eq!(defaults.http_listen, Some(SocketAddr::from(([0, 0, 0, 0], 15672))));
        assert_eq!(defaults.fsync, Fsync::Batch);
        assert_eq!(defaults.cluster.cluster_name, DEFAULT_CLUSTER_NAME);
        assert_eq!(defaults.queue_memory_budget_bytes, warren_delivery::message_store::TRANSIENT_MEMORY_BUDGET_BYTES);
        let access = AccessSettings::default();
        assert_eq!(
            (defaults.access.default_user, defaults.access.loopback_users),
            (access.default_user, access.loopback_users)
        );
        assert_eq!(defaults.resource_limits, ResourceLimits::default());
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

    #[test]
    fn every_kind_of_setting_is_read_from_the_file_and_a_flag_still_beats_it() {
        let _env = ENV_LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let secret = secret_file("kinds");
        let mut file = tempfile_in_target();
        writeln!(
            file.1,
            "http_listen = \"none\"\nfsync = \"always\"\nlog_format = \"json\"\nssl_fail_if_no_peer_cert = true\n\
             loopback_users = [\"alice\", \"bob\"]\npeers = [\"warren@f@127.0.0.1:4000\", \"warren@g@127.0.0.1:4001\"]\n\
             cluster_secret_file = {secret:?}\nqueue_memory_budget = \"64MiB\"\nmax_connections = 10"
        )
        .expect("write");
        let path = file.0.to_str().expect("utf-8 path").to_string();
        std::env::set_var("WARREN_SSL_FAIL_IF_NO_PEER_CERT", "false");
        let config = Config::try_parse_from(["warren", "--config", &path]);
        let flags = Config::try_parse_from(["warren", "--config", &path, "--peers", "warren@h@127.0.0.1:4002"]);
        std::env::remove_var("WARREN_SSL_FAIL_IF_NO_PEER_CERT");
        let config = config.expect("valid");
        assert_eq!(config.http_listen, None);
        assert_eq!(config.fsync, Fsync::Always);
        assert_eq!(config.log.format, LogFormat::Json);
        assert!(config.tls.fail_if_no_peer_cert, "the file beats the environment");
        assert_eq!(config.access.loopback_users, ["alice", "bob"]);
        assert_eq!(config.cluster.peers.len(), 2);
        assert_eq!(config.queue_memory_budget_bytes, 64 << 20);
        assert_eq!(config.protocol.max_connections, Some(10));
        let peers: Vec<String> = flags.expect("valid").cluster.peers.iter().map(ToString::to_string).collect();
        assert_eq!(peers, ["warren@h@127.0.0.1:4002"], "a flag replaces the file's list");
        let _ = std::fs::remove_file(&file.0);
        let _ = std::fs::remove_file(&secret);
    }

    #[test]
    fn a_bad_value_in_the_file_is_blamed_on_the_file() {
        let mut file = tempfile_in_target();
        writeln!(file.1, "heartbeat = \"soon\"").expect("write");
        let path = file.0.to_str().expect("utf-8 path").to_string();
        let err = Config::try_parse_from(["warren", "--config", &path]).expect_err("not a number");
        let text = err.to_string();
        assert!(text.contains("invalid configuration file") && text.contains("soon"), "{text}");
        let mut file = tempfile_in_target();
        writeln!(file.1, "heartbeat = [1, 2]").expect("write");
        let err = Config::try_parse_from(["warren", "--config", &path]).expect_err("not a list");
        assert!(err.to_string().contains("heartbeat: a array is not a value"), "{err}");
        let _ = std::fs::remove_file(&file.0);
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
