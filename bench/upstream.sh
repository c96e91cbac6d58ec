#!/usr/bin/env bash
# Upstream at scale: N WebSocket connections each send one message a
# second (so N messages/s) to `megaconn server --upstream`, whose webhook
# (bench/upstream_backend.py, Python) measures client send -> backend
# receipt per message, and stalls 5 s once (at STALL_AT s): nothing may be
# lost or duplicated, and no client closed with 1013 unless the queue was
# full. STALL 0: no stall (the latency run). Needs the sysctls of
# bench/sysctl.sh for N above ~28,000.
# usage: bash bench/upstream.sh [N=50000] [HOLD=60s] [STALL=5] [STALL_AT=30]
set -euo pipefail
n=${1:-50000}; hold=${2:-60s}; stall=${3:-5}; stall_at=${4:-30}
cd "$(dirname "$0")/.."
M=${MEGACONN:-target/release/megaconn}
out=bench/runs/upstream-$n-$(date -u +%Y-%m-%dT%H%M%S)
mkdir -p "$out"
pids=""
trap 'kill $pids 2>/dev/null; wait 2>/dev/null' EXIT
python3 bench/upstream_backend.py 9201 "$stall_at" "$stall" "$out/backend.json" > "$out/backend.log" 2>&1 &
backend=$!; pids="$pids $backend"
$M server --protocol ws --ports 8000-8099 --admin 127.0.0.1:9200 --connections "$n" \
  --upstream http://127.0.0.1:9201/hook --stats-interval 5s > "$out/server.log" 2>&1 &
pids="$pids $!"
k=0; until curl -sf http://127.0.0.1:9200/healthz >/dev/null; do k=$((k+1)); [ $k -lt 200 ] || { echo "server did not start" >&2; exit 1; }; sleep 0.1; done
$M client --protocol ws --ports 8000-8099 --connections "$n" --rate 20000 --heartbeat 1s \
  --message 'm \{ts}' --hold "$hold" > "$out/client.log" 2>&1
sleep 3  # the last batches
curl -s http://127.0.0.1:9200/stats > "$out/stats.json"
kill $backend; wait $backend 2>/dev/null || true
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
b = json.load(open(f"{out}/backend.json")); s = json.load(open(f"{out}/stats.json"))
u = s["upstream"]
print(f"workers took {s['upstream_sent']:,} messages from clients; the backend got {b['messages']:,} ({b['unique']:,} unique, {b['duplicates']} duplicates); "
      f"delivered {u['delivered']:,} in {u['batches']:,} batches; retries {u['retries']}; refused {u['refused']}; "
      f"closed upstream_full {s['close_reasons'].get('upstream_full', 0)}; backend stalled once: {b['stalled']}")
l = b["latency_ms"]
print(f"client send -> backend receipt: p50 {l['p50']:.1f} ms, p99 {l['p99']:.1f} ms, p99.9 {l['p999']:.1f} ms, max {l['max']:.1f} ms")
PY
grep -E "^(connections|ramp|hold) " "$out/client.log" || true
echo "raw: $out"
