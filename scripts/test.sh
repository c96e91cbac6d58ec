#!/usr/bin/env bash
# The test command: formatting and lints, unit and property tests, and
# end-to-end tests over loopback (real server and client processes,
# crashed workers, elastic growth, peers nobody here wrote), then half of
# them again on the epoll reactor. About 8 min of tests once built; a
# first build adds about 7 min.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
kubernetes-validate --strict --quiet deploy/k8s/*.yaml
cargo fmt --check
cargo clippy --profile ci --locked --all-targets -- -D warnings
# Tests that need network namespaces fail, saying why, where they cannot
# be made; with MEGACONN_SKIP_NETNS=1 they print "SKIPPED: <test>: <why>"
# instead, and the count is reported here so a skip is never silent.
log=$(mktemp)
cleanup=('rm -f "$log"')
# Tests listen on 20000-23999 (tests/common/ports.rs, the journeys). Where
# ip_local_port_range is 1024-65535 (as bench/sysctl.sh and `megaconn tune`
# set it), the kernel may hand one of them to another test's outgoing
# connection; reserving them for this run keeps that from happening.
pool=20000-23999
reserved=$(cat /proc/sys/net/ipv4/ip_local_reserved_ports)
if [ "$(id -u)" != 0 ]; then
  echo "test.sh: not root, so ports $pool are not reserved: a test may meet another's outgoing connection there" >&2
elif ! grep -q "$pool" <<<"$reserved"; then
  sysctl -q -w net.ipv4.ip_local_reserved_ports="${reserved:+$reserved,}$pool"
  echo "test.sh: sysctl net.ipv4.ip_local_reserved_ports: '$reserved' -> '$(cat /proc/sys/net/ipv4/ip_local_reserved_ports)' for this run"
  cleanup+=("sysctl -q -w net.ipv4.ip_local_reserved_ports='$reserved'")
fi
trap 'for c in "${cleanup[@]}"; do eval "$c"; done' EXIT
cargo test --profile ci --locked "$@" 2>&1 | tee "$log"
# The suite above runs servers and clients on --io auto (io_uring on this
# kernel, tests/io.rs checks it).
# The representative half below runs both again on the epoll reactor:
# every protocol's read and write paths, pushes, history, drains, hostile
# peers and bounds, TLS.
if [ $# -eq 0 ]; then
  MEGACONN_IO=epoll MEGACONN_CLIENT_IO=epoll cargo test --profile ci --locked --test e2e -- ws:: http:: push:: history:: drain:: \
    hostile:: requests:: any_peer:: conn_bounds:: auth:: upstream:: connections:: tls:: 2>&1 | tee -a "$log"
fi
skipped=$(awk '/SKIPPED: [^ ]+: / { n++ } END { print n + 0 }' "$log")
if [ "$skipped" -gt 0 ]; then
  echo "test.sh: $skipped test(s) SKIPPED, not run (MEGACONN_SKIP_NETNS=1):"
  grep -o 'SKIPPED: .*' "$log"
fi
