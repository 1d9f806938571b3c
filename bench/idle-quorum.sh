#!/usr/bin/env bash
# What idle quorum queues cost: starts Warren on one node or three (release build, private
# ports and data directories), declares N quorum queues through the first node with pika,
# lets them settle, then reports each node's RSS per queue (VmRSS after minus before, over N)
# (and how much of it is anonymous memory rather than mapped files) and its CPU while idle (user+system time from /proc over the measuring window).
#
# usage: bench/idle-quorum.sh [--nodes 1|3] [--queues N (1000)] [--settle SECS (15)]
#                             [--window SECS (20)] [--balanced] [--failover] [--no-build]
# --balanced declares with x-queue-leader-locator: balanced (leaders spread over the nodes);
# without it every leader is on the first node (client-local), the costliest node to be.
# --failover (three nodes): then kills the first node (kill -9) and reports how long until
# the second node's management API shows a leader on a surviving node for every queue.
# Needs python3 with pika (pip install pika).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
NODES=3
QUEUES=1000
SETTLE=15
WINDOW=20
BUILD=1
LOCATOR=client-local
FAILOVER=0
while [ $# -gt 0 ]; do
	case $1 in
	--nodes) NODES=$2 && shift ;;
	--queues) QUEUES=$2 && shift ;;
	--settle) SETTLE=$2 && shift ;;
	--window) WINDOW=$2 && shift ;;
	--balanced) LOCATOR=balanced ;;
	--failover) FAILOVER=1 ;;
	--no-build) BUILD=0 ;;
	-h | --help) sed -n '2,13p' "$0" && exit 0 ;;
	*) echo "unknown option $1" >&2 && exit 2 ;;
	esac
	shift
done
python3 -c 'import pika' 2>/dev/null || { echo "idle-quorum.sh: needs pika (pip install pika)" >&2; exit 2; }
if [ "$BUILD" = 1 ]; then (cd "$ROOT" && cargo build --release -p warren-server --bin warren); fi

WORK=$(mktemp -d /tmp/warren-idle-quorum.XXXXXX)
PIDS=()
cleanup() { for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

head -c 32 /dev/urandom | base64 >"$WORK/secret"
NAMES=() AMQP=() CLUSTER=() HTTP=()
for i in $(seq 1 "$NODES"); do
	NAMES+=("warren@n$i") AMQP+=("$(free_port)") CLUSTER+=("$(free_port)") HTTP+=("$(free_port)")
done
PEERS=$(for i in "${!NAMES[@]}"; do printf '%s@127.0.0.1:%s,' "${NAMES[$i]}" "${CLUSTER[$i]}"; done)
for i in "${!NAMES[@]}"; do
	http=none
	[ "$FAILOVER" = 1 ] && [ "$i" = 1 ] && http="127.0.0.1:${HTTP[$i]}"
	args=(--node-name "${NAMES[$i]}" --amqp-listen "127.0.0.1:${AMQP[$i]}" --http-listen "$http" --data-dir "$WORK/${NAMES[$i]}")
	if [ "$NODES" -gt 1 ]; then
		args+=(--cluster-listen "127.0.0.1:${CLUSTER[$i]}" --peers "${PEERS%,}" --cluster-secret-file "$WORK/secret")
	fi
	"$TARGET_DIR/release/warren" "${args[@]}" >"$WORK/${NAMES[$i]}.log" 2>&1 &
	PIDS+=($!)
done

python3 - "$QUEUES" "$SETTLE" "$WINDOW" "$LOCATOR" "${AMQP[0]}" "$FAILOVER" "${HTTP[1]:-0}" "${PIDS[@]}" <<'EOF'
import base64, json, os, signal, sys, time, urllib.request, pika
queues, settle, window, locator, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
failover, http_port = sys.argv[6] == "1", int(sys.argv[7])
pids = [int(p) for p in sys.argv[8:]]
arguments = {"x-queue-type": "quorum", "x-queue-leader-locator": locator}
def rss_kb(pid):
    fields = dict(line.split(":", 1) for line in open(f"/proc/{pid}/smaps_rollup") if ":" in line)
    return int(fields["Rss"].split()[0]), int(fields["Anonymous"].split()[0])
def cpu_s(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
deadline = time.time() + 60
while True:
    try:
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
        ch = conn.channel()
        ch.queue_declare("idle-probe", durable=True, arguments={"x-queue-type": "quorum"})
        ch.queue_delete("idle-probe")
        break
    except Exception:
        if time.time() > deadline:
            raise
        time.sleep(0.5)
time.sleep(2)
before = [rss_kb(p) for p in pids]
started = time.time()
for i in range(queues):
    ch.queue_declare(f"idle-{i}", durable=True, arguments=arguments)
conn.close()
print(f"declared {queues} quorum queues ({locator}) in {time.time() - started:.1f} s; settling {settle} s")
time.sleep(settle)
cpu_before = [cpu_s(p) for p in pids]
time.sleep(window)
cpu_after = [cpu_s(p) for p in pids]
after = [rss_kb(p) for p in pids]
print("| node | RSS before (MB) | RSS after (MB) | RSS per queue (KB) | of which anonymous (KB) | idle CPU (% of a core) |")
print("|---|---:|---:|---:|---:|---:|")
for n, pid in enumerate(pids):
    per_queue = (after[n][0] - before[n][0]) / queues
    anonymous = (after[n][1] - before[n][1]) / queues
    cpu = (cpu_after[n] - cpu_before[n]) / window * 100
    print(f"| {n + 1} | {before[n][0] / 1024:.0f} | {after[n][0] / 1024:.0f} | {per_queue:.0f} | {anonymous:.0f} | {cpu:.1f} |")
if failover:
    def leaders():
        request = urllib.request.Request(f"http://127.0.0.1:{http_port}/api/queues/%2F")
        request.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
        with urllib.request.urlopen(request, timeout=5) as answer:
            return {q["name"]: q.get("leader") for q in json.load(answer) if q["name"].startswith("idle-")}
    on_first = sum(1 for leader in leaders().values() if leader == "warren@n1")
    os.kill(pids[0], signal.SIGKILL)
    killed = time.time()
    marks = {}
    while True:
        try:
            shown = leaders()
        except Exception:
            shown = {}
        waiting = [name for name, leader in shown.items() if leader in (None, "warren@n1")]
        led = len(shown) - len(waiting)
        for share in (0.01, 0.5, 0.9):
            if led >= share * queues and share not in marks:
                marks[share] = time.time() - killed
        if len(shown) == queues and not waiting:
            break
        if time.time() - killed > 60:
            print(f"after 60 s, {len(waiting)} queues still have no leader on a surviving node")
            sys.exit(1)
        time.sleep(0.05)
    print(f"kill -9 of warren@n1 (leader of {on_first} of {queues} queues): every queue had a leader "
          f"on a surviving node {time.time() - killed:.2f} s later (the first after {marks.get(0.01, 0):.2f} s, "
          f"half after {marks.get(0.5, 0):.2f} s, 90% after {marks.get(0.9, 0):.2f} s)")
EOF
