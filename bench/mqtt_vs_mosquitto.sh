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
#   fanin   DEVICES devices (default 2,000) publishing to `tele/{conn}`,
#           one consumer subscribed to `tele/#`, at QoS 0 10,000/s and
#           60,000/s and QoS 1 30,000/s in all (FANIN="0:10000 0:60000
#           1:30000" chooses): the broker's CPU (its whole process tree)
#           per delivered message, every message delivered, the delivery
#           p99. megaconn runs its default worker and shard count
#           (SHARDS=n sets --broker-shards; BROKERS=megaconn runs it alone).
#
# Usage: bash bench/mqtt_vs_mosquitto.sh [memory|qos1|fanin|all=all]
#   N=15000 PAIRS=1000 RATE=50 HOLD=20 DEVICES=2000 MEGACONN=path (else cargo build --release)
#   MEGACONN_FLAGS="..." more `megaconn server` flags (e.g. an authorization backend)
# Every wait is bounded; every process it starts is killed by PID at exit.
# Ports 24200 (MQTT), 24201 (megaconn's admin API), 24202 (the subscribing
# client's /stats).
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"
n="${N:-15000}"; pairs="${PAIRS:-1000}"; rate="${RATE:-50}"; hold="${HOLD:-20}"
devices="${DEVICES:-2000}"; brokers="${BROKERS:-megaconn mosquitto}"; fanin="${FANIN:-0:10000 0:60000 1:30000}"; shards="${SHARDS:-}"
port=24200; admin=24201; sub_admin=24202
. bench/run_dir.sh
run=$(run_dir mqtt_vs_mosquitto)
if [ -z "${MEGACONN:-}" ]; then cargo build --release --locked -q; fi
bin=${MEGACONN:-target/release/megaconn}
[ -x /usr/sbin/mosquitto ] || { echo "mosquitto is missing: bash scripts/setup.sh installs it" >&2; exit 2; }
# mosquitto is one process: every connection of a run is one of its fds,
# and it takes the open-file limit of this shell (raised to the hard limit
# here). memory needs N + 100, qos1 2 x PAIRS + 100 (headroom for its
# listener, log and the kernel's lag in closing the last run's sockets).
case "$what" in memory) fds=$(( n + 100 )) ;; qos1) fds=$(( pairs * 2 + 100 )) ;; fanin) fds=$(( devices + 100 )) ;; *) fds=$(( (n > pairs * 2 ? n : pairs * 2) + 100 )) ;; esac
if [ "$(ulimit -Hn)" -lt "$fds" ]; then
  echo "the open-file hard limit ($(ulimit -Hn)) is below the $fds this run needs: one mosquitto process cannot hold it; lower N or PAIRS" >&2
  exit 2
fi
ulimit -n "$(ulimit -Hn)"

. bench/procs.sh   # pids (killed at exit), wait_for, tree, rss_of, cpu_ticks_of

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; }
# A number from the subscribing client's /stats (its --admin): its
# SUBACKs, and the stamped messages it received.
sub_stat() { curl -sf "http://127.0.0.1:$sub_admin/stats" | python3 -c "import json,sys; s=json.load(sys.stdin); print($1)" 2>/dev/null || echo -1; }
subscribed() { [ "$(sub_stat 's["mqtt_subscriptions"].get("granted", 0)')" -ge "$pairs" ]; }
delivered() { [ "$(sub_stat 'sum(s["mqtt_received"].values())')" -ge "$published" ]; }

