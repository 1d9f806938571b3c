#!/usr/bin/env bash
# How fast the management API answers with many queues: a release Warren with --queues
# queues (default 10,000; some with a backlog, so that depths differ), then each request timed
# --requests times over one keep-alive connection, as the UI and tools ask: a page of 100
# sorted by depth (the figure issue 14 names: under 200 ms), by name, filtered by a regex,
# and both Prometheus endpoints. Prints min / median / p95 / max in ms. A benchmark: it
# asserts nothing.
#
# bench/queue-listing.sh [--queues N] [--requests N] [--no-build]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
QUEUES=10000
REQUESTS=50
BUILD=1
while [ $# -gt 0 ]; do
	case $1 in
	--queues) QUEUES=$2 && shift ;;
	--requests) REQUESTS=$2 && shift ;;
	--no-build) BUILD=0 ;;
	*) echo "usage: bench/queue-listing.sh [--queues N] [--requests N] [--no-build]" >&2 && exit 2 ;;
	esac
	shift
done
[ "$BUILD" = 0 ] || (cd "$ROOT" && cargo build --release --bin warren)
work=$(mktemp -d /tmp/warren-listing.XXXXXX)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
amqp=$(free_port)
http=$(free_port)
RUST_LOG=warn "${CARGO_TARGET_DIR:-$ROOT/target}/release/warren" --amqp-listen "127.0.0.1:$amqp" \
	--http-listen "127.0.0.1:$http" --data-dir "$work/data" >"$work/warren.log" 2>&1 &
broker=$!
trap 'kill $broker 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$http") 2>/dev/null && break; sleep 0.1; done

python3 - "$http" "$QUEUES" "$REQUESTS" <<'EOF'
import base64, http.client, json, statistics, sys, time

port, queues, requests = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
auth = {"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode(), "Content-Type": "application/json"}
api = http.client.HTTPConnection("127.0.0.1", port)

def call(method, path, body=None):
    api.request(method, path, body=json.dumps(body) if body is not None else None, headers=auth)
    response = api.getresponse()
    data = response.read()
    if response.status >= 300:
        raise SystemExit(f"{method} {path}: {response.status} {data[:200]!r}")
    return data

started = time.monotonic()
for i in range(queues):
    call("PUT", f"/api/queues/%2F/q{i:05d}", {"durable": False})
# A backlog in every tenth queue, of 1 to 9 messages, so that sorting by depth has work.
published = 0
for i in range(0, queues, 10):
    for _ in range(1 + (i // 10) % 9):
        call("POST", "/api/exchanges/%2F/amq.default/publish",
             {"routing_key": f"q{i:05d}", "payload": "x", "payload_encoding": "string", "properties": {}})
        published += 1
print(f"{queues} queues declared and {published} messages published through the API "
      f"in {time.monotonic() - started:.1f} s")

cases = [
    ("page of 100 sorted by depth", "/api/queues?page=1&page_size=100&sort=messages&sort_reverse=true"),
    ("page of 100 sorted by name", "/api/queues?page=1&page_size=100&sort=name"),
    ("page 50 of 100, vhost /", "/api/queues/%2F?page=50&page_size=100"),
    ("regex filter, sorted by depth", "/api/queues?page=1&page_size=100&name=q0.*5&use_regex=true&sort=messages"),
    ("page of 100, columns name,messages", "/api/queues?page=1&page_size=100&sort=messages&columns=name,messages"),
    ("/metrics", "/metrics"),
    ("/metrics/per-object", "/metrics/per-object"),
]
print(f"\n| request ({queues} queues, {requests} times) | bytes | min ms | median ms | p95 ms | max ms |")
print("|---|---:|---:|---:|---:|---:|")
for name, path in cases:
    times, size = [], 0
    for _ in range(requests):
        t = time.perf_counter()
        size = len(call("GET", path))
        times.append((time.perf_counter() - t) * 1000)
    times.sort()
    p95 = times[min(len(times) - 1, int(len(times) * 0.95))]
    print(f"| {name} | {size} | {times[0]:.1f} | {statistics.median(times):.1f} | {p95:.1f} | {times[-1]:.1f} |")
EOF
echo "(broker RSS at the end: $(awk '/VmRSS/ {print $2, $3}' /proc/$broker/status))"
