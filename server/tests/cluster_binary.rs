//! The `warren` binary with cluster settings: two processes on 127.0.0.1 find each other
//! through their seed lists and authenticate, garbage is refused and logged; clustering
//! without a secret file is refused.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const WARREN: &str = env!("CARGO_BIN_EXE_warren");

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("warren-cluster-binary-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("address").port()
}

/// Starts a node; its stderr lines go to the returned receiver.
fn node(dir: &Path, name: &str, port: u16, peers: &str, secret: &Path) -> (Child, mpsc::Receiver<String>) {
    let mut child = Command::new(WARREN)
        .args(["--amqp-listen", "127.0.0.1:0", "--node-name", name, "--peers", peers])
        .arg("--data-dir")
        .arg(dir.join(name))
        .arg("--cluster-listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--cluster-secret-file")
        .arg(secret)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start warren");
    let stderr = child.stderr.take().expect("stderr piped");
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    (child, received)
}

fn wait_for_line(lines: &mpsc::Receiver<String>, needle: &str) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        match lines.recv_timeout(left) {
            Ok(line) if line.contains(needle) => return true,
            Ok(_) => {}
            Err(_) => return false,
        }
    }
    false
}

#[test]
fn two_processes_connect_through_their_seed_lists() {
    let dir = scratch("pair");
    let secret = dir.join("secret");
    std::fs::write(&secret, "a secret shared by both nodes\n").expect("secret");
    let (port_a, port_b) = (free_port(), free_port());
    let peers = format!("warren@a@127.0.0.1:{port_a},warren@b@127.0.0.1:{port_b}");
    let (mut a, a_lines) = node(&dir, "warren@a", port_a, &peers, &secret);
    let (mut b, b_lines) = node(&dir, "warren@b", port_b, &peers, &secret);
    let a_connected = wait_for_line(&a_lines, "cluster peer connected");
    let b_connected = wait_for_line(&b_lines, "cluster peer connected");
    // A client speaking garbage is refused and logged, with its text escaped.
    let mut intruder = std::net::TcpStream::connect(("127.0.0.1", port_b)).expect("connect");
    let _ = std::io::Write::write_all(&mut intruder, b"\0\0\0\x05hello");
    let garbage_logged = wait_for_line(&b_lines, "cluster connection refused");
    let _ = a.kill();
    let _ = b.kill();
    let _ = a.wait();
    let _ = b.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(a_connected && b_connected, "a: {a_connected}, b: {b_connected}");
    assert!(garbage_logged, "garbage was not logged");
}

#[test]
fn clustering_without_a_secret_file_is_refused_at_startup() {
    let dir = scratch("nosecret");
    let output = Command::new(WARREN)
        .args(["--amqp-listen", "127.0.0.1:0", "--cluster-listen", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(dir.join("data"))
        .stdin(Stdio::null())
        .output()
        .expect("run warren");
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--cluster-secret-file PATH"), "{stderr}");
}
