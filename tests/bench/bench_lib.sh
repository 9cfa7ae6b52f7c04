# Shared helpers of the daemon benchmarks (run_daemon_bench.sh,
# run_persistence_bench.sh, run_grpc_bench.sh, run_resp_bench.sh). Sourced from the repository
# root, not run.
#
# bench_init makes $work_dir, a fresh temporary directory, and arranges that on
# exit (also on Ctrl-C or SIGTERM, status 130) every process started with
# bench_spawn still running gets SIGTERM and is waited for, then $work_dir is
# removed. It also sets server_cpu and client_cpu: command prefixes pinning
# servers to CPU 0 and load generators to CPU 1 (empty on a single CPU).
# bench_start_tallyd uses $build_dir.
# shellcheck shell=bash disable=SC2034  # the globals set here are read by the scripts

# bench_build BUILD_DIR TARGET...: installs missing packages, configures a
# Release build in BUILD_DIR and builds the targets.
bench_build() {
  local build_dir=$1
  shift
  bash .ci/install-deps
  cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build_dir" -j2 --target "$@"
}

bench_pids=()  # started by bench_spawn and not yet stopped

bench_cleanup() {
  local pid
  for pid in "${bench_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work_dir"
}

bench_init() {
  work_dir=$(mktemp -d)
  trap bench_cleanup EXIT
  trap 'exit 130' INT TERM

  # Servers on CPU 0, the load generator on CPU 1 (unpinned on one CPU).
  server_cpu=(taskset -c 0)
  client_cpu=(taskset -c 1)
  if [ "$(nproc)" -lt 2 ]; then
    echo "warning: fewer than 2 CPUs: servers and load generator share the CPU" >&2
    server_cpu=()
    client_cpu=()
  fi
}

# Microseconds since the epoch, without starting a process.
bench_now_us() { echo "${EPOCHREALTIME//[^0-9]/}"; }

# bench_cpu_ms PID: the CPU time (user + system, all threads) process PID has
# used, in ms; PID may also be PID/task/TID for one thread.
bench_ticks_per_s=$(getconf CLK_TCK)
bench_cpu_ms() {
  awk -v hz="$bench_ticks_per_s" '{ printf "%d", ($14 + $15) * 1000 / hz }' "/proc/$1/stat"
}

# bench_children_cpu_ms: the CPU time, in ms, of this script's children that
# have exited and been waited for (a foreground command counts once it ends).
bench_children_cpu_ms() {
  awk -v hz="$bench_ticks_per_s" '{ printf "%d", ($16 + $17) * 1000 / hz }' "/proc/$$/stat"
}

# bench_wait_for_file FILE PID TIMEOUT_S: waits (polling every 5 ms) until FILE
# is not empty, PID has exited or TIMEOUT_S seconds have passed. True when the
# file is there.
bench_wait_for_file() {
  local file=$1 pid=$2 deadline_us=$(($(bench_now_us) + $3 * 1000000))
  until [ -s "$file" ] || ! kill -0 "$pid" 2>/dev/null ||
    [ "$(bench_now_us)" -gt "$deadline_us" ]; do
    sleep 0.005
  done
  [ -s "$file" ]
}

# A loopback port nobody listens on right now.
free_port() {
  local port
  while :; do
    port=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return
    fi
  done
}

# bench_spawn LOG COMMAND...: runs COMMAND in the background, stdout and stderr
# to LOG; its pid goes to $bench_pid.
bench_spawn() {
  local log=$1
  shift
  "$@" >"$log" 2>&1 &
  bench_pid=$!
  bench_pids+=("$bench_pid")
}

# bench_stop PID [SIGNAL]: sends SIGNAL (TERM) to a process of bench_spawn and
# waits for it; its exit status goes to $bench_status.
bench_stop() {
  local pid=$1 signal=${2:-TERM} kept=() p
  kill -s "$signal" "$pid" 2>/dev/null || true
  bench_status=0
  wait "$pid" 2>/dev/null || bench_status=$?
  for p in "${bench_pids[@]}"; do [ "$p" = "$pid" ] || kept+=("$p"); done
  bench_pids=("${kept[@]}")
}

# bench_start_tallyd LOG PORT_FILE TIMEOUT_S [TALLYD_OPTION...]: starts
# $tallyd_binary (default $build_dir/bin/tallyd) on CPU 0 on a free loopback port and waits up to
# TIMEOUT_S seconds for it to listen (PORT_FILE written). Sets tallyd_pid,
# tallyd_port, and tallyd_start_us / tallyd_listen_us: when it was started and
# when the port file was seen (polled every 5 ms). Exits if tallyd did not start.
bench_start_tallyd() {
  local log=$1 port_file=$2 timeout_s=$3 listening=yes
  shift 3
  rm -f "$port_file"
  tallyd_start_us=$(bench_now_us)
  bench_spawn "$log" "${server_cpu[@]}" "${tallyd_binary:-$build_dir/bin/tallyd}" --address 127.0.0.1 --port 0 \
    --port-file "$port_file" "$@"
  tallyd_pid=$bench_pid
  bench_wait_for_file "$port_file" "$tallyd_pid" "$timeout_s" || listening=no
  tallyd_listen_us=$(bench_now_us)
  [ "$listening" = yes ] || { cat "$log" >&2; echo "tallyd did not start" >&2; exit 1; }
  tallyd_port=$(cat "$port_file")
}

# bench_start_redis LOG: starts redis-server (persistence off) on CPU 0 on a
# free loopback port, a new one if another process took the probed one
# meanwhile. Sets redis_pid and redis_port. Exits if it did not start.
bench_start_redis() {
  local log=$1 attempt
  for attempt in 1 2 3 4 5; do
    redis_port=$(free_port)
    bench_spawn "$log" "${server_cpu[@]}" redis-server --bind 127.0.0.1 --port "$redis_port" \
      --save '' --appendonly no
    redis_pid=$bench_pid
    for _ in $(seq 50); do
      redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
      sleep 0.1
    done
    redis-cli -p "$redis_port" ping >/dev/null 2>&1 && return
    bench_stop "$redis_pid"
  done
  cat "$log" >&2
  echo "redis-server did not start" >&2
  exit 1
}

# bench_json_field FILE NAME: the value of a number field of the one-line JSON
# object in FILE ("name": value or "name":value).
bench_json_field() { sed -E "s/.*\"$2\": ?([^,}]*).*/\1/" "$1"; }

# bench_ratio A B: A / B with two decimals (0 when B is 0).
bench_ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }

# bench_json_array OUT FILE...: writes to OUT a JSON array of the one-line JSON
# objects in the FILEs, one a line.
bench_json_array() {
  local out=$1 i separator
  shift
  local files=("$@")
  {
    echo "["
    for i in "${!files[@]}"; do
      separator=","
      [ "$i" -eq $((${#files[@]} - 1)) ] && separator=""
      echo "  $(cat "${files[$i]}")$separator"
    done
    echo "]"
  } >"$out"
}
