#!/usr/bin/env bash
# The test command: formatting and lints, unit and property tests, and
# end-to-end tests over loopback (real server and client processes,
# crashed workers, elastic growth). About three minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Elastic server workers leave the SO_REUSEPORT group when full; with this
# set, handshakes queued on the closing listener move to a sibling instead
# of being reset. Root only; said, never silent.
if [ "$(id -u)" = 0 ] && [ "$(cat /proc/sys/net/ipv4/tcp_migrate_req 2>/dev/null || echo 1)" = 0 ]; then
  echo "test.sh: sysctl net.ipv4.tcp_migrate_req 0 -> 1 (elastic workers; see megaconn tune)"
  sysctl -q -w net.ipv4.tcp_migrate_req=1
fi
cargo fmt --check
cargo clippy --release --locked --all-targets -- -D warnings
cargo test --release --locked "$@"
