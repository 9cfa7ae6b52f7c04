#!/usr/bin/env bash
# The gRPC benchmark: Envoy's rate limit service (tallyd --grpc-port) against
# tally's own Cap'n Proto protocol on the same node, and how long loading
# policies with 10,000 descriptors takes. Not a test: it prints figures only.
#
#  1. Throughput: ONE tallyd (--threads 1, --memory-only) pinned to CPU 0
#     serves both fronts; its policy limits descriptor key `tenant` to 10^9
#     per minute with the sliding-window counter, and the Cap'n Proto runs ask
#     for the same explicit limit (sliding_counter, 10^9 per 60 s), so nothing
#     is denied and both fronts drive the same engine work. The load generator
#     (grpc_bench or tally-loadgen) runs pinned to CPU 1 with KEYS uniform
#     keys, DURATION_MS per run. Scenarios, gRPC and Cap'n Proto alternating,
#     ROUNDS times:
#       grpc-c1       1 call in flight
#       capnp-c1      1 connection, depth 1
#       grpc-c64      64 calls in flight over GRPC_CHANNELS HTTP/2 connections
#                     (4: like Envoy, which opens one per worker thread; one
#                     connection is the bottleneck at 64, see grpc-c64-ch1)
#       capnp-c64     64 connections, depth 1
#       grpc-c64-ch1  64 calls in flight on one HTTP/2 connection
#       capnp-c1d64   1 connection, depth 64 (pipelined)
#     Each front is warmed up first (WARMUP_MS at 64 in flight, not reported).
#     Besides decisions/s and latency, each run records tallyd's CPU time per
#     decision and the share of a core tallyd and the load generator used: on
#     a shared machine the CPU per decision is the steadier figure, and the
#     shares tell which side was the bottleneck.
#  2. Policy loading: a second tallyd with --policy-dir holding one file of
#     10,000 descriptors (100 keys, each with 90 values and one value with 9
#     nested descriptors; every descriptor with a rate limit). The load time
#     tallyd logs at start-up ("policies loaded from ... in N ms") and the
#     time from starting the process to listening; then RELOADS rewrites of
#     the file (renamed into place), each changing one limit: the load time
#     logged, and the time from the rename until the log line appeared (it
#     includes up to --policy-poll-ms, POLL_MS, of waiting for the watcher).
# Prints the runs, a summary (means over the rounds) and the ratios
# gRPC / Cap'n Proto; all results go to $BUILD_DIR/grpc_bench.json (a JSON
# array).
#
# Environment: DURATION_MS per run (5000), ROUNDS (3), KEYS (100000),
# GRPC_CHANNELS (4), WARMUP_MS (2000), RELOADS (3), POLL_MS (100),
# BUILD_DIR (build).
set -euo pipefail
cd "$(dirname "$0")/../.."

duration_ms=${DURATION_MS:-5000}
rounds=${ROUNDS:-3}
keys=${KEYS:-100000}
grpc_channels=${GRPC_CHANNELS:-4}
warmup_ms=${WARMUP_MS:-2000}
reloads=${RELOADS:-3}
poll_ms=${POLL_MS:-100}
build_dir=${BUILD_DIR:-build}
limit=1000000000  # the largest a policy may have; nothing is denied
window_ms=60000   # the policy's unit: minute
domain=bench
reload_descriptors=10000

# shellcheck source-path=SCRIPTDIR/../..
source tests/bench/bench_lib.sh
bench_build "$build_dir" tallyd tally-loadgen grpc_bench
bench_init

results=()  # files holding one JSON object each, for the output array

# calc EXPRESSION [NAME=VALUE...]: an awk expression's value, "%.1f".
calc() {
  local expression=$1 assignments=() assignment
  shift
  for assignment in "$@"; do assignments+=(-v "$assignment"); done
  awk "${assignments[@]}" "BEGIN { printf \"%.1f\", ($expression) }"
}

# ---------------------------------------------------------------- throughput

mkdir "$work_dir/policies"
cat >"$work_dir/policies/bench.yaml" <<EOF
domain: $domain
descriptors:
  - key: tenant
    rate_limit:
      unit: minute
      requests_per_unit: $limit
      algorithm: sliding_counter
EOF
bench_start_tallyd "$work_dir/tallyd.log" "$work_dir/tallyd.port" 10 --threads 1 --memory-only \
  --policy-dir "$work_dir/policies" --grpc-port 0 --grpc-port-file "$work_dir/grpc.port"
