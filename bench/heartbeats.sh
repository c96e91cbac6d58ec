# Sourced by bench/heartbeat_cpu.sh and bench/io_bounds.sh: one server
# worker holding N framed connections that each send a heartbeat every
# INTERVAL, brought to a steady state. Needs $M (the megaconn binary).

# hb_stats: the server's "cpu_us frames_in active" (its admin API).
hb_stats() { curl -sf http://127.0.0.1:9310/stats | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["cpu_us"], d["frames_in"], d["active"])'; }

# hb_start IO N INTERVAL SECONDS LOG: a server on reactor IO (--workers 1,
# port 24100, admin 127.0.0.1:9310) and a client holding N connections
# for at least SECONDS past the start of the steady state; logs go to
# LOG-server.log and LOG-client.log. Returns once all N are held and the
# heartbeats had 3 s to spread out. CLIENT_IO is the client's --io (auto);
# SERVER_CPU / CLIENT_CPU pin either to a core (taskset -c). hb_stop ends both.
hb_start() {
  local io=$1 n=$2 interval=$3 secs=$4 log=$5 k spin=() cpin=()
  [ -z "${SERVER_CPU:-}" ] || spin=(taskset -c "$SERVER_CPU")
  [ -z "${CLIENT_CPU:-}" ] || cpin=(taskset -c "$CLIENT_CPU")
  "${spin[@]}" "$M" server --io "$io" --workers 1 --ports 24100 --admin 127.0.0.1:9310 --connections "$n" \
    --duration $((secs + 60))s --stats-interval 5s > "$log-server.log" 2>&1 &
  hb_pids=$!
  k=0; until curl -sf http://127.0.0.1:9310/healthz >/dev/null; do k=$((k+1)); [ $k -lt 200 ] || { echo "the server did not start (see $log-server.log)" >&2; exit 1; }; sleep 0.1; done
  "${cpin[@]}" "$M" client --io "${CLIENT_IO:-auto}" --ports 24100 --connections "$n" --rate 20000 --heartbeat "$interval" \
    --hold $((secs + 10))s > "$log-client.log" 2>&1 &
  hb_pids="$hb_pids $!"
  k=0; until [ "$(hb_stats | cut -d' ' -f3)" = "$n" ]; do k=$((k+1)); [ $k -lt 600 ] || { echo "the connections did not arrive (see $log-client.log)" >&2; exit 1; }; sleep 0.1; done
  sleep 3 # the heartbeats spread out to their steady rate
}

hb_stop() {
  [ -n "${hb_pids:-}" ] || return 0
  # shellcheck disable=SC2086
  kill $hb_pids 2>/dev/null; wait $hb_pids 2>/dev/null || true
  hb_pids=""
}
