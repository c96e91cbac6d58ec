#!/usr/bin/env bash
# The ramp to N connections on both reactors beside the bare-C connect
# floor (bench/broadcast_floor.c: forked epoll clients and servers, 2,000
# connects in flight per process, nothing else), each in the same kind of
# private namespace (its own established hash sized to the run), in one
# script. megaconn runs `bench --topology netns --rate RATE` and holds
# 10 s; the default RATE, 100,000/s, asks for more than this host does
# (~40,000/s), so both go as fast as their handshakes in flight allow (the
# floor: 2,000 per process; the client: 2,048 per worker). Not much more:
# the client gives its ramp twice the time RATE needs plus 40 s, and at
# 2M an absurd RATE ends the ramp at 40 s with a third still connecting.
# Usage: sudo bash bench/ramp_io.sh [N=1000000] [RUNS=1] [RATE=100000/s]
# Runs bench/sysctl.sh first (host limits for a million sockets).
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-1000000}"; runs="${2:-1}"; rate="${3:-100000/s}"
. bench/floor.sh
floor_setup ramp-io
out="$run/results-ramp-io-$n.txt"
echo "# $(date -u +%FT%TZ) bench/ramp_io.sh n=$n runs=$runs rate=$rate, $(nproc) cores, $(uname -r)" | tee "$out"

for r in $(seq "$runs"); do
  settle
  floor_run "$n" 1 1000 "$run/floor-$r.json"
  for io in uring epoll; do
    settle
    "$bin" bench --connections "$n" --rate "$rate" --hold 10s --io "$io" --topology netns --json > "$run/megaconn-$io-$r.json" \
      || echo "megaconn bench --io $io exited $? (see its JSON)" | tee -a "$out"
  done
done

python3 - "$run" "$runs" <<'PY' | tee -a "$out"
import json, sys, os
run, runs = sys.argv[1], int(sys.argv[2])
print(f"{'run':<4} {'':<22} {'established':>12} {'failed':>7} {'seconds':>8} {'per s':>8} {'/ floor':>8} {'server B/conn':>14}")
for r in range(1, runs + 1):
    f = json.load(open(os.path.join(run, f"floor-{r}.json")))
    floor = f["connects_per_s"]
    print(f"{r:<4} {'bare C connect floor':<22} {f['established']:>12} {f['connections'] - f['established']:>7} {f['connect_s']:>8.1f} {floor:>8.0f} {1:>8.2f} {'-':>14}")
    for io in ("uring", "epoll"):
        try:
            m = json.load(open(os.path.join(run, f"megaconn-{io}-{r}.json")))
        except Exception as e:
            print(f"{r:<4} megaconn --io {io}: no result ({e})")
            continue
        ramp = next(p for p in m["client"]["phases"] if p["name"] == "ramp")
        rate = ramp["connect_rate_per_s"]
        print(f"{r:<4} {'megaconn --io ' + io:<22} {ramp['established']:>12} {m['client']['failed_total']:>7} {ramp['seconds']:>8.1f} {rate:>8.0f} {rate / floor:>8.2f} {m['server_user_bytes_per_conn']:>14.1f}")
PY
for j in "$run"/floor-*.json; do echo "raw: $(basename "$j") $(cat "$j")" >> "$out"; done
echo "results: $out"
