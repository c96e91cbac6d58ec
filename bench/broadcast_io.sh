#!/usr/bin/env bash
# Broadcast to every held connection, io_uring vs epoll, with heartbeats
# off and on, beside the bare-C floor (bench/broadcast_floor.c: epoll, one
# write() per socket, no heartbeats), all in the same kind of private
# namespace (its own established hash sized to the run), in one script.
# Usage: sudo bash bench/broadcast_io.sh [N=1000000] [ROUNDS=3] [INTERVAL_S=15]
# Runs bench/sysctl.sh first (host limits for a million sockets).
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-1000000}"; rounds="${2:-3}"; interval="${3:-15}"
[ "$(id -u)" = 0 ] || { echo "broadcast_io.sh: needs root (network namespaces, sysctls)" >&2; exit 2; }
. bench/run_dir.sh
run=$(run_dir broadcast-io)
command -v gcc >/dev/null || { apt-get update -qq && apt-get install -y -qq gcc; }
bash bench/sysctl.sh > "$run/sysctl.txt"
mkdir -p target
gcc -Wall -Wextra -O2 -o target/broadcast_floor bench/broadcast_floor.c
cargo build --release --locked -q
bin=target/release/megaconn
out="$run/results-broadcast-io-$n.txt"
echo "# $(date -u +%FT%TZ) bench/broadcast_io.sh n=$n rounds=$rounds interval=${interval}s, $(nproc) cores, $(uname -r)" | tee "$out"

. bench/settle.sh

# The floor's namespace, made as `megaconn bench --topology netns` makes
# its own: established hash = next power of two >= 2N+1024 (set on the
# host only while the namespace is created), the same queue and port sysctls.
ns="megaconn-floor-$$"
ehash_file=/proc/sys/net/ipv4/tcp_child_ehash_entries
before=$(cat "$ehash_file")
cleanup() { echo "$before" > "$ehash_file"; ip netns del "$ns" 2>/dev/null || true; }
trap cleanup EXIT
ehash=1024; while [ "$ehash" -lt $((2 * n + 1024)) ]; do ehash=$((ehash * 2)); done
echo "$ehash" > "$ehash_file"
ip netns add "$ns"
echo "$before" > "$ehash_file"
ip -n "$ns" link set lo up
ip netns exec "$ns" sysctl -q -w net.core.somaxconn=65535 net.ipv4.tcp_max_syn_backlog=65535 net.ipv4.ip_local_port_range="1024 65535"
settle
ip netns exec "$ns" target/broadcast_floor "$n" "$rounds" "$((interval * 1000))" 24000 64 > "$run/floor.json"
cleanup

for hb in off 30s; do
  for io in uring epoll; do
    settle
    "$bin" bench --scenario push --connections "$n" --broadcasts "$rounds" --broadcast-interval "${interval}s" \
      --push-bytes 64 --heartbeat "$hb" --io "$io" --topology netns --json > "$run/megaconn-$io-hb-$hb.json" \
      || echo "megaconn bench --io $io --heartbeat $hb exited $? (see its JSON)" | tee -a "$out"
  done
done

python3 - "$run" <<'PY' | tee -a "$out"
import json, sys, os
run = sys.argv[1]
f = json.load(open(os.path.join(run, "floor.json")))
floor = f["time_to_all_ms"]["median"]
print(f"{'':<32} {'tta min':>8} {'median':>8} {'max':>8} {'median/floor':>12} {'max/floor':>9} {'delivered':>20}")
print(f"{'bare C floor (no heartbeats)':<32} {f['time_to_all_ms']['min']:>8.0f} {floor:>8.0f} {f['time_to_all_ms']['max']:>8.0f} {1:>12.2f} {f['time_to_all_ms']['max'] / floor:>9.2f} {f['deliveries']:>20}")
for hb in ("off", "30s"):
    for io in ("uring", "epoll"):
        p = os.path.join(run, f"megaconn-{io}-hb-{hb}.json")
        try:
            m = json.load(open(p))["push"]
        except Exception as e:
            print(f"megaconn --io {io} --heartbeat {hb}: no result ({e})")
            continue
        t = m["time_to_all_ms"]
        print(f"{'megaconn --io ' + io + ' hb ' + hb:<32} {t['min']:>8.0f} {t['median']:>8.0f} {t['max']:>8.0f} {t['median'] / floor:>12.2f} {t['max'] / floor:>9.2f} {str(m['deliveries']) + '/' + str(m['expected_deliveries']):>20}")
PY
echo "raw: floor $(cat "$run/floor.json")" >> "$out"
for j in "$run"/megaconn-*.json; do echo "raw: $(basename "$j") $(tr -d '\n ' < "$j" | head -c 3000)" >> "$out"; done
