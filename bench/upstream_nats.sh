#!/usr/bin/env bash
# What `--upstream nats://` costs: DEVICES MQTT devices (default 1,000)
# publishing QoS 1 to `tele/{conn}` at RATE messages a second in all
# (default 10,000) for HOLD seconds (default 10), into megaconn without
# --upstream, then with every message also stored in NATS JetStream
# (`nats-server -js`, file storage). For each run: messages published and
# PUBACKed, stored in JetStream (the server's upstream_delivered and the
# stream's own count), the server's CPU (its whole process tree) and
# nats-server's per published message, and how long the last messages took
# to be stored after the devices stopped.
#
# Usage: DEVICES=1000 RATE=10000 HOLD=10 MEGACONN=path bash bench/upstream_nats.sh
# Every wait is bounded; every process it starts is killed by PID at exit.
# Ports 24310 (NATS), 24311 (MQTT), 24312 (megaconn's admin API).
set -euo pipefail
cd "$(dirname "$0")/.."
devices="${DEVICES:-1000}"; rate="${RATE:-10000}"; hold="${HOLD:-10}"
nats_port=24310; port=24311; admin=24312
bin="${MEGACONN:-}"
if [ -z "$bin" ]; then cargo build --release -q; bin=target/release/megaconn; fi
command -v nats-server >/dev/null || { echo "nats-server is missing: bash scripts/setup.sh installs it" >&2; exit 2; }
per=$(( rate / devices ))
[ "$per" -ge 1 ] || { echo "$rate/s over $devices devices is under 1/s each: raise RATE or lower DEVICES" >&2; exit 2; }
run="bench/runs/$(date +%Y-%m-%d-%H%M%S)-upstream_nats"; mkdir -p "$run"
. bench/procs.sh

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
stat_of() { curl -sf "http://127.0.0.1:$admin/stats" | python3 -c "import json,sys; s=json.load(sys.stdin); print($1)" 2>/dev/null || echo -1; }
drained() { [ "$(stat_of 's["upstream"]["queued"]')" = 0 ]; }

nats-server -js -sd "$run/js" -a 127.0.0.1 -p "$nats_port" > "$run/nats.log" 2>&1 &
npid=$!; pids+=("$npid")
wait_for 20 "nats-server" listening "$nats_port"

one() { # NAME [server flags...]
  local name=$1; shift
  "$bin" server --protocol mqtt --listen 127.0.0.1 --ports "$port" --admin "127.0.0.1:$admin" --connections $(( devices + 100 )) \
    --stats-interval 1s "$@" > "$run/server-$name.log" 2>&1 &
  local spid=$!; pids+=("$spid")
  wait_for 30 "the server" listening "$port"
  local cpu0 ncpu0 cpu1 ncpu1 t0 drain_s
  cpu0=$(cpu_ticks_of "$spid"); ncpu0=$(cpu_ticks_of "$npid")
  timeout -s INT $(( hold + 120 )) "$bin" client --protocol mqtt --ports "$port" --connections "$devices" --rate 2000/s \
    --mqtt-client-id "dev-{conn}" --mqtt-publish-topic 'tele/{conn}' --mqtt-qos 1 --request-rate "$per/s" --payload 64 \
    --heartbeat 30s --hold "${hold}s" --json > "$run/client-$name.json" 2> "$run/client-$name.log"
  t0=$SECONDS
  if [ "$name" = jetstream ]; then wait_for 120 "the stored messages" drained || true; fi
  drain_s=$(( SECONDS - t0 ))
  cpu1=$(cpu_ticks_of "$spid"); ncpu1=$(cpu_ticks_of "$npid")
  curl -sf "http://127.0.0.1:$admin/stats" > "$run/server-$name-stats.json" || true
  kill "$spid" 2>/dev/null || true; wait "$spid" 2>/dev/null || true
  python3 - "$name" "$run/client-$name.json" "$run/server-$name-stats.json" $(( cpu1 - cpu0 )) $(( ncpu1 - ncpu0 )) "$(getconf CLK_TCK)" "$drain_s" <<'PY'
import json, sys
name, client, stats, cpu, ncpu, hz, drain = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), sys.argv[7]
doc = json.load(open(client))
c = doc["summary"]
pub = c["mqtt_published"].get("1", 0)
# A PUBACK ends a QoS 1 publish's round trip: its latency count.
acked = c["requests"]["latency_ms"]["count"]
s = json.load(open(stats))
up = s.get("upstream", {})
per = lambda t: t / hz / max(pub, 1) * 1e6
line = f"{name:10} published {pub:8}  PUBACKed {acked}  server CPU {cpu / hz:5.1f} s  {per(cpu):5.1f} us/msg  nats-server {per(ncpu):5.1f} us/msg"
if up:
    line += f"  stored {up.get('delivered')}  duplicates {up.get('duplicates')}  retries {up.get('retries')}  refused {up.get('refused')}  last stored {drain} s after the devices stopped"
print(line)
PY
}

echo "== $devices devices, QoS 1, $rate/s in all for ${hold}s =="
one plain | tee "$run/plain.txt"
one jetstream --upstream "nats://127.0.0.1:$nats_port/bench" | tee "$run/jetstream.txt"
python3 - "$nats_port" <<'PY' | tee -a "$run/jetstream.txt"
import asyncio, sys, nats
async def main():
    nc = await nats.connect(f"nats://127.0.0.1:{sys.argv[1]}")
    info = await nc.jetstream().stream_info("MEGACONN_BENCH")
    print(f"stream MEGACONN_BENCH holds {info.state.messages} messages, {info.state.bytes} bytes")
    await nc.close()
asyncio.run(main())
PY
echo "results in $run"
