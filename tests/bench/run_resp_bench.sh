#!/usr/bin/env bash
# The RESP benchmark: tallyd's Redis-protocol front against redis-server
# running the Lua scripts Redis users rate-limit with, driven by the same
# client, redis-benchmark, with the same command line but for the command.
# Not a test: it prints figures only.
#
# ONE tallyd (--memory-only, --resp-port) and ONE redis-server (no
# persistence) are pinned to CPU 0; redis-benchmark runs pinned to CPU 1.
# tallyd gets --threads 1, one worker for the one core it is pinned to, as
# single-threaded redis-server has: more workers than cores would only add
# context switches. The command line is
#   redis-benchmark -c 50 -n REQUESTS -r KEYS -P {1,16} --csv <command>
# with keys key:__rand_int__ (KEYS random keys). Scenarios, each at -P 1 and
# -P 16, in one run:
#   tally-throttle  CL.THROTTLE key 1000 1000 1          (GCRA, burst 1001, 1000/s)
#   redis-gcra      EVALSHA <GCRA script> 1 key 1000 1000 1 1   (the same GCRA in Lua)
#   tally-counter   TALLY.CHECK key sliding_counter 1000000 60000
#   redis-counter   EVALSHA <sliding window script> 1 key 1000000 60000
#                   (tally-loadgen's redis-lua script: two GETs, INCR, PEXPIRE)
#   redis-incr      INCR key   (the cheapest thing Redis does: the ceiling)
# The limits are high enough that nothing is denied, so both sides do the
# same work on every request. Redis is flushed before each of its runs. A
# first check shows that the GCRA script and CL.THROTTLE answer a new key alike.
# Prints the runs (ops/s, p50 and p99 in ms, from redis-benchmark's CSV, and
# the server's CPU per request: its user + system time over the run, from
# /proc), the ratios tally / Redis, and the issue's goals; all results go to
# $BUILD_DIR/resp_bench.json (a JSON array).
#
# On a machine shared with other work the figures drift from run to run:
# ROUNDS=n runs every scenario n times, the rounds interleaved so that a
# drift touches all scenarios alike, and compares the medians (each round's
# figures are printed and kept in the JSON too).
#
# Environment: REQUESTS per run (500000), KEYS (100000), ROUNDS (1),
# BUILD_DIR (build).
set -euo pipefail
cd "$(dirname "$0")/../.."

requests=${REQUESTS:-500000}
keys=${KEYS:-100000}
rounds=${ROUNDS:-1}
build_dir=${BUILD_DIR:-build}

# shellcheck source-path=SCRIPTDIR/../..
source tests/bench/bench_lib.sh
bench_build "$build_dir" tallyd
bench_init

# redis-cell's GCRA (github.com/brandur/redis-cell, src/cell/mod.rs) in Lua,
# with its reply: limited, limit, remaining, retry_after s, reset_after s.
# ARGV: max_burst, count_per_period, period (s), quantity.
gcra_script='
local burst = tonumber(ARGV[1])
local interval = tonumber(ARGV[3]) / tonumber(ARGV[2])
local quantity = tonumber(ARGV[4])
local tolerance = interval * (burst + 1)
local increment = interval * quantity
local time = redis.call("TIME")
local now = tonumber(time[1]) - 1700000000 + tonumber(time[2]) / 1000000
local tat = tonumber(redis.call("GET", KEYS[1]) or now)
if tat < now then tat = now end
local new_tat = tat + increment
local diff = now - (new_tat - tolerance)
local function seconds(s)  -- whole seconds, up from a whole millisecond, as redis-cell
  local whole = math.floor(s)
  if s - whole >= 0.001 then whole = whole + 1 end
  return whole
end
if diff < 0 then
  local retry = -1
  if increment <= tolerance then retry = seconds(-diff) end
  return {1, burst + 1, math.max(0, math.floor((tolerance - (tat - now)) / interval)), retry,
          seconds(tat - now)}
