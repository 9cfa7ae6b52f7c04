#!/usr/bin/env bash
# Metrics::Render time and size with 1M keys held and 5 peers, beside the
# same with no keys (tests/bench/metrics_bench.cc). Pinned to one core.
# Usage: tests/bench/run_metrics_bench.sh [BUILD_DIR] [metrics_bench flags...]
set -euo pipefail
build="${1:-build}"
shift || true
cmake --build "$build" --target metrics_bench -j2 >/dev/null
exec taskset -c 0 "$build/bin/metrics_bench" "$@"
