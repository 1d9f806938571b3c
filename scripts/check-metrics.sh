#!/usr/bin/env bash
# promtool check metrics on both of Warren's Prometheus endpoints, scraped under load:
# a debug broker with durable and transient traffic from warren-perf, scraped meanwhile.
# Installs Debian's prometheus package (for promtool) if missing and we are root.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v promtool >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus >/dev/null
  else
    echo "check-metrics needs promtool: apt-get install prometheus" >&2
    exit 1
  fi
fi
cargo build --locked --bin warren -p warren-server
cargo build --locked --bin warren-perf -p warren-tests
work=$(mktemp -d)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
amqp=$(free_port)
http=$(free_port)
target/debug/warren --amqp-listen "127.0.0.1:$amqp" --http-listen "127.0.0.1:$http" --data-dir "$work/data" >"$work/warren.log" 2>&1 &
broker=$!
trap 'kill $broker 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$http") 2>/dev/null && break; sleep 0.1; done
target/debug/warren-perf --uri "amqp://guest:guest@127.0.0.1:$amqp/%2f" --queues 3 --consumers 3 --persistent --confirm 100 \
  --duration 4 >/dev/null &
load=$!
sleep 2
detailed='/metrics/detailed?family=queue_coarse_metrics&family=ra_metrics&family=channel_metrics&family=exchange_names'
for path in /metrics /metrics/per-object "$detailed"; do
  curl -sf "http://127.0.0.1:$http$path" >"$work/scrape.txt"
  grep -q 'rabbitmq_queue_messages_ready\|rabbitmq_detailed_queue_messages_ready' "$work/scrape.txt"
  if ! promtool check metrics <"$work/scrape.txt"; then
    echo "promtool rejects $path" >&2
    exit 1
  fi
  echo "==> promtool check metrics: $path passes ($(grep -vc '^#' "$work/scrape.txt") samples, under load)"
done
wait $load
