#!/usr/bin/env bash
# The test command: unit tests, property tests and end-to-end tests over
# loopback (real server and client processes). About a minute.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo test --release --locked "$@"
