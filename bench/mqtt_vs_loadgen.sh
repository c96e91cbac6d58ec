#!/usr/bin/env bash
# megaconn's MQTT load generator beside others, the same load on the same
# broker (issue 44): `megaconn client --protocol mqtt`; mqtt_paho_load
# (bench/mqtt_paho_load: Eclipse paho's Go client with
# krylovsk/mqtt-benchmark's load and measurement, written here; installed,
# pinned, by scripts/install_mqtt_loadgen.sh into target/go-bin); and
# two load generators nobody here wrote: crates.io's mqtt-benchmark 0.2.2
# (on rumqttc; installed pinned into ~/.cargo/bin by
# scripts/install_mqtt_benchmark.sh) and PyPI's pymqttbench 0.1.1 (on
# paho-mqtt 1.6.1 and Python 2.7; installed pinned into ~/.cache by
# scripts/install_pymqttbench.sh).
#
# The load: PUBS publishers x MSGS messages of SIZE bytes each, at RATE
# messages/s per publisher, publisher i to topic load/i, and SUBS
# subscribers to load/#; at each QoS in QOS, against each broker in
# BROKERS (megaconn's `server --protocol mqtt`, Debian's mosquitto), each
# tool of TOOLS alone against a broker started fresh for it. Per run:
# messages published and acknowledged, messages/s, publish latency
# p50/p99 and delivery latency p50/p99 as each tool measures them
# (megaconn: from the intended send time of its open-loop schedule,
# coordinated-omission corrected; paho: from the actual send, closed
# loop: the next send waits for the previous one's acknowledgement;
# mqtt-benchmark and pymqttbench: no latency percentiles, and no pacing:
# they publish as fast as they can, so RATE does not apply to them, and
# no subscriber of theirs: megaconn's subscribing client counts what
# reaches SUBS subscribers, outside their CPU), messages received, the
# tool's own CPU (user + system, `/usr/bin/time`: megaconn's two client
# runs, publishers and subscribers, with their worker processes; paho's
# one process; mqtt-benchmark's one process; pymqttbench's process and
# the publisher processes it forks) and the broker's CPU over the run. A
# table, and the rows as JSON in bench/results-mqtt-vs-loadgen-DATE.json
# (RESULTS overrides).
#
# Usage: bash bench/mqtt_vs_loadgen.sh [small|full=full]
#   small: PUBS=10 MSGS=100 RATE=100 SUBS=1 (one second of publishing; the
#          e2e test runs it), full: PUBS=1000 MSGS=300 RATE=10 SUBS=1.
#   Also SIZE=64 QOS="0 1" BROKERS="megaconn mosquitto" PORT=24210
#   TOOLS (small: "megaconn paho mqtt-benchmark pymqttbench", full: the
#   same without pymqttbench: one Python process per publisher and one
#   TCP connection per message, 1,000 processes and 300,000 connects)
#   MEGACONN=path (else cargo build --release) RESULTS=file RUN_DIR=dir.
# Every wait is bounded; every process it starts is killed by PID at exit.
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-full}"
case "$mode" in
  small) pubs="${PUBS:-10}"; msgs="${MSGS:-100}"; rate="${RATE:-100}"; subs="${SUBS:-1}" ;;
  full)  pubs="${PUBS:-1000}"; msgs="${MSGS:-300}"; rate="${RATE:-10}"; subs="${SUBS:-1}" ;;
  *) echo "usage: bench/mqtt_vs_loadgen.sh [small|full]" >&2; exit 2 ;;
esac
size="${SIZE:-64}"; qos_list="${QOS:-0 1}"; brokers="${BROKERS:-megaconn mosquitto}"
if [ "$mode" = small ]; then tools="${TOOLS:-megaconn paho mqtt-benchmark pymqttbench}"
else tools="${TOOLS:-megaconn paho mqtt-benchmark}"; fi
port="${PORT:-24210}"; admin=$(( port + 1 )); metrics=$(( port + 2 ))
results="${RESULTS:-bench/results-mqtt-vs-loadgen-$(date -u +%F).json}"
# The publishers' hold: their MSGS messages at RATE/s, and 2 s for the last
# acknowledgements. Deliveries still on their way get DRAIN more seconds.
pub_hold=$(( (msgs + rate - 1) / rate + 2 )); drain=10
[ "$size" -ge 28 ] || { echo "SIZE must be at least 28 (megaconn's stamp)" >&2; exit 2; }
[ "$(ulimit -Hn)" -ge $(( pubs + subs + 100 )) ] || { echo "the open-file hard limit $(ulimit -Hn) is below PUBS+SUBS+100" >&2; exit 2; }
ulimit -n "$(ulimit -Hn)"

