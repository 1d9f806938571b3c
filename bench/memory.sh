#!/usr/bin/env bash
# How much memory a backlog holds, and whether the broker gives it back: resident memory
# (VmRSS) of a release Warren with a durable backlog before a restart, after it, and after a
# purge; and with a transient backlog before and after a purge.
#
#   bench/memory.sh [--durable-count N] [--transient-count N]     (defaults 10M and 4.2M)
#
# Builds Warren and warren-perf in release mode; needs Python 3 for the purge (pika, in a venv
# under tests/python/.venv as scripts/test.sh makes it). Prints one markdown table.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DURABLE_COUNT=10000000
TRANSIENT_COUNT=4200000
# Seconds for the broker to settle before each reading.
SETTLE_SECS=${SETTLE_SECS:-5}
while [ $# -gt 0 ]; do
	case $1 in
	--durable-count) DURABLE_COUNT=$2; shift 2 ;;
	--transient-count) TRANSIENT_COUNT=$2; shift 2 ;;
	*) echo "usage: $0 [--durable-count N] [--transient-count N]" >&2; exit 2 ;;
	esac
done
cd "$ROOT"
cargo build --release --quiet --bin warren -p warren-server
cargo build --release --quiet -p warren-tests --bin warren-perf
WARREN=$ROOT/target/release/warren
PERF=$ROOT/target/release/warren-perf
VENV=$ROOT/tests/python/.venv
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check pika
DATA=$(mktemp -d /tmp/warren-memory.XXXXXX)
PORT=$("$VENV/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
URI="amqp://guest:guest@127.0.0.1:$PORT/%2f"
PID=
trap '[ -n "$PID" ] && kill $PID 2>/dev/null; rm -rf "$DATA"' EXIT

start() {
	"$WARREN" --amqp-listen "127.0.0.1:$PORT" --data-dir "$DATA/$1" >"$DATA/$1.log" 2>&1 &
	PID=$!
	for _ in $(seq 600); do
		grep -q "accepting AMQP" "$DATA/$1.log" 2>/dev/null && return
		sleep 0.1
	done
	echo "warren did not start" >&2; exit 1
}
stop() { kill -TERM "$PID"; wait "$PID" || true; PID=; }
rss_mb() { sleep "$SETTLE_SECS"; awk '/VmRSS/ { printf "%d", $2 / 1024 }' "/proc/$PID/status"; }
purge() {
	"$VENV/bin/python" - "$PORT" "$1" <<'PY'
import sys, pika
conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", int(sys.argv[1])))
print(conn.channel().queue_purge(sys.argv[2]).method.message_count, file=sys.stderr)
conn.close()
PY
}
publish() {
	"$PERF" --uri "$URI" -x 1 -y 0 -u 1 -s "$2" -C "$1" --confirm 1000 --keep-queues --interval 0 "${@:3}" >/dev/null
}

start durable
publish "$DURABLE_COUNT" 100 --persistent --durable
before=$(rss_mb)
stop
start durable
after_restart=$(rss_mb)
purge warren-perf-0
after_purge=$(rss_mb)
stop

start transient
publish "$TRANSIENT_COUNT" 1024
transient=$(rss_mb)
purge warren-perf-0
transient_purged=$(rss_mb)
stop

cat <<EOF
| backlog | RSS with it | after restart | after purge |
| --- | --- | --- | --- |
| $DURABLE_COUNT x 100 B persistent, durable queue | $before MB | $after_restart MB | $after_purge MB |
| $TRANSIENT_COUNT x 1 KiB transient | $transient MB | | $transient_purged MB |
EOF
