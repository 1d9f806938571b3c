#!/usr/bin/env bash
# Cross-client tests: real non-Rust AMQP clients (pika for Python, amqplib for Node.js) and
# RabbitMQ's rabbitmqadmin against the `warren` binary. Builds the broker, installs the
# clients, runs both suites; exits non-zero on any failure. Works from any directory.
#
# Environment:
#   WARREN_BIN  broker binary the suites start (default: target/debug/warren, built here first)
#   PYTHON      interpreter for the venv (default: python3.11, else python3)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

echo "==> cargo build --bin warren"
cargo build --bin warren
export WARREN_BIN="${WARREN_BIN:-$PWD/target/debug/warren}"
[ -x "$WARREN_BIN" ] || { echo "broker binary $WARREN_BIN is missing or not executable" >&2; exit 1; }

# rabbitmqadmin, for the management API's compatibility test: the script from Debian's
# rabbitmq-server package, taken out of the package rather than installing Erlang and a broker.
if ! command -v rabbitmqadmin >/dev/null && [ ! -f target/rabbitmqadmin/rabbitmqadmin ]; then
  echo "==> rabbitmqadmin: from Debian's rabbitmq-server package"
  package_dir=$(mktemp -d)
  (cd "$package_dir" && { apt-get download rabbitmq-server >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get download rabbitmq-server; }; })
  dpkg-deb -x "$package_dir"/rabbitmq-server_*.deb "$package_dir/extracted"
  mkdir -p target/rabbitmqadmin
  cp "$(find "$package_dir/extracted" -name rabbitmqadmin -type f | head -n 1)" target/rabbitmqadmin/rabbitmqadmin
  rm -rf "$package_dir"
fi

echo "==> Python (pika): tests/python"
PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"
venv=tests/python/.venv
# Recreate a venv that is broken or was made by another interpreter.
if ! "$venv/bin/python" -c 'import sys; sys.exit(0)' >/dev/null 2>&1 ||
  [ "$("$venv/bin/python" -c 'import sys; print(sys.version_info[:2])')" != "$("$PYTHON" -c 'import sys; print(sys.version_info[:2])')" ]; then
  rm -rf "$venv"
  if ! "$PYTHON" -m venv "$venv"; then
    # Debian ships ensurepip separately; install it when we can (CI runs as root).
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      rm -rf "$venv"
      apt-get update -q && apt-get install -y -q python3-venv
      "$PYTHON" -m venv "$venv"
    else
      echo "cannot create a venv with $PYTHON; install python3-venv" >&2
      exit 1
    fi
  fi
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r tests/python/requirements.txt
"$venv/bin/python" -m pytest tests/python -p no:cacheprovider -q
echo "==> Python (pika): quorum queues on a three-node cluster"
WARREN_CLUSTER_NODES=3 "$venv/bin/python" -m pytest tests/python/test_pika_quorum.py -p no:cacheprovider -q

echo "==> Node.js (amqplib): tests/node"
(
  cd tests/node
  if [ -f package-lock.json ]; then
    npm ci --no-audit --no-fund --loglevel=error
  else
    npm install --no-audit --no-fund --loglevel=error
  fi
  node --test
)

echo "==> cross-client tests passed"
