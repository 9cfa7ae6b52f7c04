#!/usr/bin/env bash
# The persistence benchmark: what keeping counters in RocksDB costs tallyd.
# Not a test: it prints figures only.
#
# tallyd (one thread; its persister and RocksDB threads too) runs pinned to
# CPU 0 and tally-loadgen to CPU 1, as in the daemon benchmark. In one run:
#  1. throughput, --memory-only against persistence (default flush interval,
#     a fresh data directory in a temporary directory), with the daemon
#     benchmark's tally scenarios: sliding_counter, CONNECTIONS connections,
#     KEYS uniform keys, depth 1, depth 16, and batch 100 at depth 1; every run
#     on a freshly started tallyd, alternating, ROUNDS times. Ratio of the
#     mean decisions/s, persistence/memory-only (goal >= 0.90), and per round;
#  2. RocksDB writes during the persistence runs: keys written and flushes
#     per second, from tallyctl stats before and after each run; and the share
#     of tallyd's CPU its persistence threads took (per-thread /proc times);
#  3. restart with RESTART_KEYS live keys: load them (window 1 h, batch 100,
#     20 checks per key on average so that practically every key is hit: the
#     count actually held is reported), wait for the last flush, SIGTERM
#     (which writes a checkpoint),
#     restart on the same data directory: restore_ms (stats and log line),
#     time from starting the process to listening (port file written), keys
#     restored (goal: under 2 s). The page cache is warm;
#  4. disk bytes per live key once the load is flushed: storage_disk_bytes
#     (SST files and WAL) / keys, and du -sb of the data directory / keys.
# Prints the loadgen runs, then a summary; all results go to
# $BUILD_DIR/persistence_bench.json (a JSON array).
#
# Environment: DURATION_MS per throughput run (5000), ROUNDS (3), CONNECTIONS (50),
# KEYS (100000), RESTART_KEYS (1000000), BUILD_DIR (build).
set -euo pipefail
cd "$(dirname "$0")/../.."

duration_ms=${DURATION_MS:-5000}
rounds=${ROUNDS:-3}
connections=${CONNECTIONS:-50}
keys=${KEYS:-100000}
restart_keys=${RESTART_KEYS:-1000000}
build_dir=${BUILD_DIR:-build}
restart_window_ms=3600000
restart_goal_ms=2000
ratio_goal=0.90

# shellcheck source-path=SCRIPTDIR/../..
source tests/bench/bench_lib.sh
bench_build "$build_dir" tallyd tallyctl tally-loadgen
bench_init

results=()  # files holding one JSON object each, for the output array

# stats NAME: the running tallyd's stats into $work_dir/NAME.stats (one-line
# JSON); how long the reply took into $stats_ms. The timeout is long: a stats
# request waits for a flush in progress.
stats() {
  local start_us
  start_us=$(bench_now_us)
  "${client_cpu[@]}" "$build_dir/bin/tallyctl" --port "$tallyd_port" --timeout-ms 120000 \
    --json stats >"$work_dir/$1.stats" ||
    { cat "$work_dir/$1.stats" >&2; echo "tallyctl stats failed ($1)" >&2; exit 1; }
  stats_ms=$((($(bench_now_us) - start_us) / 1000))
}
# stat_of NAME FIELD: a field of a stats snapshot.
stat_of() { bench_json_field "$work_dir/$1.stats" "$2"; }
# calc EXPRESSION [NAME=VALUE...]: an awk expression's value, "%.1f".
calc() {
  local expression=$1 assignments=() assignment
  shift
  for assignment in "$@"; do assignments+=(-v "$assignment"); done
  awk "${assignments[@]}" "BEGIN { printf \"%.1f\", ($expression) }"
}
# seconds START_US END_US: the seconds between two bench_now_us, "%.3f".
seconds() { awk -v s="$1" -v e="$2" 'BEGIN { printf "%.3f", (e - s) / 1e6 }'; }
# stop_tallyd: SIGTERM, wait; exits unless tallyd stopped cleanly.
stop_tallyd() {
  bench_stop "$tallyd_pid"
  [ "$bench_status" -eq 0 ] || { echo "tallyd exited with status $bench_status" >&2; exit 1; }
}