bench_wait_for_file "$work_dir/grpc.port" "$tallyd_pid" 10 ||
  { cat "$work_dir/tallyd.log" >&2; echo "tallyd's gRPC front did not start" >&2; exit 1; }
grpc_port=$(cat "$work_dir/grpc.port")

echo "tallyd (1 thread, memory only) on CPU 0: Cap'n Proto on 127.0.0.1:$tallyd_port, gRPC on" \
  "127.0.0.1:$grpc_port; load generator on CPU 1; $keys uniform keys, sliding_counter" \
  "$limit per ${window_ms} ms; ${duration_ms} ms per run, $rounds rounds"

# generate LABEL IN_FLIGHT DEPTH_OR_CHANNELS JSON [OPTION...]: one run of the
# load generator of LABEL's front (grpc-* or capnp-*) against the running tallyd.
generate() {
  local label=$1 in_flight=$2 spread=$3 json=$4
  shift 4
  if [[ $label == grpc-* ]]; then
    "${client_cpu[@]}" "$build_dir/bin/grpc_bench" --port "$grpc_port" --concurrency "$in_flight" \
      --channels "$spread" --keys "$keys" --domain "$domain" --descriptor-key tenant \
      --label "$label" --json "$json" "$@"
  else
    "${client_cpu[@]}" "$build_dir/bin/tally-loadgen" --target tally \
      --address "127.0.0.1:$tallyd_port" --connections "$in_flight" --depth "$spread" \
      --keys "$keys" --distribution uniform --algorithm sliding_counter --limit "$limit" \
      --window-ms "$window_ms" --label "$label" --json "$json" "$@"
  fi
}

# Warm-up: connections, allocators and most of the keys of both fronts.
echo "== warm-up, ${warmup_ms} ms per front (not reported)"
generate grpc-warmup 64 "$grpc_channels" "$work_dir/warmup.json" --duration-ms "$warmup_ms" \
  >/dev/null
generate capnp-warmup 64 1 "$work_dir/warmup.json" --duration-ms "$warmup_ms" >/dev/null

# scenario: label, calls or connections in flight, gRPC channels or Cap'n Proto depth.
scenarios=("grpc-c1 1 1" "capnp-c1 1 1" "grpc-c64 64 $grpc_channels" "capnp-c64 64 1"
  "grpc-c64-ch1 64 1" "capnp-c1d64 1 64")
labels=()
for scenario in "${scenarios[@]}"; do labels+=("${scenario%% *}"); done

# measure LABEL IN_FLIGHT SPREAD ROUND: one run with tallyd's and the load
# generator's CPU time; result in $work_dir/LABEL.ROUND.result.
measure() {
  local label=$1 in_flight=$2 spread=$3 round=$4 json server_before_ms client_before_ms start_us
  json="$work_dir/$label.$round.json"
  server_before_ms=$(bench_cpu_ms "$tallyd_pid")
  client_before_ms=$(bench_children_cpu_ms)
  start_us=$(bench_now_us)
  generate "$label" "$in_flight" "$spread" "$json" --duration-ms "$duration_ms"
  local wall_ms server_ms client_ms decisions
  wall_ms=$((($(bench_now_us) - start_us) / 1000))
  server_ms=$(($(bench_cpu_ms "$tallyd_pid") - server_before_ms))
  client_ms=$(($(bench_children_cpu_ms) - client_before_ms))
  decisions=$(bench_json_field "$json" decisions)
  printf '{"scenario": "throughput", "label": "%s", "round": %s, "server_cpu_us_per_decision": %s, "server_cpu_pct": %s, "client_cpu_pct": %s, "generator": %s}\n' \
    "$label" "$round" "$(calc "d > 0 ? s * 1000 / d : 0" s="$server_ms" d="$decisions")" \
    "$(calc "100 * s / w" s="$server_ms" w="$wall_ms")" \
    "$(calc "100 * c / w" c="$client_ms" w="$wall_ms")" "$(cat "$json")" \
    >"$work_dir/$label.$round.result"
  results+=("$work_dir/$label.$round.result")
}

for round in $(seq 1 "$rounds"); do
  echo
  echo "== round $round"
  for scenario in "${scenarios[@]}"; do
    read -r label in_flight spread <<<"$scenario"
    measure "$label" "$in_flight" "$spread" "$round"
  done
done
bench_stop "$tallyd_pid"