end
local ttl = new_tat - now
if ttl > 0 then redis.call("SET", KEYS[1], tostring(new_tat), "PX", math.ceil(ttl * 1000)) end
return {0, burst + 1, math.floor((tolerance - ttl) / interval), -1, seconds(ttl)}
'
# The load generator's sliding-window counter script, read from its source so
# that both benchmarks run the same one.
counter_script=$(sed -n '/kSlidingWindowScript = R"lua(/,/)lua";/p' cluster/target_session.cc |
  sed '1d;$d')
[ -n "$counter_script" ] || { echo "no Lua script in cluster/target_session.cc" >&2; exit 1; }

bench_start_redis "$work_dir/redis.log"
bench_start_tallyd "$work_dir/tallyd.log" "$work_dir/tallyd.port" 10 --threads 1 --memory-only \
  --resp-port 0 --resp-port-file "$work_dir/resp.port"
bench_wait_for_file "$work_dir/resp.port" "$tallyd_pid" 10 ||
  { cat "$work_dir/tallyd.log" >&2; echo "tallyd's RESP front did not start" >&2; exit 1; }
resp_port=$(cat "$work_dir/resp.port")
gcra_sha=$(redis-cli -p "$redis_port" SCRIPT LOAD "$gcra_script")
counter_sha=$(redis-cli -p "$redis_port" SCRIPT LOAD "$counter_script")

echo "tallyd (1 thread, memory only) RESP on 127.0.0.1:$resp_port and redis-server" \
  "$(redis-server --version | sed -E 's/.* v=([^ ]+).*/\1/') on 127.0.0.1:$redis_port, both" \
  "on CPU 0; redis-benchmark on CPU 1: 50 clients, $requests requests, $keys random keys"
echo "same answer on a new key: tally $(redis-cli -p "$resp_port" CL.THROTTLE same 15 30 60 |
  tr '\n' ' ')/ Redis GCRA $(redis-cli -p "$redis_port" EVALSHA "$gcra_sha" 1 same 15 30 60 1 |
  tr '\n' ' ')"

results=()
# run LABEL PIPELINE ROUND: one redis-benchmark run of LABEL's command; its
# figures go to $work_dir/LABEL-pPIPELINE-rROUND.result (one JSON object).
run() {
  local label=$1 pipeline=$2 round=$3 port=$redis_port server_pid=$redis_pid command=() csv
  local cpu_before_ms server_ns
  case "$label" in
    tally-throttle) command=(CL.THROTTLE key:__rand_int__ 1000 1000 1) ;;
    redis-gcra) command=(EVALSHA "$gcra_sha" 1 key:__rand_int__ 1000 1000 1 1) ;;
    tally-counter) command=(TALLY.CHECK key:__rand_int__ sliding_counter 1000000 60000) ;;
    redis-counter) command=(EVALSHA "$counter_sha" 1 key:__rand_int__ 1000000 60000) ;;
    redis-incr) command=(INCR key:__rand_int__) ;;
  esac
  [[ $label != tally-* ]] || { port=$resp_port; server_pid=$tallyd_pid; }
  [ "$port" = "$resp_port" ] || redis-cli -p "$redis_port" FLUSHALL >/dev/null
  cpu_before_ms=$(bench_cpu_ms "$server_pid")
  csv=$("${client_cpu[@]}" redis-benchmark -h 127.0.0.1 -p "$port" -c 50 -n "$requests" \
    -r "$keys" -P "$pipeline" --csv "${command[@]}" 2>/dev/null | tail -n 1 | tr -d '"')
  # test,rps,avg_latency_ms,min_latency_ms,p50_latency_ms,p95_latency_ms,p99_latency_ms,max_latency_ms
  IFS=, read -r _ rps _ _ p50 _ p99 _ <<<"$csv"
  server_ns=$(awk -v ms=$(($(bench_cpu_ms "$server_pid") - cpu_before_ms)) -v n="$requests" \
    'BEGIN { printf "%.0f", ms * 1e6 / n }')
  printf '{"label": "%s", "pipeline": %s, "round": %s, "ops_per_s": %s, "p50_ms": %s, "p99_ms": %s, "server_ns_per_request": %s}\n' \
    "$label" "$pipeline" "$round" "$rps" "$p50" "$p99" "$server_ns" \
    >"$work_dir/$label-p$pipeline-r$round.result"
  results+=("$work_dir/$label-p$pipeline-r$round.result")
  printf "%-15s %3s %5s %12.0f %8s %8s %10s\n" "$label" "$pipeline" "$round" "$rps" "$p50" "$p99" \
    "$server_ns"
}

