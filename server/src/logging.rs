//! The broker's log: which lines (`RUST_LOG`, openraft held to warnings), in which format (text,
//! or one JSON object a line for log shippers), and where (standard error, or a file that is
//! reopened on SIGUSR1, so that logrotate can move it away as it does RabbitMQ's after
//! `rabbitmqctl rotate_logs`; Warren does not rotate by itself). The filter can be changed
//! while the broker runs ([`LogLevels`], behind `warren ctl set_log_level`).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::{Layered, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Layer, Registry};

/// The log level when `RUST_LOG` does not say.
const DEFAULT_LOG_FILTER: &str = "info";
/// openraft logs its routine work at INFO (a snapshot built, a vote, a replication step):
/// hundreds of lines a second under load, from every quorum queue's and stream's group. Its
/// warnings and errors are kept; a `RUST_LOG` that names openraft decides for itself.
const OPENRAFT_LOG_DIRECTIVE: &str = "openraft=warn";

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// A line of text per event (time, level, target, message, fields).
    #[default]
    Text,
    /// A JSON object per line: `timestamp`, `level`, `target`, `fields` (with `message`).
    Json,
}

/// Where and how the broker logs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogSettings {
    /// Text or JSON.
    pub format: LogFormat,
    /// The file appended to, instead of standard error.
    pub file: Option<PathBuf>,
}

/// The most bytes of a filter `set_log_level` takes (a client sends it).
pub const MAX_LOG_FILTER_BYTES: usize = 1024;

/// `RUST_LOG` (or [`DEFAULT_LOG_FILTER`]), with openraft held to warnings unless it is named.
fn log_filter() -> EnvFilter {
    let asked = std::env::var("RUST_LOG").unwrap_or_default();
    filter_of(&asked).unwrap_or_else(|_| held_openraft(EnvFilter::new(DEFAULT_LOG_FILTER), ""))
}

/// The filter `directives` say (`debug`, `info,warren_amqp=debug`), openraft held to warnings
/// unless they name it; an error that says what is wrong with them.
fn filter_of(directives: &str) -> Result<EnvFilter, String> {
    if directives.trim().is_empty() {
        return Err("the filter is empty: give a level (error, warn, info, debug, trace) or directives".into());
    }
    let filter =
        EnvFilter::builder().parse(directives).map_err(|e| format!("invalid log filter {directives:?}: {e}"))?;
    Ok(held_openraft(filter, directives))
}

fn held_openraft(filter: EnvFilter, directives: &str) -> EnvFilter {
    match OPENRAFT_LOG_DIRECTIVE.parse() {
        Ok(directive) if !directives.contains("openraft") => filter.add_directive(directive),
        _ => filter,
    }
}

/// Changes the log filter of the running broker (`warren ctl set_log_level`).
type FilterHandle = reload::Handle<EnvFilter, Registry>;

/// The running filter's handle and its directives, once [`init`] ran.
static RUNNING_FILTER: OnceLock<(FilterHandle, Mutex<String>)> = OnceLock::new();

/// The log filter of the running broker: what `warren ctl set_log_level` reads and changes.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogLevels;

impl warren_webui::LogLevels for LogLevels {
    fn current(&self) -> String {
        match RUNNING_FILTER.get() {
            Some((_, directives)) => directives.lock().unwrap_or_else(PoisonError::into_inner).clone(),
            None => "(logging is not set up in this process)".into(),
        }
    }

    fn set(&self, directives: &str) -> Result<(), String> {
        if directives.len() > MAX_LOG_FILTER_BYTES {
            return Err(format!("the filter has {} bytes: at most {MAX_LOG_FILTER_BYTES}", directives.len()));
        }
        let filter = filter_of(directives)?;
        let Some((handle, current)) = RUNNING_FILTER.get() else {
            return Err("logging is not set up in this process".into());
        };
        handle.reload(filter).map_err(|e| format!("cannot change the log filter: {e}"))?;
        *current.lock().unwrap_or_else(PoisonError::into_inner) = directives.to_string();
        Ok(())
    }
}

/// The events' layer: text or JSON, to `writer`.
fn event_layer<W>(
    format: LogFormat,
    ansi: bool,
    writer: W,
) -> Box<dyn Layer<Layered<ReloadedFilter, Registry>> + Send + Sync>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let layer = tracing_subscriber::fmt::layer().with_writer(writer);
    match format {
        LogFormat::Text => Box::new(layer.with_ansi(ansi)),
        LogFormat::Json => Box::new(layer.json().with_current_span(false).with_span_list(false)),
    }
}

