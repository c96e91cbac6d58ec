#!/usr/bin/env bash
# Kernel settings for million-connection runs on one machine (root only).
# Prints every value before and after; changes nothing it does not print.
# `megaconn tune --connections N --apply` is the general tool; this script
# is the fixed recipe the benchmarks in BENCHMARKS.md were run with.
set -euo pipefail
ports="${MEGACONN_BENCH_PORTS:-8000-8099}"
set_sysctl() {
  local key="$1" value="$2" path="/proc/sys/${1//.//}"
  local before; before="$(tr '\t' ' ' < "$path")"
  if [ "$before" != "$value" ]; then
    sysctl -q -w "$key=$value"
    echo "sysctl $key: '$before' -> '$value'"
  else
    echo "sysctl $key: '$value' (unchanged)"
  fi
}
if [ "$(id -u)" != 0 ]; then
  echo "bench/sysctl.sh: needs root to set sysctls; run it with sudo" >&2
  exit 1
fi
# 64K ephemeral ports per (source address, destination) pair instead of 28K.
set_sysctl net.ipv4.ip_local_port_range "1024 65535"
# Keep the kernel from handing the server's ports to outgoing connections.
set_sysctl net.ipv4.ip_local_reserved_ports "${ports}"
# Deep accept and SYN queues so a fast ramp does not overflow listen queues.
set_sysctl net.core.somaxconn 65535
set_sysctl net.ipv4.tcp_max_syn_backlog 65535
# A deep per-CPU input backlog: every packet over loopback or between
# namespaces passes it, and at the default 1000 a broadcast or reconnect
# storm over a million connections drops packets (then ETIMEDOUT closes).
set_sysctl net.core.netdev_max_backlog 65536
# TCP buffer memory for broadcasts: a 1 KB push to a million connections
# queues ~2.6 GB in receive queues while the readers catch up, past the
# default high mark (~9% of RAM); there the kernel drops for every socket
# and the run stalls for minutes. A quarter of RAM as the high mark (only
# ever raised here, never lowered).
read -r _ _ tcp_high < /proc/sys/net/ipv4/tcp_mem
ram_pages=$(( $(awk '/^MemTotal:/ { print $2 }' /proc/meminfo) * 1024 / $(getconf PAGESIZE) ))
if [ "$tcp_high" -lt $(( ram_pages / 4 )) ]; then
  set_sysctl net.ipv4.tcp_mem "$(( ram_pages / 8 )) $(( ram_pages * 3 / 16 )) $(( ram_pages / 4 ))"
else
  echo "sysctl net.ipv4.tcp_mem: '$(tr '\t' ' ' < /proc/sys/net/ipv4/tcp_mem)' (unchanged: a quarter of RAM or more)"
fi
# Room for 2M+ sockets system-wide (both ends of every loopback pair).
set_sysctl fs.file-max 4194304
set_sysctl fs.nr_open 1048576
# (net.ipv4.tcp_migrate_req is no longer set: the server closes no
# listener while it runs; see BENCHMARKS.md, "The 1-in-a-million reset".)
