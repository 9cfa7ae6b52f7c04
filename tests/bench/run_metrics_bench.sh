#!/usr/bin/env bash
# Metrics::Render time and size with 1M keys held and 5 peers, beside the
# same with no keys (tests/bench/metrics_bench.cc). Not pinned: the six
# gossip threads of the one process (this node and its peers) need both cores
# to keep their heartbeats while a million keys replicate.
# Usage: tests/bench/run_metrics_bench.sh [BUILD_DIR] [metrics_bench flags...]
set -euo pipefail
build="${1:-build}"
shift || true
cmake --build "$build" --target metrics_bench -j2 >/dev/null
exec "$build/bin/metrics_bench" "$@"
