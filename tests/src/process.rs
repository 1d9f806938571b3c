//! The real `warren` binary as a child process, for tests that signal or kill it.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// How long the broker may take to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The `warren` binary of this workspace's debug build (or `$WARREN_BIN`).
pub fn warren_binary() -> PathBuf {
    if let Ok(path) = std::env::var("WARREN_BIN") {
        return PathBuf::from(path);
    }
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("target"));
    let binary = target.join("debug").join("warren");
    assert!(binary.exists(), "{} is missing: build it with `cargo build --bin warren`", binary.display());
    binary
}

/// A running `warren` process.
pub struct WarrenProcess {
    child: Child,
    /// Every line it has logged so far.
    log: Arc<Mutex<Vec<String>>>,
    /// Where it accepts AMQP connections.
    pub amqp_addr: SocketAddr,
    /// Where its management API listens (logged before the AMQP address).
    pub http_addr: Option<SocketAddr>,
}

impl WarrenProcess {
    /// Starts `warren` on a free loopback port with `data_dir`, plus `extra_args`.
    pub fn start(data_dir: &Path, extra_args: &[&str]) -> WarrenProcess {
        let mut command = Command::new(warren_binary());
        command.args(Self::arguments(data_dir, extra_args));
        Self::launch(command)
    }

    /// Like [`WarrenProcess::start`], with the open-files limits set to `soft` and `hard`
    /// before `warren` starts (by the shell's `ulimit`).
    pub fn start_with_open_files(data_dir: &Path, extra_args: &[&str], soft: u32, hard: u32) -> WarrenProcess {
        let mut command = Command::new("sh");
        command
            // The soft limit first: a hard limit below the current soft one is refused.
            .args(["-c", r#"ulimit -S -n "$1" && ulimit -H -n "$2" && shift 2 && exec "$@""#, "sh"])
            .args([soft.to_string(), hard.to_string()])
            .arg(warren_binary())
            .args(Self::arguments(data_dir, extra_args));
        Self::launch(command)
    }

    fn arguments(data_dir: &Path, extra_args: &[&str]) -> Vec<std::ffi::OsString> {
        let listen = [
            "--amqp-listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
            "--stream-listen",
            "127.0.0.1:0",
            "--data-dir",
        ];
        let mut arguments: Vec<std::ffi::OsString> = listen.iter().map(Into::into).collect();
        arguments.push(data_dir.into());
        arguments.extend(extra_args.iter().map(Into::into));
        arguments
    }

    fn launch(mut command: Command) -> WarrenProcess {
        let mut child = command
            .env("RUST_LOG", std::env::var("WARREN_NODE_LOG").unwrap_or_else(|_| "info".to_string()))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn warren");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = mpsc::channel();
        let log = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&log);
        // Reads the log for the listening line, and keeps every line (draining the pipe so it
        // never fills).
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(addr) = line.split("http_addr=").nth(1).and_then(|rest| rest.split(' ').next()) {
                    let _ = tx.send(format!("http {addr}"));
                }
                if let Some(addr) = line.split("amqp_addr=").nth(1).and_then(|rest| rest.split(' ').next()) {
                    let _ = tx.send(addr.to_string());
                }
                if let Ok(mut lines) = kept.lock() {
                    lines.push(line);
                }
            }
        });
        let deadline = Instant::now() + START_TIMEOUT;
        let mut http_addr = None;
        let addr = loop {
            if let Ok(addr) = rx.recv_timeout(Duration::from_millis(100)) {
                if let Some(http) = addr.strip_prefix("http ") {
                    http_addr = http.parse().ok();
                    continue;
                }
                break addr;
            }
            if let Ok(Some(status)) = child.try_wait() {
                std::thread::sleep(Duration::from_millis(100));
                let said = log.lock().map(|lines| lines.join("\n")).unwrap_or_default();
                panic!("warren exited during startup: {status}; it logged:\n{said}");
            }
            assert!(Instant::now() < deadline, "warren did not start listening in time");
        };
        WarrenProcess { child, log, amqp_addr: addr.parse().expect("listening address"), http_addr }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its resident memory now (VmRSS), in bytes.
    pub fn rss_bytes(&self) -> u64 {
        let rss = crate::siege::rss_bytes(self.pid());
        assert!(rss > 0, "no resident memory read for process {}", self.pid());
        rss
    }

    /// The lines logged so far (stderr, `RUST_LOG=info`, or `$WARREN_NODE_LOG` for a diagnosis).
    pub fn log_lines(&self) -> Vec<String> {
        self.log.lock().map(|lines| lines.clone()).unwrap_or_default()
    }

    /// The AMQP URI for lapin.
    pub fn uri(&self) -> String {
        format!("amqp://guest:guest@{}/%2f", self.amqp_addr)
    }

    /// Sends a signal by name (TERM, INT, KILL).
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill").args(["-s", name, &self.child.id().to_string()]).status().expect("kill");
        assert!(status.success(), "kill -s {name} failed");
    }

    /// Waits for the process to exit.
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "warren did not exit in time");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kills the process at once (SIGKILL) and reaps it.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for WarrenProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `warren ctl --url URL ARGS...` (the real binary): (succeeded, stdout, stderr).
pub fn run_ctl(url: &str, args: &[&str]) -> (bool, String, String) {
    let output = tokio::task::block_in_place(|| {
        std::process::Command::new(warren_binary()).args(["ctl", "--url", url]).args(args).output()
    });
    let output = match output {
        Ok(output) => output,
        Err(error) => panic!("cannot run warren ctl: {error}"),
    };
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).to_string();
    (output.status.success(), text(&output.stdout), text(&output.stderr))
}
