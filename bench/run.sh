#!/usr/bin/env bash
# Builds the runner and the benchmark in release mode and runs the benchmark.
# Prints the table; writes target/bench/results.json and
# target/bench/latency.png and target/bench/profile.svg (a flame graph of the
# runner during three more update throughput runs, not counted in the
# figures, when perf can record).
#
#   bench/run.sh            # full run (a few minutes, after a cold release
#                           # build of about 30 minutes on two cores: one
#                           # LTO unit, Cargo.toml's [profile.release])
#   bench/run.sh --quick    # well under a minute
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -p agent-runner -p runner-bench
target_dir="${CARGO_TARGET_DIR:-target}"
# The profile SVG: inferno renders perf's samples as a flame
# graph. Installed once into the target dir, not onto the system.
if [ ! -x "$target_dir/bench-tools/bin/inferno-flamegraph" ]; then
  cargo install --locked --quiet --root "$target_dir/bench-tools" inferno --version "^0.12" \
    || echo "bench: could not install inferno; the profile SVG is skipped" >&2
fi
exec "$target_dir/release/runner-bench" --runner "$target_dir/release/agent-runner" --out "$target_dir/bench" "$@"