labels=(tally-throttle redis-gcra tally-counter redis-counter redis-incr)
echo
printf "%-15s %3s %5s %12s %8s %8s %10s\n" scenario -P round ops/s p50_ms p99_ms server_ns
for round in $(seq "$rounds"); do
  for pipeline in 1 16; do
    for label in "${labels[@]}"; do run "$label" "$pipeline" "$round"; done
  done
done
# Nothing was denied on either side (the limits are far above the load).
echo "tally's RESP counters: $(redis-cli -p "$resp_port" INFO stats | tr -d '\r' |
  grep -E '^resp_(throttled|errors)' | tr '\n' ' ')"
bench_stop "$tallyd_pid"
bench_stop "$redis_pid"

# field LABEL PIPELINE NAME: the median over the rounds of a result's field.
field() {
  local round
  for round in $(seq "$rounds"); do
    bench_json_field "$work_dir/$1-p$2-r$round.result" "$3"
  done | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
}
echo
[ "$rounds" -eq 1 ] || echo "(the ratios and goals below compare medians of $rounds rounds)"
echo "== ratios, tally / Redis"
printf "%-32s %3s %8s %8s %8s\n" comparison -P ops/s p50 p99
compare() {
  local tally=$1 redis=$2 pipeline=$3 ops p50 p99
  ops=$(bench_ratio "$(field "$tally" "$pipeline" ops_per_s)" "$(field "$redis" "$pipeline" ops_per_s)")
  p50=$(bench_ratio "$(field "$tally" "$pipeline" p50_ms)" "$(field "$redis" "$pipeline" p50_ms)")
  p99=$(bench_ratio "$(field "$tally" "$pipeline" p99_ms)" "$(field "$redis" "$pipeline" p99_ms)")
  printf "%-32s %3s %8s %8s %8s\n" "$tally / $redis" "$pipeline" "$ops" "$p50" "$p99"
  printf '{"ratio": "%s / %s", "pipeline": %s, "ops_per_s": %s, "p50_ms": %s, "p99_ms": %s}\n' \
    "$tally" "$redis" "$pipeline" "$ops" "$p50" "$p99" >"$work_dir/$tally.$redis.$pipeline.ratio"
  results+=("$work_dir/$tally.$redis.$pipeline.ratio")
}
for pipeline in 1 16; do
  compare tally-throttle redis-gcra "$pipeline"
  compare tally-counter redis-counter "$pipeline"
  compare tally-throttle redis-incr "$pipeline"
  compare tally-counter redis-incr "$pipeline"
done

echo
echo "== goals"
ratio() { bench_ratio "$(field "$1" "$3" ops_per_s)" "$(field "$2" "$3" ops_per_s)"; }
goal() {  # goal TEXT RATIO MINIMUM
  local verdict=met
  awk -v r="$2" -v m="$3" 'BEGIN { exit !(r >= m) }' || verdict="NOT met"
  printf "%-52s %6sx  (goal >= %sx: %s)\n" "$1" "$2" "$3" "$verdict"
}
goal "CL.THROTTLE vs Redis+Lua GCRA at -P 16" "$(ratio tally-throttle redis-gcra 16)" 3
goal "TALLY.CHECK sliding_counter vs Redis+Lua at -P 16" "$(ratio tally-counter redis-counter 16)" 3
goal "CL.THROTTLE vs Redis INCR at -P 1" "$(ratio tally-throttle redis-incr 1)" 1
goal "TALLY.CHECK sliding_counter vs Redis INCR at -P 1" "$(ratio tally-counter redis-incr 1)" 1

out="$build_dir/resp_bench.json"
bench_json_array "$out" "${results[@]}"
echo
echo "results: $out"
