#!/usr/bin/env bash
# /metrics scraped end to end with curl from a real tallyd holding 1M keys
# with 5 peers, beside the same node empty: scrape time (curl's
# time_total) and size, as Prometheus sees them. Six memory-only tallyd on
# 127.0.0.1, one cluster secret; tally-loadgen fills the keys (fixed
# window, an hour long, so they stay for the run).
# Usage: tests/bench/run_metrics_scrape.sh [BUILD_DIR]   (SCRAPES=50, SETTLE_S=10)
set -euo pipefail
build="${1:-build}"
scrapes="${SCRAPES:-50}"
work=$(mktemp -d /tmp/tally-scrape.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/secret"

# port_of FILE: waits (bounded) for tallyd's port file.
port_of() {
  for _ in $(seq 200); do [ -s "$1" ] && { cat "$1"; return; }; sleep 0.05; done
  echo "no port file $1" >&2; exit 1
}
start() {  # start NAME [flags...]
  local name="$1"; shift
  "$build/bin/tallyd" --memory-only --port 0 --port-file "$work/$name.port" --gossip-port 0 \
    --gossip-port-file "$work/$name.gossip" --cluster-secret-file "$work/secret" \
    --max-keys 2000000 --log-level warn "$@" 2>"$work/$name.log" &
  pids+=($!)
}

start n0 --admin-port 0 --admin-port-file "$work/n0.admin"
seed="127.0.0.1:$(port_of "$work/n0.gossip")"
for i in 1 2 3 4 5; do start "n$i" --seed "$seed"; done
for i in 1 2 3 4 5; do port_of "$work/n$i.port" >/dev/null; done
admin="http://127.0.0.1:$(port_of "$work/n0.admin")/metrics"
client="127.0.0.1:$(port_of "$work/n0.port")"

scrape() {  # scrape LABEL: SCRAPES scrapes; prints a JSON object and a table row
  local label="$1" times
  times=$(for _ in $(seq "$scrapes"); do
    curl -s -o "$work/body" -w '%{time_total}\n' "$admin"; done | sort -n)
  local size lines peers keys
  size=$(wc -c < "$work/body"); lines=$(wc -l < "$work/body")
  peers=$(grep -c '^tally_gossip_link_up{' "$work/body" || true)
  keys=$(awk '/^tally_keys /{print $2}' "$work/body")
  local p50 p99
  p50=$(echo "$times" | awk -v n="$scrapes" 'NR==int((n+1)/2){print $1*1000}')
  p99=$(echo "$times" | awk -v n="$scrapes" 'NR==int(n*0.99+0.5){print $1*1000}')
  printf '{"label":"%s","keys":%s,"peer_links":%s,"bytes":%s,"lines":%s,"p50_ms":%s,"p99_ms":%s}\n' \
    "$label" "$keys" "$peers" "$size" "$lines" "$p50" "$p99" >> "$work/results.json"
  printf '%-10s %10s %6s %8s %6s %8s %8s\n' "$label" "$keys" "$peers" "$size" "$lines" "$p50" "$p99"
}

printf '%-10s %10s %6s %8s %6s %8s %8s\n' scenario keys links bytes lines p50_ms p99_ms
sleep 2  # every link up
scrape empty
"$build/bin/tally-loadgen" --address "$client" --keys 1000000 --requests 1000000 --batch 100 \
  --connections 8 --depth 4 --algorithm fixed_window --window-ms 3600000 --no-header \
  > "$work/loadgen.out" || { cat "$work/loadgen.out"; exit 1; }
sleep "${SETTLE_S:-10}"  # the peers take the keys too (SETTLE_S)
scrape 1M-keys
cat "$work/results.json"
