#!/usr/bin/env bash
# The HTTP benchmark: tallyd's HTTP front (GET /v1/policy) beside nginx
# answering a static 204 on the same machine (the HTTP ceiling here) and
# beside tally's own Cap'n Proto front. Not a test: it prints figures only.
#
# ONE tallyd (--threads 1, --memory-only) and ONE nginx worker (access log
# off, `return 204`) are pinned to CPU 0; wrk (one thread) or tally-loadgen
# to CPU 1. The policy limits descriptor key `tenant` to 10^9 per minute with
# the sliding-window counter, and the Cap'n Proto runs ask for the same
# explicit limit, so nothing is denied and both tally fronts drive the same
# engine work. wrk asks GET /v1/policy?domain=bench&tenant=N for N cycling
# over KEYS keys (tests/bench/http_keys.lua); nginx gets the same requests
# from the same script. Scenarios, per round (ROUNDS rounds of DURATION_S s
# each, after a warm-up):
#   nginx-c1   http-c1   capnp-c1     1 connection, one request at a time
#   nginx-c50  http-c50  capnp-c50    50 connections, one request at a time each
# Prints each run, the means, and the ratios http/nginx and http/capnp of
# requests/s (goal: http-c50 / nginx-c50 >= 0.7), of p50/p99 latency and of
# the server's CPU time per request (tallyd's, or nginx's worker's: on a
# shared machine the steadier figure); all results go to
# $BUILD_DIR/http_bench.json (a JSON array).
#
# Environment: DURATION_S per run (5), ROUNDS (3), KEYS (100000), BUILD_DIR
# (build).
set -euo pipefail
cd "$(dirname "$0")/../.."

duration_s=${DURATION_S:-5}
rounds=${ROUNDS:-3}
keys=${KEYS:-100000}
build_dir=${BUILD_DIR:-build}
limit=1000000000
window_ms=60000

# shellcheck source-path=SCRIPTDIR/../..
source tests/bench/bench_lib.sh
for tool in wrk /usr/sbin/nginx; do
  command -v "$tool" >/dev/null || { echo "$tool is missing (Debian: wrk, nginx)" >&2; exit 1; }
done
bench_build "$build_dir" tallyd tally-loadgen
bench_init
results=()

mkdir "$work_dir/policies" "$work_dir/nginx" "$work_dir/nginx/tmp"
cat >"$work_dir/policies/bench.yaml" <<EOF
domain: bench
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: $limit, algorithm: sliding_counter}
EOF
bench_start_tallyd "$work_dir/tallyd.log" "$work_dir/tallyd.port" 10 --threads 1 --memory-only \
  --policy-dir "$work_dir/policies" --http-port 0 --http-port-file "$work_dir/http.port"
bench_wait_for_file "$work_dir/http.port" "$tallyd_pid" 10 ||
  { cat "$work_dir/tallyd.log" >&2; echo "tallyd's HTTP front did not start" >&2; exit 1; }
http_port=$(cat "$work_dir/http.port")

nginx_port=$(free_port)
cat >"$work_dir/nginx/nginx.conf" <<EOF
daemon off;
worker_processes 1;
pid $work_dir/nginx/nginx.pid;
error_log $work_dir/nginx/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $work_dir/nginx/tmp; proxy_temp_path $work_dir/nginx/tmp;
  fastcgi_temp_path $work_dir/nginx/tmp; uwsgi_temp_path $work_dir/nginx/tmp;
  scgi_temp_path $work_dir/nginx/tmp;
  keepalive_requests 1000000000;
  server { listen 127.0.0.1:$nginx_port; location / { return 204; } }
}
EOF
bench_spawn "$work_dir/nginx.log" "${server_cpu[@]}" /usr/sbin/nginx -p "$work_dir/nginx" \
  -c "$work_dir/nginx/nginx.conf" -e "$work_dir/nginx/error.log"
nginx_pid=$bench_pid
for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$nginx_port") 2>/dev/null && break; sleep 0.02; done
nginx_worker=$(pgrep -P "$nginx_pid" | head -n 1)

echo "tallyd (1 thread) and nginx (1 worker) on CPU 0, load on CPU 1: HTTP 127.0.0.1:$http_port," \
  "Cap'n Proto 127.0.0.1:$tallyd_port, nginx 127.0.0.1:$nginx_port; $keys keys;" \
  "${duration_s} s per run, $rounds rounds"

# to_us VALUE: wrk's "68.00us", "1.20ms" or "1.05s" in microseconds.
to_us() {
  awk -v v="$1" 'BEGIN {
    n = v + 0; unit = v; sub(/^[0-9.]+/, "", unit)
    printf "%.1f", (unit == "s" ? n * 1e6 : unit == "ms" ? n * 1e3 : n)
  }'
}

# run LABEL CONNECTIONS DURATION_S OUT: one run of LABEL's front; writes a
# one-line JSON object to OUT, with the server's CPU time per request.
run() {
  local label=$1 connections=$2 seconds=$3 out=$4 server=$tallyd_pid before_ms
  [[ $label == nginx-* ]] && server=$nginx_worker
  before_ms=$(bench_cpu_ms "$server")
  measure "$@"
  local requests_per_s cpu_ms
  requests_per_s=$(bench_json_field "$out.run" requests_per_s)
  cpu_ms=$(($(bench_cpu_ms "$server") - before_ms))
  sed -E "s/\}$/, \"server_cpu_us_per_request\": $(awk -v c="$cpu_ms" -v r="$requests_per_s" \
    -v s="$seconds" 'BEGIN { printf "%.2f", (r > 0 ? c * 1000 / (r * s) : 0) }')}/" \
    "$out.run" >"$out"
}

