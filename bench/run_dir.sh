# Sourced by the bench scripts: `run_dir NAME` makes a fresh run directory
# and prints its path. Results go there (bench/runs/ is not committed),
# never over the bench/results-* files BENCHMARKS.md cites; RUN_DIR
# overrides it and must be empty.
run_dir() {
  local run="${RUN_DIR:-bench/runs/$(date -u +%F-%H%M%S)-$1}"
  if [ -n "$(ls -A "$run" 2>/dev/null)" ]; then
    echo "$1.sh: $run is not empty; give a new RUN_DIR" >&2
    exit 2
  fi
  mkdir -p "$run"
  echo "$1.sh: results in $run" >&2
  printf '%s\n' "$run"
}