# start_broker NAME [megaconn server flags...]: prints nothing, sets spid.
start_broker() {
  local name=$1; shift
  if [ "$name" = mosquitto ]; then
    # max_queued_messages: megaconn's --mqtt-queue (1000 per connection),
    # so a subscriber that falls behind costs both brokers the same bound
    # (100,000 let 1,000 subscribers queue up to ~10 GB).
    printf 'listener %s 127.0.0.1\nallow_anonymous true\npersistence false\nmax_connections -1\nmax_queued_messages 1000\nlog_dest stderr\nlog_type error\n' "$port" > "$run/mosquitto.conf"
    /usr/sbin/mosquitto -c "$run/mosquitto.conf" > "$run/server-$name.log" 2>&1 &
  else
    # shellcheck disable=SC2086 # MEGACONN_FLAGS is a list of flags
    "$bin" server --protocol mqtt --listen 127.0.0.1 --ports "$port" --admin "127.0.0.1:$admin" "$@" ${MEGACONN_FLAGS:-} \
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
  local name=$1 cpu0 cpu1 published
  if [ "$name" = mosquitto ]; then start_broker mosquitto; else start_broker megaconn --connections $(( pairs * 2 + 100 )); fi
  # The subscribers hold at most until the publishers' hold has ended
  # (their ramp: at most 30 s) and 10 s more; they are stopped (SIGINT:
  # summary and JSON as usual) once every message came, or 10 s after the
  # publishers' end, whichever is first.
  local settle=40
  timeout -s INT $(( hold + settle + 120 )) "$bin" client --protocol mqtt --ports "$port" --connections "$pairs" --rate 2000/s \
    --mqtt-client-id "sub-{conn}" --mqtt-subscribe 'pair/{conn}' --mqtt-qos 1 --heartbeat 30s --hold "$(( hold + settle ))s" \
    --admin "127.0.0.1:$sub_admin" --json > "$run/client-qos1-sub-$name.json" 2> "$run/client-qos1-sub-$name.log" &
  local sub=$!; pids+=("$sub")
  wait_for 30 "$pairs SUBACKs" subscribed
  cpu0=$(cpu_ticks_of "$spid")
  timeout -s INT $(( hold + 120 )) "$bin" client --protocol mqtt --ports "$port" --connections "$pairs" --rate 2000/s \
    --mqtt-client-id "pub-{conn}" --mqtt-publish-topic 'pair/{conn}' --mqtt-qos 1 --request-rate "$rate/s" --payload 64 \
    --heartbeat 30s --hold "${hold}s" --json \
    > "$run/client-qos1-pub-$name.json" 2> "$run/client-qos1-pub-$name.log" &
  local pub=$!; pids+=("$pub")
  wait "$pub" || echo "$name: the publishers exited $? (see $run/client-qos1-pub-$name.log)" >&2
  published=$(field "$run/client-qos1-pub-$name.json" 's["summary"]["mqtt_published"].get("1", 0)' 2>/dev/null || echo 0)
  wait_for 10 "the last deliveries" delivered || true
  cpu1=$(cpu_ticks_of "$spid")
  kill -INT "$(child_of "$sub")" 2>/dev/null || true   # the client under timeout (see child_of)
  wait "$sub" || true                     # interrupted on purpose: not 0
  # megaconn's own counters (what it dropped, and why), kept beside the run.
  if [ "$name" = megaconn ]; then curl -sf "http://127.0.0.1:$admin/stats" > "$run/server-megaconn-stats.json" || true; fi
  stop_broker
  python3 bench/mqtt_qos1_table.py "$name" "$hold" $(( cpu1 - cpu0 )) "$(getconf CLK_TCK)" \
    "$run/client-qos1-pub-$name.json" "$run/client-qos1-sub-$name.json" | tee "$run/qos1-$name.txt"
}

