#!/usr/bin/env bash
# What the live dashboard costs the server it watches: the server's CPU
# (supervisor and workers) over SECONDS with nobody watching, then over
# SECONDS with a headless Chromium page on /ui (it asks /stats once a
# second), while a megaconn client holds CONNS connections.
# usage: [MEGACONN=path] bash bench/dashboard_cpu.sh [CONNS] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
CONNS=${1:-20000}; SECONDS_EACH=${2:-60}
BIN=${MEGACONN:-target/release/megaconn}
[ -x "$BIN" ] || cargo build --release --locked -q
PORT=24310; ADMIN=127.0.0.1:24311; CADMIN=127.0.0.1:24312
pids=""
trap 'kill $pids 2>/dev/null; wait $pids 2>/dev/null' EXIT
"$BIN" server --ports $PORT --workers 2 --admin $ADMIN --drain-period 0s > /dev/null 2>&1 & spid=$!; pids="$spid"
n=0; until curl -sf http://$ADMIN/healthz > /dev/null; do n=$((n+1)); [ $n -lt 200 ] || { echo "the server did not start" >&2; exit 1; }; sleep 0.1; done
"$BIN" client --ports $PORT --connections "$CONNS" --rate 20000/s --hold $((SECONDS_EACH * 2 + 60))s --admin $CADMIN > /dev/null 2>&1 & pids="$pids $!"
n=0; until [ "$(curl -s http://$ADMIN/stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["active"])' 2>/dev/null)" = "$CONNS" ]; do
  n=$((n+1)); [ $n -lt 600 ] || { echo "the client did not open $CONNS" >&2; exit 1; }; sleep 0.1
done
sleep 5 # the ramp's tail settles
# CPU ticks of the server's process tree (supervisor and its workers).
ticks() { local t=0; for p in $spid $(pgrep -P $spid); do t=$((t + $(awk '{print $14 + $15}' /proc/$p/stat))); done; echo $t; }
hz=$(getconf CLK_TCK)
a=$(ticks); sleep "$SECONDS_EACH"; b=$(ticks)
node -e "
const { launch } = require('./tests/peers/chromium_page');
(async () => { const br = await launch(); const p = await br.newPage(); await p.goto('http://$ADMIN/ui');
  await p.waitForTimeout(${SECONDS_EACH} * 1000 + 3000); await br.close(); })();
" & page=$!; pids="$pids $page"
sleep 3; c=$(ticks); sleep "$SECONDS_EACH"; d=$(ticks); wait $page || true
python3 - "$a" "$b" "$c" "$d" "$hz" "$SECONDS_EACH" "$CONNS" <<'PY'
import sys
a, b, c, d, hz, s, n = map(int, sys.argv[1:])
idle, watched = (b - a) / hz / s * 100, (d - c) / hz / s * 100
print(f"# {n} connections held; server CPU, % of one core, over {s} s each")
print(f"nobody watching: {idle:.2f}%   the dashboard open: {watched:.2f}%   the page's cost: {watched - idle:+.2f} points of one core")
PY
