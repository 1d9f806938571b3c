#!/usr/bin/env bash
# Side-by-side benchmark of Warren and RabbitMQ with warren-perf.
#
# Installs RabbitMQ from Debian's packages if it is missing, builds Warren and warren-perf in
# release mode, and for each scenario starts a fresh Warren and a fresh private RabbitMQ node
# (spare loopback ports, data in a temporary directory), runs the scenario against both in
# turn (warren, rabbitmq, warren, rabbitmq, ...), then stops both. At the end it prints one
# markdown table per scenario: medians over the rounds and the Warren/RabbitMQ ratio.
#
# With --observed it compares Warren with itself instead: each round runs the scenario once
# while warren-observer watches the broker as the web UI and Prometheus do (the live feed
# subscribed to the queues table, both metrics endpoints scraped every second), then once
# without it; the ratio is observed/unobserved.
#
# With --baseline BINARY it compares Warren with another build of itself (an earlier commit's
# release binary, say): each round runs the scenario against this checkout's Warren, then
# against the baseline; the ratio is this/baseline.
#
# With --policies N it compares Warren holding N policies (set through its management API
# after it starts; one matches the scenario's queues) with Warren holding none: what policy
# matching costs the hot path. The ratio is with/without.
#
# Run as root from a checkout: bench/compare.sh [options]. See --help and BENCHMARKS.md.
# Benchmarks measure; they assert nothing about timings. A run whose counts do not add up
# (lost messages) or that fails is reported in the tables and in problems.txt.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
ROUNDS=3
DURATION=10
BACKLOG_COUNT=1000000
CONNECTIONS=1000
IDLE_SECS=10
SCENARIOS=all
OUT=
BUILD=1
# Whether the pair compared is Warren watched and Warren alone (--observed) rather than Warren
# and RabbitMQ.
OBSERVED=0
# A Warren binary to compare this checkout's with (--baseline), rather than RabbitMQ.
BASELINE=
# Policies the second Warren holds (--policies), compared with the first holding none.
POLICIES=0
ALL_SCENARIOS=(transient-16B transient-1KiB durable fanout latency backlog connections stream-publish stream-replay quorum)
# Open files allowed to the brokers and the tool: the connections scenario needs > 1024.
OPEN_FILES=65536
# Seconds a broker gets to start listening.
START_TIMEOUT=120

usage() {
	cat <<EOF
usage: bench/compare.sh [options]
  --rounds N          rounds per scenario, each running Warren then RabbitMQ (default $ROUNDS)
  --scenarios LIST    comma-separated name prefixes (default all: ${ALL_SCENARIOS[*]})
  --duration SECS     publishing time of the timed scenarios (default $DURATION)
  --backlog-count N   messages published then drained (backlog) or replayed (stream-replay) (default $BACKLOG_COUNT)
  --connections N     idle connections in the connections scenario (default $CONNECTIONS)
  --idle-secs SECS    how long the idle connections are held (default $IDLE_SECS)
  --out DIR           where results, logs and report.md go (default: a new /tmp/warren-bench.* directory)
  --no-build          use the binaries already in $TARGET_DIR/release
  --observed          Warren watched by warren-observer (live feed + metrics scrapes each
                      second) against Warren alone, instead of Warren against RabbitMQ
  --baseline BINARY   Warren against another Warren binary (warren-baseline), instead of RabbitMQ
  --policies N        Warren holding N policies, one matching the scenario's queues
                      (warren-policies), against Warren holding none, instead of RabbitMQ
EOF
}

log() { echo "compare.sh: $*" >&2; }
die() {
	log "error: $*"
	exit 2
}

parse_args() {
	while [ $# -gt 0 ]; do
		case $1 in
		--rounds) ROUNDS=$2 && shift ;;
		--scenarios) SCENARIOS=$2 && shift ;;
		--duration) DURATION=$2 && shift ;;
		--backlog-count) BACKLOG_COUNT=$2 && shift ;;
		--connections) CONNECTIONS=$2 && shift ;;
		--idle-secs) IDLE_SECS=$2 && shift ;;
		--out) OUT=$2 && shift ;;
		--no-build) BUILD=0 ;;
		--observed) OBSERVED=1 ;;
		--baseline) BASELINE=$(realpath "$2") && shift ;;
		--policies) POLICIES=$2 && shift ;;
		-h | --help) usage && exit 0 ;;
		*) usage >&2 && exit 2 ;;
		esac
		shift
	done
}

# ---- set-up ------------------------------------------------------------------------------

