#!/usr/bin/env bash
# Elastic workers vs the old worst-case default, side by side in one run:
# 50,000 connections x 1 request/s, classic service time, async business
# stage. "elastic" is `megaconn server` with default flags; "56 fixed" is
# what `--workers auto` used to start (planned for 1M connections); "4
# fixed" is what the elastic server grows to for this load.
# Usage: bash bench/elastic.sh [HOLD]   (default hold 30s)
set -euo pipefail
cd "$(dirname "$0")/.."
hold="${1:-30s}"
. bench/run_dir.sh
run=$(run_dir elastic)   # fresh each run; RUN_DIR overrides
cargo build --release --locked -q
bin=target/release/megaconn
ports=19000-19009
run_one() {
  local label="$1"; shift
  "$bin" server --ports "$ports" --business async --service-time classic --stats-interval 5s --duration 600s "$@" > "$run/server-$label.log" 2>&1 &
  local spid=$!
  trap 'kill -TERM '"$spid"' 2>/dev/null || true' EXIT
  sleep 1
  "$bin" client --ports "$ports" --connections 50000 --rate 20000 --request-rate 1/s --payload 8 --heartbeat off --hold "$hold" --json \
    > "$run/client-$label.json" 2> "$run/client-$label.err" || true
  kill -TERM "$spid"; wait "$spid" || true
  trap - EXIT
  local workers; workers="$(grep -o 'workers [0-9]* accepting / [0-9]* full / [0-9]*' "$run/server-$label.log" | tail -1)"
  python3 - "$label" "$run/client-$label.json" "$workers" <<'PY' | tee -a "$run/results-elastic.txt"
import json, sys
label, path, workers = sys.argv[1], sys.argv[2], sys.argv[3]
s = json.load(open(path))["summary"]
r = s["requests"]; l = r["latency_ms"]
print(f"{label:<10} qps {r['qps']:9.1f} (offered {r['offered_qps']:.0f}) | mean {l['mean_ms']:7.2f} ms | p50 {l['p50_ms']:6.2f} | p99 {l['p99_ms']:7.2f} | max {l['max_ms']:8.1f} | timeouts {r['timeouts']} | held {s['held']} | server {workers}")
PY
}
echo "# $(date -u +%F) bench/elastic.sh hold=$hold, $(nproc) cores" | tee "$run/results-elastic.txt"
run_one elastic
run_one 4-fixed --workers 4
run_one 56-fixed --workers 56
