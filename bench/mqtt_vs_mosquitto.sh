#!/usr/bin/env bash
# megaconn's MQTT broker side by side with Debian's mosquitto (issue 44's
# goals), each broker alone on the machine, the same load from
# `megaconn client --protocol mqtt`:
#
#   memory  N MQTT 3.1.1 clients (default 15,000), each subscribed to one
#           shared topic, held: the broker's RSS growth per connection
#           (RSS after the ramp minus RSS before, over N). Both brokers
#           run as one process (megaconn --workers 1), as the issue
#           measured mosquitto.
#   qos1    PAIRS publishers -> PAIRS subscribers (default 1,000 each) at
#           QoS 1, publisher i to topic `pair/i`, subscriber i subscribed
#           to it, each publisher at RATE/s for HOLD: messages delivered
#           per second at the subscribers, and the delivery p99 (from the
#           stamp each publish carries to its receipt) as the subscribers
#           measured it. megaconn runs its default worker count.
#
# Usage: bash bench/mqtt_vs_mosquitto.sh [memory|qos1|all=all]
#   N=15000 PAIRS=1000 RATE=50 HOLD=20 MEGACONN=path (else cargo build --release)
# Every wait is bounded; every process it starts is killed by PID at exit.
# Ports 24200 (MQTT) and 24201 (megaconn's admin API).
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"
n="${N:-15000}"; pairs="${PAIRS:-1000}"; rate="${RATE:-50}"; hold="${HOLD:-20}"
port=24200; admin=24201
. bench/run_dir.sh
run=$(run_dir mqtt_vs_mosquitto)
if [ -z "${MEGACONN:-}" ]; then cargo build --release --locked -q; fi
bin=${MEGACONN:-target/release/megaconn}
[ -x /usr/sbin/mosquitto ] || { echo "mosquitto is missing: bash scripts/setup.sh installs it" >&2; exit 2; }
if [ "$(ulimit -Hn)" -lt $(( n + 100 )) ]; then
  echo "the open-file hard limit ($(ulimit -Hn)) is below N+100 = $(( n + 100 )): one mosquitto process cannot hold N; lower N" >&2
  exit 2
fi
ulimit -n "$(ulimit -Hn)"

. bench/procs.sh   # pids (killed at exit), wait_for, tree, rss_of, cpu_ticks_of

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; }

# start_broker NAME [megaconn server flags...]: prints nothing, sets spid.
start_broker() {
  local name=$1; shift
  if [ "$name" = mosquitto ]; then
    printf 'listener %s 127.0.0.1\nallow_anonymous true\npersistence false\nmax_connections -1\nmax_queued_messages 100000\nlog_dest stderr\nlog_type error\n' "$port" > "$run/mosquitto.conf"
    /usr/sbin/mosquitto -c "$run/mosquitto.conf" > "$run/server-$name.log" 2>&1 &
  else
    "$bin" server --protocol mqtt --listen 127.0.0.1 --ports "$port" --admin "127.0.0.1:$admin" "$@" \
      --stats-interval 1s > "$run/server-$name.log" 2>&1 &
  fi
  spid=$!; pids+=("$spid")
  wait_for 30 "$name to listen on $port" listening
  sleep 1
}
stop_broker() { kill "$spid" 2>/dev/null || true; wait "$spid" 2>/dev/null || true; }

# The client's JSON summary: FIELD (a python expression over `s`).
field() { python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print($2)" "$1"; }

memory_run() { # NAME
  local name=$1 base idle
  if [ "$name" = mosquitto ]; then start_broker mosquitto; else start_broker megaconn --workers 1 --connections $(( n + 100 )); fi
  base=$(rss_of "$spid")
  local hold_s=$(( n / 5000 + 20 ))
  timeout -s INT $(( hold_s + 120 )) "$bin" client --protocol mqtt --ports "$port" --connections "$n" --rate 5000/s \
    --mqtt-client-id "mem-{conn}" --mqtt-subscribe shared/topic --heartbeat 30s --hold "${hold_s}s" --json \
    > "$run/client-memory-$name.json" 2> "$run/client-memory-$name.log" &
  local cpid=$!; pids+=("$cpid")
  # The ramp takes N/5000 s; RSS is read 10 s after it, while held.
  sleep $(( n / 5000 + 10 ))
  idle=$(rss_of "$spid")
  wait "$cpid" || echo "$name: the client exited $? (see $run/client-memory-$name.log)" >&2
  stop_broker
  local est; est=$(field "$run/client-memory-$name.json" 's["summary"]["established"]')
  echo "{\"name\":\"$name\",\"n\":$n,\"established\":$est,\"base\":$base,\"held\":$idle}" > "$run/memory-$name.json"
  python3 -c "
import json,sys
r=json.load(open(sys.argv[1]))
print('%-10s %6d established  RSS %7.1f -> %7.1f MiB  %6.0f B per connection' % (r['name'], r['established'], r['base']/2**20, r['held']/2**20, (r['held']-r['base'])/max(1,r['established'])))
" "$run/memory-$name.json"
}

qos1_run() { # NAME
  local name=$1 cpu0 cpu1
  if [ "$name" = mosquitto ]; then start_broker mosquitto; else start_broker megaconn --connections $(( pairs * 2 + 100 )); fi
  local settle=5
  timeout -s INT $(( hold + settle + 120 )) "$bin" client --protocol mqtt --ports "$port" --connections "$pairs" --rate 2000/s \
    --mqtt-client-id "sub-{conn}" --mqtt-subscribe 'pair/{conn}' --mqtt-qos 1 --heartbeat 30s --hold "$(( hold + settle + 2 ))s" --json \
    > "$run/client-qos1-sub-$name.json" 2> "$run/client-qos1-sub-$name.log" &
  local sub=$!; pids+=("$sub")
  sleep "$settle"
  cpu0=$(cpu_ticks_of "$spid")
  timeout -s INT $(( hold + 120 )) "$bin" client --protocol mqtt --ports "$port" --connections "$pairs" --rate 2000/s \
    --mqtt-client-id "pub-{conn}" --mqtt-publish-topic 'pair/{conn}' --mqtt-qos 1 --request-rate "$rate/s" --payload 64 \
    --heartbeat 30s --hold "${hold}s" --json \
    > "$run/client-qos1-pub-$name.json" 2> "$run/client-qos1-pub-$name.log" &
  local pub=$!; pids+=("$pub")
  wait "$pub" || echo "$name: the publishers exited $? (see $run/client-qos1-pub-$name.log)" >&2
  cpu1=$(cpu_ticks_of "$spid")
  wait "$sub" || echo "$name: the subscribers exited $? (see $run/client-qos1-sub-$name.log)" >&2
  stop_broker
  python3 bench/mqtt_qos1_table.py "$name" "$hold" $(( cpu1 - cpu0 )) "$(getconf CLK_TCK)" \
    "$run/client-qos1-pub-$name.json" "$run/client-qos1-sub-$name.json" | tee "$run/qos1-$name.txt"
}

case "$what" in
  memory|all) echo "== memory: $n MQTT 3.1.1 clients, one shared subscription each, one broker process =="
              memory_run megaconn; memory_run mosquitto ;;&
  qos1|all)   echo "== qos1: $pairs publishers -> $pairs subscribers, QoS 1, $rate/s each for ${hold}s =="
              qos1_run megaconn; qos1_run mosquitto ;;
  memory) ;;
  *) echo "usage: bench/mqtt_vs_mosquitto.sh [memory|qos1|all]" >&2; exit 2 ;;
esac
echo "results in $run"
