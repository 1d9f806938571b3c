#!/usr/bin/env bash
# The management plane under issue #28's attacks, at the issue's scale, against a release
# Warren (and, with --baseline BINARY, against another build side by side):
#
#  - AMQP connect times (p50, p99, max) while 20,000 idle sockets are attempted on the HTTP
#    port from four loopback addresses, the broker under an open-files limit of 8,192 (fewer
#    than the sockets: a broker that let HTTP take them all has none left for AMQP);
#  - resident memory above idle while 40 clients ask for the largest answers and never read
#    them: /metrics/per-object with 100,000 queues, a replay and a live-feed browse of 100 MiB of
#    control bytes with truncate 10^8;
#  - how long a real peer takes to join while 200 silent sockets hammer the cluster port.
#
#   bench/management-siege.sh [--baseline BINARY] [--queues N] [--sockets N] [--broker-open-files N]
#
# Benchmarks measure; they assert nothing. Prints markdown tables.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BASELINE=
QUEUES=100000
SOCKETS=20000
BROKER_OPEN_FILES=8192
while [ $# -gt 0 ]; do
	case $1 in
	--baseline) BASELINE=$2; shift 2 ;;
	--queues) QUEUES=$2; shift 2 ;;
	--sockets) SOCKETS=$2; shift 2 ;;
	--broker-open-files) BROKER_OPEN_FILES=$2; shift 2 ;;
	*) echo "usage: $0 [--baseline BINARY] [--queues N] [--sockets N] [--broker-open-files N]" >&2; exit 2 ;;
	esac
done
cd "$ROOT"
cargo build --release --quiet --bin warren -p warren-server
cargo build --release --quiet -p warren-tests --bin warren-siege
SIEGE=$ROOT/target/release/warren-siege
# The attackers need more descriptors than a default shell allows.
ulimit -n "$(ulimit -Hn)"
WORK=$(mktemp -d /tmp/warren-siege.XXXXXX)
PID=
trap '[ -n "$PID" ] && kill $PID 2>/dev/null; rm -rf "$WORK"' EXIT

# Starts broker binary $1 as run $2 under an open-files limit of $3; sets PID, AMQP and HTTP.
start() {
	(ulimit -n "$3" && exec "$1" --amqp-listen 127.0.0.1:0 --http-listen 127.0.0.1:0 --data-dir "$WORK/$2") \
		>"$WORK/$2.log" 2>&1 &
	PID=$!
	AMQP= HTTP=
	for _ in $(seq 600); do
		HTTP=$(grep -o 'http_addr=[0-9.:]*' "$WORK/$2.log" | head -1 | cut -d= -f2 || true)
		AMQP=$(grep -o 'amqp_addr=[0-9.:]*' "$WORK/$2.log" | head -1 | cut -d= -f2 || true)
		[ -n "$AMQP" ] && [ -n "$HTTP" ] && return 0
		sleep 0.1
	done
	echo "broker $1 did not start; its log:" >&2
	cat "$WORK/$2.log" >&2
	exit 1
}

stop() {
	kill "$PID" 2>/dev/null || true
	wait "$PID" 2>/dev/null || true
	PID=
}

run() {
	local binary=$1 name=$2
	echo "## $name ($binary)"
	echo
	start "$binary" "$name-idle" "$BROKER_OPEN_FILES"
	"$SIEGE" idle --amqp "$AMQP" --http "$HTTP" --sockets "$SOCKETS"
	stop
	echo
	start "$binary" "$name-silent" "$(ulimit -Hn)"
	"$SIEGE" silent --amqp "$AMQP" --http "$HTTP" --pid "$PID" --queues "$QUEUES"
	stop
	echo
}

run "$ROOT/target/release/warren" "this checkout"
[ -n "$BASELINE" ] && run "$BASELINE" "baseline"
echo "## A real peer joining while 200 silent sockets hammer the cluster port"
echo
cargo test --release --quiet -p warren-server --test cluster_handshake_flood -- --nocapture 2>&1 | grep -E "peer admitted" || true
