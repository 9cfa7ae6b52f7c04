#!/usr/bin/env bash
# What TLS costs: the same 3-node cluster and load with gossip in plain text
# (HMAC seals), over TLS 1.3 with the PSK (--gossip-tls psk) and over mutual
# TLS with certificates (--gossip-tls cert), side by side in one run; and the
# HTTP front served plain and over TLS (--client-tls on). Not a test: it
# prints a table and JSON ($BUILD_DIR/tls_bench.json).
#
# Gossip: three tallyd (--threads 1, memory only) pinned to CPU 0, joined
# through node 0; tally-loadgen on CPU 1 spreads checks on KEYS keys over
# the three client ports (plain text in every mode: only gossip changes).
# Per decision: CPU of all three tallyd (user + system, /proc/<pid>/stat),
# the gossip bytes on the wire (TCP payload both ways on every gossip
# connection, from the kernel's tcp_info via `ss -ti`: TLS records and
# handshakes included) and the gossip bytes tally wrote (the nodes'
# gossip_bytes_sent: frames and seals, before TLS). The CPU of all tallyd
# includes serving the checks, the same in every mode; the CPU of the three
# gossip threads ("tally-gossip", /proc/<pid>/task/<tid>/stat) is gossip's
# alone: links, sessions, sealing, merging, and TLS.
#
# HTTP: one tallyd (--threads 1) on CPU 0, wrk (one thread, KEEP-ALIVE
# connections, so handshakes are a few and the figure is the records' cost)
# on CPU 1 asking GET /v1/policy; CPU of tallyd per request, plain and TLS.
#
# About 3 minutes. Environment: BUILD_DIR (build), DURATION_S (8), ROUNDS (2), KEYS (100000),
# CONNECTIONS (32).
set -euo pipefail
cd "$(dirname "$0")/../.."
build_dir=${BUILD_DIR:-build}
duration_s=${DURATION_S:-8}
rounds=${ROUNDS:-2}
keys=${KEYS:-100000}
connections=${CONNECTIONS:-32}
# shellcheck source-path=SCRIPTDIR/../..
source tests/bench/bench_lib.sh
bench_build "$build_dir" tallyd tallyctl tally-loadgen
bench_init
certs=$work_dir/certs
sh tests/tls/make_certs.sh "$certs"
head -c 32 /dev/urandom | base64 >"$work_dir/secret"
chmod 600 "$work_dir/secret"

mode_args() {  # the gossip flags of a mode
  case $1 in
    plain) ;;
    psk) echo --gossip-tls psk ;;
    cert) echo --gossip-tls cert --tls-cert-file "$certs/node.pem" --tls-key-file \
      "$certs/node.key" --tls-ca-file "$certs/ca.pem" ;;
  esac
}

# Sum of the CPU ms of the pids given.
cpu_ms() {
  local total=0 pid
  for pid in "$@"; do total=$((total + $(bench_cpu_ms "$pid"))); done
  echo "$total"
}

# Sum of the CPU ms of the gossip threads of the pids given.
gossip_cpu_ms() {
  local total=0 pid task
  for pid in "$@"; do
    for task in /proc/"$pid"/task/*; do
      [ "$(cat "$task/comm")" = tally-gossip ] &&
        total=$((total + $(bench_cpu_ms "$pid/task/${task##*/}")))
    done
  done
  echo "$total"
}

# TCP payload bytes, both ways, of the connections to the gossip ports given
# (counted once each: on the accepting side's socket).
wire_bytes() {
  local filter="" port
  for port in "$@"; do filter+="${filter:+ or }sport = :$port"; done
  ss -tinH state established "( $filter )" |
    grep -oE 'bytes_(sent|received):[0-9]+' | awk -F: '{ s += $2 } END { printf "%d", s }'
}

# Sum of the nodes' gossip_bytes_sent (what tally wrote, before TLS).
app_bytes() {
  local total=0 port
  for port in "$@"; do
    "$build_dir/bin/tallyctl" --port "$port" --json stats >"$work_dir/stats.json"
    total=$((total + $(bench_json_field "$work_dir/stats.json" gossip_bytes_sent)))
  done
  echo "$total"
}

