#!/usr/bin/env bash
# HTTP keep-alive "Hello world!" under wrk: megaconn on io_uring, megaconn
# on epoll and nginx, side by side in one sitting, rounds alternating so
# drift hits all three. Prints req/s per round, medians and the ratios.
# With "tls" as the fourth argument, the same over HTTPS (TLS 1.3, one
# ECDSA P-256 certificate for all three, nginx as in bench/https.sh).
# Usage: bench/http_io.sh [duration per wrk run, default 10s] [rounds, default 3] [connections, default 100] [tls]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/nginx.sh
DUR="${1:-10s}"
ROUNDS="${2:-3}"
CONNS="${3:-100}"
MODE="${4:-plain}"
case "$MODE" in plain|tls) ;; *) echo "http_io.sh: the fourth argument is 'tls' or nothing, not '$MODE'" >&2; exit 2 ;; esac
. bench/run_dir.sh
run=$(run_dir "http-io-$MODE")
need_tools wrk:wrk nginx:nginx-light openssl:openssl
cargo build --release --locked -q
BIN=${MEGACONN:-target/release/megaconn}
start_workdir
scheme=http tls=() certs=() curl_ca=()
if [ "$MODE" = tls ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/key.pem" -out "$work/cert.pem" \
    -days 2 -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 2>/dev/null
  scheme=https tls=(--tls-cert "$work/cert.pem" --tls-key "$work/key.pem") certs=("$work/cert.pem" "$work/key.pem") curl_ca=(--cacert "$work/cert.pem")
fi
nginx_conf "$work" 18180 2 "${certs[@]}"
nginx -c "$work/nginx.conf" -p "$work" &
pids+=($!)
"$BIN" server --io uring --protocol http --ports 18181 --workers 2 --admin off --duration 30m "${tls[@]}" > "$work/uring.log" 2>&1 &
pids+=($!)
"$BIN" server --io epoll --protocol http --ports 18182 --workers 2 --admin off --duration 30m "${tls[@]}" > "$work/epoll.log" 2>&1 &
pids+=($!)
for port in 18180 18181 18182; do
  k=0; until curl -fsS "${curl_ca[@]}" "$scheme://localhost:$port/" >/dev/null 2>&1; do k=$((k+1)); [ $k -lt 100 ] || { echo "port $port did not answer" >&2; exit 1; }; sleep 0.1; done
done
grep -q 'reactor io_uring' "$work/uring.log" || { echo "the uring server is not on io_uring:" >&2; cat "$work/uring.log" >&2; exit 1; }
{
  echo "# $(date -u +%FT%TZ) bench/http_io.sh $scheme wrk -t2 -c$CONNS -d$DUR, $ROUNDS rounds, 2 workers each, $(nproc) cores"
  for r in $(seq "$ROUNDS"); do
    for who in uring:18181 epoll:18182 nginx:18180; do
      rps=$(wrk -t2 -c"$CONNS" -d"$DUR" "$scheme://127.0.0.1:${who#*:}/" | awk '/Requests\/sec/ {print $2}')
      echo "round $r ${who%%:*} $rps"
    done
  done
} | tee "$run/rounds.txt"
python3 - "$run/rounds.txt" <<'PY' | tee "$run/summary.txt"
import statistics, sys
rps = {}
for line in open(sys.argv[1]):
    if line.startswith("round"):
        _, _, who, v = line.split()
        rps.setdefault(who, []).append(float(v))
m = {k: statistics.median(v) for k, v in rps.items()}
for k in ("uring", "epoll", "nginx"):
    print(f"{k:6} median {m[k]:10.0f} req/s  (rounds: {', '.join(f'{x:.0f}' for x in rps[k])})")
print(f"uring/nginx {m['uring']/m['nginx']:.2f}x (goal >= 1.3x), epoll/nginx {m['epoll']/m['nginx']:.2f}x, uring/epoll {m['uring']/m['epoll']:.2f}x")
PY
