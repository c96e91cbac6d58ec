#!/usr/bin/env bash
# Broadcast time to all: one node vs two nodes joined through NATS, side by
# side on this machine, same connections in all.
#   1. one node, one private namespace (loopback): the single-node push bench
#   2. one node behind the cluster's bridge, with its NATS link (--nodes 1)
#   3. two nodes x N/2, each in its own namespace, broadcasts published on
#      node n0 and carried to n1 by nats-server (--nodes 2 --cluster nats)
# Usage: bash bench/cluster.sh [CONNECTIONS] (default 500000). Writes the
# JSON of each run to <run>/results-cluster-<N>-{single,one,two}.json and
# the table to <run>/results-cluster-<N>.txt, and prints the ratios of the
# median and max time to all. Needs root (namespaces) and nats-server.
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-500000}"
. bench/run_dir.sh
run=$(run_dir cluster)   # fresh each run; RUN_DIR overrides
cargo build --release --locked -q
bin=target/release/megaconn
common=(bench --scenario push --connections "$n" --broadcasts 10 --json)
. bench/settle.sh
settle; "$bin" "${common[@]}" --topology netns > "$run/results-cluster-$n-single.json"
settle; "$bin" "${common[@]}" --nodes 1 --cluster nats > "$run/results-cluster-$n-one.json"
settle; "$bin" "${common[@]}" --nodes 2 --cluster nats > "$run/results-cluster-$n-two.json"
python3 - "$n" "$run" <<'PY' | tee "$run/results-cluster-$n.txt"
import json, sys
n, run = sys.argv[1], sys.argv[2]
runs = {k: json.load(open(f"{run}/results-cluster-{n}-{k}.json")) for k in ("single", "one", "two")}
for k, v in runs.items():
    p = v["push"]
    print(f"{k:<7} held {p['connections']:>9,} | deliveries {p['deliveries']:,}/{p['expected_deliveries']:,} dup {p['duplicates']} gaps {p['gaps']}"
          f" | time to all median {p['time_to_all_ms']['median']:.0f} ms max {p['time_to_all_ms']['max']:.0f} ms"
          f" | delivery p50 {p['delivery_ms']['p50_ms']:.0f} p99 {p['delivery_ms']['p99_ms']:.0f} ms | server cpu {p['server_cpu_seconds']:.1f} s")
two = runs["two"]["push"]["time_to_all_ms"]
for base in ("single", "one"):
    b = runs[base]["push"]["time_to_all_ms"]
    print(f"two nodes / {base}: median {two['median'] / b['median']:.2f}x, max {two['max'] / b['max']:.2f}x (goal <= 1.2x)")
PY
