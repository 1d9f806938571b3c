//! The broker's log: which lines (`RUST_LOG`, openraft held to warnings), in which format (text,
//! or one JSON object a line for log shippers), and where (standard error, or a file that is
//! reopened on SIGUSR1, so that logrotate can move it away as it does RabbitMQ's after
//! `rabbitmqctl rotate_logs`; Warren does not rotate by itself).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

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

/// `RUST_LOG` (or [`DEFAULT_LOG_FILTER`]), with openraft held to warnings unless it is named.
fn log_filter() -> EnvFilter {
    let asked = std::env::var("RUST_LOG").unwrap_or_default();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_LOG_FILTER));
    match OPENRAFT_LOG_DIRECTIVE.parse() {
        Ok(directive) if !asked.contains("openraft") => filter.add_directive(directive),
        _ => filter,
    }
}

/// Starts logging as `settings` say; the log file, if there is one, for [`LogFile::reopen`].
pub fn init(settings: &LogSettings) -> std::io::Result<Option<LogFile>> {
    let builder = tracing_subscriber::fmt().with_env_filter(log_filter());
    match &settings.file {
        Some(path) => {
            let file = LogFile::open(path)?;
            let builder = builder.with_ansi(false).with_writer(file.clone());
            match settings.format {
                LogFormat::Text => builder.init(),
                LogFormat::Json => builder.json().with_current_span(false).with_span_list(false).init(),
            }
            Ok(Some(file))
        }
        None => {
            // Colour codes only on a terminal: logs redirected to files or read by tests stay plain.
            let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
            let builder = builder.with_writer(std::io::stderr);
            match settings.format {
                LogFormat::Text => builder.with_ansi(ansi).init(),
                LogFormat::Json => builder.json().with_current_span(false).with_span_list(false).init(),
            }
            Ok(None)
        }
    }
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
