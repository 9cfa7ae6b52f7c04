#!/usr/bin/env bash
# The check path's guard: this working tree against an earlier commit, side
# by side, before any change to the check path (put its output in the commit
# message). Not a test: it prints figures, and CI does not run it.
#
#   bash tests/bench/run_guard_bench.sh [BASE [ROUNDS]]
#
# BASE defaults to the daemon as first landed (701ff72), the reference the
# check path's cost is held to. Builds BASE (any commit) in a git worktree
# under $BUILD_DIR/guard-base and the working tree in $BUILD_DIR, then runs
# ROUNDS (3) rounds, the two builds interleaved within each round (base
# first in odd rounds, the tree first in even ones), of:
#  - tallyd's CPU per decision: one memory-only tallyd --threads 1 pinned to
#    CPU 0, this tree's tally-loadgen pinned to CPU 1 (the same client for
#    both), 50 connections, 100k uniform keys, sliding_counter far from its
#    limit, REQUESTS (2M) checks at depth 16 and REQUESTS / 10 at depth 1;
#    tallyd's user + system time from /proc over the run;
#  - the engine's batched check (limiter_bench batch64/sliding_counter, one
#    thread) at 10k and 1M keys, when BASE has that benchmark.
# Prints each round, then per measure the medians, the ratio tree / base and
# the spread of the per-round ratios; JSON in $BUILD_DIR/guard_bench.json.
#
# Environment: BUILD_DIR (build), REQUESTS (2000000), CONNECTIONS (50),
# KEYS (100000), MIN_TIME (0.5: seconds per engine benchmark).
set -euo pipefail
cd "$(dirname "$0")/../.."
base=${1:-701ff72}
rounds=${2:-3}
build_dir=${BUILD_DIR:-build}
requests=${REQUESTS:-2000000}
connections=${CONNECTIONS:-50}
keys=${KEYS:-100000}
base_commit=$(git rev-parse --verify "$base^{commit}")

# shellcheck source-path=SCRIPTDIR/../..
source tests/bench/bench_lib.sh
bench_build "$build_dir" tallyd tally-loadgen limiter_bench
base_tree="$build_dir/guard-base"
if [ ! -d "$base_tree" ] || [ "$(git -C "$base_tree" rev-parse HEAD 2>/dev/null)" != "$base_commit" ]; then
  git worktree remove --force "$base_tree" 2>/dev/null || rm -rf "$base_tree"
  git worktree add --detach "$base_tree" "$base_commit" >/dev/null
fi
cmake -S "$base_tree" -B "$base_tree/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$base_tree/build" -j2 --target tallyd
base_engine=false
if cmake --build "$base_tree/build" -j2 --target limiter_bench >/dev/null 2>&1; then
  base_engine=true
fi
# built_binary DIR NAME: the executable NAME under DIR (older trees put
# binaries beside their sources rather than in bin/).
built_binary() { find "$1" -name "$2" -type f -perm -u+x -print -quit; }
bench_init

declare -A tallyd_of=([base]="$(built_binary "$base_tree/build" tallyd)" [tree]="$build_dir/bin/tallyd")
declare -A bench_of=([base]="$(built_binary "$base_tree/build" limiter_bench)"
  [tree]="$build_dir/bin/limiter_bench")
declare -A results  # "build measure" -> the per-round values, space-separated

# cpu_per_decision BUILD DEPTH CHECKS: ns of tallyd CPU per decision.
cpu_per_decision() {
  local build=$1 depth=$2 checks=$3 before after
  tallyd_binary=${tallyd_of[$build]}
  bench_start_tallyd "$work_dir/tallyd.log" "$work_dir/tallyd.port" 5 --threads 1 --memory-only
  before=$(bench_cpu_ms "$tallyd_pid")
  "${client_cpu[@]}" "$build_dir/bin/tally-loadgen" --target tally --address "127.0.0.1:$tallyd_port" \
    --connections "$connections" --depth "$depth" --keys "$keys" --distribution uniform \
    --algorithm sliding_counter --limit 1000000000 --window-ms 60000 --requests "$checks" \
    --label "$build-d$depth" --no-header --json "$work_dir/load.json" >/dev/null
  after=$(bench_cpu_ms "$tallyd_pid")
  bench_stop "$tallyd_pid"
  awk -v ms=$((after - before)) -v n="$checks" 'BEGIN { printf "%.1f", ms * 1e6 / n }'
}

