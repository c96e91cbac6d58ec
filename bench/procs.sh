# Sourced by the bench scripts that start servers and measure them:
# the PIDs they started (`pids`, killed and reaped at exit, by PID), a
# bounded wait for a condition, and a process tree's RSS and CPU.
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# wait_for SECONDS WHAT CMD...: run CMD every 0.2 s until it succeeds.
wait_for() {
  local limit=$1 what=$2; shift 2
  local end=$(( SECONDS + limit ))
  until "$@"; do
    if [ "$SECONDS" -ge "$end" ]; then echo "timed out after ${limit}s waiting for $what" >&2; return 1; fi
    sleep 0.2
  done
}

# The processes of a tree rooted at PID (megaconn's supervisor and workers).
tree() {
  local p=$1
  echo "$p"
  for c in $(cat /proc/"$p"/task/*/children 2>/dev/null); do tree "$c"; done
}
# Bytes of RSS, and CPU ticks (user + system), of the tree rooted at PID.
rss_of() { local t=0 p; for p in $(tree "$1"); do t=$(( t + $(awk '/^VmRSS:/ {print $2}' /proc/"$p"/status 2>/dev/null || echo 0) )); done; echo $(( t * 1024 )); }
cpu_ticks_of() { local t=0 p; for p in $(tree "$1"); do t=$(( t + $(sed 's/.*) //' /proc/"$p"/stat 2>/dev/null | awk '{print $12 + $13}' || echo 0) )); done; echo "$t"; }
# One line per thread of the tree rooted at PID: "PID/TID NAME TICKS"
# (user + system), for a breakdown of where the CPU went.
thread_ticks_of() { local p t; for p in $(tree "$1"); do for t in /proc/"$p"/task/*; do
  echo "$p/${t##*/} $(tr ' ' '_' < "$t/comm" 2>/dev/null) $(sed 's/.*) //' "$t/stat" 2>/dev/null | awk '{print $12 + $13}')"; done; done; }
# The first child of PID (the command a wrapper such as /usr/bin/time or
# timeout runs). Signal a megaconn client itself, not the `timeout` before
# it: timeout passes a signal to its whole process group, the client's
# workers too, and a worker ended by SIGINT takes its counters with it.
child_of() { awk '{print $1}' "/proc/$1/task/$1/children" 2>/dev/null; }
