//! The broker's settings: command-line flags, then an optional TOML file, then environment
//! variables, then defaults, in that order of precedence.
//!
//! clap reads flags and environment variables together; `ArgMatches::value_source` tells which
//! one a value came from, so that a value from the TOML file can beat an environment variable
//! but not a flag.

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use warren_amqp::ProtocolConfig;
use warren_storage::FlushPolicy;

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
#[command(name = "warren", version, about, long_about = None)]
pub struct Cli {
    /// TOML configuration file.
    #[arg(long, env = "WARREN_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Address the AMQP listener binds (port 0 picks a free port).
    #[arg(long, env = "WARREN_AMQP_LISTEN", default_value = "0.0.0.0:5672")]
    pub amqp_listen: SocketAddr,

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

    /// Largest message body accepted, in bytes; larger publishes get 406 PRECONDITION_FAILED.
    #[arg(long, env = "WARREN_MAX_MESSAGE_SIZE", default_value_t = 128 * 1024 * 1024)]
    pub max_message_size: u64,

    /// Milliseconds a client has from connecting to connection.open.
    #[arg(long, env = "WARREN_HANDSHAKE_TIMEOUT_MS", default_value_t = 10_000)]
    pub handshake_timeout_ms: u64,
}

/// The TOML file: every key optional, named like the flags.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSettings {
    amqp_listen: Option<SocketAddr>,
    data_dir: Option<PathBuf>,
    fsync: Option<Fsync>,
    channel_max: Option<u16>,
    frame_max: Option<u32>,
    heartbeat: Option<u16>,
    max_message_size: Option<u64>,
    handshake_timeout_ms: Option<u64>,
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
}

/// The settings the broker runs with.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address of the AMQP listener.
    pub amqp_listen: SocketAddr,
    /// Data directory.
    pub data_dir: PathBuf,
    /// fsync policy of durable queues.
    pub fsync: Fsync,
    /// Protocol limits.
    pub protocol: ProtocolConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            amqp_listen: ([0, 0, 0, 0], 5672).into(),
            data_dir: PathBuf::from("./data"),
            fsync: Fsync::Batch,
            protocol: ProtocolConfig::default(),
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
        let frame_max = pick(m, "frame_max", cli.frame_max, file.frame_max);
        if frame_max < 4096 {
            return Err(ConfigError::Invalid { key: "frame_max", message: format!("{frame_max} is below 4096") });
        }
        let protocol = ProtocolConfig {
            channel_max: pick(m, "channel_max", cli.channel_max, file.channel_max),
            frame_max,
            heartbeat_secs: pick(m, "heartbeat", cli.heartbeat, file.heartbeat),
            max_message_bytes: pick(m, "max_message_size", cli.max_message_size, file.max_message_size),
            handshake_timeout: Duration::from_millis(pick(
                m,
                "handshake_timeout_ms",
                cli.handshake_timeout_ms,
                file.handshake_timeout_ms,
            )),
            ..ProtocolConfig::default()
        };
        Ok(Config {
            amqp_listen: pick(m, "amqp_listen", cli.amqp_listen, file.amqp_listen),
            data_dir: pick(m, "data_dir", cli.data_dir, file.data_dir),
            fsync: pick(m, "fsync", cli.fsync, file.fsync),
            protocol,
        })
    }
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
