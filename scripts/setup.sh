#!/usr/bin/env bash
# Install what building and testing megaconn needs on a fresh Debian-like
# machine: a Rust toolchain (cargo, rustfmt, clippy), Python's
# prometheus-client (a parser nobody here wrote, for /metrics) and iproute2 (`ss`, used by the tests
# to prove no socket is left behind). Idempotent; installs only what is
# missing and says what it does.
set -euo pipefail
# Rust: Cargo.toml's rust-version is the oldest toolchain the locked
# dependencies build with. Debian's cargo package is far older, so it is no
# fallback; rustup (preinstalled on these machines) is the way.
need=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo not found; megaconn needs Rust >= $need: install it with rustup (https://rustup.rs), then rerun" >&2
  exit 1
fi
have=$(rustc --version | cut -d' ' -f2)
if [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" != "$need" ]; then
  if command -v rustup >/dev/null 2>&1; then
    echo "setup: rustc $have is older than the $need Cargo.toml needs; updating with rustup"
    rustup toolchain install stable --profile minimal -c rustfmt,clippy && rustup default stable
  else
    echo "setup: rustc $have is older than the $need Cargo.toml needs; install Rust >= $need with rustup" >&2
    exit 1
  fi
fi
# The test script checks formatting and lints.
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  if command -v rustup >/dev/null 2>&1; then
    echo "setup: adding rustfmt and clippy (rustup)"
    rustup component add rustfmt clippy
  elif command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "setup: installing rustfmt and clippy from Debian packages"
    apt-get update -qq && apt-get install -y -qq rustfmt rust-clippy
  else
    echo "setup: cargo fmt / cargo clippy missing; install rustfmt and clippy" >&2
    exit 1
  fi
fi
# The push tests parse /metrics with Prometheus's own Python parser.
if ! python3 -c "import prometheus_client" >/dev/null 2>&1; then
  echo "setup: installing the Python prometheus-client (its OpenMetrics parser checks /metrics)"
  if ! python3 -m pip install -q prometheus-client; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
      apt-get update -qq && apt-get install -y -qq python3-prometheus-client
    else
      echo "setup: cannot install prometheus-client for python3" >&2
      exit 1
    fi
  fi
fi
# The shard test checks megaconn merge against HdrHistogram's own Python
# implementation (module hdrh, PyPI package hdrhistogram).
if ! python3 -c "import hdrh.log" >/dev/null 2>&1; then
  echo "setup: installing the Python hdrhistogram package (an independent reader of HdrHistogram logs)"
  python3 -m pip install -q "hdrhistogram==0.10.8"
fi
# The thresholds test reads --junit files with junitparser (a JUnit XML
# reader nobody here wrote, as CI test reporters are).
if ! python3 -c "import junitparser, sys; sys.exit(junitparser.version != '5.0.3')" >/dev/null 2>&1; then
  echo "setup: installing the Python junitparser package (an independent reader of JUnit XML)"
  python3 -m pip install -q "junitparser==5.0.3"
fi
# The cluster test and bench run a real NATS server: Debian's package.
if ! command -v nats-server >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "setup: installing nats-server from Debian packages (the cluster's broker in tests and bench)"
    apt-get update -qq && apt-get install -y -qq nats-server
  else
    echo "setup: nats-server missing; install it (apt-get install nats-server)" >&2
    exit 1
  fi
fi
# `--upstream nats://` is read back by NATS's own Python client (nats-py,
# pinned: tests/peers/nats_consume.py uses its JetStream pull consumer).
if ! python3 -c "import importlib.metadata as m, sys; sys.exit(m.version('nats-py') != '2.15.0')" >/dev/null 2>&1; then
  echo "setup: installing the Python nats-py package (NATS's own client, the JetStream consumer in the upstream tests)"
  python3 -m pip install -q "nats-py==2.15.0"
fi
# The MQTT server is tested against clients nobody here wrote: Eclipse
# paho-mqtt in Python (pinned: its callback API is what tests/peers/mqtt_paho.py
# uses) and Debian's mosquitto_sub / mosquitto_pub.
if ! python3 -c "import paho.mqtt, sys; sys.exit(paho.mqtt.__version__ != '2.1.0')" >/dev/null 2>&1; then
  echo "setup: installing the Python paho-mqtt package (an independent MQTT client for the tests)"
  python3 -m pip install -q paho-mqtt==2.1.0
fi
if ! command -v mosquitto_sub >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "setup: installing mosquitto-clients from Debian packages (mosquitto_sub/mosquitto_pub, MQTT peers in the tests)"
    apt-get update -qq && apt-get install -y -qq mosquitto-clients
  else
    echo "setup: mosquitto_sub missing; install it (apt-get install mosquitto-clients)" >&2
    exit 1
  fi
fi
# The MQTT load generator is tested against Debian's mosquitto broker
# (tests/e2e/mqtt_client.rs starts /usr/sbin/mosquitto on a free port).
if [ ! -x /usr/sbin/mosquitto ]; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "setup: installing mosquitto from Debian packages (the broker the MQTT client's tests load)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mosquitto >/dev/null
  else
    echo "setup: /usr/sbin/mosquitto missing; install it (apt-get install mosquitto)" >&2
    exit 1
  fi
fi
# The MQTT load generator megaconn's client is compared with
# (bench/mqtt_vs_loadgen.sh, tests/e2e/mqtt_loadgen.rs): bench/mqtt_paho_load
# on paho.mqtt.golang v1.5.1, pinned by its go.sum, built into target/go-bin.
bash scripts/install_mqtt_loadgen.sh >/dev/null
# ... and two nobody here wrote: crates.io's mqtt-benchmark 0.2.2, with its
# own Cargo.lock, into ~/.cargo/bin, and PyPI's pymqttbench 0.1.1 (Python
# 2.7, paho-mqtt 1.6.1) into ~/.cache, each once per machine (only when
# missing).
bash scripts/install_mqtt_benchmark.sh >/dev/null
bash scripts/install_pymqttbench.sh >/dev/null
# nginx is the HTTPS server the client's keep-alive test loads (a peer
# nobody here wrote); openssl makes and reads its test certificates.
for tool in nginx openssl; do
  if ! command -v "$tool" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$tool" ]; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
      echo "setup: installing $tool from Debian packages (a peer of the TLS tests)"
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$tool" >/dev/null
    else
      echo "setup: $tool missing; install it (apt-get install $tool)" >&2
      exit 1
    fi
  fi
done
# curl is a peer of the lingering-close test (a body sent to a refusal).
if ! command -v curl >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "setup: installing curl (an HTTP client peer for the tests)"
    apt-get update -qq && apt-get install -y -qq curl
  else
    echo "setup: curl missing; install it (apt-get install curl)" >&2
    exit 1
  fi
fi
# WebSocket tests run against Python's `websockets` (pinned: its API is
# what the peer scripts in tests/peers use).
if ! python3 -c "import websockets, sys; sys.exit(int(websockets.__version__.split('.')[0]) < 14)" >/dev/null 2>&1; then
  echo "setup: installing the Python websockets package (an independent WebSocket peer for the tests)"
  python3 -m pip install -q "websockets==17.4"
fi
# The --auth tests mint their tokens with PyJWT (and its RSA/EC keys with
# cryptography), not with megaconn's own code.
if ! python3 -c "import jwt, cryptography" >/dev/null 2>&1; then
  echo "setup: installing PyJWT and cryptography (an independent token minter for the --auth tests)"
  python3 -m pip install -q "pyjwt[crypto]==2.10.1"
fi
# Kubernetes manifests in deploy/k8s are checked against the API schemas
# kubernetes-validate ships (offline; pinned).
if ! command -v kubernetes-validate >/dev/null 2>&1; then
  echo "setup: installing kubernetes-validate (strict checks of deploy/k8s)"
  python3 -m pip install -q "kubernetes-validate==1.31.0"
fi
# ... and Node's `ws` and `mqtt` (mqtt.js) (versions pinned in tests/peers/package-lock.json).
if [ ! -d tests/peers/node_modules/ws ] || [ ! -d tests/peers/node_modules/playwright-core ] || [ ! -d tests/peers/node_modules/mqtt ]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "setup: npm not found; install Node.js (apt-get install nodejs npm)" >&2
    exit 1
  fi
  echo "setup: installing Node's ws, mqtt and playwright-core into tests/peers (npm ci)"
  (cd tests/peers && npm ci --no-audit --no-fund --silent)
fi
# ... and a real browser: Debian's Chromium, driven by playwright-core
# (which is told where it is; it downloads nothing).
if ! command -v chromium >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "setup: installing Debian's chromium (a browser peer for the WebSocket tests)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "setup: chromium missing; install Debian's chromium package (apt-get install chromium)" >&2
    exit 1
  fi
fi
if ! command -v ss >/dev/null 2>&1; then
  echo "setup: installing iproute2 (for ss)"
  apt-get update -qq && apt-get install -y -qq iproute2
fi
