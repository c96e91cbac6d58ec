#!/usr/bin/env bash
# Side-by-side HTTP keep-alive benchmark: megaconn vs nginx on this machine.
# Installs wrk, ab (apache2-utils) and nginx from Debian packages if
# missing, runs the same loads against both on loopback and prints a table
# of req/s and p99 latency with the megaconn/nginx ratio.
# Usage: bench/http.sh [duration-per-wrk-run, default 15s] [ab requests, default 1000000]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/nginx.sh
DUR="${1:-15s}"
AB_N="${2:-1000000}"
. bench/run_dir.sh
run=$(run_dir http)   # fresh each run; RUN_DIR overrides
NGINX_PORT=18080
MEGA_PORT=18081
WORKERS=2

need_tools wrk:wrk ab:apache2-utils nginx:nginx-light
cargo build --release --locked -q
BIN=${MEGACONN:-target/release/megaconn}   # MEGACONN=path compares another build

start_workdir

nginx_conf "$work" "$NGINX_PORT" "$WORKERS"
nginx -c "$work/nginx.conf" -p "$work" &
pids+=($!)
"$BIN" server --protocol http --listen 127.0.0.1 --ports "$MEGA_PORT" --workers "$WORKERS" --duration 30m > "$work/megaconn.log" 2>&1 &
pids+=($!)
sleep 1
curl -fsS "http://127.0.0.1:$NGINX_PORT/" >/dev/null
curl -fsS "http://127.0.0.1:$MEGA_PORT/" >/dev/null

# wrk: "Requests/sec" and the 99% line of --latency (in us/ms/s).
run_wrk() { # port conns
  local out; out="$(wrk -t2 -c"$2" -d"$DUR" --latency "http://127.0.0.1:$1/")"
  local rps p99
  rps="$(echo "$out" | awk '/Requests\/sec/ {print $2}')"
  p99="$(echo "$out" | awk '$1=="99%" {print $2}' | to_ms)"
  echo "$rps $p99"
}
run_ab() { # port
  local out; out="$(ab -k -c10 -n "$AB_N" "http://127.0.0.1:$1/" 2>/dev/null)"
  local rps p99
  rps="$(echo "$out" | awk '/Requests per second/ {print $4}')"
  p99="$(echo "$out" | awk '$1=="99%" {print $2}')"
  echo "$rps $p99"
}

row() { # label "m_rps m_p99" "n_rps n_p99"
  read -r mr mp <<<"$2"; read -r nr np <<<"$3"
  awk -v l="$1" -v mr="$mr" -v mp="$mp" -v nr="$nr" -v np="$np" 'BEGIN { printf "%-22s %14.0f %10.2f %14.0f %10.2f %8.2f %10.2f\n", l, mr, mp, nr, np, mr/nr, (np>0? mp/np : 0) }'
}
table() {
  echo "# $(date -u +%FT%TZ) bench/http.sh duration=$DUR ab_n=$AB_N workers=$WORKERS, $(nproc) cores"
  printf "%-22s %14s %10s %14s %10s %8s %10s\n" "load" "megaconn req/s" "p99 ms" "nginx req/s" "p99 ms" "ratio" "p99 ratio"
  for c in 10 100 1000; do
    m="$(run_wrk $MEGA_PORT $c)"; n="$(run_wrk $NGINX_PORT $c)"
    row "wrk -t2 -c$c -d$DUR" "$m" "$n"
  done
  m="$(run_ab $MEGA_PORT)"; n="$(run_ab $NGINX_PORT)"
  row "ab -k -c10 -n $AB_N" "$m" "$n"
}
table | tee "$run/results-http.txt"
