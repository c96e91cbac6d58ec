#!/usr/bin/env bash
# Installs the MQTT load generator nobody here wrote that
# bench/mqtt_vs_loadgen.sh puts beside `megaconn client --protocol mqtt`:
# crates.io's mqtt-benchmark 0.2.2 (chenquan/mqtt-benchmark, on rumqttc
# 0.24), with the Cargo.lock it ships (`--locked`; cargo warns that two of
# its locked crates, futures-util 0.3.30 and spin 0.9.8, were yanked since:
# they still build). The Go MQTT benchmarks are not served by the module
# proxy this project reaches (scripts/install_mqtt_loadgen.sh), and PyPI's
# pymqttbench 0.1.1 is Python 2 code (docs/bench.md).
#
# Machine-wide, once: into cargo's bin directory (~/.cargo/bin), only when
# `cargo install --list` does not already hold this version (its --version
# says 0.1.1 whatever the release, so the binary cannot be asked), never
# rebuilt per clone. Prints the binary's path on stdout.
set -euo pipefail
version=0.2.2
bin_dir="${CARGO_HOME:-$HOME/.cargo}/bin"
bin="$bin_dir/mqtt-benchmark"
if ! command -v cargo >/dev/null 2>&1 && [ -x "$bin_dir/cargo" ]; then
  export PATH="$bin_dir:$PATH"
fi
if [ -x "$bin" ] && cargo install --list | grep -qx "mqtt-benchmark v$version:"; then
  echo "$bin"
  exit 0
fi
echo "install_mqtt_benchmark: cargo install --locked mqtt-benchmark --version $version (once per machine, ~2 min)" >&2
# Its own target directory (a temporary one), not the caller's.
env -u CARGO_TARGET_DIR nice -n 19 cargo install --locked --quiet mqtt-benchmark --version "$version" >&2
echo "$bin"
