#!/usr/bin/env bash
# Server CPU per heartbeat round trip, io_uring vs epoll, side by side:
# one server worker holds N framed connections, each sending a heartbeat
# every INTERVAL; over a WINDOW of steady state the server's CPU time
# (its /stats cpu_us) is divided by the heartbeats it answered (frames_in).
# Rounds alternate epoll, uring, epoll, uring, ... so drift hits both.
# usage: bash bench/heartbeat_cpu.sh [N=10000] [INTERVAL=200ms] [ROUNDS=3] [WINDOW=15]
# CLIENT_IO=uring|epoll|auto (default auto): the client's reactor, the same
# for every round (it changes what the server's sends cost on loopback).
set -euo pipefail
n=${1:-10000}
interval=${2:-200ms}
rounds=${3:-3}
window=${4:-15}
client_io=${CLIENT_IO:-auto}
cd "$(dirname "$0")/.."
M=${MEGACONN:-target/release/megaconn}
out=bench/runs/heartbeat-cpu-$(date -u +%Y-%m-%dT%H%M%S)
mkdir -p "$out"
pids=""
trap 'kill $pids 2>/dev/null; wait 2>/dev/null' EXIT
stats() { curl -sf http://127.0.0.1:9310/stats | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["cpu_us"], d["frames_in"], d["active"])'; }
for r in $(seq "$rounds"); do
  for io in epoll uring; do
    $M server --io "$io" --workers 1 --ports 24100 --admin 127.0.0.1:9310 --connections "$n" \
      --duration $((window + 60))s --stats-interval 5s > "$out/server-$io-$r.log" 2>&1 &
    spid=$!; pids="$spid"
    k=0; until curl -sf http://127.0.0.1:9310/healthz >/dev/null; do k=$((k+1)); [ $k -lt 200 ] || { echo "server did not start" >&2; exit 1; }; sleep 0.1; done
    $M client --io "$client_io" --ports 24100 --connections "$n" --rate 20000 --heartbeat "$interval" --hold $((window + 10))s > "$out/client-$io-$r.log" 2>&1 &
    cpid=$!; pids="$spid $cpid"
    k=0; until [ "$(stats | cut -d' ' -f3)" = "$n" ]; do k=$((k+1)); [ $k -lt 600 ] || { echo "the connections did not arrive" >&2; exit 1; }; sleep 0.1; done
    sleep 3 # heartbeats reach their steady rate
    read -r c0 f0 _ < <(stats)
    sleep "$window"
    read -r c1 f1 _ < <(stats)
    echo "$io $r $((c1 - c0)) $((f1 - f0))" | tee -a "$out/rounds.txt"
    kill "$cpid" "$spid" 2>/dev/null; wait "$cpid" "$spid" 2>/dev/null || true
    pids=""
  done
done
python3 - "$out" "$n" "$interval" "$client_io" <<'PY'
import statistics, sys
out, n, interval, client_io = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
per = {"epoll": [], "uring": []}
for line in open(f"{out}/rounds.txt"):
    io, _, cpu_us, beats = line.split()
    per[io].append(int(cpu_us) / max(int(beats), 1))
e, u = statistics.median(per["epoll"]), statistics.median(per["uring"])
print(f"{n} framed connections, heartbeat every {interval}, one server worker, client --io {client_io}")
for io, v in per.items():
    print(f"  {io:5}: server CPU per heartbeat round trip median {statistics.median(v):.2f} us (rounds: {', '.join(f'{x:.2f}' for x in v)})")
print(f"  uring/epoll: {u / e:.2f}x (goal <= 0.5x)")
PY
