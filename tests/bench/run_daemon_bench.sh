#!/usr/bin/env bash
# The daemon benchmark: tallyd against Redis doing the same job, on loopback.
# Not a test: it prints figures only.
#
# Starts redis-server and tallyd (one thread) pinned to CPU 0 and drives them
# with tally-loadgen pinned to CPU 1, the same connections, depth and keys for
# every scenario:
#   tally sliding_counter, redis-lua (EVALSHA: two GETs, INCR, PEXPIRE),
#   redis-incr (INCR: the cheapest thing Redis does), at depth 1 and 16;
#   tally with 100 checks per request at depth 1.
# Prints each run, then decisions/s, p50, p99 and the server's CPU per
# decision (its user + system time over the run, from /proc) per scenario, and
# the ratios tally/redis; all results go to $BUILD_DIR/daemon_bench.json (a
# JSON array).
#
# Environment: DURATION_MS per scenario (5000), CONNECTIONS (50),
# KEYS (100000), BUILD_DIR (build), THREADS (tallyd's --threads, 1),
# PIN (yes; no: servers and load generator run on any core, as on a machine
# where they share the cores).
set -euo pipefail
cd "$(dirname "$0")/../.."

duration_ms=${DURATION_MS:-5000}
connections=${CONNECTIONS:-50}
keys=${KEYS:-100000}
build_dir=${BUILD_DIR:-build}

# shellcheck source-path=SCRIPTDIR/../..
source tests/bench/bench_lib.sh
bench_build "$build_dir" tallyd tally-loadgen
bench_init
if [ "${PIN:-yes}" = no ]; then
  server_cpu=()
  client_cpu=()
fi

bench_start_redis "$work_dir/redis.log"

# Memory only, like the Redis baseline (persistence off); run_persistence_bench.sh
# measures what persistence costs.
bench_start_tallyd "$work_dir/tallyd.log" "$work_dir/tallyd.port" 5 --threads "${THREADS:-1}" \
  --memory-only

echo "redis-server $(redis-server --version | sed -E 's/.* v=([^ ]+).*/\1/') on 127.0.0.1:$redis_port," \
  "tallyd on 127.0.0.1:$tallyd_port; $connections connections, $keys uniform keys, ${duration_ms} ms each"

labels=()
label_files=()  # their loadgen results
header=()  # the table header comes with the first run only
declare -A server_ns  # label -> the server's CPU per decision, ns
# run LABEL TARGET DEPTH BATCH
run() {
  local label=$1 target=$2 depth=$3 batch=$4 address server_pid cpu_before_ms
  if [ "$target" = tally ]; then
    address=127.0.0.1:$tallyd_port
    server_pid=$tallyd_pid
  else
    address=127.0.0.1:$redis_port
    server_pid=$redis_pid
    redis-cli -p "$redis_port" flushall >/dev/null  # every Redis run starts empty
  fi
  cpu_before_ms=$(bench_cpu_ms "$server_pid")
  "${client_cpu[@]}" "$build_dir/bin/tally-loadgen" --target "$target" --address "$address" \
    --connections "$connections" --depth "$depth" --batch "$batch" --keys "$keys" \
    --distribution uniform --duration-ms "$duration_ms" --label "$label" "${header[@]}" \
    --json "$work_dir/$label.json"
  server_ns[$label]=$(awk -v ms=$(($(bench_cpu_ms "$server_pid") - cpu_before_ms)) \
    -v n="$(bench_json_field "$work_dir/$label.json" decisions)" \
    'BEGIN { printf "%.0f", (n > 0 ? ms * 1e6 / n : 0) }')
  header=(--no-header)
  labels+=("$label")
  label_files+=("$work_dir/$label.json")
}

run tally-d1 tally 1 1
run redis-lua-d1 redis-lua 1 1
run redis-incr-d1 redis-incr 1 1
run tally-d16 tally 16 1
run redis-lua-d16 redis-lua 16 1
run redis-incr-d16 redis-incr 16 1
run tally-b100 tally 1 100

# A number field of a result, from the loadgen's one-line JSON object.
field() { bench_json_field "$work_dir/$1.json" "$2"; }

echo
echo "== summary"
printf "%-16s %14s %10s %10s %18s\n" scenario decisions/s p50_us p99_us server_ns/decision
for label in "${labels[@]}"; do
  printf "%-16s %14.0f %10s %10s %18s\n" "$label" "$(field "$label" decisions_per_s)" \
    "$(field "$label" p50_us)" "$(field "$label" p99_us)" "${server_ns[$label]}"
done

echo
echo "== tally decisions/s over Redis decisions/s"
printf "%-32s %16s %16s\n" comparison tally/redis-lua tally/redis-incr
# ratio TALLY REDIS
ratio() { bench_ratio "$(field "$1" decisions_per_s)" "$(field "$2" decisions_per_s)"; }
compare() {
  printf "%-32s %16s %16s\n" "$1" "$(ratio "$2" "redis-lua-$3")" "$(ratio "$2" "redis-incr-$3")"
}
compare "depth 1" tally-d1 d1
compare "depth 16" tally-d16 d16
compare "tally batch 100 vs Redis d1" tally-b100 d1
compare "tally batch 100 vs Redis d16" tally-b100 d16

echo
echo "== tally's CPU per decision over Redis's CPU per request"
printf "%-32s %16s %16s\n" comparison tally/redis-lua tally/redis-incr
for depth in d1 d16; do
  printf "%-32s %16s %16s\n" "depth ${depth#d}" \
    "$(bench_ratio "${server_ns[tally-$depth]}" "${server_ns[redis-lua-$depth]}")" \
    "$(bench_ratio "${server_ns[tally-$depth]}" "${server_ns[redis-incr-$depth]}")"
done

out="$build_dir/daemon_bench.json"
bench_json_array "$out" "${label_files[@]}"
echo
echo "results: $out"