# measure LABEL CONNECTIONS DURATION_S OUT: the load generator's figures in OUT.run.
measure() {
  local label=$1 connections=$2 seconds=$3 out=$4 text port
  case "$label" in
    capnp-*)
      "${client_cpu[@]}" "$build_dir/bin/tally-loadgen" --target tally \
        --address "127.0.0.1:$tallyd_port" --connections "$connections" --depth 1 --keys "$keys" \
        --distribution uniform --algorithm sliding_counter --limit "$limit" \
        --window-ms "$window_ms" --label "$label" --json "$out.loadgen" \
        --duration-ms $((seconds * 1000)) >/dev/null
      printf '{"label": "%s", "connections": %s, "requests_per_s": %s, "p50_us": %s, "p99_us": %s}\n' \
        "$label" "$connections" "$(bench_json_field "$out.loadgen" decisions_per_s)" \
        "$(bench_json_field "$out.loadgen" p50_us)" "$(bench_json_field "$out.loadgen" p99_us)" \
        >"$out.run"
      return
      ;;
    http-*) port=$http_port ;;
    nginx-*) port=$nginx_port ;;
  esac
  text=$(KEYS=$keys "${client_cpu[@]}" wrk -t1 -c"$connections" -d"${seconds}s" --latency \
    -s tests/bench/http_keys.lua "http://127.0.0.1:$port/v1/policy")
  if grep -q "Non-2xx" <<<"$text"; then
    echo "$text" >&2
    echo "$label: answers other than 2xx" >&2
    exit 1
  fi
  printf '{"label": "%s", "connections": %s, "requests_per_s": %s, "p50_us": %s, "p99_us": %s}\n' \
    "$label" "$connections" "$(awk '/^Requests\/sec:/ { print $2 }' <<<"$text")" \
    "$(to_us "$(awk '$1 == "50%" { print $2 }' <<<"$text")")" \
    "$(to_us "$(awk '$1 == "99%" { print $2 }' <<<"$text")")" >"$out.run"
}

echo "== warm-up (not reported)"
for label in nginx-w http-w capnp-w; do run "$label" 50 2 "$work_dir/warmup.json"; done

scenarios=("nginx-c1 1" "http-c1 1" "capnp-c1 1" "nginx-c50 50" "http-c50 50" "capnp-c50 50")
printf "%-6s %-10s %14s %9s %9s %16s\n" round scenario requests/s p50_us p99_us server_us/req
for round in $(seq 1 "$rounds"); do
  for scenario in "${scenarios[@]}"; do
    read -r label connections <<<"$scenario"
    out="$work_dir/$label.$round.json"
    run "$label" "$connections" "$duration_s" "$out"
    printf "%-6s %-10s %14.0f %9s %9s %16s\n" "$round" "$label" \
      "$(bench_json_field "$out" requests_per_s)" "$(bench_json_field "$out" p50_us)" \
      "$(bench_json_field "$out" p99_us)" "$(bench_json_field "$out" server_cpu_us_per_request)"
    results+=("$out")
  done
done
bench_stop "$nginx_pid" QUIT
bench_stop "$tallyd_pid"

# mean LABEL FIELD: the mean over the rounds.
mean() {
  local round
  for round in $(seq 1 "$rounds"); do bench_json_field "$work_dir/$1.$round.json" "$2"; done |
    awk '{ sum += $1 } END { printf "%.1f", sum / NR }'
}

echo
echo "== means over $rounds rounds"
printf "%-10s %14s %9s %9s %16s\n" scenario requests/s p50_us p99_us server_us/req
for scenario in "${scenarios[@]}"; do
  label=${scenario%% *}
  printf "%-10s %14.0f %9s %9s %16s\n" "$label" "$(mean "$label" requests_per_s)" \
    "$(mean "$label" p50_us)" "$(mean "$label" p99_us)" \
    "$(mean "$label" server_cpu_us_per_request)"
  printf '{"scenario": "mean", "label": "%s", "rounds": %s, "requests_per_s": %s, "p50_us": %s, "p99_us": %s, "server_cpu_us_per_request": %s}\n' \
    "$label" "$rounds" "$(mean "$label" requests_per_s)" "$(mean "$label" p50_us)" \
    "$(mean "$label" p99_us)" "$(mean "$label" server_cpu_us_per_request)" >"$work_dir/$label.mean"
  results+=("$work_dir/$label.mean")
done

echo
echo "== ratios of the means"
printf "%-22s %12s %8s %8s %14s\n" comparison requests/s p50 p99 server_us/req
for pair in "http-c1 nginx-c1" "http-c50 nginx-c50" "http-c1 capnp-c1" "http-c50 capnp-c50"; do
  read -r a b <<<"$pair"
  rate=$(bench_ratio "$(mean "$a" requests_per_s)" "$(mean "$b" requests_per_s)")
  p50=$(bench_ratio "$(mean "$a" p50_us)" "$(mean "$b" p50_us)")
  p99=$(bench_ratio "$(mean "$a" p99_us)" "$(mean "$b" p99_us)")
  cpu=$(bench_ratio "$(mean "$a" server_cpu_us_per_request)" \
    "$(mean "$b" server_cpu_us_per_request)")
  printf "%-22s %12s %8s %8s %14s\n" "$a / $b" "$rate" "$p50" "$p99" "$cpu"
  printf '{"scenario": "ratio", "of": "%s", "to": "%s", "requests_per_s": %s, "p50_us": %s, "p99_us": %s, "server_cpu_us_per_request": %s}\n' \
    "$a" "$b" "$rate" "$p50" "$p99" "$cpu" >"$work_dir/$a.$b.ratio"
  results+=("$work_dir/$a.$b.ratio")
done

out="$build_dir/http_bench.json"
bench_json_array "$out" "${results[@]}"
echo
echo "results: $out"