install_rabbitmq() {
	if [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; then
		return
	fi
	log "installing rabbitmq-server from the Debian packages"
	apt-get update
	DEBIAN_FRONTEND=noninteractive apt-get install -y rabbitmq-server
	# The package may start its own node (on 5672); ours uses other ports and its own epmd, so
	# both can coexist, but say so.
	if pgrep -u rabbitmq beam.smp >/dev/null 2>&1; then
		log "note: the package's own RabbitMQ node is running; it is left alone"
	fi
}

build() {
	if [ "$BUILD" = 1 ]; then
		log "building warren, warren-perf and warren-observer (release)"
		(cd "$ROOT" && cargo build --release -p warren-server -p warren-tests --bin warren --bin warren-perf --bin warren-observer)
	fi
	# Copies, so that a rebuild during the run cannot swap the binaries under it.
	mkdir -p "$WORK/bin"
	cp "$TARGET_DIR/release/warren" "$TARGET_DIR/release/warren-perf" "$WORK/bin/"
	[ "$OBSERVED" = 0 ] || cp "$TARGET_DIR/release/warren-observer" "$WORK/bin/"
}

# Sets variable $1 to a TCP port on 127.0.0.1 that nothing listens on, below the ephemeral
# range, and not handed out before.
TAKEN_PORTS=" "
pick_port() {
	local port
	for _ in $(seq 1 200); do
		port=$((20000 + RANDOM % 12000))
		case $TAKEN_PORTS in *" $port "*) continue ;; esac
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			TAKEN_PORTS="$TAKEN_PORTS$port "
			printf -v "$1" %s "$port"
			return
		fi
	done
	die "no free port found"
}

wait_for_port() {
	local port=$1 what=$2
	for _ in $(seq 1 $((START_TIMEOUT * 10))); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			return
		fi
		sleep 0.1
	done
	die "$what did not listen on port $port within $START_TIMEOUT s"
}

# ---- Warren ------------------------------------------------------------------------------

WARREN_PORT=
WARREN_HTTP_PORT=
RABBIT_PORT=
BASELINE_PORT=
# The management port of the Warren of --policies.
POLICIES_HTTP_PORT=
RABBIT_DIST_PORT=
EPMD_PORT=
WARREN_PID=
start_warren() {
	rm -rf "$WORK/warren-data"
	RUST_LOG=warn "$WORK/bin/warren" --amqp-listen "127.0.0.1:$WARREN_PORT" \
		--http-listen "127.0.0.1:$WARREN_HTTP_PORT" --data-dir "$WORK/warren-data" \
		>>"$OUT/logs/warren.log" 2>&1 &
	WARREN_PID=$!
	wait_for_port "$WARREN_PORT" warren
	wait_for_port "$WARREN_HTTP_PORT" "warren's management listener"
}

# The baseline Warren of --baseline, on ports of its own.
BASELINE_PID=
start_baseline() {
	rm -rf "$WORK/baseline-data"
	RUST_LOG=warn "$BASELINE" --amqp-listen "127.0.0.1:$BASELINE_PORT" --http-listen none \
		--data-dir "$WORK/baseline-data" >>"$OUT/logs/warren-baseline.log" 2>&1 &
	BASELINE_PID=$!
	wait_for_port "$BASELINE_PORT" warren-baseline
}

# The Warren of --policies: this checkout's, on the baseline's ports, with POLICIES policies
# set through its API. All but one match no queue; the last matches every queue the scenarios
# declare (their names start with perf-) and sets a length limit none of them reaches, so that
# the limit is checked on every publish.
start_with_policies() {
	rm -rf "$WORK/policies-data"
	RUST_LOG=warn "$WORK/bin/warren" --amqp-listen "127.0.0.1:$BASELINE_PORT" \
		--http-listen "127.0.0.1:$POLICIES_HTTP_PORT" --data-dir "$WORK/policies-data" \
		>>"$OUT/logs/warren-policies.log" 2>&1 &
	BASELINE_PID=$!
	wait_for_port "$BASELINE_PORT" warren-policies
	wait_for_port "$POLICIES_HTTP_PORT" "warren-policies' management listener"
	local i pattern
	for i in $(seq 1 "$POLICIES"); do
		pattern="^unrelated-$i\\\\."
		[ "$i" != "$POLICIES" ] || pattern="^perf-"
		curl -sf -u guest:guest -X PUT -H 'content-type: application/json' \
			-d "{\"pattern\": \"$pattern\", \"definition\": {\"max-length\": 1000000000}, \"apply-to\": \"queues\"}" \
			"http://127.0.0.1:$POLICIES_HTTP_PORT/api/policies/%2F/policy-$i" >/dev/null ||
			die "cannot set policy $i on warren-policies (see $OUT/logs/warren-policies.log)"
	done
}

