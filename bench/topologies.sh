#!/usr/bin/env bash
# The same bench on the host's loopback, in one private namespace, and
# across a veth pair between two namespaces, side by side with reports
# and `megaconn report compare` ratios against the host run.
# Usage: bash bench/topologies.sh [CONNECTIONS] [OUT_DIR]   (default 1000000, a fresh bench/runs/<date-time>-topologies)
# Each run's output goes to OUT_DIR/results-<label>-<topology>.txt and its
# report to OUT_DIR/<label>-<topology>/.
# The host run needs the host's sysctls (bench/sysctl.sh); they are put
# back to what they were afterwards, and every change is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-1000000}"
RUN_DIR="${2:-${RUN_DIR:-}}"
. bench/run_dir.sh
run=$(run_dir topologies)   # fresh each run; RUN_DIR overrides
out="$run"
cargo build --release --locked -q
bin=target/release/megaconn
keys=(net.ipv4.ip_local_port_range net.ipv4.ip_local_reserved_ports net.core.somaxconn net.ipv4.tcp_max_syn_backlog fs.file-max)
declare -A before
for k in "${keys[@]}"; do before[$k]="$(sysctl -n "$k" | tr '\t' ' ')"; done
restore() {
  for k in "${keys[@]}"; do
    if [ "$(sysctl -n "$k" | tr '\t' ' ')" != "${before[$k]}" ]; then
      sysctl -q -w "$k=${before[$k]}" && echo "restored $k = '${before[$k]}'"
    fi
  done
}
trap restore EXIT
if (( n % 1000000 == 0 )); then label="$(( n / 1000000 ))m"; else label="$(( n / 1000 ))k"; fi
bash bench/sysctl.sh
"$bin" bench --connections "$n" --topology host --report "$out/$label-host" 2>&1 | tee "$out/results-$label-host.txt" | grep -vE '^\[ *[0-9.]+s\] (ramp|hold|closing) ' || true
restore
for t in netns veth; do
  "$bin" bench --connections "$n" --topology "$t" --report "$out/$label-$t" 2>&1 | tee "$out/results-$label-$t.txt" | grep -vE '^\[ *[0-9.]+s\] (ramp|hold|closing) ' || true
done
for t in netns veth; do
  echo "== host vs $t"
  "$bin" report compare "$out/$label-host/report.json" "$out/$label-$t/report.json" --html "$out/$label-host-vs-$t.html"
done
