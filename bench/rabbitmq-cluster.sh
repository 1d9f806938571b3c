#!/usr/bin/env bash
# Three private RabbitMQ nodes clustered on this machine, for side-by-side runs against three
# Warren nodes (bench/cluster.sh, bench/declare-rate.sh --cluster --rabbitmq).
#
#   bench/rabbitmq-cluster.sh start DIR   # prints the first node's AMQP port on stdout
#   bench/rabbitmq-cluster.sh stop DIR
#
# After a start, DIR/NODE/amqp-port and DIR/NODE/rabbitmq.pid give each node's AMQP port and
# process (NODE is a, b or c); a start makes a fresh cluster in DIR.
#
# Each node has its own directory, ports and name (warrenbench-a@localhost, ...); they share an
# Erlang cookie kept in DIR, and run as the rabbitmq user, as Debian's package does, through
# /usr/lib/rabbitmq/bin directly (the /usr/sbin wrappers would override HOME and the logs). No
# plugins. rabbitmq-server must be installed (apt-get install rabbitmq-server).
set -euo pipefail

ACTION=${1:?usage: $0 start|stop DIR}
DIR=${2:?usage: $0 start|stop DIR}
NODES=(a b c)
START_TIMEOUT_S=120

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Runs a RabbitMQ script as the rabbitmq user with node $1's settings.
as_node() {
	local node=$1
	shift
	runuser -u rabbitmq -- "$DIR/$node/launch.sh" "$@"
}

node_name() { echo "warrenbench-$1@localhost"; }

write_node() {
	local node=$1 port=$2 dist=$3 epmd=$4
	mkdir -p "$DIR/$node/log"
	echo '[].' >"$DIR/$node/enabled_plugins"
	: >"$DIR/$node/rabbitmq-env.conf"
	cat >"$DIR/$node/rabbitmq.conf" <<EOF
listeners.tcp.1 = 127.0.0.1:$port
loopback_users.guest = true
log.console = false
log.file.level = warning
disk_free_limit.absolute = 100MB
EOF
	{
		echo '#!/bin/sh'
		echo "export HOME='$DIR/home' RABBITMQ_NODENAME='$(node_name "$node")'" \
			"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT=$port RABBITMQ_DIST_PORT=$dist" \
			"ERL_EPMD_PORT=$epmd RABBITMQ_CONF_ENV_FILE='$DIR/$node/rabbitmq-env.conf'" \
			"RABBITMQ_CONFIG_FILE='$DIR/$node/rabbitmq.conf'" \
			"RABBITMQ_ENABLED_PLUGINS_FILE='$DIR/$node/enabled_plugins'" \
			"RABBITMQ_MNESIA_BASE='$DIR/$node/mnesia' RABBITMQ_LOG_BASE='$DIR/$node/log'" \
			"RABBITMQ_PID_FILE='$DIR/$node/rabbitmq.pid'"
		echo 'cd "$HOME" || exit 1'
		# runuser's PAM session resets the soft open-files limit (1024 on Debian): raise it.
		echo 'ulimit -n 65536 2>/dev/null || true'
		echo 'exec "/usr/lib/rabbitmq/bin/$@"'
	} >"$DIR/$node/launch.sh"
	chmod 755 "$DIR/$node/launch.sh"
	echo "$port" >"$DIR/$node/amqp-port"
}

start() {
	[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || {
		echo "rabbitmq-server is not installed (apt-get install rabbitmq-server)" >&2
		exit 1
	}
	# A fresh cluster each time: nodes of an earlier start would not join again.
	stop
	rm -rf "$DIR"
	mkdir -p "$DIR/home"
	head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$DIR/home/.erlang.cookie"
	chmod 400 "$DIR/home/.erlang.cookie"
	local epmd
	epmd=$(free_port)
	echo "$epmd" >"$DIR/epmd-port"
	for node in "${NODES[@]}"; do
		write_node "$node" "$(free_port)" "$(free_port)" "$epmd"
	done
	# The path down to DIR must be open to the rabbitmq user, and DIR its own.
	local parent
	parent=$(dirname "$DIR")
	chmod o+x "$parent"
	chown -R rabbitmq:rabbitmq "$DIR"
	for node in "${NODES[@]}"; do
		as_node "$node" rabbitmq-server >>"$DIR/$node/log/console.log" 2>&1 &
	done
	for node in "${NODES[@]}"; do
		as_node "$node" rabbitmqctl -n "$(node_name "$node")" wait "$DIR/$node/rabbitmq.pid" \
			--timeout "$START_TIMEOUT_S" >/dev/null
	done
	for node in b c; do
		as_node "$node" rabbitmqctl -n "$(node_name "$node")" stop_app >/dev/null
		as_node "$node" rabbitmqctl -n "$(node_name "$node")" join_cluster "$(node_name a)" >/dev/null
		as_node "$node" rabbitmqctl -n "$(node_name "$node")" start_app >/dev/null
	done
	local members
	members=$(as_node a rabbitmqctl -n "$(node_name a)" cluster_status --formatter json |
		python3 -c 'import json,sys; print(len(json.load(sys.stdin)["running_nodes"]))')
	[ "$members" = 3 ] || {
		echo "the RabbitMQ cluster has $members running nodes, not 3 (see $DIR/*/log)" >&2
		exit 1
	}
	cat "$DIR/a/amqp-port"
}

stop() {
	for node in "${NODES[@]}"; do
		[ -x "$DIR/$node/launch.sh" ] || continue
		as_node "$node" rabbitmqctl -n "$(node_name "$node")" stop >/dev/null 2>&1 || true
	done
	# The nodes started an epmd of their own, on their port: it outlives them.
	if [ -f "$DIR/epmd-port" ]; then
		ERL_EPMD_PORT=$(cat "$DIR/epmd-port") /usr/lib/erlang/bin/epmd -kill >/dev/null 2>&1 || true
	fi
}

case "$ACTION" in
start) start ;;
stop) stop ;;
*)
	echo "usage: $0 start|stop DIR" >&2
	exit 2
	;;
esac