stop_baseline() {
	[ -n "$BASELINE_PID" ] || return 0
	kill -TERM "$BASELINE_PID" 2>/dev/null || true
	wait "$BASELINE_PID" || log "warren-baseline exited with status $? (see $OUT/logs/warren-baseline.log)"
	BASELINE_PID=
}

# warren-observer, watching Warren while a run lasts.
OBSERVER_PID=
start_observer() {
	"$WORK/bin/warren-observer" --url "http://127.0.0.1:$WARREN_HTTP_PORT" >>"$OUT/logs/$1.log" 2>&1 &
	OBSERVER_PID=$!
}

stop_observer() {
	[ -n "$OBSERVER_PID" ] || return 0
	kill -TERM "$OBSERVER_PID" 2>/dev/null || true
	if ! wait "$OBSERVER_PID"; then
		echo "warren-observer failed during $1 (see $OUT/logs/$1.log)" >>"$OUT/problems.txt"
	fi
	OBSERVER_PID=
}

stop_warren() {
	if [ -n "$WARREN_PID" ] && kill -0 "$WARREN_PID" 2>/dev/null; then
		kill -TERM "$WARREN_PID"
		wait "$WARREN_PID" || log "warren exited with status $? (see $OUT/logs/warren.log)"
	elif [ -n "$WARREN_PID" ]; then
		log "warren (pid $WARREN_PID) was no longer running (see $OUT/logs/warren.log)"
		echo "warren was no longer running at the end of a scenario" >>"$OUT/problems.txt"
	fi
	WARREN_PID=
}

# ---- RabbitMQ: a private node run as the rabbitmq user ----------------------------------

RABBIT_DIR=
RABBIT_NODE=
RABBIT_ENV=()
RABBIT_LAUNCHER=
setup_rabbitmq() {
	RABBIT_DIR="$WORK/rabbitmq"
	RABBIT_NODE="warrenbench-$$@localhost"
	mkdir -p "$RABBIT_DIR/home" "$RABBIT_DIR/log"
	# Its own Erlang cookie, in its own HOME, so the CLI and the node agree whatever the system has.
	head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$RABBIT_DIR/home/.erlang.cookie"
	chmod 400 "$RABBIT_DIR/home/.erlang.cookie"
	echo '[].' >"$RABBIT_DIR/enabled_plugins" # no management plugin: faster start, less noise
	: >"$RABBIT_DIR/rabbitmq-env.conf"        # ignore /etc/rabbitmq/rabbitmq-env.conf
	cat >"$RABBIT_DIR/rabbitmq.conf" <<EOF
listeners.tcp.1 = 127.0.0.1:$RABBIT_PORT
loopback_users.guest = true
log.console = false
log.file.level = warning
disk_free_limit.absolute = 100MB
EOF
	# The node runs as rabbitmq: it must be able to reach and own its directory. mktemp made
	# $WORK private to root, so open the path to it (read-only) and hand the directory over.
	chmod 755 "$WORK"
	chown -R rabbitmq:rabbitmq "$RABBIT_DIR"
	RABBIT_ENV=(
		HOME="$RABBIT_DIR/home"
		RABBITMQ_NODENAME="$RABBIT_NODE"
		RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
		RABBITMQ_NODE_PORT="$RABBIT_PORT"
		RABBITMQ_DIST_PORT="$RABBIT_DIST_PORT"
		ERL_EPMD_PORT="$EPMD_PORT"
		RABBITMQ_CONF_ENV_FILE="$RABBIT_DIR/rabbitmq-env.conf"
		RABBITMQ_CONFIG_FILE="$RABBIT_DIR/rabbitmq.conf"
		RABBITMQ_ADVANCED_CONFIG_FILE="$RABBIT_DIR/advanced.config"
		RABBITMQ_ENABLED_PLUGINS_FILE="$RABBIT_DIR/enabled_plugins"
		RABBITMQ_MNESIA_BASE="$RABBIT_DIR/mnesia"
		RABBITMQ_LOG_BASE="$RABBIT_DIR/log"
		RABBITMQ_PID_FILE="$RABBIT_DIR/rabbitmq.pid"
	)
	RABBIT_LAUNCHER="$RABBIT_DIR/launch.sh"
	# One place that runs a RabbitMQ script as the rabbitmq user with the private settings
	# (the /usr/sbin wrappers would override HOME and redirect the logs).
	{
		echo '#!/bin/sh'
		printf 'export'
		printf " '%s'" "${RABBIT_ENV[@]}"
		echo
		echo 'cd "$HOME" || exit 1'
		# runuser's PAM session resets the soft open-files limit (to 1024 on Debian), which
		# caps RabbitMQ at about 650 client connections: raise it again.
		echo "ulimit -n $OPEN_FILES 2>/dev/null || true"
		echo 'exec "/usr/lib/rabbitmq/bin/$@"'
	} >"$RABBIT_LAUNCHER"
	chmod 755 "$RABBIT_LAUNCHER"
}

