#!/usr/bin/env bash
# What --mqtt-auth-http costs a CONNECT ramp: N MQTT clients (each its
# own client id, so every CONNECT asks the backend) ramped at RATE into
# megaconn without the hook, then with it, side by side in one sitting.
# The backend is nginx answering 204 (allow) to every POST, so the
# backend is not what is measured. Prints, for each: the ramp's seconds,
# CONNACK time p50/p99 (the client's handshake), and the server's CPU
# (its whole process tree, supervisor and hook thread included) per
# connection; then the ratios.
# usage: N=100000 RATE=20000 bash bench/auth_http.sh   (MEGACONN=path to a build)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/procs.sh   # pids (killed at exit), wait_for, tree, cpu_ticks_of
. bench/nginx.sh   # nginx_conf
N=${N:-100000}
RATE=${RATE:-20000}
MEGACONN=${MEGACONN:-target/release/megaconn}
[ -x "$MEGACONN" ] || cargo build --release
command -v nginx >/dev/null || { echo "nginx is needed (apt-get install nginx-light)" >&2; exit 2; }
work=$(mktemp -d)
trap 'cleanup; rm -rf "$work"' EXIT
HOOK=24190 ADMIN=24191 PORTS=24100-24119
NGINX_RETURN=204 nginx_conf "$work" "$HOOK" 1
nginx -c "$work/nginx.conf" -p "$work" & pids+=($!)
wait_for 10 "nginx" curl -sf -o /dev/null -X POST "http://127.0.0.1:$HOOK/auth"

run() {
  local name=$1; shift
  "$MEGACONN" server --protocol mqtt --ports "$PORTS" --connections "$N" --admin "127.0.0.1:$ADMIN" "$@" \
    > "$work/$name-server.log" 2>&1 & local spid=$!
  pids+=("$spid")
  wait_for 30 "the server" curl -sf -o /dev/null "http://127.0.0.1:$ADMIN/healthz"
  local cpu0 cpu1
  cpu0=$(cpu_ticks_of "$spid")
  "$MEGACONN" client --protocol mqtt --ports "$PORTS" --connections "$N" --rate "$RATE" --hold 2s \
    --mqtt-username device --mqtt-password secret --json > "$work/$name-client.json" 2> "$work/$name-client.log"
  cpu1=$(cpu_ticks_of "$spid")
  curl -s "http://127.0.0.1:$ADMIN/stats" > "$work/$name-stats.json"
  kill "$spid"; wait "$spid" 2>/dev/null || true
  python3 - "$name" "$work/$name-client.json" "$work/$name-stats.json" $(( cpu1 - cpu0 )) "$(getconf CLK_TCK)" "$N" <<'PY'
import json, sys
name, client, stats, ticks, hz, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
s = json.load(open(client))["summary"]
hook = json.load(open(stats)).get("mqtt_auth_http", {})
c = s["connect_ms"]
cpu = ticks / hz
print(json.dumps({"name": name, "established": s["established"], "ramp_s": round(s["ramp_seconds"], 2),
                  "connack_p50_ms": c["p50_ms"], "connack_p99_ms": c["p99_ms"], "server_cpu_s": round(cpu, 2),
                  "server_cpu_us_per_conn": round(cpu * 1e6 / n, 1), "hook": hook}))
PY
}
off=$(run off)
on=$(run on --mqtt-auth-http "http://127.0.0.1:$HOOK/auth")
echo "$off"
echo "$on"
python3 - "$off" "$on" <<'PY'
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for k in ["ramp_s", "connack_p50_ms", "connack_p99_ms", "server_cpu_us_per_conn"]:
    print(f"{k:24} no hook {a[k]:>10} | hook {b[k]:>10} | ratio {b[k] / a[k] if a[k] else float('nan'):.2f}")
PY
