#!/usr/bin/env bash
# The test command: formatting and lints, unit and property tests, and
# end-to-end tests over loopback (real server and client processes,
# crashed workers, elastic growth, peers nobody here wrote). About 2.5 min
# of tests once built; a first build adds about 7 min.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
kubernetes-validate --strict --quiet deploy/k8s/*.yaml
cargo fmt --check
cargo clippy --release --locked --all-targets -- -D warnings
# Tests that need network namespaces fail, saying why, where they cannot
# be made; with MEGACONN_SKIP_NETNS=1 they print "SKIPPED: <test>: <why>"
# instead, and the count is reported here so a skip is never silent.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --release --locked "$@" 2>&1 | tee "$log"
skipped=$(awk '/SKIPPED: [^ ]+: / { n++ } END { print n + 0 }' "$log")
if [ "$skipped" -gt 0 ]; then
  echo "test.sh: $skipped test(s) SKIPPED, not run (MEGACONN_SKIP_NETNS=1):"
  grep -o 'SKIPPED: .*' "$log"
fi
