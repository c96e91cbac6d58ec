#!/usr/bin/env bash
# permessage-deflate side by side with Python `websockets` (issue 45's
# goal): N connections held by `megaconn client --protocol ws` against
#   megaconn server --protocol ws --ws-deflate on, then off, and
#   a Python websockets broadcast server (bench/ws_deflate_websockets_server.py),
#   compression on (websockets' defaults), then off,
# each server alone on the machine, then PUSHES broadcasts of a ~1 KB JSON
# push INTERVAL_S apart. Per server it prints: RSS per connection (RSS
# delta over the server's processes / N, idle and after the pushes),
# delivery time from each push's publish stamp to its receipt as the
# client measures it (p50, p99, max; max is the slowest push's time until
# every client had it), the server's CPU seconds over the pushes, and the
# bytes of one push on the wire and as a message (payload, per
# connection). The client offers what megaconn's client offers (no
# context takeover either way), so both servers hold no compressor per
# connection between messages; websockets still compresses once per
# connection, megaconn once per worker.
#
# Usage: bash bench/ws_deflate_vs_websockets.sh [N=10000] [PUSHES=5] [INTERVAL_S=2]
#   SERVER_WORKERS=1 (megaconn server workers: one, as websockets is one
#   process), MEGACONN=path (an existing build; else cargo build --release).
# Every wait is bounded; every process it starts is killed by PID at exit.
# Ports 24100 (WebSocket) and 24101 (megaconn's admin API).
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-10000}"; pushes="${2:-5}"; interval="${3:-2}"
workers="${SERVER_WORKERS:-1}"
port=24100; admin=24101
. bench/run_dir.sh
run=$(run_dir ws_deflate_vs_websockets)
if [ -z "${MEGACONN:-}" ]; then cargo build --release --locked -q; fi
bin=${MEGACONN:-target/release/megaconn}
python3 -c 'import websockets' || { echo "Python websockets is missing: bash scripts/setup.sh" >&2; exit 2; }

. bench/procs.sh   # pids (killed at exit), wait_for, tree, rss_of, cpu_ticks_of

# Bounds: the ramp at the client's rate plus a minute; the hold covers the
# settle, the pushes and a tail for the last deliveries.
rate=5000
ramp_limit=$(( n / rate + 60 ))
hold=$(( 4 + pushes * interval + 6 ))
client_limit=$(( ramp_limit + hold + 60 ))

client() { # NAME DEFLATE(on|off)
  local flag=(); [ "$2" = on ] && flag=(--ws-deflate)
  timeout -s INT "$client_limit" "$bin" client --url "ws://127.0.0.1:$port/" --connections "$n" --rate "$rate/s" \
    --heartbeat off --hold "${hold}s" --json "${flag[@]}" > "$run/client-$1.json" 2> "$run/client-$1.log" &
  cpid=$!; pids+=("$cpid")
}