. bench/run_dir.sh
run=$(run_dir mqtt_vs_loadgen)
if [ -z "${MEGACONN:-}" ]; then cargo build --release --locked -q; fi
bin=${MEGACONN:-target/release/megaconn}
case " $tools " in *" paho "*) paho=$(bash scripts/install_mqtt_loadgen.sh) ;; esac
case " $tools " in *" mqtt-benchmark "*) mqtt_benchmark=$(bash scripts/install_mqtt_benchmark.sh) ;; esac
case " $tools " in *" pymqttbench "*) pymqttbench=$(bash scripts/install_pymqttbench.sh) ;; esac
# mqtt-benchmark's payload is a string (-P): SIZE bytes of it.
payload=$(head -c "$size" /dev/zero | tr '\0' x)
for need in /usr/sbin/mosquitto /usr/bin/time; do
  [ -x "$need" ] || { echo "$need is missing: bash scripts/setup.sh installs it" >&2; exit 2; }
done
. bench/procs.sh   # pids (killed at exit), wait_for, cpu_ticks_of, child_of

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start_broker() { # NAME: sets spid
  if [ "$1" = mosquitto ]; then
    # One process: its fd limit is this shell's (raised above); queues
    # bounded as megaconn's are (--mqtt-queue 1000).
    printf 'listener %s 127.0.0.1\nallow_anonymous true\npersistence false\nmax_connections -1\nmax_queued_messages 1000\nlog_dest stderr\nlog_type error\n' \
      "$port" > "$run/mosquitto.conf"
    /usr/sbin/mosquitto -c "$run/mosquitto.conf" > "$run/broker-$tag.log" 2>&1 &
  else
    "$bin" server --protocol mqtt --listen 127.0.0.1 --ports "$port" --admin "127.0.0.1:$admin" \
      --connections $(( pubs + subs + 100 )) --stats-interval 10s > "$run/broker-$tag.log" 2>&1 &
  fi
  spid=$!; pids+=("$spid")
  wait_for 30 "$1 to listen on $port" listening "$port"
}
stop_broker() { kill "$spid" 2>/dev/null || true; wait "$spid" 2>/dev/null || true; }

# A number from the subscribing megaconn client's /stats (its --admin).
client_stat() { curl -sf "http://127.0.0.1:$metrics/stats" | python3 -c "import json,sys; s=json.load(sys.stdin); print($1)" 2>/dev/null || echo -1; }
subscribed() { [ "$(client_stat 's["mqtt_subscriptions"].get("granted", 0)')" -ge "$subs" ]; }
# Stamped (megaconn's publishers) and unstamped (the others') deliveries.
all_received() { [ "$(client_stat "sum(s['mqtt_received'].values()) + s['mqtt_unstamped']")" -ge $(( pubs * msgs * subs )) ]; }


# SUBS megaconn clients subscribed to load/# at QOS (sets sub); they count
# what reaches them, and time what carries megaconn's stamp.
start_subscribers() { # QOS
  /usr/bin/time -f '%e %U %S' -o "$run/$tag-sub.time" timeout -s INT $(( pub_hold + drain + 120 )) \
    "$bin" client --protocol mqtt --ports "$port" --connections "$subs" --mqtt-client-id 'msub-{conn}' \
    --mqtt-subscribe 'load/#' --mqtt-qos "$1" --heartbeat 30s --hold "$(( pub_hold + drain + 60 ))s" \
    --admin "127.0.0.1:$metrics" --json > "$run/$tag-sub.json" 2> "$run/$tag-sub.log" &
  sub=$!; pids+=("$sub")
  wait_for 30 "the subscribers' SUBACKs" subscribed
}
# After at most DRAIN more seconds for deliveries on their way, their summary.
stop_subscribers() {
  wait_for "$drain" "every delivery" all_received || true
  # SIGINT ends its hold with the summary and JSON as usual; to the client
  # itself, under /usr/bin/time and timeout (see child_of).
  kill -INT "$(child_of "$(child_of "$sub")")" 2>/dev/null || true
  wait "$sub" || true   # interrupted on purpose: exits non-zero
}

