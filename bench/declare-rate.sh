#!/usr/bin/env bash
# Durable declares as the number of definitions grows (issue 29): one pika client declares N
# durable queues and binds each, one at a time, synchronously; the time of every block of
# 1,000 shows whether a declare's cost grows with what is already declared.
#
#   bench/declare-rate.sh [--queues N] [--binary PATH] [--cluster] [--rabbitmq]
#   bench/declare-rate.sh --churn CHANGES [--clients K] [--binary PATH] [--cluster]
#   (and --node-args "ARGS": more arguments for every node, e.g. --pretend-previous-release
#   to run as a cluster whose catalog_snapshots flag is off)
#
# Starts a release Warren (or PATH) on a fresh data directory and free ports (with
# --cluster, three nodes on one machine, declared through the first); with
# --rabbitmq, runs the same client against the RabbitMQ on 127.0.0.1:5672 afterwards
# (apt-get install rabbitmq-server; started here if it is not running), with a fresh vhost;
# with --cluster too, against three private RabbitMQ nodes clustered on this machine
# (bench/rabbitmq-cluster.sh), declared through the first.
# Prints the blocks, the totals and Warren's data directory size, then restarts Warren
# and prints how long until the last queue could be declared passively again.
# With --churn: CHANGES definition changes (durable declare/delete from K clients at once),
# then the size of each node's metadata log and definitions, and the time to restart.
# Needs pika: tests/python/.venv (made by tests/cross_client.sh) or a python3 that has it.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
QUEUES=10000
BINARY=
RABBITMQ=
CLUSTER=
CHURN=
CLIENTS=4
NODE_ARGS=
while [ $# -gt 0 ]; do
	case $1 in
	--queues) QUEUES=$2; shift 2 ;;
	--churn) CHURN=$2; shift 2 ;;
	--clients) CLIENTS=$2; shift 2 ;;
	--node-args) NODE_ARGS=$2; shift 2 ;;
	--binary) BINARY=$2; shift 2 ;;
	--rabbitmq) RABBITMQ=1; shift ;;
	--cluster) CLUSTER=1; shift ;;
	*) echo "usage: $0 [--queues N | --churn CHANGES [--clients K]] [--binary PATH] [--cluster] [--rabbitmq]" >&2; exit 2 ;;
	esac
done
cd "$ROOT"
PYTHON=python3
[ -x tests/python/.venv/bin/python ] && PYTHON=tests/python/.venv/bin/python
if [ -z "$BINARY" ]; then
	cargo build --release --quiet --bin warren -p warren-server
	BINARY=target/release/warren
fi
DATA=$(mktemp -d /tmp/warren-declare-rate.XXXXXX)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=$(free_port)
HTTP=$(free_port)
PID=
OTHERS=()
trap '[ -n "$PID" ] && kill $PID ${OTHERS[*]} 2>/dev/null; rm -rf "$DATA"' EXIT
CLUSTER_ARGS=()
if [ -n "$CLUSTER" ]; then
	head -c 32 /dev/urandom | base64 >"$DATA/secret"
	chmod 600 "$DATA/secret"
	NODES=(a b c)
	declare -A N_AMQP N_HTTP N_CLUSTER
	for n in "${NODES[@]}"; do N_AMQP[$n]=$(free_port); N_HTTP[$n]=$(free_port); N_CLUSTER[$n]=$(free_port); done
	N_AMQP[a]=$PORT
	N_HTTP[a]=$HTTP
	PEERS=""
	for n in "${NODES[@]}"; do PEERS="$PEERS${PEERS:+,}warren@$n@127.0.0.1:${N_CLUSTER[$n]}"; done
	cluster_args() { echo --node-name "warren@$1" --cluster-listen "127.0.0.1:${N_CLUSTER[$1]}" --peers "$PEERS" \
		--cluster-secret-file "$DATA/secret"; }
	CLUSTER_ARGS=($(cluster_args a))
fi
start() {
	if [ -n "$CLUSTER" ]; then
		OTHERS=()
		for n in b c; do
			"$BINARY" --amqp-listen "127.0.0.1:${N_AMQP[$n]}" --http-listen "127.0.0.1:${N_HTTP[$n]}" \
				--data-dir "$DATA/data-$n" $(cluster_args $n) $NODE_ARGS >>"$DATA/warren-$n.log" 2>&1 &
			OTHERS+=($!)
		done
	fi
	"$BINARY" --amqp-listen "127.0.0.1:$PORT" --http-listen "127.0.0.1:$HTTP" --data-dir "$DATA/data" \
		"${CLUSTER_ARGS[@]}" $NODE_ARGS >>"$DATA/warren.log" 2>&1 &
	PID=$!
	local began=$(date +%s%N)
	for _ in $(seq 6000); do
		(exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
		sleep 0.01
	done
	echo "warren accepting connections after $((($(date +%s%N) - began) / 1000000)) ms"
}
start
if [ -n "$CHURN" ]; then
	echo "== Warren ($BINARY), $CHURN definition changes from $CLIENTS clients"
	"$PYTHON" bench/declare-rate.py 127.0.0.1 "$PORT" --churn "$CHURN" --clients "$CLIENTS"
	AWAITED=declare-rate-kept
else
	echo "== Warren ($BINARY), $QUEUES durable queues with a binding each"
	"$PYTHON" bench/declare-rate.py 127.0.0.1 "$PORT" --queues "$QUEUES"
	AWAITED=$(printf 'declare-rate-%07d' "$QUEUES")
fi
for dir in "$DATA"/data*; do
	echo "data directory $(basename "$dir"): $(du -sh "$dir" | cut -f1)" \
		"(metadata log: $(du -sh "$dir/cluster/metadata-log" 2>/dev/null | cut -f1 || echo none))"
done
kill -TERM "$PID" ${OTHERS[*]}
wait "$PID" ${OTHERS[*]} || true
PID=
echo "== Warren restart"
start
"$PYTHON" bench/declare-rate.py 127.0.0.1 "$PORT" --await-queue "$AWAITED"
kill -TERM "$PID" ${OTHERS[*]}
wait "$PID" ${OTHERS[*]} || true
PID=
if [ -n "$RABBITMQ" ] && [ -n "$CLUSTER" ]; then
	RABBIT_PORT=$(bench/rabbitmq-cluster.sh start "$DATA/rabbitmq")
	trap 'bench/rabbitmq-cluster.sh stop "$DATA/rabbitmq"; rm -rf "$DATA"' EXIT
	echo "== RabbitMQ $(dpkg-query -W -f '${Version}' rabbitmq-server), three nodes, $QUEUES durable queues with a binding each"
	"$PYTHON" bench/declare-rate.py 127.0.0.1 "$RABBIT_PORT" --queues "$QUEUES"
elif [ -n "$RABBITMQ" ]; then
	if ! (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null; then
		rabbitmq-server -detached
		rabbitmqctl await_startup >/dev/null
	fi
	VHOST="declare-rate-$$"
	rabbitmqctl add_vhost "$VHOST" >/dev/null
	rabbitmqctl set_permissions -p "$VHOST" guest '.*' '.*' '.*' >/dev/null
	echo "== RabbitMQ $(rabbitmqctl version 2>/dev/null), $QUEUES durable queues with a binding each"
	"$PYTHON" bench/declare-rate.py 127.0.0.1 5672 --queues "$QUEUES" --vhost "$VHOST"
	rabbitmqctl delete_vhost "$VHOST" >/dev/null
fi