# mean LABEL FIELD: the mean over the rounds of a number field of LABEL's results.
mean() {
  local round
  for round in $(seq 1 "$rounds"); do bench_json_field "$work_dir/$1.$round.result" "$2"; done |
    awk '{ sum += $1 } END { printf "%.1f", sum / NR }'
}
# per_round GRPC CAPNP: the decisions/s ratio of each round, space-separated.
per_round() {
  local round ratios=()
  for round in $(seq 1 "$rounds"); do
    ratios+=("$(bench_ratio "$(bench_json_field "$work_dir/$1.$round.result" decisions_per_s)" \
      "$(bench_json_field "$work_dir/$2.$round.result" decisions_per_s)")")
  done
  echo "${ratios[*]}"
}

echo
echo "== summary: means over $rounds rounds"
printf "%-14s %12s %9s %9s %9s %14s %11s %11s\n" scenario decisions/s p50_us p99_us p999_us \
  server_us/dec server_cpu% client_cpu%
for label in "${labels[@]}"; do
  printf "%-14s %12.0f %9s %9s %9s %14s %11s %11s\n" "$label" "$(mean "$label" decisions_per_s)" \
    "$(mean "$label" p50_us)" "$(mean "$label" p99_us)" "$(mean "$label" p999_us)" \
    "$(mean "$label" server_cpu_us_per_decision)" "$(mean "$label" server_cpu_pct)" \
    "$(mean "$label" client_cpu_pct)"
  printf '{"scenario": "throughput_mean", "label": "%s", "rounds": %s, "decisions_per_s": %s, "p50_us": %s, "p99_us": %s, "p999_us": %s, "server_cpu_us_per_decision": %s, "server_cpu_pct": %s, "client_cpu_pct": %s}\n' \
    "$label" "$rounds" "$(mean "$label" decisions_per_s)" "$(mean "$label" p50_us)" \
    "$(mean "$label" p99_us)" "$(mean "$label" p999_us)" \
    "$(mean "$label" server_cpu_us_per_decision)" "$(mean "$label" server_cpu_pct)" \
    "$(mean "$label" client_cpu_pct)" >"$work_dir/$label.mean"
  results+=("$work_dir/$label.mean")
done

echo
echo "== gRPC / Cap'n Proto (of the means; decisions/s also per round)"
printf "%-28s %12s %8s %8s %14s  %s\n" comparison decisions/s p50 p99 server_us/dec \
  "decisions/s per round"
# compare GRPC CAPNP: the ratios of GRPC's means to CAPNP's.
compare() {
  local ratio_rate ratio_p50 ratio_p99 ratio_cpu rounds_list
  ratio_rate=$(bench_ratio "$(mean "$1" decisions_per_s)" "$(mean "$2" decisions_per_s)")
  ratio_p50=$(bench_ratio "$(mean "$1" p50_us)" "$(mean "$2" p50_us)")
  ratio_p99=$(bench_ratio "$(mean "$1" p99_us)" "$(mean "$2" p99_us)")
  ratio_cpu=$(bench_ratio "$(mean "$1" server_cpu_us_per_decision)" \
    "$(mean "$2" server_cpu_us_per_decision)")
  rounds_list=$(per_round "$1" "$2")
  printf "%-28s %12s %8s %8s %14s  %s\n" "$1 / $2" "$ratio_rate" "$ratio_p50" "$ratio_p99" \
    "$ratio_cpu" "$rounds_list"
  printf '{"scenario": "ratio", "grpc": "%s", "capnp": "%s", "decisions_per_s": %s, "p50_us": %s, "p99_us": %s, "server_cpu_us_per_decision": %s, "decisions_per_s_per_round": [%s]}\n' \
    "$1" "$2" "$ratio_rate" "$ratio_p50" "$ratio_p99" "$ratio_cpu" "${rounds_list// /, }" \
    >"$work_dir/$1.$2.ratio"
  results+=("$work_dir/$1.$2.ratio")
}
compare grpc-c1 capnp-c1
compare grpc-c64 capnp-c64
compare grpc-c64 capnp-c1d64
compare grpc-c64-ch1 capnp-c1d64

# ------------------------------------------------------------ policy loading

