#!/usr/bin/env bash
# Builds the runner and the benchmark in release mode and runs the benchmark
# (issue 7). Prints the table; writes target/bench/results.json and
# target/bench/latency.png.
#
#   bench/run.sh            # full run (a few minutes)
#   bench/run.sh --quick    # well under a minute
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -p agent-runner -p runner-bench
target_dir="${CARGO_TARGET_DIR:-target}"
exec "$target_dir/release/runner-bench" --runner "$target_dir/release/agent-runner" --out "$target_dir/bench" "$@"