# engine_ns BUILD KEYS: ns per check in a batch of 64 (from the benchmark's
# checks per second, one thread), or nothing without the benchmark.
engine_ns() {
  local build=$1 key_count=$2
  [ "$build" = base ] && [ "$base_engine" = false ] && return 0
  "${client_cpu[@]}" "${bench_of[$build]}" --benchmark_min_time="${MIN_TIME:-0.5}" \
    --benchmark_filter="^batch64/sliding_counter/keys:$key_count/real_time/threads:1\$" \
    --benchmark_out="$work_dir/engine.json" --benchmark_out_format=json >/dev/null 2>&1
  awk -F': ' '/"items_per_second"/ { gsub(/,/, "", $2); printf "%.2f", 1e9 / $2; exit }' \
    "$work_dir/engine.json"
}

measure() {
  local build=$1 value
  for depth in 16 1; do
    local checks=$requests
    [ "$depth" = 1 ] && checks=$((requests / 10))
    value=$(cpu_per_decision "$build" "$depth" "$checks")
    results["$build tallyd_ns_per_decision_d$depth"]+="$value "
    echo "  $build tallyd CPU per decision at depth $depth: $value ns"
  done
  for key_count in 10000 1000000; do
    value=$(engine_ns "$build" "$key_count")
    [ -n "$value" ] || continue
    results["$build engine_batch64_ns_k$key_count"]+="$value "
    echo "  $build engine batched check at $key_count keys: $value ns"
  done
}

# median VALUE...: the middle value (the lower middle of an even count).
median() { printf '%s\n' "$@" | sort -g | sed -n "$(((${#} + 1) / 2))p"; }

# summarize BASE_VALUES TREE_VALUES (space-separated, round by round): the
# medians of each, their ratio tree / base, and the lowest and highest of the
# rounds' own ratios.
summarize() {
  local -a base_values tree_values ratios
  read -ra base_values <<<"$1"
  read -ra tree_values <<<"$2"
  local i median_base median_tree
  for i in "${!base_values[@]}"; do
    ratios+=("$(awk -v t="${tree_values[$i]}" -v b="${base_values[$i]}" 'BEGIN { printf "%.3f", t / b }')")
  done
  median_base=$(median "${base_values[@]}")
  median_tree=$(median "${tree_values[@]}")
  echo "$median_base $median_tree" \
    "$(awk -v t="$median_tree" -v b="$median_base" 'BEGIN { printf "%.3f", t / b }')" \
    "$(printf '%s\n' "${ratios[@]}" | sort -g | head -1)" \
    "$(printf '%s\n' "${ratios[@]}" | sort -g | tail -1)"
}

for ((round = 1; round <= rounds; round++)); do
  echo "== round $round of $rounds"
  if ((round % 2 == 1)); then order=(base tree); else order=(tree base); fi
  for build in "${order[@]}"; do measure "$build"; done
done

echo
echo "== tree ($(git rev-parse --short HEAD)$(git diff --quiet || echo '+changes')) against base ($(git rev-parse --short "$base_commit")), medians of $rounds rounds"
printf "%-34s %12s %12s %10s %18s\n" measure base tree tree/base "ratio min-max"
json="["
for measure in tallyd_ns_per_decision_d16 tallyd_ns_per_decision_d1 engine_batch64_ns_k10000 \
  engine_batch64_ns_k1000000; do
  if [ -z "${results["base $measure"]:-}" ] || [ -z "${results["tree $measure"]:-}" ]; then
    continue
  fi
  line=$(summarize "${results["base $measure"]}" "${results["tree $measure"]}")
  read -r median_base median_tree ratio low high <<<"$line"
  printf "%-34s %12s %12s %10s %18s\n" "$measure" "$median_base" "$median_tree" "$ratio" "$low-$high"
  json+="{\"measure\": \"$measure\", \"base\": \"$(git rev-parse --short "$base_commit")\", \"rounds\": $rounds, \"base_median\": $median_base, \"tree_median\": $median_tree, \"tree_over_base\": $ratio, \"ratio_min\": $low, \"ratio_max\": $high},"
done
json="${json%,}]"
echo "$json" >"$build_dir/guard_bench.json"
echo "results: $build_dir/guard_bench.json"