# reload_policy FILE FIRST_LIMIT: writes the policy of $reload_descriptors
# descriptors to FILE (through a temporary file renamed into place, so the
# watcher never reads half a file); the first descriptor's limit is FIRST_LIMIT.
reload_policy() {
  awk -v domain=reload -v first="$2" 'BEGIN {
    print "domain: " domain
    print "descriptors:"
    for (k = 0; k < 100; k++) {
      for (v = 0; v < 90; v++) {
        printf "  - key: key_%d\n    value: value_%d\n    rate_limit:\n", k, v
        limit = (k == 0 && v == 0) ? first : 100 + v
        printf "      unit: second\n      requests_per_unit: %d\n", limit
      }
      printf "  - key: key_%d\n    value: group\n    rate_limit:\n", k
      printf "      unit: minute\n      requests_per_unit: 6000\n      algorithm: sliding_counter\n"
      print "    descriptors:"
      for (u = 0; u < 9; u++) {
        printf "      - key: user\n        value: user_%d\n        rate_limit:\n", u
        printf "          unit: hour\n          requests_per_unit: %d\n", 1000 + u
      }
    }
  }' >"$work_dir/reload.tmp"
  mv "$work_dir/reload.tmp" "$1"
}
# loads_logged LOG: how many times tallyd logged a policy load.
loads_logged() { grep -c "policies loaded from" "$1" || true; }
# last_load LOG FIELD: of the last load logged, its limits or ms.
last_load() {
  local pattern='.*policies loaded from .*: [0-9]+ domains, ([0-9]+) limits in ([0-9]+) ms.*'
  case "$2" in
    limits) grep "policies loaded from" "$1" | tail -n 1 | sed -E "s/$pattern/\1/" ;;
    ms) grep "policies loaded from" "$1" | tail -n 1 | sed -E "s/$pattern/\2/" ;;
  esac
}

echo
echo "== policy loading: $reload_descriptors descriptors in one file, a fresh tallyd"
mkdir "$work_dir/reload-policies"
reload_file="$work_dir/reload-policies/reload.yaml"
reload_policy "$reload_file" 100
reload_log="$work_dir/reload-tallyd.log"
bench_start_tallyd "$reload_log" "$work_dir/reload-tallyd.port" 60 --threads 1 --memory-only \
  --policy-dir "$work_dir/reload-policies" --policy-poll-ms "$poll_ms"
listen_ms=$(((tallyd_listen_us - tallyd_start_us) / 1000))
reload_limits=$(last_load "$reload_log" limits)
printf "%-10s %8s %18s\n" event load_ms visible_after_ms
printf "%-10s %8s %18s\n" start-up "$(last_load "$reload_log" ms)" "$listen_ms (listening)"
printf '{"scenario": "policy_load", "event": "startup", "descriptors": %s, "limits": %s, "file_bytes": %s, "load_ms": %s, "listening_after_ms": %s}\n' \
  "$reload_descriptors" "$reload_limits" "$(stat -c %s "$reload_file")" \
  "$(last_load "$reload_log" ms)" "$listen_ms" >"$work_dir/load.startup"
results+=("$work_dir/load.startup")

for reload in $(seq 1 "$reloads"); do
  loads_before=$(loads_logged "$reload_log")
  sleep 0.2  # a new modification time even on a coarse clock
  reload_policy "$reload_file" $((100 + reload))
  renamed_us=$(bench_now_us)
  deadline_us=$((renamed_us + 60000000))
  until [ "$(loads_logged "$reload_log")" -gt "$loads_before" ] ||
    [ "$(bench_now_us)" -gt "$deadline_us" ]; do
    sleep 0.005
  done
  [ "$(loads_logged "$reload_log")" -gt "$loads_before" ] ||
    { cat "$reload_log" >&2; echo "tallyd did not reload its policies" >&2; exit 1; }
  visible_ms=$((($(bench_now_us) - renamed_us) / 1000))
  printf "%-10s %8s %18s\n" "reload $reload" "$(last_load "$reload_log" ms)" "$visible_ms"
  printf '{"scenario": "policy_load", "event": "reload", "reload": %s, "descriptors": %s, "limits": %s, "load_ms": %s, "visible_after_ms": %s, "poll_ms": %s}\n' \
    "$reload" "$reload_descriptors" "$(last_load "$reload_log" limits)" \
    "$(last_load "$reload_log" ms)" "$visible_ms" "$poll_ms" >"$work_dir/load.$reload"
  results+=("$work_dir/load.$reload")
done
if grep -q "reload refused" "$reload_log"; then
  cat "$reload_log" >&2
  echo "tallyd refused a policy file" >&2
  exit 1
fi
bench_stop "$tallyd_pid"

out="$build_dir/grpc_bench.json"
bench_json_array "$out" "${results[@]}"
echo
echo "results: $out"
