#!/usr/bin/env bash
# Broadcast to every held connection, io_uring vs epoll, with heartbeats
# off and on, beside the bare-C floor (bench/broadcast_floor.c: epoll, one
# write() per socket, no heartbeats), all in the same kind of private
# namespace (its own established hash sized to the run), in one script.
# Usage: sudo bash bench/broadcast_io.sh [N=1000000] [ROUNDS=3] [INTERVAL_S=15]
# Reactors run, as server/client pairs: PAIRS="uring/uring uring/epoll
# epoll/epoll" by default (the client's --io is bench --client-io).
# Runs bench/sysctl.sh first (host limits for a million sockets).
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-1000000}"; rounds="${2:-3}"; interval="${3:-15}"
pairs="${PAIRS:-uring/uring uring/epoll epoll/epoll}"
. bench/floor.sh
floor_setup broadcast-io
out="$run/results-broadcast-io-$n.txt"
echo "# $(date -u +%FT%TZ) bench/broadcast_io.sh n=$n rounds=$rounds interval=${interval}s, $(nproc) cores, $(uname -r)" | tee "$out"

settle
floor_run "$n" "$rounds" "$((interval * 1000))" "$run/floor.json"

for hb in off 30s; do
  for pair in $pairs; do
    io=${pair%/*}; cio=${pair#*/}
    settle
    "$bin" bench --scenario push --connections "$n" --broadcasts "$rounds" --broadcast-interval "${interval}s" \
      --push-bytes 64 --heartbeat "$hb" --io "$io" --client-io "$cio" --topology netns --json > "$run/megaconn-$io-$cio-hb-$hb.json" \
      || echo "megaconn bench --io $io --client-io $cio --heartbeat $hb exited $? (see its JSON)" | tee -a "$out"
  done
done

python3 - "$run" "$pairs" <<'PY' | tee -a "$out"
import json, sys, os
run, pairs = sys.argv[1], sys.argv[2].split()
f = json.load(open(os.path.join(run, "floor.json")))
floor = f["time_to_all_ms"]["median"]
print(f"{'':<32} {'tta min':>8} {'median':>8} {'max':>8} {'median/floor':>12} {'max/floor':>9} {'delivered':>20}")
print(f"{'bare C floor (no heartbeats)':<32} {f['time_to_all_ms']['min']:>8.0f} {floor:>8.0f} {f['time_to_all_ms']['max']:>8.0f} {1:>12.2f} {f['time_to_all_ms']['max'] / floor:>9.2f} {f['deliveries']:>20}")
for hb in ("off", "30s"):
    for pair in pairs:
        io, cio = pair.split("/")
        p = os.path.join(run, f"megaconn-{io}-{cio}-hb-{hb}.json")
        try:
            m = json.load(open(p))["push"]
        except Exception as e:
            print(f"megaconn server {io} client {cio} hb {hb}: no result ({e})")
            continue
        t = m["time_to_all_ms"]
        print(f"{'server ' + io + ' client ' + cio + ' hb ' + hb:<32} {t['min']:>8.0f} {t['median']:>8.0f} {t['max']:>8.0f} {t['median'] / floor:>12.2f} {t['max'] / floor:>9.2f} {str(m['deliveries']) + '/' + str(m['expected_deliveries']):>20}")
PY
echo "raw: floor $(cat "$run/floor.json")" >> "$out"
for j in "$run"/megaconn-*.json; do echo "raw: $(basename "$j") $(tr -d '\n ' < "$j" | head -c 3000)" >> "$out"; done
