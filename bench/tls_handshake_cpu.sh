#!/usr/bin/env bash
# CPU per TLS handshake on each side, full and resumed, and the ramp
# ceiling they set: cores / (server us + client us).
# A one-worker megaconn server (TLS 1.3, ECDSA P-256) and a one-worker
# megaconn client open N connections (no heartbeats, no hold), first with
# --tls-resume never (every handshake full), then --tls-resume always
# (every one but the first resumes); CPU comes from the server's /stats
# (before and after) and the client's summary. Accept, connect, the
# WebSocket upgrade and closing are included, as in a ramp. Offered at
# 2,000/s (at most 200 handshakes in flight) so tickets from earlier
# handshakes are at hand for the resumed mode.
# Usage: bench/tls_handshake_cpu.sh [N, default 10000] [protocol, default ws]
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-10000}"
PROTO="${2:-ws}"
PORT=18450
ADMIN=127.0.0.1:18451
cargo build --release --locked -q
BIN=${MEGACONN:-target/release/megaconn}
work="$(mktemp -d)"
server=""
trap 'rc=$?; [ -n "$server" ] && kill "$server" 2>/dev/null; wait 2>/dev/null; [ $rc -eq 0 ] || tail -5 "$work"/client.log 2>/dev/null; rm -rf "$work"' EXIT
# A CA, and a leaf for localhost it signed (a CA certificate cannot serve).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
  -keyout "$work/ca.key" -out "$work/ca.pem" -subj "/CN=bench CA" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/key.pem" -out "$work/cert.csr" -subj /CN=localhost 2>/dev/null
echo "subjectAltName=DNS:localhost,IP:127.0.0.1" > "$work/san.ext"
openssl x509 -req -in "$work/cert.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" -CAcreateserial -days 2 \
  -extfile "$work/san.ext" -out "$work/cert.pem" 2>/dev/null
"$BIN" server --protocol "$PROTO" --ports "$PORT" --workers 1 --admin "$ADMIN" --stats-interval 1s \
  --tls-cert "$work/cert.pem" --tls-key "$work/key.pem" > "$work/server.log" 2>&1 &
server=$!
n=0; until curl -sf "http://$ADMIN/healthz" >/dev/null; do n=$((n+1)); [ $n -lt 100 ] || { echo "server did not start" >&2; exit 1; }; sleep 0.1; done
server_cpu() { curl -sf "http://$ADMIN/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["cpu_us"])'; }
cores=$(nproc)
echo "date $(date -u +%F) | $N connections per mode | protocol $PROTO | TLS 1.3, ECDSA P-256 | 1 server worker, 1 client worker | $cores cores"
for mode in never always; do
  before=$(server_cpu)
  "$BIN" client --url "$( [ "$PROTO" = ws ] && echo wss || echo https )://localhost:$PORT/" --tls-ca "$work/ca.pem" \
    --tls-resume "$mode" --connections "$N" --rate 2000 --heartbeat off --hold 0s --workers 1 --json > "$work/client.json" 2> "$work/client.log"
  # Wait until the server saw every connection close, then for the
  # report after that (counters reach /stats once a second).
  n=0; until curl -sf "http://$ADMIN/stats" | python3 -c 'import json,sys; sys.exit(json.load(sys.stdin)["active"] != 0)'; do
    n=$((n+1)); [ $n -lt 300 ] || { echo "server still holds connections" >&2; exit 1; }; sleep 0.1
  done
  first=$(server_cpu)
  n=0; while [ "$(server_cpu)" = "$first" ]; do n=$((n+1)); [ $n -lt 50 ] || break; sleep 0.1; done
  after=$(server_cpu)
  python3 - "$work/client.json" "$before" "$after" "$N" "$mode" "$cores" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
before, after, n, mode, cores = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], int(sys.argv[6])
server_us = (after - before) / n
client_us = s["cpu_seconds"] * 1e6 / n
kind = "full" if mode == "never" else "resumed"
print(f"{kind:8} handshakes {s['tls_handshakes']:,} (resumed {s['tls_resumed']:,}) | server {server_us:.0f} us | client {client_us:.0f} us "
      f"| ceiling {cores} cores / {server_us + client_us:.0f} us = {cores * 1e6 / (server_us + client_us):,.0f}/s")
PY
done
