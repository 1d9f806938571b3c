"""Fixtures that run a real Warren broker for the pika cross-client tests.

The broker binary is taken from $WARREN_BIN (default: target/debug/warren in
the repository root). One broker process serves the whole test session (and
tests that stop the broker get their own); each listens on a free loopback
port and keeps its data in a temporary directory.
"""

import contextlib
import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pika
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BIN = REPO_ROOT / "target" / "debug" / "warren"
STARTUP_TIMEOUT_S = 20.0
SHUTDOWN_TIMEOUT_S = 10.0


def free_port() -> int:
    """Ask the kernel for a free loopback port, then release it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_listening(port: int, process: subprocess.Popen, log_path: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"warren exited with {process.returncode} during startup:\n{log_path.read_text()}"
            )
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"warren did not listen on port {port} in time:\n{log_path.read_text()}")


def wait_for_port(port: int) -> None:
    """Waits until something accepts connections on 127.0.0.1:port (the management listener
    binds after the AMQP one that run_broker waits for)."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listened on port {port} in time")


def stop(process: subprocess.Popen) -> None:
    """SIGTERM, then wait; SIGKILL if the broker does not exit in time."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=SHUTDOWN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.contextmanager
def run_broker(workdir: Path, extra_args=()):
    """Runs warren in workdir (with extra_args on its command line) until the block ends;
    yields (process, pika parameters)."""
    binary = Path(os.environ.get("WARREN_BIN", DEFAULT_BIN))
    if not binary.is_file():
        pytest.fail(f"broker binary not found at {binary}; run `cargo build --bin warren` or set WARREN_BIN")
    log_path = workdir / "warren.log"
    port = free_port()
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [str(binary), "--amqp-listen", f"127.0.0.1:{port}", "--data-dir", str(workdir / "data"), *extra_args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        wait_until_listening(port, process, log_path)
        yield process, pika.ConnectionParameters(
            host="127.0.0.1",
            port=port,
            virtual_host="/",
            credentials=pika.PlainCredentials("guest", "guest"),
            connection_attempts=3,
            retry_delay=0.2,
            socket_timeout=5,
            blocked_connection_timeout=10,
        )
    finally:
        stop(process)


@contextlib.contextmanager
def run_cluster(workdir: Path, nodes: int):
    """Runs a cluster of `nodes` warren processes in workdir until the block ends; yields the
    pika parameters of each node, in name order."""
    names = [f"warren@n{i}" for i in range(nodes)]
    ports = [free_port() for _ in names]
    peers = ",".join(f"{name}@127.0.0.1:{port}" for name, port in zip(names, ports))
    secret = workdir / "secret"
    secret.write_text("the pika suite's cluster secret\n")
    with contextlib.ExitStack() as stack:
        parameters = []
        for name, port in zip(names, ports):
            node_dir = workdir / name
            node_dir.mkdir()
            args = ["--node-name", name, "--peers", peers, "--cluster-listen", f"127.0.0.1:{port}",
                    "--cluster-secret-file", str(secret)]
            _, node_parameters = stack.enter_context(run_broker(node_dir, args))
            parameters.append(node_parameters)
        yield parameters


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    """The broker shared by the session's tests; yields pika connection parameters for it.
    With WARREN_CLUSTER_NODES=N, a cluster of N nodes, and the parameters of its second node
    (so that what the tests declare has its leader elsewhere only when the cluster chooses)."""
    nodes = int(os.environ.get("WARREN_CLUSTER_NODES", "1"))
    if nodes > 1:
        with run_cluster(tmp_path_factory.mktemp("warren-cluster"), nodes) as parameters:
            yield parameters[1]
        return
    with run_broker(tmp_path_factory.mktemp("warren")) as (_, parameters):
        yield parameters


@pytest.fixture
def private_broker(tmp_path):
    """A broker for this test alone (for tests that stop it); yields (process, parameters)."""
    with run_broker(tmp_path) as running:
        yield running


@pytest.fixture
def connection(broker):
    conn = pika.BlockingConnection(broker)
    yield conn
    if conn.is_open:
        conn.close()


@pytest.fixture
def channel(connection):
    return connection.channel()


@pytest.fixture
def names(request):
    """Makes entity names unique to the running test: names("q") -> "py.<test>.q.<hex>"."""
    token = uuid.uuid4().hex[:8]

    def make(suffix: str) -> str:
        return f"py.{request.node.name}.{suffix}.{token}"

    return make
