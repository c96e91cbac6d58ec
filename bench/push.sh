#!/usr/bin/env bash
# Broadcast to every held connection: megaconn's push bench beside a bare
# C epoll sender (bench/broadcast_floor.c: one write() per socket, nothing
# else) on the same machine, one after the other in one script.
# Usage: bash bench/push.sh [N=200000] [ROUNDS=10] [INTERVAL_S=3]
# Above ~100K connections run `sudo bash bench/sysctl.sh` first.
# Heartbeats are off in both: the floor has none. The floor listens on
# 127.0.0.1:24000 and up (23000-23999 are the docs' journeys' ports).
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-200000}"; rounds="${2:-10}"; interval="${3:-3}"
. bench/run_dir.sh
run=$(run_dir push)   # fresh each run; RUN_DIR overrides
command -v gcc >/dev/null || { apt-get update -qq && apt-get install -y -qq gcc; }
mkdir -p target
gcc -Wall -Wextra -O2 -o target/broadcast_floor bench/broadcast_floor.c
cargo build --release --locked -q
out="$run/results-push-$n.txt"
floor_json="$run/floor-$n.json"; mega_json="$run/megaconn-$n.json"
echo "# $(date -u +%FT%TZ) bench/push.sh n=$n rounds=$rounds interval=${interval}s, $(nproc) cores" | tee "$out"
target/broadcast_floor "$n" "$rounds" "$((interval * 1000))" 24000 64 > "$floor_json"
bin=${MEGACONN:-target/release/megaconn}   # MEGACONN=path compares another build
size=--push-bytes; "$bin" bench --help | grep -q -- --push-bytes || size=--payload   # builds before issue 20
"$bin" bench --scenario push --connections "$n" --broadcasts "$rounds" --broadcast-interval "${interval}s" \
  "$size" 64 --heartbeat off --json --ports 8000-8099 > "$mega_json" || echo "megaconn bench exited $? (see its JSON)" | tee -a "$out"
python3 - "$floor_json" "$mega_json" <<'PY' | tee -a "$out"
import json, sys
f = json.load(open(sys.argv[1])); m = json.load(open(sys.argv[2]))["push"]
ft, mt = f["time_to_all_ms"], m["time_to_all_ms"]
print(f"{'':<18} {'connections':>11} {'tta min':>9} {'median':>9} {'max':>9} {'deliv p50':>9} {'p99':>8} {'delivered':>11}")
print(f"{'bare C floor':<18} {f['connections']:>11} {ft['min']:>9.0f} {ft['median']:>9.0f} {ft['max']:>9.0f} {f['delivery_ms']['p50']:>9.0f} {f['delivery_ms']['p99']:>8.0f} {f['deliveries']:>11}")
d = m["delivery_ms"]
print(f"{'megaconn':<18} {m['connections']:>11} {mt['min']:>9.0f} {mt['median']:>9.0f} {mt['max']:>9.0f} {d['p50_ms']:>9.0f} {d['p99_ms']:>8.0f} {m['deliveries']:>11} (expected {m['expected_deliveries']})")
print(f"megaconn / floor, median time to all: {mt['median'] / ft['median']:.2f}")
PY
echo "raw: floor $(cat "$floor_json")" >> "$out"
echo "raw: megaconn $(tr -d '\n ' < "$mega_json" | head -c 4000)" >> "$out"
