#!/usr/bin/env bash
# What `--mqtt-authz-http` costs once its answers are cached: the MQTT
# fan-in of bench/mqtt_vs_mosquitto.sh (DEVICES devices publishing to
# `tele/{conn}`, one consumer of `tele/#`) at the rate in FANIN, into
# megaconn without the hook, then with every publish and the
# subscription asked of an allow-all backend (Python's http.server on
# port 24320) and kept --mqtt-auth-http-cache 600s, alternated ROUNDS
# times. Each run prints the broker's CPU per delivered message (its
# whole process tree) and the split by thread; the backend counts what it
# was asked (each device's topic once, then nothing: the workers' cache).
#
# Usage: ROUNDS=2 FANIN="0:60000" HOLD=10 MEGACONN=path bash bench/mqtt_authz_cost.sh
# Every wait is bounded; every process it starts is killed by PID at exit.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${ROUNDS:-2}"; hook=24320
run="bench/runs/$(date +%Y-%m-%d-%H%M%S)-mqtt_authz_cost"; mkdir -p "$run"
cat > "$run/allow_all.py" <<'PY'
import json, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
asked, lock = [0], threading.Lock()
class Allow(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        with lock:
            asked[0] += 1
        body = b'{"result": "allow"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        body = json.dumps({"asked": asked[0]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
class Server(ThreadingHTTPServer):
    # Python's default listen backlog is 5: megaconn opens up to
    # --mqtt-auth-http-concurrency (64) connections at once, and SYNs
    # past the backlog wait seconds for their retransmission.
    request_queue_size = 1024
Server(("127.0.0.1", int(sys.argv[1])), Allow).serve_forever()
PY
python3 "$run/allow_all.py" "$hook" > "$run/backend.log" 2>&1 &
backend=$!
trap 'kill "$backend" 2>/dev/null; wait "$backend" 2>/dev/null || true' EXIT
n=0; until curl -sf "http://127.0.0.1:$hook/" > /dev/null; do
  n=$((n+1)); [ $n -lt 100 ] || { echo "the backend did not start (see $run/backend.log)" >&2; exit 1; }; sleep 0.1
done
# The devices' first publishes all ask at once (2,000 in a second): the
# timeout leaves Python's server time to answer them all.
flags="--mqtt-authz-http http://127.0.0.1:$hook/authz --mqtt-auth-http-cache 600s --mqtt-auth-http-timeout 60s"
for r in $(seq 1 "$rounds"); do
  for mode in off authz; do
    echo "== round $r: megaconn, authorization $mode =="
    if [ "$mode" = authz ]; then f="$flags"; else f=""; fi
    BROKERS=megaconn MEGACONN_FLAGS="$f" bash bench/mqtt_vs_mosquitto.sh fanin 2>&1 | tee "$run/round-$r-$mode.txt" | grep -v '^results in'
    [ "$mode" = authz ] && echo "the backend was asked $(curl -sf "http://127.0.0.1:$hook/") so far"
  done
done
echo "results in $run"
