#!/usr/bin/env bash
# Soak of the cluster's failover: many seeded rounds of every fault (three real nodes, a
# publisher with confirms, the fault injected mid-load and repaired): kill -9 of the leader,
# SIGSTOP of the leader, the leader's links closed, the leader's links black-holed, a
# follower's links closed, the link between the leader and one follower closed. On a quorum
# queue with an acking consumer (every confirmed message must be delivered), then on a
# replicated stream (every confirmed message stored, every replica the same byte for byte).
# CI runs one or two rounds of each; this runs more, and prints per fault and queue type the
# median and the longest window in which the publisher got no confirm.
#
# usage: scripts/soak-cluster.sh [ROUNDS (default 50)] [FIRST_SEED (default 1)]
# A failing round prints its seed; replay it with: scripts/soak-cluster.sh 1 SEED
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${1:-50}"
SEED="${2:-1}"
LOG=$(mktemp /tmp/warren-soak.XXXXXX)
cargo build --locked --bin warren
# The "every fault" tests run ROUNDS/2 rounded up seeds; twice ROUNDS makes ROUNDS of each.
run() {
  WARREN_FAILOVER_ROUNDS="$1" WARREN_FAILOVER_SEED="$SEED" \
    cargo test --locked -p warren-tests --test "$2" "$3" -- --nocapture 2>&1 | tee -a "$LOG"
}
run "$ROUNDS" cluster killing_the_leader
run $((ROUNDS * 2)) cluster every_fault_mid_load
run "$ROUNDS" replicated_streams a_replicated_stream_confirms
run $((ROUNDS * 2)) replicated_streams a_replicated_stream_loses_nothing
echo
echo "Window without a confirm after each fault (s), from $LOG:"
printf "%-44s %6s %8s %8s\n" "fault (queue type)" "rounds" "median" "max"
grep -o 'fault [a-z-]* window [0-9.]* s ([a-z ]*' "$LOG" |
  awk '{ sub(/^\(/, "", $6); key = $2 " (" $6 " " $7 ")"; print key "\t" $4 }' | sort -t$'\t' -k1,1 -k2,2n |
  awk -F'\t' '
    { v[$1] = v[$1] " " $2; n[$1]++ }
    END {
      for (k in n) {
        split(substr(v[k], 2), a, " ")
        m = (n[k] % 2) ? a[(n[k] + 1) / 2] : (a[n[k] / 2] + a[n[k] / 2 + 1]) / 2
        printf "%-44s %6d %8.2f %8.2f\n", k, n[k], m, a[n[k]]
      }
    }' | sort
