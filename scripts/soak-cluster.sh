#!/usr/bin/env bash
# Soak of the cluster's failover: many seeded rounds of the kill -9 tests (three real nodes, a
# publisher with confirms, the leader killed mid-load and restarted): a quorum queue with an
# acking consumer (every confirmed message must be delivered), then a replicated stream (every
# confirmed message stored, every replica the same byte for byte). CI runs two rounds of each;
# this runs more.
#
# usage: scripts/soak-cluster.sh [ROUNDS (default 50)] [FIRST_SEED (default 1)]
# A failing round prints its seed; replay it with: scripts/soak-cluster.sh 1 SEED
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --locked --bin warren
WARREN_FAILOVER_ROUNDS="${1:-50}" WARREN_FAILOVER_SEED="${2:-1}" \
  cargo test --locked -p warren-tests --test cluster killing_the_leader -- --nocapture
WARREN_FAILOVER_ROUNDS="${1:-50}" WARREN_FAILOVER_SEED="${2:-1}" \
  cargo test --locked -p warren-tests --test replicated_streams a_replicated_stream_confirms -- --nocapture