megaconn_run() { # QOS
  local q=$1 pub
  start_subscribers "$q"
  /usr/bin/time -f '%e %U %S' -o "$run/$tag-pub.time" timeout -s INT $(( pub_hold + 120 )) \
    "$bin" client --protocol mqtt --ports "$port" --connections "$pubs" --mqtt-client-id 'mpub-{conn}' \
    --mqtt-publish-topic 'load/{conn}' --mqtt-qos "$q" --request-rate "$rate/s" --requests-per-connection "$msgs" \
    --payload "$size" --heartbeat 30s --hold "${pub_hold}s" --json > "$run/$tag-pub.json" 2> "$run/$tag-pub.log" &
  pub=$!; pids+=("$pub")
  wait "$pub" || echo "$tag: the publishers exited $? (see $run/$tag-pub.log)" >&2
  stop_subscribers
}

paho_run() { # QOS
  local q=$1
  /usr/bin/time -f '%e %U %S' -o "$run/$tag.time" timeout $(( pub_hold + drain + 120 )) \
    "$paho" -broker "tcp://127.0.0.1:$port" -clients "$pubs" -count "$msgs" -qos "$q" -size "$size" \
    -subscribers "$subs" -topic load -interval "$(( 1000000 / rate ))us" -timeout "$(( pub_hold + drain + 60 ))s" -json \
    > "$run/$tag.json" 2> "$run/$tag.log" || echo "$tag: mqtt_paho_load exited $? (see $run/$tag.log)" >&2
}

# mqtt-benchmark: PUBS clients (ids TAG_i) each publish MSGS messages to
# load/i, unpaced; it prints each client's count and time and the total.
# Its host must be a name: it parses -b as a URL and takes its domain.
mqtt_benchmark_run() { # QOS
  local q=$1
  start_subscribers "$q"
  /usr/bin/time -f '%e %U %S' -o "$run/$tag.time" timeout $(( pub_hold + drain + 60 )) \
    "$mqtt_benchmark" -b "localhost:$port" -c "$tag" -t load -q "$q" -P "$payload" -s "$msgs" -C "$pubs" \
    > "$run/$tag.out" 2> "$run/$tag.log" || echo "$tag: mqtt-benchmark exited $? (see $run/$tag.log)" >&2
  stop_subscribers
}

# pymqttbench: PUBS forked processes each publish MSGS messages to
# load/pymqttbench (one topic for all: it has no other), each message on a
# TCP connection of its own (paho's publish.single: connect, publish,
# PUBACK at QoS 1, disconnect), unpaced; it prints (--brief) the mean
# duration of a publisher and the throughput derived from it. Its own
# subscribers are left out (--sub-clients 0): its publishers start without
# waiting for their SUBACK, and one short of its count blocks it forever
# (`SUB_QUEUE.get(60)` is block=60, no timeout).
pymqttbench_run() { # QOS
  local q=$1 limit=$(( pub_hold + drain + 60 ))
  start_subscribers "$q"
  # timeout signals its whole process group: the forked publishers too.
  /usr/bin/time -f '%e %U %S' -o "$run/$tag.time" timeout "$limit" \
    "$pymqttbench" --hostname 127.0.0.1 --port "$port" --pub-clients "$pubs" --pub-count "$msgs" \
    --sub-clients 0 --sub-count 0 --msg-size "$size" --qos "$q" --topic load/pymqttbench \
    --pub-timeout "$limit" --brief > "$run/$tag.out" 2> "$run/$tag.log" \
    || echo "$tag: pymqttbench exited $? (see $run/$tag.log)" >&2
  stop_subscribers
}

tags=()
echo "== $pubs publishers x $msgs messages of $size B at $rate/s each (mqtt-benchmark, pymqttbench: unpaced), $subs subscriber(s) to load/#; QoS $qos_list; brokers: $brokers; tools: $tools =="
for broker in $brokers; do
  for q in $qos_list; do
    for tool in $tools; do
      tag="$broker-$tool-qos$q"
      start_broker "$broker"
      cpu0=$(cpu_ticks_of "$spid")
      "${tool//-/_}_run" "$q"
      cpu1=$(cpu_ticks_of "$spid")
      stop_broker
      printf '{"tool":"%s","broker":"%s","qos":%d,"publishers":%d,"messages":%d,"rate_per_publisher":%d,"subscribers":%d,"size":%d,"broker_cpu_ticks":%d,"clk_tck":%d}\n' \
        "$tool" "$broker" "$q" "$pubs" "$msgs" "$rate" "$subs" "$size" $(( cpu1 - cpu0 )) "$(getconf CLK_TCK)" > "$run/$tag.meta.json"
      tags+=("$tag")
    done
  done
done
python3 bench/mqtt_loadgen_table.py "$run" "$results" "${tags[@]}" | tee "$run/table.txt"
echo "rows in $results; logs in $run"
