#!/usr/bin/env bash
# Runs the engine benchmark: Google Benchmark's table and a summary on stdout,
# JSON in build/engine_bench.json. Not a test: it prints figures only.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash .ci/install-deps
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target limiter_bench
./build/bin/limiter_bench --benchmark_min_time="${MIN_TIME:-0.5}" \
  --benchmark_out=build/engine_bench.json --benchmark_out_format=json "$@"