fanin_run() { # NAME QOS TOTAL_RATE
  local name=$1 qos=$2 total=$3 cpu0 cpu1 published per
  per=$(( total / devices ))
  [ "$per" -ge 1 ] || { echo "fanin: $total/s over $devices devices is under 1/s each: raise the rate or lower DEVICES" >&2; exit 2; }
  if [ "$name" = mosquitto ]; then start_broker mosquitto; else start_broker megaconn --connections $(( devices + 100 )) ${shards:+--broker-shards "$shards"}; fi
  local settle=40
  timeout -s INT $(( hold + settle + 120 )) "$bin" client --protocol mqtt --ports "$port" --connections 1 \
    --mqtt-client-id "consumer" --mqtt-subscribe 'tele/#' --mqtt-qos "$qos" --heartbeat 30s --hold "$(( hold + settle ))s" \
    --admin "127.0.0.1:$sub_admin" --json > "$run/client-fanin-sub-$name-$qos-$total.json" 2> "$run/client-fanin-sub-$name-$qos-$total.log" &
  local sub=$!; pids+=("$sub")
  pairs=1 wait_for 30 "the consumer's SUBACK" subscribed
  cpu0=$(cpu_ticks_of "$spid")
  thread_ticks_of "$spid" > "$run/threads-before-$name-$qos-$total.txt"
  timeout -s INT $(( hold + 120 )) "$bin" client --protocol mqtt --ports "$port" --connections "$devices" --rate 2000/s \
    --mqtt-client-id "dev-{conn}" --mqtt-publish-topic 'tele/{conn}' --mqtt-qos "$qos" --request-rate "$per/s" --payload 64 \
    --heartbeat 30s --hold "${hold}s" --json \
    > "$run/client-fanin-pub-$name-$qos-$total.json" 2> "$run/client-fanin-pub-$name-$qos-$total.log" &
  local pub=$!; pids+=("$pub")
  wait "$pub" || echo "$name: the devices exited $? (see $run/client-fanin-pub-$name-$qos-$total.log)" >&2
  published=$(field "$run/client-fanin-pub-$name-$qos-$total.json" "s['summary']['mqtt_published'].get('$qos', 0)" 2>/dev/null || echo 0)
  wait_for 10 "the last deliveries" delivered || true
  cpu1=$(cpu_ticks_of "$spid")
  thread_ticks_of "$spid" > "$run/threads-after-$name-$qos-$total.txt"
  kill -INT "$(child_of "$sub")" 2>/dev/null || true
  wait "$sub" || true
  if [ "$name" = megaconn ]; then curl -sf "http://127.0.0.1:$admin/stats" > "$run/server-megaconn-fanin-$qos-$total-stats.json" || true; fi
  stop_broker
  python3 bench/mqtt_qos1_table.py "$name" "$hold" $(( cpu1 - cpu0 )) "$(getconf CLK_TCK)" \
    "$run/client-fanin-pub-$name-$qos-$total.json" "$run/client-fanin-sub-$name-$qos-$total.json" | tee "$run/fanin-$name-$qos-$total.txt"
  # Where megaconn's CPU went: workers, broker shards, the supervisor's own thread.
  python3 bench/thread_split.py "$run/threads-before-$name-$qos-$total.txt" "$run/threads-after-$name-$qos-$total.txt" \
    "$(getconf CLK_TCK)" "$run/client-fanin-sub-$name-$qos-$total.json" | tee -a "$run/fanin-$name-$qos-$total.txt"
}

case "$what" in
  fanin)      for point in $fanin; do
                echo "== fanin: $devices devices -> tele/#, QoS ${point%%:*}, ${point#*:}/s in all for ${hold}s =="
                for b in $brokers; do fanin_run "$b" "${point%%:*}" "${point#*:}"; done
              done ;;
  memory|all) echo "== memory: $n MQTT 3.1.1 clients, one shared subscription each, one broker process =="
              memory_run megaconn; memory_run mosquitto ;;&
  qos1|all)   echo "== qos1: $pairs publishers -> $pairs subscribers, QoS 1, $rate/s each for ${hold}s =="
              qos1_run megaconn; qos1_run mosquitto ;;
  memory) ;;
  *) echo "usage: bench/mqtt_vs_mosquitto.sh [memory|qos1|fanin|all]" >&2; exit 2 ;;
esac
echo "results in $run"
