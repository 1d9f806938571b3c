//! The real `warren` binary, started with a low soft limit on open files (as many
//! distributions set it), raises it to the hard limit before it accepts connections.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const WARREN: &str = env!("CARGO_BIN_EXE_warren");
/// The soft limit the broker is started with.
const LOW_SOFT_LIMIT: u64 = 256;
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// (soft, hard) "Max open files" of process `pid`.
fn open_files_limits(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("/proc limits");
    let line = limits.lines().find(|l| l.starts_with("Max open files")).expect("Max open files line");
    let fields: Vec<&str> = line["Max open files".len()..].split_whitespace().collect();
    (fields[0].to_string(), fields[1].to_string())
}

#[test]
fn a_low_soft_limit_on_open_files_is_raised_to_the_hard_one() {
    let data = tempfile::tempdir().expect("tempdir");
    let script = format!("ulimit -Sn {LOW_SOFT_LIMIT} && exec \"$0\" --amqp-listen 127.0.0.1:0 --data-dir \"$1\"");
    let mut child = Command::new("sh")
        .args(["-c", &script, WARREN])
        .arg(data.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn warren");
    let stderr = child.stderr.take().expect("stderr");
    let deadline = Instant::now() + START_TIMEOUT;
    let mut lines = BufReader::new(stderr).lines();
    let started = loop {
        assert!(Instant::now() < deadline, "warren did not start");
        match lines.next() {
            Some(Ok(line)) if line.contains("accepting AMQP") => break true,
            Some(Ok(_)) => {}
            _ => break false,
        }
    };
    let limits = open_files_limits(child.id());
    let _ = child.kill();
    let _ = child.wait();
    assert!(started, "warren exited during startup");
    assert_eq!(limits.0, limits.1, "soft limit raised to the hard one (started at {LOW_SOFT_LIMIT})");
    assert_ne!(limits.0, LOW_SOFT_LIMIT.to_string());
}
