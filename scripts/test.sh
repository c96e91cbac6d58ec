#!/usr/bin/env bash
# The test command: formatting and lints, unit and property tests, and
# end-to-end tests over loopback (real server and client processes,
# crashed workers, elastic growth). About three minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
kubernetes-validate --strict --quiet deploy/k8s/*.yaml
cargo fmt --check
cargo clippy --release --locked --all-targets -- -D warnings
cargo test --release --locked "$@"
