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
. bench/heartbeats.sh
M=${MEGACONN:-target/release/megaconn}
out=bench/runs/heartbeat-cpu-$(date -u +%Y-%m-%dT%H%M%S)
mkdir -p "$out"
trap hb_stop EXIT
for r in $(seq "$rounds"); do
  for io in epoll uring; do
    hb_start "$io" "$n" "$interval" "$window" "$out/$io-$r"
    read -r c0 f0 _ < <(hb_stats)
    sleep "$window"
    read -r c1 f1 _ < <(hb_stats)
    echo "$io $r $((c1 - c0)) $((f1 - f0))" | tee -a "$out/rounds.txt"
    hb_stop
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
