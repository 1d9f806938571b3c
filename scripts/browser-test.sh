#!/usr/bin/env bash
# The web UI in headless Chromium: Debian's chromium (installed here if missing and we are
# root), Playwright's driver from npm (tests/browser, no browser download), a debug broker.
# Screenshots of every page go to target/ui-screenshots (or $WARREN_UI_SCREENSHOTS).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v "${CHROMIUM:-chromium}" >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >/dev/null
  else
    echo "the browser test needs Chromium: apt-get install chromium (or set CHROMIUM)" >&2
    exit 1
  fi
fi
export CHROMIUM="$(command -v "${CHROMIUM:-chromium}")"
cargo build --locked --bin warren
export WARREN_BIN="${WARREN_BIN:-$PWD/target/debug/warren}"
cd tests/browser
npm ci --no-audit --no-fund --loglevel=error
node --test
echo "==> browser test passed; screenshots in ${WARREN_UI_SCREENSHOTS:-target/ui-screenshots}"
