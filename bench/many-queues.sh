#!/usr/bin/env bash
# Many durable queues under a small open-files limit: each queue's two logs open their segment
# files on use through the storage layer's cache (half the limit), so the queues need not fit
# in the descriptors (issue 15's "10,000 durable queues fit in the default hard limit").
#
#   bench/many-queues.sh [--queues N] [--limit FILES]        (defaults 10000, 1024)
#
# Builds Warren in release mode and runs it with soft = hard open-files limit FILES on a fresh
# data directory; declares N durable queues and publishes one persistent message to each
# (pika, confirms on); restarts Warren under the same limit and gets every message back.
# Prints the times, the descriptors and memory maps held, and the data directory's size.
# Needs pika: tests/python/.venv (made by tests/cross_client.sh) or a python3 that has it.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
QUEUES=10000
LIMIT=1024
while [ $# -gt 0 ]; do
	case $1 in
	--queues) QUEUES=$2; shift 2 ;;
	--limit) LIMIT=$2; shift 2 ;;
	*) echo "usage: $0 [--queues N] [--limit FILES]" >&2; exit 2 ;;
	esac
done
cd "$ROOT"
PYTHON=python3
[ -x tests/python/.venv/bin/python ] && PYTHON=tests/python/.venv/bin/python
cargo build --release --quiet --bin warren -p warren-server
DATA=$(mktemp -d /tmp/warren-many-queues.XXXXXX)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=$(free_port)
HTTP=$(free_port)
PID=
trap '[ -n "$PID" ] && kill $PID 2>/dev/null; rm -rf "$DATA"' EXIT
start() {
	: >"$DATA/warren.log"
	(ulimit -S -n "$LIMIT" && ulimit -H -n "$LIMIT" &&
		exec target/release/warren --amqp-listen "127.0.0.1:$PORT" --http-listen "127.0.0.1:$HTTP" \
			--data-dir "$DATA/data") >>"$DATA/warren.log" 2>&1 &
	PID=$!
	for _ in $(seq 1200); do
		grep -q "accepting AMQP" "$DATA/warren.log" && return
		sleep 0.1
	done
	echo "warren did not start" >&2
	exit 1
}
held() { echo "$(ls "/proc/$PID/fd" | wc -l) descriptors, $(wc -l <"/proc/$PID/maps") memory maps"; }
client() {
	"$PYTHON" - "$PORT" "$QUEUES" "$1" <<'PY'
import sys, time, pika
port, queues, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
channel = connection.channel()
started = time.monotonic()
wrong = 0
if mode == "publish":
    channel.confirm_delivery()
    for i in range(queues):
        channel.queue_declare(f"many-{i}", durable=True)
        channel.basic_publish("", f"many-{i}", f"m{i}".encode(), pika.BasicProperties(delivery_mode=2))
else:
    for i in range(queues):
        _, _, body = channel.basic_get(f"many-{i}", auto_ack=True)
        wrong += body != f"m{i}".encode()
print(f"{mode}: {queues} queues in {time.monotonic() - started:.1f} s, {wrong} wrong or missing")
connection.close()
sys.exit(1 if wrong else 0)
PY
}
start
echo "limit $LIMIT: $(grep -o 'segment_files=[0-9]*' "$DATA/warren.log")"
client publish
echo "after publishing: $(held)"
kill -TERM "$PID"
wait "$PID" || true
start
client get
echo "after the restart and gets: $(held); data directory $(du -sh "$DATA/data" | cut -f1)"
