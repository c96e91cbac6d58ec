#!/usr/bin/env bash
# Fuzz every parser megaconn exposes to peers and users (src/fuzz_targets.rs),
# each for FUZZ_SECONDS (default 60), with libFuzzer through cargo-fuzz.
# Installs cargo-fuzz if missing; needs the nightly toolchain (says so if
# absent). Seeds and every crash found live in fuzz/regressions/<target>/,
# which `cargo test` replays (tests/fuzz_regressions.rs). Prints one line per
# target: executions, corpus size, crashes; exits 1 if any target crashed.
set -euo pipefail
cd "$(dirname "$0")"
SECS="${FUZZ_SECONDS:-60}"
if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  echo "fuzz/run.sh: the nightly Rust toolchain is missing (cargo fuzz needs it): rustup toolchain install nightly" >&2
  exit 1
fi
echo "fuzz/run.sh: nightly toolchain present: $(rustc +nightly --version)"
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz/run.sh: installing cargo-fuzz (cargo install cargo-fuzz --locked)"
  cargo install cargo-fuzz --locked
fi
mkdir -p logs
targets=$(cargo +nightly fuzz list)
failed=0
printf '%-16s %14s %10s %8s\n' target executions corpus crashes > logs/summary.txt
for t in $targets; do
  mkdir -p "corpus/$t"
  cp -n "regressions/$t"/* "corpus/$t/" 2>/dev/null || true
  echo "fuzz/run.sh: $t for ${SECS}s"
  status=0
  cargo +nightly fuzz run "$t" "corpus/$t" -- -max_total_time="$SECS" -print_final_stats=1 -rss_limit_mb=2048 > "logs/$t.log" 2>&1 || status=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "logs/$t.log" | grep -o '[0-9]*$' | tail -1)
  crashes=$(find "artifacts/$t" -type f 2>/dev/null | wc -l)
  if [ "$status" != 0 ] || [ "$crashes" != 0 ]; then
    failed=1
    for f in "artifacts/$t"/*; do
      [ -f "$f" ] && cp "$f" "regressions/$t/$(basename "$f")" && echo "fuzz/run.sh: $t crashed; input saved as regressions/$t/$(basename "$f") (cargo test replays it)"
    done
    tail -30 "logs/$t.log"
  fi
  printf '%-16s %14s %10s %8s\n' "$t" "${execs:-?}" "$(ls "corpus/$t" | wc -l)" "$crashes" >> logs/summary.txt
done
cat logs/summary.txt
exit "$failed"
