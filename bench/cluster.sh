#!/usr/bin/env bash
# Quorum queues (or, with --queue-type stream, replicated streams) on three nodes, Warren
# against RabbitMQ, on this machine.
#
# Starts a three-node Warren cluster and a three-node RabbitMQ cluster (private nodes with
# their own ports, Erlang cookie and epmd, joined with join_cluster), one cluster running at a
# time, and runs warren-perf's quorum scenario (100 B, confirm window 1000, prefetch 1000,
# publisher and consumer connected to the second node) against each in alternating rounds.
# Reports the rates and the brokers' CPU per message (user+system time of the three broker
# processes over the run, divided by the messages consumed), medians and the spread of the
# rounds. Then measures Warren's failover: kill -9 of the queue's leader under a publisher
# with confirms, to the first confirm after it.
#
# With --queue-type stream: a stream replicated on the three nodes, published with confirms for
# the duration with no consumer (100 B, confirm window 1000), then read back from its first
# offset by a consumer on the same node (prefetch 1000): the publish rate and the read-back
# rate, both over AMQP 0-9-1 (RabbitMQ's stream protocol is not used).
#
# With --queue-type super-stream (Warren only: RabbitMQ 3.10 has no super streams): a super
# stream of 6 partitions on the three nodes, a consumer group of 3 members (one per node)
# reading it, 300,000 keyed 100 B messages published with confirms, and one member killed
# half-way (warren-group-bench): publish and group consume rates, messages processed twice,
# and the rebalance time (the member's death to its partitions' first delivery to another).
#
# Run as root from a checkout:
#   bench/cluster.sh [--rounds N] [--duration SECS] [--queue-type quorum|stream|super-stream] [--no-build]
# On 2 cores the client and the three brokers compete: read the spread, not one figure.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
ROUNDS=3
DURATION=10
BUILD=1
QUEUE_TYPE=quorum
START_TIMEOUT=120
NODES=(a b c)

while [ $# -gt 0 ]; do
	case $1 in
	--rounds) ROUNDS=$2 && shift ;;
	--duration) DURATION=$2 && shift ;;
	--queue-type) QUEUE_TYPE=$2 && shift ;;
	--no-build) BUILD=0 ;;
	-h | --help)
		sed -n '2,30p' "$0"
		exit 0
		;;
	*) echo "unknown option $1" >&2 && exit 2 ;;
	esac
	shift
done

log() { echo "cluster.sh: $*" >&2; }
die() {
	log "error: $*"
	exit 2
}

WORK=$(mktemp -d /tmp/warren-cluster-bench.XXXXXX)
OUT=$WORK
mkdir -p "$WORK/logs" "$WORK/bin"

if [ "$BUILD" = 1 ]; then
	log "building warren and warren-perf (release)"
	(cd "$ROOT" && cargo build --release -p warren-server -p warren-tests --bin warren --bin warren-perf --bin warren-group-bench)
fi
cp "$TARGET_DIR/release/warren" "$TARGET_DIR/release/warren-perf" "$TARGET_DIR/release/warren-group-bench" "$WORK/bin/"
if ! [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; then
	log "installing rabbitmq-server from the Debian packages"
	apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y rabbitmq-server
fi

TAKEN=" "
pick_port() {
	local port
	for _ in $(seq 1 200); do
		port=$((20000 + RANDOM % 12000))
		case $TAKEN in *" $port "*) continue ;; esac
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			TAKEN="$TAKEN$port "
			echo "$port"
			return
		fi
	done
	die "no free port"
}

wait_for_port() {
	for _ in $(seq 1 $((START_TIMEOUT * 10))); do
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return
		sleep 0.1
	done
	die "$2 did not listen on port $1"
}

# CPU ticks (user+system) of the given pids, summed.
cpu_ticks() {
	local total=0 pid
	for pid in "$@"; do
		total=$((total + $(awk '{print $14+$15}' "/proc/$pid/stat")))
	done
	echo "$total"
}

# ---- Warren ------------------------------------------------------------------------------

declare -A W_AMQP W_CLUSTER
for n in "${NODES[@]}"; do
	W_AMQP[$n]=$(pick_port)
	W_CLUSTER[$n]=$(pick_port)
