#!/usr/bin/env bash
# MQTT QoS 0 broadcast vs the framed broadcast, side by side in one run:
# PAIRS pairs of `megaconn bench --scenario push` runs, one framed and one
# MQTT (`--protocol mqtt --mqtt-qos 0`, every client subscribed to the
# bench's push topic), each holding N connections and timing ROUNDS
# broadcasts of 64 B, INTERVAL_S apart. The order alternates pair by pair
# (framed first, then MQTT first) so that a machine drifting during the
# run does not favour one side; settle() waits for the last run's sockets
# to be freed before each run.
#
# One pair is not a measurement here: the broadcast is ~90% kernel time
# (perf: slab allocation of a million skbs, established-hash lookups), and
# the same build's framed time to all ranged 10.9-15.2 s on one day. The
# table gives each pair's ratio of medians, and the median of those.
#
# Usage: sudo bash bench/mqtt_qos0_broadcast.sh [N=1000000] [PAIRS=3] [ROUNDS=3] [INTERVAL_S=15]
# MEGACONN=path runs that build instead of building this tree.
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-1000000}"; pairs="${2:-3}"; rounds="${3:-3}"; interval="${4:-15}"
[ "$(id -u)" = 0 ] || { echo "mqtt_qos0_broadcast.sh: needs root (network namespaces, sysctls)" >&2; exit 2; }
. bench/run_dir.sh
. bench/settle.sh
run=$(run_dir mqtt-qos0-broadcast)
bash bench/sysctl.sh > "$run/sysctl.txt"
if [ -n "${MEGACONN:-}" ]; then bin=$MEGACONN; else cargo build --release --locked -q; bin=target/release/megaconn; fi
out="$run/results-mqtt-qos0-broadcast-$n.txt"
echo "# $(date -u +%FT%TZ) bench/mqtt_qos0_broadcast.sh n=$n pairs=$pairs rounds=$rounds interval=${interval}s, $(nproc) cores, $(uname -r), $("$bin" --version)" | tee "$out"

one() { # one run: framed or mqtt, pair number
  local proto=$1 k=$2 extra=()
  [ "$proto" = mqtt ] && extra=(--protocol mqtt --mqtt-qos 0)
  settle
  echo "pair $k: $proto" >&2
  "$bin" bench --scenario push "${extra[@]}" --connections "$n" --push-bytes 64 --broadcasts "$rounds" \
    --broadcast-interval "${interval}s" --heartbeat 120s --json > "$run/$proto-$k.json" 2> "$run/$proto-$k.log" \
    || echo "pair $k: megaconn bench ($proto) exited $? (its checks are in $run/$proto-$k.json)" | tee -a "$out"
}

for k in $(seq "$pairs"); do
  if [ $((k % 2)) = 1 ]; then one framed "$k"; one mqtt "$k"; else one mqtt "$k"; one framed "$k"; fi
done

python3 - "$run" "$pairs" <<'PY' | tee -a "$out"
import json, os, statistics, sys
run, pairs = sys.argv[1], int(sys.argv[2])
def load(proto, k):
    try:
        return json.load(open(os.path.join(run, f"{proto}-{k}.json")))["push"]
    except Exception as e:
        print(f"pair {k}: no {proto} result ({e})")
        return None
print(f"{'pair':<5} {'framed tta per round (ms)':<28} {'MQTT tta per round (ms)':<28} {'median ratio':>12} {'first ratio':>11} {'server cpu f/m (s)':>18} {'client cpu f/m (s)':>18} {'delivered f, m':>24}")
ratios, firsts, all_f, all_m = [], [], [], []
for k in range(1, pairs + 1):
    f, m = load("framed", k), load("mqtt", k)
    if not f or not m:
        continue
    tf = [r["time_to_all_ms"] for r in f["rounds"]]
    tm = [r["time_to_all_ms"] for r in m["rounds"]]
    all_f += tf; all_m += tm
    ratio = statistics.median(tm) / statistics.median(tf)
    first = tm[0] / tf[0]
    ratios.append(ratio); firsts.append(first)
    fb, mb = f['broadcast_phase'], m['broadcast_phase']
    cpu = f"{fb['cpu_seconds']:.1f}/{mb['cpu_seconds']:.1f}"
    ccpu = f"{fb.get('client_cpu_seconds', 0):.1f}/{mb.get('client_cpu_seconds', 0):.1f}"
    dl = f"{f['deliveries']}/{f['expected_deliveries']}, {m['deliveries']}/{m['expected_deliveries']}"
    print(f"{k:<5} {' '.join(f'{t:.0f}' for t in tf):<28} {' '.join(f'{t:.0f}' for t in tm):<28} {ratio:>12.3f} {first:>11.3f} {cpu:>18} {ccpu:>18} {dl:>24}")
if ratios:
    print(f"MQTT / framed time to all: median of the pairs' ratios {statistics.median(ratios):.3f} "
          f"(pairs {min(ratios):.3f}-{max(ratios):.3f}); first broadcasts only {statistics.median(firsts):.3f}; "
          f"all rounds pooled {statistics.median(all_m):.0f} / {statistics.median(all_f):.0f} ms = {statistics.median(all_m) / statistics.median(all_f):.3f}")
PY
