#!/usr/bin/env bash
# The live dashboard's cost during a large `megaconn bench`: the CPU of
# the bench's whole process tree (its server and its load generator,
# supervisors and workers) over windows of SECONDS in the hold: nobody
# watching; the page's requests alone (curl asking /stats once a second,
# as the page does: what a browser elsewhere costs the bench); a headless
# Chromium page on the bench's /ui (`bench --admin`: the load
# generator's phases, counts and latency percentiles) on this machine,
# sharing its 2 cores. Then the same windows in the other order, so a
# drift of the hold's own cost shows.
# usage: [MEGACONN=path] bash bench/dashboard_cpu_bench.sh [CONNS] [SECONDS]
# Every wait is bounded; what it starts is killed by PID at exit.
set -euo pipefail
cd "$(dirname "$0")/.."
CONNS=${1:-1000000}; SECONDS_EACH=${2:-40}
BIN=${MEGACONN:-target/release/megaconn}
[ -x "$BIN" ] || cargo build --release --locked -q
ADMIN=127.0.0.1:24313
run="bench/runs/$(date +%Y-%m-%d-%H%M%S)-dashboard_cpu_bench"; mkdir -p "$run"
pids=""
trap 'kill $pids 2>/dev/null; wait $pids 2>/dev/null' EXIT
"$BIN" bench --connections "$CONNS" --hold $((SECONDS_EACH * 6 + 60))s --admin $ADMIN --json > "$run/bench.json" 2> "$run/bench.log" & bpid=$!; pids="$bpid"
phase() { curl -s "http://$ADMIN/healthz" | python3 -c 'import json,sys; print(json.load(sys.stdin)["phase"])' 2>/dev/null || echo none; }
n=0; until [ "$(phase)" = hold ]; do
  n=$((n+1)); [ $n -lt 1200 ] || { echo "the bench did not reach its hold in 600 s (see $run/bench.log)" >&2; exit 1; }; sleep 0.5
done
sleep 10 # the ramp's tail settles
# CPU ticks of the bench's process tree, every descendant.
tree() { local p=$1; echo "$p"; for c in $(pgrep -P "$p"); do tree "$c"; done; }
ticks() { local t=0; for p in $(tree $bpid); do t=$((t + $(awk '{print $14 + $15}' /proc/$p/stat 2>/dev/null || echo 0))); done; echo $t; }
# The bench's own process (its load generator's supervisor, which
# answers /stats), apart: its windows are far quieter than the tree's.
own() { awk '{print $14 + $15}' /proc/$bpid/stat; }
hz=$(getconf CLK_TCK)
# window: the tree's ticks and the bench process's, over SECONDS_EACH.
window() { local a b c d; a=$(ticks); c=$(own); sleep "$SECONDS_EACH"; b=$(ticks); d=$(own); echo "$((b - a)) $((d - c))"; }
unwatched() { window; }
watched() {
  node -e "
const { launch } = require('./tests/peers/chromium_page');
(async () => { const br = await launch(); const p = await br.newPage(); await p.goto('http://$ADMIN/ui');
  await p.waitForTimeout(${SECONDS_EACH} * 1000 + 3000); await br.close(); })();
" & local page=$!
  sleep 3; local w; w=$(window); wait $page || true; echo "$w"
}
polled() {
  ( end=$((SECONDS + SECONDS_EACH + 3)); while [ $SECONDS -lt $end ]; do curl -s "http://$ADMIN/stats" > /dev/null; sleep 1; done ) & local poll=$!
  sleep 3; local w; w=$(window); wait $poll || true; echo "$w"
}
u1=$(unwatched); p1=$(polled); w1=$(watched); w2=$(watched); p2=$(polled); u2=$(unwatched)
[ "$(phase)" = hold ] || echo "warning: the hold ended before the last window (phase $(phase))" >&2
python3 - "$u1" "$p1" "$w1" "$w2" "$p2" "$u2" "$hz" "$SECONDS_EACH" "$CONNS" <<'PY' | tee "$run/result.txt"
import sys
*w, hz, s, n = sys.argv[1:]
hz, s = int(hz), int(s)
u1, p1, w1, w2, p2, u2 = [tuple(int(x) for x in v.split()) for v in w]
pct = lambda t: t / hz / s * 100
print(f"# {n} connections held by megaconn bench; CPU, % of one core, over {s} s windows, in this order:")
print("# nobody watching, /stats asked each second (curl), the page open in Chromium here, again, /stats, nobody")
for i, what in ((0, "the whole tree"), (1, "the bench's own process")):
    v = [pct(x[i]) for x in (u1, p1, w1, w2, p2, u2)]
    u, p, wa = (v[0] + v[5]) / 2, (v[1] + v[4]) / 2, (v[2] + v[3]) / 2
    print(f"{what}: " + " ".join(f"{x:.2f}" for x in v))
    print(f"  the page's requests {p - u:+.2f} points of one core ({100 * (p - u) / u:+.2f}%), the page here {wa - u:+.2f} ({100 * (wa - u) / u:+.2f}%)")
PY
kill -INT $bpid 2>/dev/null || true
wait $bpid 2>/dev/null || true
echo "results in $run"