as_rabbitmq() { runuser -u rabbitmq -- "$RABBIT_LAUNCHER" "$@"; }

RABBIT_OS_PID=
start_rabbitmq() {
	runuser -u rabbitmq -- rm -rf "$RABBIT_DIR/mnesia"
	runuser -u rabbitmq -- rm -f "$RABBIT_DIR/rabbitmq.pid"
	as_rabbitmq rabbitmq-server >>"$OUT/logs/rabbitmq.log" 2>&1 &
	# `wait PIDFILE` waits for the node to write its pid file, then for the rabbit application.
	if ! as_rabbitmq rabbitmqctl -n "$RABBIT_NODE" wait "$RABBIT_DIR/rabbitmq.pid" --timeout "$START_TIMEOUT" \
		>>"$OUT/logs/rabbitmq.log" 2>&1; then
		RABBIT_OS_PID=$(cat "$RABBIT_DIR/rabbitmq.pid" 2>/dev/null || true)
		die "RabbitMQ did not start (see $OUT/logs/rabbitmq.log and $RABBIT_DIR/log)"
	fi
	RABBIT_OS_PID=$(cat "$RABBIT_DIR/rabbitmq.pid")
	wait_for_port "$RABBIT_PORT" rabbitmq
}

stop_rabbitmq() {
	if [ -n "$RABBIT_OS_PID" ]; then
		as_rabbitmq rabbitmqctl -n "$RABBIT_NODE" stop >>"$OUT/logs/rabbitmq.log" 2>&1 || true
		for _ in $(seq 1 100); do
			kill -0 "$RABBIT_OS_PID" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$RABBIT_OS_PID" 2>/dev/null || true
		RABBIT_OS_PID=
	fi
}

stop_epmd() {
	if [ -n "$RABBIT_LAUNCHER" ] && [ -x "$RABBIT_LAUNCHER" ]; then
		runuser -u rabbitmq -- env ERL_EPMD_PORT="$EPMD_PORT" HOME="$RABBIT_DIR/home" epmd -kill >/dev/null 2>&1 || true
	fi
}

cleanup() {
	local status=$?
	set +e
	[ -z "$OBSERVER_PID" ] || kill "$OBSERVER_PID" 2>/dev/null
	stop_warren
	stop_baseline
	stop_rabbitmq
	stop_epmd
	rm -rf "$WORK/warren-data" "$WORK/baseline-data" "$WORK/bin"
	[ -z "$RABBIT_DIR" ] || rm -rf "$RABBIT_DIR/mnesia"
	exit "$status"
}

# ---- scenarios ---------------------------------------------------------------------------

wanted() {
	local name=$1 prefix
	[ "$SCENARIOS" = all ] && return 0
	for prefix in ${SCENARIOS//,/ }; do
		case $name in "$prefix"*) return 0 ;; esac
	done
	return 1
}

# The warren-perf arguments of a scenario.
scenario_args() {
	case $1 in
	transient-16B) echo "--size 16 --prefetch 1000 --duration $DURATION" ;;
	transient-1KiB) echo "--size 1024 --prefetch 1000 --duration $DURATION" ;;
	durable) echo "--size 16 --persistent --durable --confirm 1000 --prefetch 1000 --duration $DURATION" ;;
	fanout) echo "--exchange-type fanout --queues 4 --consumers 4 --prefetch 1000 --duration $DURATION" ;;
	latency) echo "--rate 10000 --size 16 --prefetch 1000 --duration $DURATION" ;;
	backlog) echo "--backlog --count $BACKLOG_COUNT --prefetch 1000" ;;
	connections) echo "--connections $CONNECTIONS --idle-secs $IDLE_SECS" ;;
	# Streams: publishing alone, then reading a stream from its start (its publishing phase is
	# set-up: read the consume rate).
	stream-publish) echo "--queue-type stream --size 100 --persistent --confirm 1000 --consumers 0 --duration $DURATION" ;;
	stream-replay) echo "--queue-type stream --size 100 --persistent --confirm 1000 --backlog --count $BACKLOG_COUNT --stream-offset first --prefetch 1000 --multi-ack-every 100" ;;
	# A quorum queue on one node: publishes confirmed after the commit, consumed with acks.
	quorum) echo "--queue-type quorum --size 100 --persistent --confirm 1000 --prefetch 1000 --duration $DURATION" ;;
	*) die "unknown scenario $1" ;;
	esac
}