# run_cluster MODE OUT: one gossip run; its figures as one JSON line in OUT.
run_cluster() {
  local mode=$1 out=$2 i pids=() ports=() gossip_ports=() seed=() dir
  # shellcheck disable=SC2046  # mode_args' words are flags
  for i in 0 1 2; do
    dir=${out%.json}-node$i  # fresh each run: no port file of an earlier run
    mkdir -p "$dir"
    bench_start_tallyd "$dir/log" "$dir/port" 20 --threads 1 --memory-only \
      --cluster-secret-file "$work_dir/secret" --gossip-port 0 --gossip-port-file "$dir/gport" \
      "${seed[@]}" $(mode_args "$mode")
    pids+=("$tallyd_pid")
    ports+=("$tallyd_port")
    gossip_ports+=("$(cat "$dir/gport")")
    seed=(--seed "127.0.0.1:${gossip_ports[0]}")
  done
  # Every node has a session from each other: 6 connections.
  local deadline_us=$(($(bench_now_us) + 20000000))
  until [ "$(ss -tnH state established "( sport = :${gossip_ports[0]} or sport = :${gossip_ports[1]} or sport = :${gossip_ports[2]} )" | wc -l)" -eq 6 ]; do
    [ "$(bench_now_us)" -lt "$deadline_us" ] || { echo "$mode: gossip did not connect" >&2; exit 1; }
    sleep 0.05
  done
  sleep 1  # the first full syncs
  local cpu0 gcpu0 wire0 app0 cpu1 gcpu1 wire1 app1
  cpu0=$(cpu_ms "${pids[@]}")
  gcpu0=$(gossip_cpu_ms "${pids[@]}")
  wire0=$(wire_bytes "${gossip_ports[@]}")
  app0=$(app_bytes "${ports[@]}")
  "${client_cpu[@]}" "$build_dir/bin/tally-loadgen" --address "127.0.0.1:${ports[0]}" \
    --address "127.0.0.1:${ports[1]}" --address "127.0.0.1:${ports[2]}" \
    --connections "$connections" --depth 4 --keys "$keys" --duration-ms $((duration_s * 1000)) \
    --no-header --label "$mode" --json "$work_dir/loadgen.json" >/dev/null
  cpu1=$(cpu_ms "${pids[@]}")
  gcpu1=$(gossip_cpu_ms "${pids[@]}")
  wire1=$(wire_bytes "${gossip_ports[@]}")
  app1=$(app_bytes "${ports[@]}")
  local decisions
  decisions=$(bench_json_field "$work_dir/loadgen.json" decisions)
  for pid in "${pids[@]}"; do bench_stop "$pid"; done
  printf '{"kind": "gossip", "mode": "%s", "decisions": %s, "decisions_per_s": %s, "tallyd_cpu_ms": %s, "cpu_us_per_decision": %s, "gossip_cpu_ms": %s, "gossip_cpu_us_per_decision": %s, "wire_bytes": %s, "wire_bytes_per_decision": %s, "app_bytes": %s, "app_bytes_per_decision": %s}\n' \
    "$mode" "$decisions" "$(bench_json_field "$work_dir/loadgen.json" decisions_per_s)" \
    $((cpu1 - cpu0)) "$(awk -v c=$((cpu1 - cpu0)) -v d="$decisions" 'BEGIN { printf "%.3f", c * 1000 / d }')" \
    $((gcpu1 - gcpu0)) "$(awk -v c=$((gcpu1 - gcpu0)) -v d="$decisions" 'BEGIN { printf "%.3f", c * 1000 / d }')" \
    $((wire1 - wire0)) "$(awk -v b=$((wire1 - wire0)) -v d="$decisions" 'BEGIN { printf "%.2f", b / d }')" \
    $((app1 - app0)) "$(awk -v b=$((app1 - app0)) -v d="$decisions" 'BEGIN { printf "%.2f", b / d }')" >"$out"
}

