#!/usr/bin/env bash
# Soak of the cluster's failover: many seeded rounds of the kill -9 test (three real nodes, a
# publisher with confirms and an acking consumer, the queue's leader killed mid-load and
# restarted; every confirmed message must be delivered). CI runs two rounds; this runs more.
#
# usage: scripts/soak-cluster.sh [ROUNDS (default 50)] [FIRST_SEED (default 1)]
# A failing round prints its seed; replay it with: scripts/soak-cluster.sh 1 SEED
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --locked --bin warren
WARREN_FAILOVER_ROUNDS="${1:-50}" WARREN_FAILOVER_SEED="${2:-1}" \
  cargo test --locked -p warren-tests --test cluster killing_the_leader -- --nocapture
