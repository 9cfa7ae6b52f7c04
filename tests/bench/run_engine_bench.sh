#!/usr/bin/env bash
# Runs the engine benchmark: Google Benchmark's table and a summary on stdout
# (ns per check; beside them ns per merged key-slot, one by one and batched,
# the batched merges' ratios to the batched checks, and both in units of a
# cache line read at random, the machine's floor at 1M keys), JSON in
# build/engine_bench.json. Not a test: it prints figures only. Pin it to a core
# (taskset -c 1) on a shared machine; the summary's CPU column is what the
# benchmark thread itself spent. REPETITIONS=5 runs each benchmark 5 times,
# interleaved at random, and the summary takes the medians (steadier ratios).
set -euo pipefail
cd "$(dirname "$0")/../.."
bash .ci/install-deps
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target limiter_bench
repetitions=${REPETITIONS:-1}
interleave=false
if [ "$repetitions" -gt 1 ]; then interleave=true; fi
./build/bin/limiter_bench --benchmark_min_time="${MIN_TIME:-0.5}" \
  --benchmark_repetitions="$repetitions" --benchmark_enable_random_interleaving="$interleave" \
  --benchmark_out=build/engine_bench.json --benchmark_out_format=json "$@"
