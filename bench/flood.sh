#!/usr/bin/env bash
# A flood of transient messages with no consumer, on the default settings: what it costs in
# memory and on disk, and what a purge gives back (issue 15's flow-control figures).
#
#   bench/flood.sh [--seconds N] [--producers N] [--size BYTES]     (defaults 60, 4, 1024)
#
# Builds Warren and warren-perf in release mode; runs Warren on a fresh data directory with no
# flags but its ports; samples its RSS (VmRSS) every second while warren-perf floods one queue
# (publisher confirms on, 1000 outstanding per producer); then purges it with warren ctl. Prints one markdown table row.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SECONDS_TO_FLOOD=60
PRODUCERS=4
SIZE=1024
while [ $# -gt 0 ]; do
	case $1 in
	--seconds) SECONDS_TO_FLOOD=$2; shift 2 ;;
	--producers) PRODUCERS=$2; shift 2 ;;
	--size) SIZE=$2; shift 2 ;;
	*) echo "usage: $0 [--seconds N] [--producers N] [--size BYTES]" >&2; exit 2 ;;
	esac
done
cd "$ROOT"
cargo build --release --quiet --bin warren -p warren-server
cargo build --release --quiet -p warren-tests --bin warren-perf
WARREN=$ROOT/target/release/warren
PERF=$ROOT/target/release/warren-perf
DATA=$(mktemp -d /tmp/warren-flood.XXXXXX)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=$(free_port)
HTTP=$(free_port)
PID=
trap '[ -n "$PID" ] && kill $PID 2>/dev/null; rm -rf "$DATA"' EXIT
"$WARREN" --amqp-listen "127.0.0.1:$PORT" --http-listen "127.0.0.1:$HTTP" --data-dir "$DATA/data" >"$DATA/warren.log" 2>&1 &
PID=$!
for _ in $(seq 600); do
	grep -q "accepting AMQP" "$DATA/warren.log" 2>/dev/null && break
	sleep 0.1
done
rss_mb() { awk '/VmRSS/ { printf "%d", $2 / 1024 }' "/proc/$PID/status"; }
"$PERF" --uri "amqp://guest:guest@127.0.0.1:$PORT/%2f" -x "$PRODUCERS" -y 0 -u 1 -s "$SIZE" \
	-z "$SECONDS_TO_FLOOD" --confirm 1000 --keep-queues --interval 0 --json >"$DATA/perf.json" 2>"$DATA/perf.log" &
PERF_PID=$!
peak=0
while kill -0 "$PERF_PID" 2>/dev/null; do
	rss=$(rss_mb)
	[ "$rss" -gt "$peak" ] && peak=$rss
	sleep 1
done
wait "$PERF_PID" || true
CTL=("$WARREN" ctl --url "http://127.0.0.1:$HTTP")
messages=$("${CTL[@]}" list_queues name messages | awk '$1 == "warren-perf-0" { print $2 }')
field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$DATA/perf.json" "$1"; }
published=$(field published)
confirmed=$(field confirmed)
nacked=$(field nacked)
paged_mb=$(du -sm "$DATA/data" | cut -f1)
blocked=$(grep -c "resource alarm set" "$DATA/warren.log" || true)
"${CTL[@]}" purge_queue warren-perf-0 >/dev/null
sleep 5
after_purge=$(rss_mb)
left_mb=$(du -sm "$DATA/data" | cut -f1)
echo "| producers | seconds | size | published | confirmed | nacked | messages held | peak RSS | data dir | alarms | RSS after purge | data dir after |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
echo "| $PRODUCERS | $SECONDS_TO_FLOOD | $SIZE B | $published | $confirmed | $nacked | $messages | $peak MB | $paged_mb MB | $blocked | $after_purge MB | $left_mb MB |"
