#!/usr/bin/env bash
# The test command: formatting and lints, unit and property tests, and
# end-to-end tests over loopback (real server and client processes,
# crashed workers, elastic growth, peers nobody here wrote), then half of
# them again on the epoll reactor, beside the first run. About 4.5 min of
# tests once built; a first build adds about 6 min (658 s in all from a
# fresh clone, BENCHMARKS.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
kubernetes-validate --strict --quiet deploy/k8s/*.yaml
cargo fmt --check
# Tests that need network namespaces fail, saying why, where they cannot
# be made; with MEGACONN_SKIP_NETNS=1 they print "SKIPPED: <test>: <why>"
# instead, and the count is reported here so a skip is never silent.
logs=$(mktemp -d)
log=$logs/tests
cleanup=('rm -rf "$logs"')
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
# Lints check and the tests compile: they share no artifact, so clippy
# runs in its own target directory beside everything else, at the lowest
# priority: it takes what the build leaves idle on 2 cores (links, one
# crate's type checking) and then what the end-to-end tests leave idle
# (they mostly wait on sockets), instead of its 2.5 min before them. It is
# waited for at the end; its output is shown only when it fails.
CARGO_TARGET_DIR=target/clippy nice -n 19 cargo clippy --profile ci --locked --all-targets -- -D warnings >"$logs/clippy" 2>&1 &
clippy=$!
cleanup+=('kill $clippy 2>/dev/null || true')
cargo test --profile ci --locked --no-run 2>&1 | tee "$log"
# The suite below runs servers and clients on --io auto (io_uring on this
# kernel, tests/io.rs checks it). The representative half runs both again
# on the epoll reactor: every protocol's read and write paths, pushes,
# history, drains, hostile peers and bounds, TLS. The end-to-end tests
# spend most of their time waiting on sockets and processes (about half a
# core of 2), so the epoll half runs beside the first run, from the same
# test binary, its output kept apart and shown after it. Ports come from
# one allocator with lock files (tests/e2e/common/ports.rs), so the two
# never meet.
epoll=
if [ $# -eq 0 ]; then
  e2e=$(cargo test --profile ci --locked --no-run --test e2e --message-format=json 2>/dev/null |
    python3 -c 'import json,sys; print(*[m["executable"] for m in map(json.loads, sys.stdin) if m.get("executable") and m["target"]["name"] == "e2e"])')
  if [ -z "$e2e" ] || [ ! -x "$e2e" ]; then
    echo "test.sh: cannot find the e2e test binary that cargo built" >&2
    exit 1
  fi
  MEGACONN_IO=epoll MEGACONN_CLIENT_IO=epoll "$e2e" --test-threads=2 ws:: http:: push:: history:: drain:: \
    hostile:: requests:: any_peer:: conn_bounds:: auth:: upstream:: connections:: tls:: ws_deflate:: >"$logs/epoll" 2>&1 &
  epoll=$!
  cleanup+=('kill $epoll 2>/dev/null || true')
fi
# Four tests at a time in the first run, two in the epoll half: the tests
# wait far more than they compute (the 251 end-to-end tests add up to
# ~850 s, on one core at a time), so 4 + 2 threads finish in ~260-275 s
# where 2 + 2 took 426 s, and still leave the load tests the CPU their
# deadlines need (6 + 4 did not, with niced builds beside: heartbeats
# queued for seconds and 6 load tests failed). RUST_TEST_THREADS
# overrides the first run's count.
status=0
RUST_TEST_THREADS=${RUST_TEST_THREADS:-4} cargo test --profile ci --locked "$@" 2>&1 | tee -a "$log" || status=$?
if [ -n "$epoll" ]; then
  echo "test.sh: the epoll half (MEGACONN_IO=epoll MEGACONN_CLIENT_IO=epoll $e2e ws:: http:: ...):"
  epoll_status=0
  wait $epoll || epoll_status=$?
  tee -a "$log" <"$logs/epoll"
  if [ $epoll_status -ne 0 ]; then status=$epoll_status; fi
  # Tests that must run with no other bench beside them (#[ignore]d in
  # the runs above, which say so): every bench removes the namespaces of
  # benches that are gone, so a killed bench's namespace can only be shown
  # left behind, and removed by the next bench, while no other bench starts.
  echo "test.sh: the tests that run alone ($e2e --ignored topology::alone_):"
  "$e2e" --ignored topology::alone_ 2>&1 | tee -a "$log" || status=$?
fi
if ! wait $clippy; then
  cat "$logs/clippy"
  echo "test.sh: cargo clippy failed (above)" >&2
  status=1
fi
if [ $status -ne 0 ]; then
  # What each failing test printed, once more at the very end (above, it
  # is followed by the epoll half's and clippy's output), 40 lines each.
  echo "test.sh: FAILED; what the failing tests printed (also above):"
  awk '/^---- .* stdout ----$/ { on = 1; n = 0 } /^(failures:|stack backtrace:)$/ { on = 0 } on && n++ < 40' "$log"
fi
skipped=$(awk '/SKIPPED: [^ ]+: / { n++ } END { print n + 0 }' "$log")
if [ "$skipped" -gt 0 ]; then
  echo "test.sh: $skipped test(s) SKIPPED, not run (MEGACONN_SKIP_NETNS=1):"
  grep -o 'SKIPPED: .*' "$log"
fi
exit $status
