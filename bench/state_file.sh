#!/usr/bin/env bash
# What one change costs `--mqtt-retained-file` once the set is large:
# COUNT retained messages of SIZE bytes are published (paho, QoS 0, one
# client), the set is written, then CHANGES times one message is replaced
# and the next write waited for (--mqtt-retained-save-every 1s). Each
# write prints the bytes the server's process wrote (/proc/PID/io wchar:
# the disk write, on its writer thread) and the CPU of the supervisor's
# main thread (the copy of the set, on the thread that serves admin
# requests and session claims) between the change and the write.
#
# Usage: COUNT=50000 SIZE=1000 CHANGES=5 MEGACONN=path bash bench/state_file.sh
# Every wait is bounded; the server it starts is killed by PID at exit.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/run_dir.sh
count="${COUNT:-50000}"; size="${SIZE:-1000}"; changes="${CHANGES:-5}"
bin="${MEGACONN:-target/release/megaconn}"
port=24330; admin=24331
run=$(run_dir state_file)
"$bin" server --protocol mqtt --listen 127.0.0.1 --ports "$port" --admin "127.0.0.1:$admin" \
  --mqtt-retained "$((count * 2))" --mqtt-retained-per-identity "$((count * 2))" --mqtt-retained-bytes "$((count * (size + 200) * 2))" --max-push-bytes "$((size * 2))" \
  --mqtt-retained-file "$run/retained.json" --mqtt-retained-save-every 1s > "$run/server.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true' EXIT
n=0; until curl -sf "http://127.0.0.1:$admin/healthz" > /dev/null; do
  kill -0 "$server" 2>/dev/null || { echo "the server exited (see $run/server.log)" >&2; exit 1; }
  n=$((n+1)); [ $n -lt 100 ] || { echo "the server did not start (see $run/server.log)" >&2; exit 1; }; sleep 0.1
done
stat() { curl -sf "http://127.0.0.1:$admin/stats" | python3 -c "import json,sys; print(json.load(sys.stdin)['mqtt_retained'].get('$1', -1))"; }
saves_over() { # wait for a write after the one counted $1
  local n=0; until [ "$(stat saved)" -gt "$1" ]; do
    n=$((n+1)); [ $n -lt 600 ] || { echo "no write of the set within 60 s" >&2; exit 1; }; sleep 0.1
  done
}
python3 - "$port" "$count" "$size" <<'PY'
import sys, paho.mqtt.client as mqtt
port, count, size = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="filler")
c.max_queued_messages_set(0)
c.connect("127.0.0.1", port)
c.loop_start()
for i in range(count):
    c.publish(f"fleet/{i}/state", bytes([48 + i % 10]) * size, qos=0, retain=True)
c.publish("fleet/done", b"1", qos=1, retain=True).wait_for_publish(120)
c.disconnect(); c.loop_stop()
PY
n=0; until [ "$(stat messages)" -ge "$((count + 1))" ]; do
  n=$((n+1)); [ $n -lt 600 ] || { echo "the set did not reach $((count + 1)) messages" >&2; exit 1; }; sleep 0.1
done
saves_over "$(stat saved)"
sleep 1.5
tick=$(getconf CLK_TCK)
main_cpu() { awk -v t="$tick" '{ printf "%.0f", ($14 + $15) * 1000000 / t }' "/proc/$server/task/$server/stat"; }
wchar() { awk '/^wchar/ { print $2 }' "/proc/$server/io"; }
echo "set: $(stat messages) messages, $(du -sbc "$run"/retained.json* | tail -1 | cut -f1) bytes on disk"
for i in $(seq 1 "$changes"); do
  saved=$(stat saved); seg=$(stat saved_segments); w0=$(wchar); c0=$(main_cpu)
  curl -sf -X POST -H "Content-Type: application/octet-stream" "http://127.0.0.1:$admin/publish?topic=fleet/$i/state&retain=1" --data-binary "changed $i" > /dev/null
  saves_over "$saved"
  w1=$(wchar); c1=$(main_cpu)
  segs="$(( $(stat saved_segments) - seg )) segments"; [ "$seg" -ge 0 ] || segs="the whole file"
  echo "change $i: one write of $segs, $(( (w1 - w0) / 1024 )) KiB written, supervisor main thread $(( (c1 - c0) / 1000 )) ms of CPU"
done
