#!/usr/bin/env bash
# Builds the MQTT load generator that bench/mqtt_vs_loadgen.sh puts beside
# `megaconn client --protocol mqtt`: bench/mqtt_paho_load, a Go program on
# Eclipse paho's Go client, pinned by its go.mod and go.sum
# (github.com/eclipse/paho.mqtt.golang v1.5.1, from the Go module proxy).
# The usual Go MQTT benchmarks (krylovsk/mqtt-benchmark,
# inovex/mqtt-stresser) are not served by the module proxy this project
# can reach, and emqtt-bench needs Erlang and hex; mqtt_paho_load keeps
# mqtt-benchmark's load and measurement (bench/mqtt_paho_load/main.go).
#
# Installs into target/go-bin/mqtt_paho_load (target/ is ignored by git),
# or $GOBIN_DIR. Idempotent: does nothing when the binary is newer than
# its sources. Prints the binary's path on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
src=bench/mqtt_paho_load
bin_dir="${GOBIN_DIR:-$PWD/target/go-bin}"
bin="$bin_dir/mqtt_paho_load"
if [ -x "$bin" ] && [ -z "$(find "$src" -newer "$bin" -type f)" ]; then
  echo "$bin"
  exit 0
fi
# Go comes with this project's machines (Go 1.26); Debian's golang-go
# (1.19 here) is older than the 1.24 the pinned modules need.
if ! command -v go >/dev/null 2>&1; then
  echo "install_mqtt_loadgen: go not found; install Go >= 1.24 (https://go.dev/dl), then rerun" >&2
  exit 1
fi
mkdir -p "$bin_dir"
echo "install_mqtt_loadgen: building $src (paho.mqtt.golang v1.5.1, go.sum-pinned) into $bin_dir" >&2
(cd "$src" && GOBIN="$bin_dir" GOFLAGS=-mod=readonly go install -buildvcs=false . >&2)
echo "$bin"
