#!/usr/bin/env bash
# Presence of a big topic: N WebSocket connections, each its own user
# (tokens minted by the client, server --auth jwt), all subscribed to
# "room"; then GET /presence?topic=room, timed 10 times (curl's
# time_total: request to last byte of the answer). Needs the sysctls of
# bench/sysctl.sh for N above ~28,000.
# usage: bash bench/presence.sh [N=100000]
set -euo pipefail
n=${1:-100000}
cd "$(dirname "$0")/.."
M=${MEGACONN:-target/release/megaconn}
out=bench/runs/presence-$n-$(date -u +%Y-%m-%dT%H%M%S)
mkdir -p "$out"
head -c 48 /dev/urandom | base64 > "$out/secret"
pids=""
trap 'kill $pids 2>/dev/null; wait 2>/dev/null; rm -f "$out/secret"' EXIT
$M server --protocol ws --ports 8000-8099 --admin 127.0.0.1:9300 --connections "$n" \
  --auth jwt --jwt-secret-file "$out/secret" --stats-interval 5s > "$out/server.log" 2>&1 &
pids="$pids $!"
k=0; until curl -sf http://127.0.0.1:9300/healthz >/dev/null; do k=$((k+1)); [ $k -lt 200 ] || { echo "server did not start" >&2; exit 1; }; sleep 0.1; done
$M client --protocol ws --ports 8000-8099 --connections "$n" --subscribe room --jwt-secret-file "$out/secret" \
  --heartbeat 30s --hold 120s > "$out/client.log" 2>&1 &
pids="$pids $!"
k=0; until [ "$(curl -sf 'http://127.0.0.1:9300/presence?topic=room&limit=1' | python3 -c 'import json,sys; print(json.load(sys.stdin)["connections"])')" = "$n" ]; do
  k=$((k+1)); [ $k -lt 1200 ] || { echo "the subscribers did not arrive" >&2; exit 1; }; sleep 0.1
done
for i in $(seq 10); do
  curl -s -o "$out/presence.json" -w '%{time_total}\n' 'http://127.0.0.1:9300/presence?topic=room' >> "$out/times.txt"
done
python3 - "$out" "$n" <<'PY'
import json, statistics, sys
out, n = sys.argv[1], int(sys.argv[2])
t = sorted(float(x) * 1000 for x in open(f"{out}/times.txt"))
p = json.load(open(f"{out}/presence.json"))
assert p["connections"] == n and p["users_total"] == n and len(p["users"]) == n, (p["connections"], p["users_total"], len(p["users"]))
size = len(open(f"{out}/presence.json", "rb").read())
print(f"GET /presence of a {n:,}-member topic ({p['users_total']:,} users, {size / 1e6:.1f} MB of JSON): "
      f"min {t[0]:.0f} ms, median {statistics.median(t):.0f} ms, max {t[-1]:.0f} ms over {len(t)} requests")
PY
echo "raw: $out"