COMMANDS=()
# Runs one scenario once against one broker and appends its JSON summary to results.jsonl.
run_once() {
	local scenario=$1 broker=$2 round=$3 port pid summary status args
	case $broker in
	warren | warren-observed) port=$WARREN_PORT pid=$WARREN_PID ;;
	warren-baseline | warren-policies) port=$BASELINE_PORT pid=$BASELINE_PID ;;
	rabbitmq) port=$RABBIT_PORT pid=$RABBIT_OS_PID ;;
	esac
	args="$(scenario_args "$scenario") --queue-prefix perf-$scenario"
	[ "$scenario" = connections ] && args="$args --rss-pid $pid"
	[ "$round" = 1 ] && [ "$broker" = warren ] && COMMANDS+=("warren-perf --uri amqp://guest:guest@127.0.0.1:PORT/%2f ${args//--rss-pid $pid/--rss-pid PID}")
	log "$scenario, round $round: $broker"
	[ "$broker" != warren-observed ] || start_observer "$scenario-observer-$round"
	set +e
	# shellcheck disable=SC2086 # the arguments are meant to split
	summary=$("$WORK/bin/warren-perf" --uri "amqp://guest:guest@127.0.0.1:$port/%2f" $args \
		--scenario "$scenario" --broker "$broker" --json --interval 5 \
		2>>"$OUT/logs/$scenario-$broker-$round.log")
	status=$?
	set -e
	[ "$broker" != warren-observed ] || stop_observer "$scenario-observer-$round"
	if [ -n "$summary" ]; then
		echo "$summary" >>"$OUT/results.jsonl"
	else
		printf '{"scenario":"%s","broker":"%s","error":"exit status %s"}\n' "$scenario" "$broker" "$status" \
			>>"$OUT/results.jsonl"
	fi
	if [ "$status" != 0 ]; then
		local why
		why=$(grep -E 'error|FAILED' "$OUT/logs/$scenario-$broker-$round.log" | tail -1 || true)
		log "  $broker failed (status $status): $why"
		echo "$scenario round $round on $broker: status $status: $why" >>"$OUT/problems.txt"
	fi
	if ! kill -0 "$pid" 2>/dev/null; then
		echo "$scenario round $round: $broker (pid $pid) is gone" >>"$OUT/problems.txt"
		die "$broker died during $scenario (see $OUT/logs)"
	fi
}

run_scenario() {
	local scenario=$1 round
	if [ -n "$BASELINE" ]; then
		start_warren
		start_baseline
		for round in $(seq 1 "$ROUNDS"); do
			run_once "$scenario" warren "$round"
			run_once "$scenario" warren-baseline "$round"
		done
		stop_warren
		stop_baseline
		return
	fi
	if [ "$POLICIES" -gt 0 ]; then
		start_warren
		start_with_policies
		for round in $(seq 1 "$ROUNDS"); do
			run_once "$scenario" warren-policies "$round"
			run_once "$scenario" warren "$round"
		done
		stop_warren
		stop_baseline
		return
	fi
	if [ "$OBSERVED" = 1 ]; then
		start_warren
		for round in $(seq 1 "$ROUNDS"); do
			run_once "$scenario" warren-observed "$round"
			run_once "$scenario" warren "$round"
		done
		stop_warren
		return
	fi
	start_warren
	start_rabbitmq
	for round in $(seq 1 "$ROUNDS"); do
		run_once "$scenario" warren "$round"
		run_once "$scenario" rabbitmq "$round"
	done
	stop_warren
	stop_rabbitmq
}

