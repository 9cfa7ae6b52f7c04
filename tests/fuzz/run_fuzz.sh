#!/usr/bin/env bash
# Builds the fuzz targets with clang and libFuzzer (ASan+UBSan) in
# build-fuzz/ and runs each for SECONDS (default 10) from a copy of its seed
# corpus. A crash, a sanitizer report, a leak or a timeout fails the run; the
# input that caused it is kept in the work directory, whose path is printed:
# replay it with `build-fuzz/bin/tally_fuzz_<target> FILE`, then add it to
# tests/fuzz/corpus/<target>/ as regression-<what>.
#   tests/fuzz/run_fuzz.sh [SECONDS] [TARGET...]
# CI runs it briefly; run it for minutes or hours after touching a decoder.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-10}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then  # every target: one corpus folder each
  for corpus in tests/fuzz/corpus/*/; do targets+=("$(basename "$corpus")"); done
fi

CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTALLY_FUZZ=ON \
  -DTALLY_BENCHMARKS=OFF > /dev/null
cmake --build build-fuzz -j"$(nproc)" --target tally_fuzz_targets

work=$(mktemp -d /tmp/tally-fuzz.XXXXXX)
echo "fuzzing ${targets[*]} for ${seconds} s each; work directory ${work}"
failed=()
for target in "${targets[@]}"; do
  mkdir -p "${work}/${target}/corpus"
  cp tests/fuzz/corpus/"${target}"/* "${work}/${target}/corpus/"
  if build-fuzz/bin/tally_fuzz_"${target}" -max_total_time="${seconds}" -max_len=16384 \
      -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="${work}/${target}/" "${work}/${target}/corpus" \
      > "${work}/${target}/log" 2>&1; then
    echo "${target}: $(grep -E '^stat::number_of_executed_units' "${work}/${target}/log" |
      awk '{print $2}') runs, no failure"
  else
    echo "${target}: FAILED; the last lines of ${work}/${target}/log:"
    tail -n 30 "${work}/${target}/log"
    failed+=("${target}")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzzing found failures in: ${failed[*]} (inputs in ${work})"
  exit 1
fi
rm -rf "${work}"
