//! The `warren` binary logging to a file in JSON: one object a line, and the file reopened on
//! SIGUSR1 after logrotate moved it away.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const WARREN: &str = env!("CARGO_BIN_EXE_warren");

/// The lines of `path` once one contains `needle` (at most 10 s).
fn lines_once(path: &Path, needle: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.contains(needle) || Instant::now() > deadline {
            return text.lines().map(str::to_string).collect();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

struct Stopped(Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn json_lines_go_to_the_log_file_which_sigusr1_reopens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("warren.log");
    let child = Command::new(WARREN)
        .args(["--amqp-listen", "127.0.0.1:0", "--http-listen", "none", "--log-format", "json", "--log-file"])
        .arg(&log)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start warren");
    let running = Stopped(child);

    let lines = lines_once(&log, "accepting AMQP");
    let started = lines.iter().find(|l| l.contains("accepting AMQP")).expect("the start is logged to the file");
    for line in &lines {
        let event: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(event["timestamp"].is_string() && event["level"].is_string(), "{line}");
        assert!(event["fields"]["message"].is_string(), "{line}");
    }
    let event: serde_json::Value = serde_json::from_str(started).expect("JSON");
    assert_eq!(event["level"], "INFO");
    assert!(event["fields"]["amqp_addr"].as_str().is_some_and(|a| a.starts_with("127.0.0.1:")), "{started}");

    // logrotate moves the file away, then signals.
    let rotated = dir.path().join("warren.log.1");
    std::fs::rename(&log, &rotated).expect("rotate");
    let signalled = Command::new("kill").args(["-USR1", &running.0.id().to_string()]).status();
    assert!(signalled.is_ok_and(|s| s.success()), "kill -USR1");
    let reopened = lines_once(&log, "log file reopened");
    assert!(reopened.iter().any(|l| l.contains("log file reopened")), "the new file has the next lines: {reopened:?}");
    let old = std::fs::read_to_string(&rotated).expect("rotated file");
    assert!(!old.contains("log file reopened"), "nothing more went to the moved file");
}
