#!/usr/bin/env bash
# HTTPS keep-alive and TLS handshakes, megaconn vs nginx side by side on
# this machine: the same ECDSA P-256 certificate, TLS 1.3 on both, the
# client's cipher order on both (wrk and s_time are OpenSSL: AES-256-GCM).
# Rows: wrk -t2 over https at -c10 and -c100 (req/s, p99), and
# `openssl s_time -new` (full handshakes per second, one connection at a
# time, each with one request).
# Usage: bench/https.sh [duration-per-run, default 15s]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/nginx.sh
DUR="${1:-15s}"
SECS="${DUR%s}"
NGINX_PORT=18443
MEGA_PORT=18444
WORKERS=2

need_tools wrk:wrk nginx:nginx-light openssl:openssl
cargo build --release --locked -q
BIN=${MEGACONN:-target/release/megaconn}

start_workdir

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/key.pem" -out "$work/cert.pem" \
  -days 2 -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 2>/dev/null
nginx_conf "$work" "$NGINX_PORT" "$WORKERS" "$work/cert.pem" "$work/key.pem"
nginx -c "$work/nginx.conf" -p "$work" &
pids+=($!)
"$BIN" server --protocol http --listen 127.0.0.1 --ports "$MEGA_PORT" --workers "$WORKERS" --duration 30m \
  --tls-cert "$work/cert.pem" --tls-key "$work/key.pem" > "$work/megaconn.log" 2>&1 &
pids+=($!)
sleep 1
curl -fsS --cacert "$work/cert.pem" "https://localhost:$NGINX_PORT/" >/dev/null
curl -fsS --cacert "$work/cert.pem" "https://localhost:$MEGA_PORT/" >/dev/null

run_wrk() { # port conns
  local out; out="$(wrk -t2 -c"$2" -d"$DUR" --latency "https://127.0.0.1:$1/")"
  echo "$(echo "$out" | awk '/Requests\/sec/ {print $2}') $(echo "$out" | awk '$1=="99%" {print $2}' | to_ms)"
}
run_stime() { # port: full handshakes/s (s_time prints "N connections in T real seconds")
  local out; out="$(openssl s_time -connect "127.0.0.1:$1" -new -time "$SECS" -www / 2>/dev/null)"
  echo "$(echo "$out" | awk '/connections in .* real seconds/ {print $1/$4; exit}') 0"
}
row() {
  read -r mr mp <<<"$2"; read -r nr np <<<"$3"
  awk -v l="$1" -v mr="$mr" -v mp="$mp" -v nr="$nr" -v np="$np" 'BEGIN { printf "%-24s %12.0f %9.2f %12.0f %9.2f %7.2f\n", l, mr, mp, nr, np, mr/nr }'
}
echo "# $(date -u +%FT%TZ) bench/https.sh duration=$DUR workers=$WORKERS, $(nproc) cores, TLS 1.3 ECDSA P-256"
printf "%-24s %12s %9s %12s %9s %7s\n" load megaconn p99_ms nginx p99_ms ratio
for c in 10 100; do
  m="$(run_wrk "$MEGA_PORT" "$c")"; n="$(run_wrk "$NGINX_PORT" "$c")"
  row "wrk https -c$c req/s" "$m" "$n"
done
m="$(run_stime "$MEGA_PORT")"; n="$(run_stime "$NGINX_PORT")"
row "s_time -new handshakes/s" "$m" "$n"