done
head -c 32 /dev/urandom | base64 >"$WORK/secret"
chmod 600 "$WORK/secret"
W_PIDS=()
start_warren() {
	local peers="" n
	for n in "${NODES[@]}"; do peers="$peers${peers:+,}warren@$n@127.0.0.1:${W_CLUSTER[$n]}"; done
	W_PIDS=()
	for n in "${NODES[@]}"; do
		rm -rf "$WORK/warren-$n"
		"$WORK/bin/warren" --node-name "warren@$n" --amqp-listen "127.0.0.1:${W_AMQP[$n]}" --data-dir "$WORK/warren-$n" \
			--cluster-listen "127.0.0.1:${W_CLUSTER[$n]}" --peers "$peers" --cluster-secret-file "$WORK/secret" \
			>>"$WORK/logs/warren-$n.log" 2>&1 &
		W_PIDS+=($!)
	done
	for n in "${NODES[@]}"; do wait_for_port "${W_AMQP[$n]}" "warren@$n"; done
}
stop_warren() {
	local pid
	for pid in "${W_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for pid in "${W_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
	W_PIDS=()
}

# ---- RabbitMQ: three private nodes run as the rabbitmq user (bench/rabbitmq-cluster.sh) ---

declare -A R_AMQP
RABBIT_DIR="$WORK/rabbitmq"
chmod 755 "$WORK"
R_PIDS=()
start_rabbitmq() {
	local n
	"$ROOT/bench/rabbitmq-cluster.sh" start "$RABBIT_DIR" >/dev/null 2>>"$WORK/logs/rabbitmq.log" ||
		die "the RabbitMQ cluster did not start (see $WORK/logs/rabbitmq.log and $RABBIT_DIR/*/log)"
	R_PIDS=()
	for n in "${NODES[@]}"; do
		R_AMQP[$n]=$(cat "$RABBIT_DIR/$n/amqp-port")
		R_PIDS+=("$(cat "$RABBIT_DIR/$n/rabbitmq.pid")")
		wait_for_port "${R_AMQP[$n]}" "RabbitMQ node $n"
	done
}
stop_rabbitmq() {
	local pid
	"$ROOT/bench/rabbitmq-cluster.sh" stop "$RABBIT_DIR" 2>/dev/null || true
	for pid in "${R_PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
	R_PIDS=()
}
trap 'stop_warren; stop_rabbitmq' EXIT

# ---- rounds ------------------------------------------------------------------------------

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : int((a[NR/2]+a[NR/2+1])/2))}'; }
spread() { sort -n | awk 'NR==1 {min=$1} {max=$1} END {print min "-" max}'; }

if [ "$QUEUE_TYPE" = super-stream ]; then
	: >"$WORK/group.txt"
	for round in $(seq 1 "$ROUNDS"); do
		start_warren
		uris="amqp://guest:guest@127.0.0.1:${W_AMQP[a]}/%2f,amqp://guest:guest@127.0.0.1:${W_AMQP[b]}/%2f"
		uris="$uris,amqp://guest:guest@127.0.0.1:${W_AMQP[c]}/%2f"
		"$WORK/bin/warren-group-bench" --uri "$uris" 2>>"$WORK/logs/group-$round.log" | tee -a "$WORK/group.txt" >&2 ||
			log "warren-group-bench failed (see $WORK/logs)"
		stop_warren
	done
	field() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p" "$WORK/group.txt"; }
	echo
	echo "### Super stream of 6 partitions, a group of 3 members, one killed half-way ($ROUNDS rounds)"
	echo
	echo "| metric | median | spread |"
	echo "|---|---:|---:|"
	for f in publish_rate consume_rate rebalance_ms processed_twice; do
		echo "| $f | $(field $f | median) | $(field $f | spread) |"
	done
	exit 0
fi

case $QUEUE_TYPE in
quorum) ARGS="--queue-type quorum --size 100 --persistent --confirm 1000 --prefetch 1000 --duration $DURATION" ;;
stream) ARGS="--queue-type stream --stream-offset first --backlog --size 100 --persistent --confirm 1000 --prefetch 1000 --duration $DURATION" ;;
*) die "--queue-type is quorum or stream, not $QUEUE_TYPE" ;;
esac
RESULTS="$WORK/results.txt"
: >"$RESULTS"
run_round() {
	local broker=$1 round=$2 port before after summary pids
	if [ "$broker" = warren ]; then
		start_warren
		port=${W_AMQP[b]}
		pids=("${W_PIDS[@]}")
	else
		start_rabbitmq
		port=${R_AMQP[b]}
		pids=("${R_PIDS[@]}")
	fi
	before=$(cpu_ticks "${pids[@]}")
	# shellcheck disable=SC2086
	summary=$("$WORK/bin/warren-perf" --uri "amqp://guest:guest@127.0.0.1:$port/%2f" $ARGS --queue-prefix "q$round" \
		--json 2>>"$WORK/logs/perf-$broker-$round.log") || log "warren-perf failed on $broker (see logs)"
	after=$(cpu_ticks "${pids[@]}")
	if [ "$broker" = warren ]; then stop_warren; else stop_rabbitmq; fi
	local rate consumed read
	rate=$(echo "$summary" | sed -n 's/.*"publish_rate":\([0-9.]*\).*/\1/p')
	consumed=$(echo "$summary" | sed -n 's/.*"consumed":\([0-9]*\).*/\1/p')
	read=$(echo "$summary" | sed -n 's/.*"consume_rate":\([0-9.]*\).*/\1/p')
	local cpu_us=$(((after - before) * 10000))
	local per_message=$((consumed > 0 ? cpu_us / consumed : 0))
	read=${read:-0}
	echo "$broker $round ${rate%.*} $consumed $per_message ${read%.*}" | tee -a "$RESULTS" >&2
}
for round in $(seq 1 "$ROUNDS"); do
	run_round warren "$round"
	run_round rabbitmq "$round"
