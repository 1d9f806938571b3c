#!/usr/bin/env bash
# A short run of every cargo-fuzz target (fuzz/), when a nightly toolchain is installed (the
# sanitizers need it); skipped with a line saying so otherwise. The stable replay of the
# committed corpora and reproducers (fuzz-harness/tests/replay.rs) runs with the other tests.
#
#   scripts/fuzz-smoke.sh [SECONDS_PER_TARGET]     (default 10)
#
# Longer runs: cd fuzz && cargo +nightly fuzz run TARGET -- -max_total_time=600
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
SECONDS_PER_TARGET=${1:-10}
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
	echo "fuzz smoke run skipped: no nightly toolchain (rustup toolchain install nightly)"
	exit 0
fi
# libFuzzer is C++, built with the system's g++.
command -v g++ >/dev/null || { apt-get update -q && apt-get install -y -q g++; }
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked --quiet
# Runs on a copy of the corpus: a smoke run adds nothing to what is committed.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for target in frames methods connection segment; do
	mkdir -p "$work/$target"
	cp -r "corpus/$target/." "$work/$target/"
	echo "==> fuzz $target for ${SECONDS_PER_TARGET} s"
	cargo +nightly fuzz run -O "$target" "$work/$target" -- -max_total_time="$SECONDS_PER_TARGET" \
		-rss_limit_mb=4096 -timeout=10 -print_final_stats=1 2>&1 | grep -E "^stat::number_of_executed_units|^Done|ERROR|SUMMARY" || true
	# A crash leaves its input in fuzz/artifacts/TARGET/ and fails the run.
	if ls "artifacts/$target"/crash-* "artifacts/$target"/oom-* "artifacts/$target"/timeout-* >/dev/null 2>&1; then
		echo "fuzz $target found a failing input: see fuzz/artifacts/$target/ (add it to fuzz/regressions/$target/ once fixed)" >&2
		exit 1
	fi
done