echo "tallyd on 127.0.0.1, port chosen per run; data directories under $work_dir" \
  "($(df --output=fstype "$work_dir" | tail -n 1)); $connections connections, $keys uniform keys," \
  "${duration_ms} ms each; restart with $restart_keys keys"

header=()  # the loadgen's table header comes with the first run only
# loadgen LABEL LOADGEN_OPTION...: drives the running tallyd, result in $work_dir/LABEL.json.
loadgen() {
  local label=$1
  shift
  "${client_cpu[@]}" "$build_dir/bin/tally-loadgen" --target tally \
    --address "127.0.0.1:$tallyd_port" --connections "$connections" --distribution uniform \
    --label "$label" "${header[@]}" --json "$work_dir/$label.json" "$@"
  header=(--no-header)
}

# storage_cpu_ms PID: the CPU time of its persistence threads (tally-flush,
# tally-compact, RocksDB's rocksdb:*), read per thread: the direct cost.
storage_cpu_ms() {
  local task total=0
  for task in /proc/"$1"/task/*; do
    case "$(cat "$task/comm")" in
      tally-flush | tally-compact | rocksdb:*)
        total=$((total + $(bench_cpu_ms "${task#/proc/}")))
        ;;
    esac
  done
  echo "$total"
}

# throughput LABEL MODE DEPTH BATCH: one run on a fresh tallyd, MODE off
# (--memory-only) or on (persistence in a new data directory).
throughput() {
  local label=$1 mode=$2 depth=$3 batch=$4 store=(--memory-only) start_us end_us
  if [ "$mode" = on ]; then store=(--data-dir "$work_dir/$label.data"); fi
  bench_start_tallyd "$work_dir/$label.log" "$work_dir/$label.port" 10 --threads 1 "${store[@]}"
  stats "$label.before"
  start_us=$(bench_now_us)  # the counters' interval: from this reply to the next
  local cpu_before_ms cpu_after_ms storage_before_ms storage_after_ms
  cpu_before_ms=$(bench_cpu_ms "$tallyd_pid")
  storage_before_ms=$(storage_cpu_ms "$tallyd_pid")
  loadgen "$label" --depth "$depth" --batch "$batch" --keys "$keys" --duration-ms "$duration_ms"
  cpu_after_ms=$(bench_cpu_ms "$tallyd_pid")
  storage_after_ms=$(storage_cpu_ms "$tallyd_pid")
  stats "$label.after"
  end_us=$(bench_now_us)
  stop_tallyd

  local seconds written flushes errors
  seconds=$(seconds "$start_us" "$end_us")
  written=$(($(stat_of "$label.after" storage_keys_written) - $(stat_of "$label.before" storage_keys_written)))
  flushes=$(($(stat_of "$label.after" storage_flushes) - $(stat_of "$label.before" storage_flushes)))
  errors=$(($(stat_of "$label.after" storage_write_errors) - $(stat_of "$label.before" storage_write_errors)))
  # CPU per decision does not depend on how much of the core the machine lent us.
  local cpu_ns_per_decision
  cpu_ns_per_decision=$(calc "c * 1e6 / d" c=$((cpu_after_ms - cpu_before_ms)) \
    d="$(bench_json_field "$work_dir/$label.json" decisions)")
  printf '{"scenario": "throughput", "label": "%s", "persistence": %s, "depth": %s, "batch": %s, "decisions_per_s": %s, "cpu_ns_per_decision": %s, "storage_cpu_share": %s, "p50_us": %s, "p99_us": %s, "stats_interval_s": %s, "storage_keys_written": %s, "storage_flushes": %s, "storage_write_errors": %s, "keys_written_per_s": %s, "flushes_per_s": %s, "loadgen": %s}\n' \
    "$label" "$([ "$mode" = on ] && echo true || echo false)" "$depth" "$batch" \
    "$(bench_json_field "$work_dir/$label.json" decisions_per_s)" "$cpu_ns_per_decision" \
    "$(calc "c > 0 ? 100 * s / c : 0" s=$((storage_after_ms - storage_before_ms)) c=$((cpu_after_ms - cpu_before_ms)))" \
    "$(bench_json_field "$work_dir/$label.json" p50_us)" \
    "$(bench_json_field "$work_dir/$label.json" p99_us)" "$seconds" \
    "$written" "$flushes" "$errors" "$(calc "w / t" w="$written" t="$seconds")" \
    "$(calc "f / t" f="$flushes" t="$seconds")" "$(cat "$work_dir/$label.json")" \
    >"$work_dir/$label.result"
  results+=("$work_dir/$label.result")
}

# Alternating off and on, ROUNDS times, so that a change in the machine's load
# hits both alike; the summary compares the means over the rounds.
scenarios=("depth 1:d1:1:1" "depth 16:d16:16:1" "batch 100:b100:1:100")
for round in $(seq 1 "$rounds"); do
  for scenario in "${scenarios[@]}"; do
    IFS=: read -r _ name depth batch <<<"$scenario"
    throughput "tally-$name-off-r$round" off "$depth" "$batch"
    throughput "tally-$name-on-r$round" on "$depth" "$batch"
  done
done

# The restart: load, let the last flush land, SIGTERM, start again.
data_dir=$work_dir/restart.data
bench_start_tallyd "$work_dir/load.log" "$work_dir/load.port" 10 --threads 1 --data-dir "$data_dir"
load_start_us=$(bench_now_us)
load_label=load-$restart_keys
loadgen "$load_label" --depth 1 --batch 100 --keys "$restart_keys" --window-ms "$restart_window_ms" \
  --duration-ms 0 --requests $((restart_keys * 20 / 100))
load_end_us=$(bench_now_us)
# Flushed: storage_keys_written unchanged for 0.2 s, 5 times running.
stats settle.prev
settle_stats_max_ms=$stats_ms
flush_start_us=$(bench_now_us)
last_change_us=$flush_start_us  # when a stats reply last showed more keys written
stable=0
while [ "$stable" -lt 5 ]; do
  sleep 0.2
  stats settle
  [ "$stats_ms" -le "$settle_stats_max_ms" ] || settle_stats_max_ms=$stats_ms
  if [ "$(stat_of settle storage_keys_written)" = "$(stat_of settle.prev storage_keys_written)" ]; then
    stable=$((stable + 1))
  else
    stable=0
    last_change_us=$(bench_now_us)
  fi
  mv "$work_dir/settle.stats" "$work_dir/settle.prev.stats"
  [ $(($(bench_now_us) - flush_start_us)) -lt 300000000 ] ||
    { echo "storage_keys_written still changing after 300 s" >&2; exit 1; }
done
flush_s=$(seconds "$load_end_us" "$last_change_us")
stats loaded
loaded_keys=$(stat_of loaded keys)
disk_bytes=$(stat_of loaded storage_disk_bytes)
du_bytes=$(du -sb "$data_dir" | cut -f1)

stop_start_us=$(bench_now_us)
stop_tallyd
stop_end_us=$(bench_now_us)
grep -q "final checkpoint written" "$work_dir/load.log" ||
  { cat "$work_dir/load.log" >&2; echo "no final checkpoint at SIGTERM" >&2; exit 1; }
du_bytes_stopped=$(du -sb "$data_dir" | cut -f1)

bench_start_tallyd "$work_dir/restart.log" "$work_dir/restart.port" 120 --threads 1 \
  --data-dir "$data_dir"
listen_ms=$(calc "(l - s) / 1e3" s="$tallyd_start_us" l="$tallyd_listen_us")
stats restarted
restore_ms=$(stat_of restarted restore_ms)
keys_restored=$(stat_of restarted keys_restored)
restarted_keys=$(stat_of restarted keys)
restore_log=$(grep -o "restored [0-9]* keys from [0-9]* records in [0-9]* ms.*" "$work_dir/restart.log" || echo "(no log line)")
restore_log_ms=$(sed -nE 's/.*restored [0-9]+ keys from [0-9]+ records in ([0-9]+) ms.*/\1/p' "$work_dir/restart.log")
disk_bytes_restarted=$(stat_of restarted storage_disk_bytes)
stop_tallyd

printf '{"scenario": "restart", "keys_requested": %s, "window_ms": %s, "load_checks": %s, "load_s": %s, "flushed_s": %s, "slowest_stats_reply_ms": %s, "keys_loaded": %s, "storage_keys_written": %s, "storage_flushes": %s, "storage_write_errors": %s, "storage_disk_bytes": %s, "du_bytes": %s, "disk_bytes_per_key": %s, "du_bytes_per_key": %s, "shutdown_ms": %s, "du_bytes_after_shutdown": %s, "restore_ms": %s, "restore_ms_log": %s, "listening_ms": %s, "keys_restored": %s, "keys_after_restart": %s, "storage_disk_bytes_after_restart": %s, "goal_ms": %s, "loadgen": %s}\n' \
  "$restart_keys" "$restart_window_ms" "$(bench_json_field "$work_dir/$load_label.json" decisions)" \
  "$(seconds "$load_start_us" "$load_end_us")" "$flush_s" "$settle_stats_max_ms" "$loaded_keys" \
  "$(stat_of loaded storage_keys_written)" "$(stat_of loaded storage_flushes)" \
  "$(stat_of loaded storage_write_errors)" "$disk_bytes" "$du_bytes" \
  "$(calc "b / k" b="$disk_bytes" k="$loaded_keys")" "$(calc "b / k" b="$du_bytes" k="$loaded_keys")" \
  "$(calc "(e - s) / 1e3" s="$stop_start_us" e="$stop_end_us")" "$du_bytes_stopped" \
  "$restore_ms" "${restore_log_ms:-null}" "$listen_ms" "$keys_restored" "$restarted_keys" \
  "$disk_bytes_restarted" "$restart_goal_ms" "$(cat "$work_dir/$load_label.json")" \
  >"$work_dir/restart.result"

# A field of a throughput result.
result() { bench_json_field "$work_dir/$1.result" "$2"; }
# mean LABEL FIELD: the field's mean over the rounds of LABEL (tally-NAME-MODE).
mean() {
  local round sum=0
  for round in $(seq 1 "$rounds"); do
    sum=$(calc "s + v" s="$sum" v="$(result "$1-r$round" "$2")")
  done
  calc "s / n" s="$sum" n="$rounds"
}
# round_ratios NAME FIELD: per round, on/off of the field, space-separated.
round_ratios() {
  local round ratios=()
  for round in $(seq 1 "$rounds"); do
    ratios+=("$(bench_ratio "$(result "tally-$1-on-r$round" "$2")" "$(result "tally-$1-off-r$round" "$2")")")
  done
  echo "${ratios[*]}"
}

echo
echo "== throughput: decisions/s, memory-only against persistence, mean of $rounds rounds (goal: on/off >= $ratio_goal)"
printf "%-12s %14s %14s %8s %6s %12s %12s  %s\n" scenario memory-only persistence on/off goal \
  p99_us_off p99_us_on "on/off per round"
for scenario in "${scenarios[@]}"; do
  IFS=: read -r title name _ _ <<<"$scenario"
  off=$(mean "tally-$name-off" decisions_per_s)
  on=$(mean "tally-$name-on" decisions_per_s)
  ratio=$(bench_ratio "$on" "$off")
  per_round=$(round_ratios "$name" decisions_per_s)
  met=$(awk -v r="$ratio" -v g="$ratio_goal" 'BEGIN { print (r >= g ? "met" : "MISSED") }')
  printf "%-12s %14.0f %14.0f %8s %6s %12s %12s  %s\n" "$title" "$off" "$on" "$ratio" "$met" \
    "$(mean "tally-$name-off" p99_us)" "$(mean "tally-$name-on" p99_us)" "$per_round"
  printf '{"scenario": "ratio", "comparison": "%s", "rounds": %s, "memory_only_decisions_per_s": %s, "persistence_decisions_per_s": %s, "on_over_off": %s, "on_over_off_per_round": [%s], "goal": %s}\n' \
    "$title" "$rounds" "$off" "$on" "$ratio" "${per_round// /, }" "$ratio_goal" >"$work_dir/ratio-$name.result"
  results+=("$work_dir/ratio-$name.result")
done

echo
echo "== tallyd CPU time per decision, mean of $rounds rounds (all threads), and the share of the"
echo "   persistence runs' tallyd CPU spent in its persistence threads (tally-flush, tally-compact, rocksdb:*)"
printf "%-12s %12s %12s %10s %18s\n" scenario off_ns on_ns off/on storage_cpu_%
for scenario in "${scenarios[@]}"; do
  IFS=: read -r title name _ _ <<<"$scenario"
  off=$(mean "tally-$name-off" cpu_ns_per_decision)
  on=$(mean "tally-$name-on" cpu_ns_per_decision)
  printf "%-12s %12s %12s %10s %18s\n" "$title" "$off" "$on" "$(bench_ratio "$off" "$on")" \
    "$(mean "tally-$name-on" storage_cpu_share)"
done

echo
echo "== RocksDB writes during the persistence runs of round 1 (stats before/after each run)"
printf "%-12s %9s %14s %12s %9s %10s %11s %7s\n" scenario seconds keys_written keys/s flushes \
  flushes/s keys/flush errors
for scenario in "${scenarios[@]}"; do
  IFS=: read -r title name _ _ <<<"$scenario"
  label=tally-$name-on-r1
  printf "%-12s %9s %14s %12.0f %9s %10s %11.0f %7s\n" "$title" "$(result "$label" stats_interval_s)" \
    "$(result "$label" storage_keys_written)" "$(result "$label" keys_written_per_s)" \
    "$(result "$label" storage_flushes)" "$(result "$label" flushes_per_s)" \
    "$(calc "f > 0 ? w / f : 0" w="$(result "$label" storage_keys_written)" f="$(result "$label" storage_flushes)")" \
    "$(result "$label" storage_write_errors)"
done

echo
echo "== restart with $restart_keys keys requested (goal: listening in under $restart_goal_ms ms; page cache warm)"
restart_met=$(awk -v l="$listen_ms" -v g="$restart_goal_ms" 'BEGIN { print (l < g ? "met" : "MISSED") }')
printf "%-44s %s\n" \
  "load: checks, seconds" "$(bench_json_field "$work_dir/$load_label.json" decisions), $(seconds "$load_start_us" "$load_end_us")" \
  "load end to last flush seen, s" "$flush_s" \
  "slowest stats reply meanwhile, ms" "$settle_stats_max_ms" \
  "live keys after the load (stats keys)" "$loaded_keys" \
  "keys written / flushes during the load" "$(stat_of loaded storage_keys_written) / $(stat_of loaded storage_flushes)" \
  "shutdown on SIGTERM (final checkpoint), ms" "$(calc "(e - s) / 1e3" s="$stop_start_us" e="$stop_end_us")" \
  "restore_ms (stats)" "$restore_ms" \
  "log line" "$restore_log" \
  "start to listening (port file), ms" "$listen_ms ($restart_met)" \
  "keys_restored / keys after restart" "$keys_restored / $restarted_keys"

echo
echo "== disk per live key ($loaded_keys keys, after the last flush)"
printf "%-44s %12s %10s\n" measure bytes bytes/key
printf "%-44s %12s %10s\n" \
  "storage_disk_bytes (SST + WAL), running" "$disk_bytes" "$(calc "b / k" b="$disk_bytes" k="$loaded_keys")" \
  "du -sb data dir, running" "$du_bytes" "$(calc "b / k" b="$du_bytes" k="$loaded_keys")" \
  "du -sb data dir, after SIGTERM" "$du_bytes_stopped" "$(calc "b / k" b="$du_bytes_stopped" k="$loaded_keys")" \
  "storage_disk_bytes, after restart" "$disk_bytes_restarted" \
  "$(calc "b / k" b="$disk_bytes_restarted" k="$loaded_keys")"
results+=("$work_dir/restart.result")

out="$build_dir/persistence_bench.json"
bench_json_array "$out" "${results[@]}"
echo
echo "results: $out"