payload=$(python3 -c '
import json
out, i = [], 0
while len(json.dumps(out)) < 1000:
    i += 1
    out.append({"seq": i, "symbol": "S%03d" % (i * 7919 % 500), "price": "%d.%02d" % (50 + i * 31 % 150, i * 17 % 100), "size": 100 * (1 + i % 50), "side": "buy" if i % 2 else "sell"})
print(json.dumps(out)[:1000])')

# One megaconn run: server with --ws-deflate $1, N clients, the pushes.
megaconn_run() {
  local mode=$1 name="megaconn-$1"
  "$bin" server --protocol ws --ports "$port" --admin "127.0.0.1:$admin" --workers "$workers" --ws-deflate "$mode" \
    --connections "$n" --stats-interval 500ms > "$run/server-$name.log" 2>&1 &
  local spid=$!; pids+=("$spid")
  wait_for 30 "megaconn's admin API" curl -sf "http://127.0.0.1:$admin/healthz" -o /dev/null
  sleep 1
  local base; base=$(rss_of "$spid")
  client "$name" "$mode"
  wait_for "$ramp_limit" "$n connections on megaconn" sh -c "curl -sf http://127.0.0.1:$admin/stats | python3 -c 'import json,sys; sys.exit(json.load(sys.stdin)[\"active\"] < $n)'"
  sleep 2
  local idle cpu0 k; idle=$(rss_of "$spid"); cpu0=$(cpu_ticks_of "$spid")
  for k in $(seq 1 "$pushes"); do
    curl -sf -X POST -H "Content-Type: application/json" "http://127.0.0.1:$admin/broadcast" --data "$payload" >> "$run/publish-$name.json"
    echo >> "$run/publish-$name.json"
    [ "$k" -lt "$pushes" ] && sleep "$interval"
  done
  sleep 3
  local after cpu1; after=$(rss_of "$spid"); cpu1=$(cpu_ticks_of "$spid")
  curl -sf "http://127.0.0.1:$admin/stats" > "$run/stats-$name.json" || true
  wait "$cpid" || echo "$name: the client exited $? (see $run/client-$name.log)" >&2
  kill "$spid" 2>/dev/null || true; wait "$spid" 2>/dev/null || true
  echo "{\"name\":\"$name\",\"base\":$base,\"idle\":$idle,\"after\":$after,\"cpu_ticks\":$(( cpu1 - cpu0 ))}" > "$run/rss-$name.json"
}

# One websockets run: its server drives itself (waits for N, pushes).
websockets_run() {
  local mode=$1 name="websockets-$1"
  python3 bench/ws_deflate_websockets_server.py "$port" "$mode" "$n" "$pushes" "$interval" "$ramp_limit" > "$run/server-$name.log" 2>&1 &
  local spid=$!; pids+=("$spid")
  wait_for 30 "websockets' server" grep -qs '"ready"' "$run/server-$name.log"
  client "$name" "$mode"
  wait_for "$(( ramp_limit + 5 ))" "websockets' pushes to start" grep -qs '"rss"' "$run/server-$name.log"
  local cpu0; cpu0=$(cpu_ticks_of "$spid")
  wait_for "$(( pushes * interval + 30 ))" "websockets' pushes" grep -qs '"done"' "$run/server-$name.log"
  sleep 3
  local cpu1 after; cpu1=$(cpu_ticks_of "$spid"); after=$(rss_of "$spid")
  wait "$cpid" || echo "$name: the client exited $? (see $run/client-$name.log)" >&2
  kill "$spid" 2>/dev/null || true; wait "$spid" 2>/dev/null || true
  python3 - "$run/server-$name.log" "$name" "$after" "$(( cpu1 - cpu0 ))" > "$run/rss-$name.json" <<'PY'
import json, sys
ev = {}
for line in open(sys.argv[1]):
    try:
        v = json.loads(line)
    except ValueError:
        continue
    ev.setdefault(v.get("event"), v)
print(json.dumps({"name": sys.argv[2], "base": ev["ready"]["rss_bytes"], "idle": ev["rss"]["rss_bytes"], "after": int(sys.argv[3]), "cpu_ticks": int(sys.argv[4]),
                  "message_bytes": ev["push"]["message_bytes"]}))
PY
}

out="$run/results-ws-deflate-vs-websockets-$n.txt"
echo "# $(date -u +%FT%TZ) bench/ws_deflate_vs_websockets.sh n=$n pushes=$pushes interval=${interval}s megaconn workers=$workers, $(nproc) cores" | tee "$out"
megaconn_run on
megaconn_run off
websockets_run on
websockets_run off

python3 - "$run" "$n" "$pushes" "$(getconf CLK_TCK)" <<'PY' | tee -a "$out"
import json, os, sys
run, n, pushes, hz = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
names = ["megaconn-on", "megaconn-off", "websockets-on", "websockets-off"]
rows = {}
for name in names:
    r = json.load(open(f"{run}/rss-{name}.json"))
    try:
        c = json.load(open(f"{run}/client-{name}.json"))["summary"]
    except (OSError, ValueError, KeyError):
        c = {}
    p = c.get("push") or {}
    lat = p.get("latency_ms") or {}
    got = c.get("ws_inflated", 0)
    wire = c["ws_inflated_wire_bytes"] / got if got else None
    msg = c["ws_inflated_message_bytes"] / got if got else r.get("message_bytes")
    rows[name] = dict(r, held=c.get("held", 0), received=p.get("received", 0), lat=lat, wire=wire, msg=msg)
# An uncompressed push is its message on the wire; megaconn's is the size its deflate run inflated.
for a, b in [("megaconn-off", "megaconn-on"), ("websockets-off", "websockets-on")]:
    rows[a]["msg"] = rows[a]["msg"] or rows[b]["msg"]
    rows[a]["wire"] = rows[a]["msg"]
print(f"{'server':<16} {'held':>7} {'received':>10} {'rss/conn idle':>14} {'after pushes':>13} {'deliv p50':>10} {'p99':>8} {'max':>8} {'cpu pushes':>11} {'wire B/push':>12} {'message B':>10}")
for name in names:
    r = rows[name]
    per = lambda k: (r[k] - r["base"]) / n
    l = r["lat"]
    f = lambda v, w=8, d=1: f"{v:>{w}.{d}f}" if isinstance(v, (int, float)) else f"{'-':>{w}}"
    print(f"{name:<16} {r['held']:>7} {r['received']:>10} {per('idle'):>12.0f} B {per('after'):>11.0f} B {f(l.get('p50_ms'), 8)} ms {f(l.get('p99_ms'))} {f(l.get('max_ms'))} {r['cpu_ticks'] / hz:>9.2f} s {f(r['wire'], 12, 0)} {f(r['msg'], 10, 0)}")
print(f"expected receipts per server: {n * pushes}; delivery times are from each push's publish stamp (max: the slowest push's time until every client had it); "
      "rss/conn: (RSS of the server's processes - before any client) / N; cpu: the server's CPU from the first push to 3 s after the last")
PY
echo "raw files: $run" >> "$out"