write_report() {
	local report=$OUT/report.md
	{
		echo "## Run of $(date -u '+%Y-%m-%d %H:%M UTC')"
		echo
		echo "- machine: $(nproc) CPUs ($(lscpu 2>/dev/null | sed -n 's/^Model name: *//p')), $(free -h | awk '/^Mem:/ {print $2}') memory, Linux $(uname -r)"
		echo "- Warren: $(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo 'not a git checkout'), release build"
		if [ -n "$BASELINE" ]; then
			echo "- warren-baseline: $BASELINE"
		elif [ "$POLICIES" -gt 0 ]; then
			echo "- warren-policies: the same build holding $POLICIES policies (one matching the scenario's queues, max-length 10^9)"
		elif [ "$OBSERVED" = 1 ]; then
			echo "- warren-observed: the same broker while warren-observer watched it (live feed subscribed to the queues table, /metrics and /metrics/per-object scraped every second)"
		else
			echo "- RabbitMQ: $(dpkg-query -W -f '${Version}' rabbitmq-server 2>/dev/null), Erlang $(dpkg-query -W -f '${Version}' erlang-base 2>/dev/null)"
		fi
		echo "- compare.sh$([ "$OBSERVED" = 0 ] || echo ' --observed')$([ "$POLICIES" = 0 ] || echo " --policies $POLICIES") --rounds $ROUNDS --duration $DURATION --backlog-count $BACKLOG_COUNT --connections $CONNECTIONS --idle-secs $IDLE_SECS --scenarios $SCENARIOS"
		echo
		echo "Commands (PORT and PID are the broker's):"
		echo
		printf '    %s\n' "${COMMANDS[@]}"
		"$WORK/bin/warren-perf" --report "$OUT/results.jsonl"
		if wanted stream-replay; then
			echo
			echo "stream-replay: the publish rate is that of its set-up phase; the consume rate (one consumer"
			echo "reading the stream from first) is its measure, and its latencies are the age of the messages."
		fi
		if [ -s "$OUT/problems.txt" ]; then
			echo
			echo "Problems:"
			echo
			sed 's/^/- /' "$OUT/problems.txt"
		fi
	} >"$report"
	cat "$report"
	log "results: $OUT (report.md, results.jsonl, logs/)"
}

main() {
	parse_args "$@"
	[ "$POLICIES" -gt 0 ] || [ "$OBSERVED" = 1 ] || [ -n "$BASELINE" ] || [ "$(id -u)" = 0 ] || die "run as root: it installs packages and runs RabbitMQ as the rabbitmq user"
	WORK=$(mktemp -d /tmp/warren-bench.XXXXXX)
	OUT=${OUT:-$WORK}
	mkdir -p "$OUT/logs"
	: >"$OUT/results.jsonl"
	: >"$OUT/problems.txt"
	trap cleanup EXIT
	trap 'exit 130' INT TERM
	local hard_limit
	hard_limit=$(ulimit -Hn)
	if [ "$hard_limit" != unlimited ] && [ "$hard_limit" -lt "$OPEN_FILES" ]; then
		OPEN_FILES=$hard_limit
	fi
	ulimit -n "$OPEN_FILES" || log "cannot raise the open-files limit; the connections scenario may fail"
	[ "$POLICIES" -gt 0 ] || [ "$OBSERVED" = 1 ] || [ -n "$BASELINE" ] || install_rabbitmq
	build
	pick_port WARREN_PORT
	pick_port WARREN_HTTP_PORT
	pick_port RABBIT_PORT
	pick_port RABBIT_DIST_PORT
	pick_port EPMD_PORT
	pick_port BASELINE_PORT
	pick_port POLICIES_HTTP_PORT
	if [ "$POLICIES" -gt 0 ]; then
		log "warren on 127.0.0.1:$WARREN_PORT, warren-policies ($POLICIES policies) on 127.0.0.1:$BASELINE_PORT"
	elif [ -n "$BASELINE" ]; then
		[ -x "$BASELINE" ] || die "--baseline $BASELINE is not an executable"
		log "warren on 127.0.0.1:$WARREN_PORT, warren-baseline ($BASELINE) on 127.0.0.1:$BASELINE_PORT"
	elif [ "$OBSERVED" = 1 ]; then
		log "warren on 127.0.0.1:$WARREN_PORT, watched on 127.0.0.1:$WARREN_HTTP_PORT in every other run"
	else
		setup_rabbitmq
		log "warren on 127.0.0.1:$WARREN_PORT, rabbitmq on 127.0.0.1:$RABBIT_PORT (node $RABBIT_NODE, epmd $EPMD_PORT)"
	fi
	local scenario
	for scenario in "${ALL_SCENARIOS[@]}"; do
		if wanted "$scenario"; then
			run_scenario "$scenario"
		fi
	done
	write_report
}

main "$@"