# run_http MODE OUT: wrk against one tallyd's HTTP front, plain or TLS.
run_http() {
  local mode=$1 out=$2 dir=${2%.json} scheme=http tls=()
  mkdir -p "$dir/policies"
  cat >"$dir/policies/bench.yaml" <<POLICY
domain: bench
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 1000000000, algorithm: sliding_counter}
POLICY
  if [ "$mode" = tls ]; then
    scheme=https
    tls=(--client-tls on --tls-cert-file "$certs/node.pem" --tls-key-file "$certs/node.key")
  fi
  bench_start_tallyd "$dir/log" "$dir/port" 20 --threads 1 --memory-only \
    --policy-dir "$dir/policies" --http-port 0 --http-port-file "$dir/hport" "${tls[@]}"
  local pid=$tallyd_pid port cpu0 cpu1 text requests
  bench_wait_for_file "$dir/hport" "$pid" 10 || { echo "no HTTP port" >&2; exit 1; }
  port=$(cat "$dir/hport")
  cpu0=$(bench_cpu_ms "$pid")
  text=$(KEYS=$keys "${client_cpu[@]}" wrk -t1 -c"$connections" -d"${duration_s}s" \
    -s tests/bench/http_keys.lua "$scheme://127.0.0.1:$port/v1/policy")
  cpu1=$(bench_cpu_ms "$pid")
  bench_stop "$pid"
  if grep -q "Non-2xx" <<<"$text"; then echo "$text" >&2; exit 1; fi
  requests=$(awk '/requests in/ { print $1 }' <<<"$text")
  printf '{"kind": "http", "mode": "%s", "requests": %s, "requests_per_s": %s, "tallyd_cpu_ms": %s, "cpu_us_per_request": %s}\n' \
    "$mode" "$requests" "$(awk '/^Requests\/sec:/ { print $2 }' <<<"$text")" $((cpu1 - cpu0)) \
    "$(awk -v c=$((cpu1 - cpu0)) -v r="$requests" 'BEGIN { printf "%.3f", c * 1000 / r }')" >"$out"
}

results=()
for round in $(seq 1 "$rounds"); do
  for mode in plain psk cert; do
    run_cluster "$mode" "$work_dir/gossip-$mode-$round.json"
    results+=("$work_dir/gossip-$mode-$round.json")
    echo "round $round: $(cat "$work_dir/gossip-$mode-$round.json")"
  done
  for mode in plain tls; do
    run_http "$mode" "$work_dir/http-$mode-$round.json"
    results+=("$work_dir/http-$mode-$round.json")
    echo "round $round: $(cat "$work_dir/http-$mode-$round.json")"
  done
done
out="$build_dir/tls_bench.json"
bench_json_array "$out" "${results[@]}"

# The table: medians over the rounds, and ratios to plain text.
median() {  # median FIELD FILE...
  local field=$1
  shift
  for file in "$@"; do bench_json_field "$file" "$field"; done | sort -g |
    awk '{ v[NR] = $1 } END { printf "%s", (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
}
echo
echo "gossip: 3 nodes, $connections connections x depth 4 on $keys keys, ${duration_s}s x $rounds rounds (medians)"
printf "%-6s %12s %16s %6s %19s %6s %15s %6s %14s\n" mode decisions/s all_cpu_us/decision ratio gossip_cpu_us/decision ratio wire_B/decision ratio app_B/decision
base_cpu=$(median cpu_us_per_decision "$work_dir"/gossip-plain-*.json)
base_gossip=$(median gossip_cpu_us_per_decision "$work_dir"/gossip-plain-*.json)
base_wire=$(median wire_bytes_per_decision "$work_dir"/gossip-plain-*.json)
for mode in plain psk cert; do
  files=("$work_dir"/gossip-"$mode"-*.json)
  cpu=$(median cpu_us_per_decision "${files[@]}")
  gossip=$(median gossip_cpu_us_per_decision "${files[@]}")
  wire=$(median wire_bytes_per_decision "${files[@]}")
  printf "%-6s %12.0f %16s %6s %19s %6s %15s %6s %14s\n" "$mode" \
    "$(median decisions_per_s "${files[@]}")" "$cpu" "$(bench_ratio "$cpu" "$base_cpu")" \
    "$gossip" "$(bench_ratio "$gossip" "$base_gossip")" "$wire" "$(bench_ratio "$wire" "$base_wire")" "$(median app_bytes_per_decision "${files[@]}")"
done
echo
echo "HTTP front: wrk -t1 -c$connections, keep-alive, ${duration_s}s x $rounds rounds (medians)"
printf "%-6s %12s %15s %8s\n" mode requests/s cpu_us/request ratio
base_http=$(median cpu_us_per_request "$work_dir"/http-plain-*.json)
for mode in plain tls; do
  files=("$work_dir"/http-"$mode"-*.json)
  cpu=$(median cpu_us_per_request "${files[@]}")
  printf "%-6s %12.0f %15s %8s\n" "$mode" "$(median requests_per_s "${files[@]}")" "$cpu" \
    "$(bench_ratio "$cpu" "$base_http")"
done
echo
echo "JSON: $out"