done

report() {
	local broker=$1 column=$2
	awk -v b="$broker" -v c="$column" '$1 == b {print $c}' "$RESULTS"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", (b > 0 ? a / b : 0)}'; }
if [ "$QUEUE_TYPE" = stream ]; then
	echo
	echo "### Replicated stream on three nodes (100 B, confirm window 1000, then read back with prefetch 1000, ${DURATION}s x $ROUNDS rounds)"
	echo
	echo "| metric | warren (median, spread) | rabbitmq (median, spread) | warren/rabbitmq |"
	echo "|---|---:|---:|---:|"
	wr=$(report warren 3 | median)
	rr=$(report rabbitmq 3 | median)
	wb=$(report warren 6 | median)
	rb=$(report rabbitmq 6 | median)
	echo "| publish with confirms (msg/s) | $wr ($(report warren 3 | spread)) | $rr ($(report rabbitmq 3 | spread)) | $(ratio "$wr" "$rr") |"
	echo "| read-back from the first offset (msg/s) | $wb ($(report warren 6 | spread)) | $rb ($(report rabbitmq 6 | spread)) | $(ratio "$wb" "$rb") |"
	echo "| messages read back per round (median) | $(report warren 4 | median) | $(report rabbitmq 4 | median) | |"
	exit 0
fi
echo
echo "### Quorum queue on three nodes (100 B, confirm window 1000, prefetch 1000, ${DURATION}s x $ROUNDS rounds)"
echo
echo "| metric | warren (median, spread) | rabbitmq (median, spread) | warren/rabbitmq |"
echo "|---|---:|---:|---:|"
wr=$(report warren 3 | median)
rr=$(report rabbitmq 3 | median)
wc=$(report warren 5 | median)
rc=$(report rabbitmq 5 | median)
echo "| publish = consume rate (msg/s) | $wr ($(report warren 3 | spread)) | $rr ($(report rabbitmq 3 | spread)) | $(ratio "$wr" "$rr") |"
echo "| broker CPU per message, 3 nodes (µs) | $wc ($(report warren 5 | spread)) | $rc ($(report rabbitmq 5 | spread)) | $(ratio "$wc" "$rc") |"

# ---- Warren failover --------------------------------------------------------------------

log "failover: kill -9 of the quorum queue's leader under a publisher with confirms"
start_warren
"$ROOT/tests/python/.venv/bin/python" - "${W_AMQP[a]}" "${W_AMQP[b]}" "${W_PIDS[0]}" <<'EOF' || log "failover measurement failed"
import os, signal, sys, threading, time
import pika
port_a, port_b, leader_pid = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
declare = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port_a))
declare.channel().queue_declare("failover", durable=True, arguments={"x-queue-type": "quorum"})
declare.close()
conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port_b))
ch = conn.channel()
ch.confirm_delivery()
killed_at = None
last_before = None
first_after = None
start = time.monotonic()
while time.monotonic() - start < 30:
    if killed_at is None and time.monotonic() - start > 2:
        os.kill(leader_pid, signal.SIGKILL)
        killed_at = time.monotonic()
    try:
        ch.basic_publish("", "failover", b"x")
        now = time.monotonic()
        if killed_at is None:
            last_before = now
        else:
            first_after = now
            break
    except pika.exceptions.NackError:
        pass
print(f"failover: last confirm {1000 * (killed_at - last_before):.0f} ms before the kill, "
      f"first confirm {1000 * (first_after - killed_at):.0f} ms after it" if first_after else "failover: no confirm within 30 s")
EOF
