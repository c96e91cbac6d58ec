# Sourced by the bench scripts that compare megaconn with the bare-C floor
# (bench/broadcast_floor.c). `floor_run N ROUNDS INTERVAL_MS OUT` builds it
# and runs it in a private namespace made as `megaconn bench --topology
# netns` makes its own: established hash = next power of two >= 2N+1024
# (set on the host only while the namespace is created), the same queue
# and port sysctls. Its JSON (connect rate, time to all per round) goes to
# OUT. Needs root. `floor_setup NAME` does what both scripts do first:
# refuse without root, make the run directory ($run), set the host's
# limits (bench/sysctl.sh), build, and set $bin; settle() comes with it.
. bench/run_dir.sh
. bench/settle.sh
floor_setup() {
  [ "$(id -u)" = 0 ] || { echo "$1.sh: needs root (network namespaces, sysctls)" >&2; exit 2; }
  run=$(run_dir "$1")
  bash bench/sysctl.sh > "$run/sysctl.txt"
  cargo build --release --locked -q
  bin=target/release/megaconn
}

floor_run() {
  local n=$1 rounds=$2 interval_ms=$3 out=$4
  mkdir -p target
  command -v gcc >/dev/null || { apt-get update -qq && apt-get install -y -qq gcc; }
  gcc -Wall -Wextra -O2 -o target/broadcast_floor bench/broadcast_floor.c
  local ns="megaconn-floor-$$" ehash_file=/proc/sys/net/ipv4/tcp_child_ehash_entries
  local before ehash=1024
  before=$(cat "$ehash_file")
  while [ "$ehash" -lt $((2 * n + 1024)) ]; do ehash=$((ehash * 2)); done
  # shellcheck disable=SC2064 # the values now, not at exit
  trap "echo $before > $ehash_file; ip netns del $ns 2>/dev/null || true" EXIT
  echo "$ehash" > "$ehash_file"
  ip netns add "$ns"
  echo "$before" > "$ehash_file"
  ip -n "$ns" link set lo up
  ip netns exec "$ns" sysctl -q -w net.core.somaxconn=65535 net.ipv4.tcp_max_syn_backlog=65535 net.ipv4.ip_local_port_range="1024 65535"
  local rc=0
  ip netns exec "$ns" target/broadcast_floor "$n" "$rounds" "$interval_ms" 24000 64 > "$out" || rc=$?
  ip netns del "$ns"
  trap - EXIT
  return $rc
}
