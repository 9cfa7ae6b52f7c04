#!/usr/bin/env bash
# The simulation's growth table (docs/simulation.md): one tally-sim run per
# cluster size, the same clients at every size, no faults. Prints each run's
# JSON, then a table. Usage: run_sim_growth.sh [sizes...] (default 10 30 100 300 1000).
set -euo pipefail
cd "$(dirname "$0")/../.."
sim=${TALLY_SIM:-build/bin/tally-sim}
sizes=("$@")
[[ ${#sizes[@]} -gt 0 ]] || sizes=(10 30 100 300 1000)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for nodes in "${sizes[@]}"; do
  start_ms=$(date +%s%3N)
  "$sim" --nodes "$nodes" --seed 1 --seconds 60 --json | tee -a "$out"
  echo "{\"wall_ms\": $(($(date +%s%3N) - start_ms))}" >> "$out"
done
python3 - "$out" <<'PY'
import json, sys
lines = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
runs = [dict(lines[i], **lines[i + 1]) for i in range(0, len(lines), 2)]
print("| nodes | ok | decisions | entries/decision | bytes/decision | heap/key held | "
      "convergence | 2x/central | 10x/central | 0.5x/central | burst/central | far/central | "
      "CPU us/decision | wall s |")
print("|" + "---:|" * 14)
for r in runs:
    a = r["admitted"]
    print(f"| {r['nodes']} | {'yes' if r['ok'] else 'NO'} | {r['decisions']:,} | "
          f"{r['entries_per_decision']:.2f} | {r['bytes_per_decision']:,.0f} | "
          f"{r['heap_bytes_per_key_held']:,.0f} B | {r['convergence_ms'] / 1000:.1f} s | "
          f"{a['overload 2x']['ratio']:.3f} | {a['overload 10x']['ratio']:.3f} | "
          f"{a['below (0.5x)']['ratio']:.3f} | {a['burst (5x, fresh key)']['ratio']:.3f} | "
          f"{a['far (zipf)']['ratio']:.3f} | {r['cpu_us_per_decision']:.1f} | {r['wall_ms'] / 1000:.0f} |")
PY
