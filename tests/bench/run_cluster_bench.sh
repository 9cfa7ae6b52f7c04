#!/usr/bin/env bash
# The cluster benchmark (tests/bench/cluster_bench.cc says what it measures):
# local clusters of 3 and 5 nodes against local-only nodes. Not a test: it
# prints figures, and writes them to $BUILD_DIR/cluster_bench.json.
#
# Every tallyd runs pinned to CPU 0 (the benchmark process is, and its nodes
# inherit it) and tally-loadgen to CPU 1: one node and a whole cluster get the
# same core. About 30 minutes.
#
# Environment: BUILD_DIR (build), WINDOWS (3), SAMPLES (200), DURATION_MS (4000),
# TRIALS (3), ONLY (empty: every part; "admission": only the counters' admission
# per window, each replication mode against local-only nodes; "membership": only failure
# detection, under a minute; "overhead": only the replication
# overhead factor, about 16 minutes; "accuracy": only the accuracy against one
# central node, about 3 minutes), OVERHEAD_CHECKS (1500000), OVERHEAD_RUNS (3),
# ACCURACY_WINDOWS (10), BURST_TRIALS (5), ALGORITHMS (sliding_counter: the
# admission and accuracy parts' algorithms, comma-separated), SCALE_NODES
# (3,8,16,32,64), SCALE_QUIET_S (60), SCALE_KEYS (0: keys held at rest) and
# SCALE_FILL_ONE (empty; 1: those keys admitted through node 0 only) for
# ONLY=scale: what a cluster costs by
# its size, run only when asked, unpinned (64 idle nodes would fill one core),
# about 8 minutes; then the replication overhead of a sustained load at every
# size, a cluster and as many local-only nodes each given SCALE_LOAD_RATE
# (20000) checks/s for SCALE_LOAD_S (60; at least 60 for the documented
# figure, 0 skips it) seconds over SCALE_LOAD_KEYS (1000000) far keys, about
# 3 minutes per size; AGREEMENT_NODES (3,5,8), AGREEMENT_LOAD_S (20) and
# AGREEMENT_SEED (1) for ONLY=agreement: a tally-sim run's requests replayed
# on real nodes, about a minute a size; KEEP_DIR (empty): keep every cluster's
# node directories and logs there (cluster-1, cluster-2, ...). For example:
#   ONLY=overhead bash tests/bench/run_cluster_bench.sh
#   ONLY=accuracy ACCURACY_WINDOWS=20 bash tests/bench/run_cluster_bench.sh
#   ONLY=accuracy ALGORITHMS=sliding_log,token_bucket bash tests/bench/run_cluster_bench.sh
#   ONLY=scale SCALE_NODES=3,16,64 SCALE_LOAD_S=0 bash tests/bench/run_cluster_bench.sh
#   ONLY=scale SCALE_NODES=3,8,16,32 bash tests/bench/run_cluster_bench.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
build_dir=${BUILD_DIR:-build}
# shellcheck source-path=SCRIPTDIR/../..
source tests/bench/bench_lib.sh
bench_build "$build_dir" tallyd tally-loadgen cluster_bench
bench_init
loadgen_cpu=1
[ ${#client_cpu[@]} -gt 0 ] || loadgen_cpu=-1
if [ "${ONLY:-}" = scale ]; then
  server_cpu=()
  loadgen_cpu=-1
fi
"${server_cpu[@]}" "$build_dir/bin/cluster_bench" \
  --tallyd "$build_dir/bin/tallyd" --loadgen "$build_dir/bin/tally-loadgen" \
  --loadgen-cpu "$loadgen_cpu" --windows "${WINDOWS:-3}" --samples "${SAMPLES:-200}" \
  --trials "${TRIALS:-3}" ${ONLY:+--only "$ONLY"} \
  --overhead-checks "${OVERHEAD_CHECKS:-1500000}" --overhead-runs "${OVERHEAD_RUNS:-3}" \
  --accuracy-windows "${ACCURACY_WINDOWS:-10}" --burst-trials "${BURST_TRIALS:-5}" \
  --algorithms "${ALGORITHMS:-sliding_counter}" \
  --scale-nodes "${SCALE_NODES:-3,8,16,32,64}" --scale-quiet-s "${SCALE_QUIET_S:-60}" \
  --scale-keys "${SCALE_KEYS:-0}" ${SCALE_FILL_ONE:+--scale-fill-one} --scale-load-rate "${SCALE_LOAD_RATE:-20000}" \
  --scale-load-s "${SCALE_LOAD_S:-60}" --scale-load-keys "${SCALE_LOAD_KEYS:-1000000}" \
  --agreement-nodes "${AGREEMENT_NODES:-3,5,8}" --agreement-load-s "${AGREEMENT_LOAD_S:-20}" \
  --agreement-seed "${AGREEMENT_SEED:-1}" ${KEEP_DIR:+--keep-dir "$KEEP_DIR"} \
  --duration-ms "${DURATION_MS:-4000}" --json "$build_dir/cluster_bench.json"
