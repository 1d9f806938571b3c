#!/usr/bin/env bash
# Warren's whole test suite: the Rust workspace (unit, property and lapin end-to-end tests,
# and the tests that run the real `warren` binary: signals, kill -9), then the cross-client
# suites (pika and amqplib against the real binary).
set -euo pipefail
cd "$(dirname "$0")/.."
# The binary the process tests start; `cargo test` alone does not build it.
cargo build --locked --bin warren
cargo test --workspace --locked
# The quorum queue suite again, on a three-node cluster of real processes.
WARREN_CLUSTER_NODES=3 cargo test --locked -p warren-tests --test quorum_queues -- --test-threads 2
bash tests/cross_client.sh
