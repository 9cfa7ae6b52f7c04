#!/usr/bin/env bash
# Builds tally twice, optimised and with ASan+UBSan, and runs every test in
# both builds. Exits non-zero when anything fails. This is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
# Ninja compiles every target's objects in parallel (Make waits for each library's
# dependencies); a build directory made before keeps its own generator.
export CMAKE_GENERATOR=${CMAKE_GENERATOR:-Ninja}

bash .ci/install-deps

echo "== release build"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"

echo "== sanitizer build (ASan+UBSan)"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DTALLY_SANITIZE=ON -DTALLY_BENCHMARKS=OFF
cmake --build build-asan -j"$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs"

echo "== fuzzing (libFuzzer, a few seconds per decoder; tests/fuzz/run_fuzz.sh)"
bash tests/fuzz/run_fuzz.sh "${TALLY_FUZZ_SECONDS:-10}"
