#!/usr/bin/env bash
# Install what building and testing megaconn needs on a fresh Debian-like
# machine: a Rust toolchain (cargo) and iproute2 (`ss`, used by the tests
# to prove no socket is left behind). Idempotent; installs only what is
# missing and says what it does.
set -euo pipefail
if ! command -v cargo >/dev/null 2>&1; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  else
    echo "setup: cargo not found; install Rust with your package manager (apt-get install cargo) or rustup" >&2
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
      echo "setup: installing cargo from Debian packages"
      apt-get update -qq && apt-get install -y -qq cargo
    else
      exit 1
    fi
  fi
fi
if ! command -v ss >/dev/null 2>&1; then
  echo "setup: installing iproute2 (for ss)"
  apt-get update -qq && apt-get install -y -qq iproute2
fi