/// The filter layer, reloadable.
type ReloadedFilter = reload::Layer<EnvFilter, Registry>;

/// Starts logging as `settings` say; the log file, if there is one, for [`LogFile::reopen`].
pub fn init(settings: &LogSettings) -> std::io::Result<Option<LogFile>> {
    let directives = std::env::var("RUST_LOG").ok().filter(|d| filter_of(d).is_ok());
    let (filter, handle) = reload::Layer::new(log_filter());
    let _ = RUNNING_FILTER.set((handle, Mutex::new(directives.unwrap_or_else(|| DEFAULT_LOG_FILTER.into()))));
    let registry = tracing_subscriber::registry().with(filter);
    let file = match &settings.file {
        Some(path) => {
            let file = LogFile::open(path)?;
            registry.with(event_layer(settings.format, false, file.clone())).init();
            Some(file)
        }
        None => {
            // Colour codes only on a terminal: logs redirected to files or read by tests stay plain.
            let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
            registry.with(event_layer(settings.format, ansi, std::io::stderr)).init();
            None
        }
    };
    Ok(file)
}

/// The log file, shared by every writer; [`LogFile::reopen`] swaps in the file now at its path.
#[derive(Debug, Clone)]
pub struct LogFile {
    path: PathBuf,
    file: Arc<Mutex<File>>,
}

impl LogFile {
    fn open(path: &Path) -> std::io::Result<Self> {
        let file = open_for_append(path)?;
        Ok(LogFile { path: path.to_path_buf(), file: Arc::new(Mutex::new(file)) })
    }

    /// Opens the path again (a new file, if logrotate moved the old one away) and writes there
    /// from now on.
    pub fn reopen(&self) -> std::io::Result<()> {
        let file = open_for_append(&self.path)?;
        *self.lock() = file;
        Ok(())
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> MutexGuard<'_, File> {
        self.file.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn open_for_append(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// One event's writer: holds the file while the event is written, so lines never interleave.
pub struct LogLine<'a>(MutexGuard<'a, File>);

impl Write for LogLine<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.write(bytes)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl<'a> MakeWriter<'a> for LogFile {
    type Writer = LogLine<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        LogLine(self.lock())
    }
}

/// Reopens `file` on every SIGUSR1, until the process ends.
pub fn reopen_on_sigusr1(file: LogFile) -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut signals = signal(SignalKind::user_defined1())?;
    tokio::spawn(async move {
        while signals.recv().await.is_some() {
            match file.reopen() {
                Ok(()) => tracing::info!(path = %file.path().display(), "log file reopened (SIGUSR1)"),
                // Still written to the old file, which stays open.
                Err(error) => tracing::error!(path = %file.path().display(), %error, "cannot reopen the log file"),
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_are_checked_and_say_what_is_wrong() {
        assert!(filter_of("debug").is_ok());
        assert!(filter_of("info,warren_amqp=debug").is_ok());
        let empty = filter_of("  ").expect_err("empty");
        assert!(empty.contains("empty"), "{empty}");
        let bad = filter_of("warren_amqp=loud").expect_err("bad level");
        assert!(bad.contains("invalid log filter"), "{bad}");
        let long = "a".repeat(MAX_LOG_FILTER_BYTES + 1);
        let refused = warren_webui::LogLevels::set(&LogLevels, &long).expect_err("too long");
        assert!(refused.contains("at most"), "{refused}");
    }

    #[test]
    fn a_reopened_log_writes_to_the_file_now_at_its_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("warren.log");
        let log = LogFile::open(&path).expect("open");
        log.make_writer().write_all(b"first\n").expect("write");
        std::fs::rename(&path, dir.path().join("warren.log.1")).expect("rotate");
        log.make_writer().write_all(b"still the old file\n").expect("write");
        log.reopen().expect("reopen");
        log.make_writer().write_all(b"second\n").expect("write");
        let old = std::fs::read_to_string(dir.path().join("warren.log.1")).expect("old");
        assert_eq!(old, "first\nstill the old file\n");
        assert_eq!(std::fs::read_to_string(&path).expect("new"), "second\n");
    }
}
