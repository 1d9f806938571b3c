#!/usr/bin/env bash
# Warren's whole test suite: the Rust workspace (unit, property and lapin end-to-end tests),
# then the cross-client suites (pika and amqplib against the real `warren` binary).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --locked
if [ -x tests/cross_client.sh ] || [ -f tests/cross_client.sh ]; then
  bash tests/cross_client.sh
fi
