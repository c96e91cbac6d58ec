#!/usr/bin/env bash
# What no reactor can remove: profiles (perf record -g) where the CPU of a
# heartbeat round trip and of an HTTP keep-alive request goes, and from the
# share that is the kernel's TCP work (tcp_sendmsg, tcp_recvmsg: the same
# whichever reactor calls them) computes the best any reactor could reach:
#  - heartbeats: server pinned to core 0, client to core 1, 10,000 framed
#    connections; per reactor the server's CPU per heartbeat split into TCP
#    send (including the peer's receive, which loopback runs in the
#    sender's context), TCP receive, and the rest (the reactor, system call
#    entry, megaconn's own code). A reactor whose own cost were zero would
#    still pay the TCP part: that is the lowest uring/epoll ratio possible.
#    Also with the peer's receive taken out (as if the client were another
#    host) and the client's CPU per heartbeat (core 1).
#  - HTTP: wrk -t2 -c100 against megaconn (io_uring) and nginx, the whole
#    machine profiled; if megaconn's cost outside the kernel's TCP work
#    were zero, the freed CPU would serve more requests at wrk's and the
#    TCP work's cost: the highest megaconn/nginx ratio possible.
#  - broadcast: `megaconn bench --scenario push` to BCAST connections (200,000)
#    without heartbeats, the whole machine profiled while it broadcasts; the
#    share of the busy CPU that is TCP work is the least fraction of its
#    time a broadcast (CPU-bound on both cores) could take with every other
#    cost gone.
# Needs root (perf), perf, wrk, nginx. Rounds alternate.
# usage: sudo bash bench/io_bounds.sh [N=10000] [INTERVAL=200ms] [SECONDS=8] [ROUNDS=2] [BCAST=200000]
set -euo pipefail
n=${1:-10000}
interval=${2:-200ms}
secs=${3:-8}
rounds=${4:-2}
bcast=${5:-200000}
cd "$(dirname "$0")/.."
. bench/nginx.sh
. bench/run_dir.sh
. bench/heartbeats.sh
[ "$(nproc)" -ge 2 ] || { echo "io_bounds.sh: needs 2 cores (server on core 0, client on core 1)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "io_bounds.sh: perf needs root: sudo bash bench/io_bounds.sh" >&2; exit 2; }
run=$(run_dir io-bounds)
need_tools wrk:wrk nginx:nginx-light perf:linux-perf
cargo build --release --locked -q
M=${MEGACONN:-target/release/megaconn}
start_workdir
trap 'hb_stop; cleanup' EXIT INT TERM
busy() { awk -v c="cpu$1" '$1==c {print $2+$3+$4+$7+$8}' /proc/stat; } # USER_HZ ticks

heartbeats() { # IO ROUND
  local io=$1 r=$2 f0 f1 c0 c1
  SERVER_CPU=0 CLIENT_CPU=1 hb_start "$io" "$n" "$interval" "$secs" "$run/hb-$io-$r"
  read -r _ f0 _ < <(hb_stats); c0=$(busy 1)
  perf record -q -g -C 0 -o "$run/hb-$io-$r.perf" -- sleep "$secs" 2>/dev/null
  read -r _ f1 _ < <(hb_stats); c1=$(busy 1)
  echo "hb $io $r $((f1 - f0)) $(( (c1 - c0) * 1000000 / $(getconf CLK_TCK) ))" >> "$run/rounds.txt"
  hb_stop
}

http() { # WHO PORT ROUND
  wrk -t2 -c100 -d"${secs}s" "http://127.0.0.1:$2/" > "$run/wrk-$1-$3.txt" &
  local w=$!
  perf record -q -a -g -o "$run/http-$1-$3.perf" -- sleep "$secs" 2>/dev/null
  wait "$w"
  echo "http $1 $3 $(awk '/Requests\/sec/ {print $2}' "$run/wrk-$1-$3.txt")" >> "$run/rounds.txt"
}

for r in $(seq "$rounds"); do
  for io in epoll uring; do heartbeats "$io" "$r"; done
done
nginx_conf "$work" 18180 2
nginx -c "$work/nginx.conf" -p "$work" &
pids+=($!)
"$M" server --io uring --protocol http --ports 18181 --workers 2 --admin off --duration 30m > "$run/http-server.log" 2>&1 &
pids+=($!)
for port in 18180 18181; do
  k=0; until curl -fsS "http://127.0.0.1:$port/" >/dev/null 2>&1; do k=$((k+1)); [ $k -lt 100 ] || { echo "port $port did not answer" >&2; exit 1; }; sleep 0.1; done
done
grep -q 'reactor io_uring' "$run/http-server.log" || { echo "the HTTP server is not on io_uring:" >&2; cat "$run/http-server.log" >&2; exit 1; }
for r in $(seq "$rounds"); do
  http megaconn 18181 "$r"
  http nginx 18180 "$r"
done

kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null || true
pids=()
"$M" bench --scenario push --connections "$bcast" --broadcasts 6 --broadcast-interval 2s --push-bytes 64 \
  --heartbeat off --topology netns --json > "$run/push.json" 2> "$run/push.log" &
bpid=$!; pids+=("$bpid")
k=0; until grep -q "ramp done" "$run/push.log"; do k=$((k+1)); [ $k -lt 1200 ] && kill -0 "$bpid" 2>/dev/null || { echo "the push bench did not ramp:" >&2; cat "$run/push.log" >&2; exit 1; }; sleep 0.1; done
perf record -q -a -g -F 999 -o "$run/push.perf" -- sleep 12 2>/dev/null
wait "$bpid" || { echo "the push bench failed:" >&2; tail "$run/push.log" >&2; exit 1; }

python3 - "$run" "$n" "$interval" "$secs" "$bcast" <<'PY' | tee "$run/summary.txt"
import json, statistics, subprocess, sys
run, n, interval, secs, bcast = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5])

TCP = {"tcp_sendmsg", "tcp_sendmsg_locked", "tcp_recvmsg", "tcp_recvmsg_locked"}

def profile(data):
    """Per command, percent of all samples: [all, with the kernel's TCP send or receive on the
    stack, with loopback's delivery to the peer (process_backlog) on the stack]."""
    out = subprocess.run(["perf", "script", "-i", data, "-F", "comm,ip,sym"], capture_output=True, text=True, check=True).stdout
    counts = {}
    for block in out.split("\n\n"):
        lines = [l for l in block.split("\n") if l.strip()]
        if not lines:
            continue
        syms = {l.split()[1] for l in lines[1:] if len(l.split()) > 1}
        c = counts.setdefault(lines[0].strip(), [0, 0, 0])
        c[0] += 1
        c[1] += bool(syms & TCP)
        c[2] += "process_backlog" in syms
    total = sum(c[0] for c in counts.values())
    return {k: [100 * x / total for x in v] for k, v in counts.items()}

med = statistics.median
hb = {"epoll": [], "uring": []}
reqs = {"megaconn": [], "nginx": []}
for line in open(f"{run}/rounds.txt"):
    f = line.split()
    if f[0] == "hb":
        io, r, beats, client_us = f[1], f[2], int(f[3]), int(f[4])
        data = f"{run}/hb-{io}-{r}.perf"
        total, tcp, peer = profile(data).get("megaconn", [0, 0, 0])
        us = lambda pct: pct / 100 * secs * 1e6 / beats  # core 0 was sampled for the whole window
        hb[io].append(dict(total=us(total), tcp=us(tcp), peer=us(peer), client=client_us / beats))
    else:
        who, r, rps = f[1], f[2], float(f[3])
        data = f"{run}/http-{who}-{r}.perf"
        p = profile(data)
        z = [0, 0, 0]
        reqs[who].append(dict(rps=rps, wrk=p.get("wrk", z)[0], server=p.get(who, z)[0], idle=p.get("swapper", z)[0], tcp=p.get(who, z)[1]))

print(f"Heartbeats: {n} framed connections every {interval}, server (1 worker) on core 0, client on core 1, {secs:.0f} s profiles")
print(f"{'server reactor':<15} {'server us/hb':>12} {'TCP work':>9} {'reactor+own':>11} {'peer rx':>8} {'client us/hb':>12}")
m = {}
for io, rows in hb.items():
    m[io] = {k: med(r[k] for r in rows) for k in rows[0]}
    x = m[io]
    print(f"{io:<15} {x['total']:>12.2f} {x['tcp']:>9.2f} {x['total'] - x['tcp']:>11.2f} {x['peer']:>8.2f} {x['client']:>12.2f}")
e, u = m["epoll"], m["uring"]
print(f"  measured uring/epoll: {u['total'] / e['total']:.2f}x (goal <= 0.5x)")
print(f"  best possible (io_uring's own cost zero, TCP work as measured): {u['tcp'] / e['total']:.2f}x")
print(f"  best possible with the peer's receive taken out (another host):  {(u['tcp'] - u['peer']) / (e['total'] - e['peer']):.2f}x")
cores = (u["total"] + u["client"]) * 1e6 / 30 / 1e6
print(f"  1,000,000 connections x 1 heartbeat / 30 s at today's cost (server on io_uring + client): {cores:.2f} of 2 cores;"
      f" a broadcast then has {2 - cores:.2f} cores, so with heartbeats it takes at least {2 / (2 - cores):.2f}x its time without them")
print()
print(f"HTTP keep-alive: wrk -t2 -c100, {secs:.0f} s, megaconn (io_uring, 2 workers) and nginx (2 workers), whole machine profiled")
print(f"{'server':<9} {'req/s':>9} {'wrk %':>6} {'server %':>8} {'its TCP %':>9} {'idle %':>6} {'req/s if the server cost only its TCP work':>43}")
best = {}
for who, rows in reqs.items():
    for x in rows:
        busy = 100 - x["idle"]
        x["best"] = x["rps"] * busy / (busy - (x["server"] - x["tcp"]))
        print(f"{who:<9} {x['rps']:>9.0f} {x['wrk']:>6.1f} {x['server']:>8.1f} {x['tcp']:>9.1f} {x['idle']:>6.1f} {x['best']:>43.0f}")
    best[who] = {k: med(r[k] for r in rows) for k in ("rps", "best")}
print(f"  measured megaconn/nginx: {best['megaconn']['rps'] / best['nginx']['rps']:.2f}x (goal >= 1.3x)")
print(f"  best possible megaconn/nginx (megaconn's cost outside TCP zero): {best['megaconn']['best'] / best['nginx']['rps']:.2f}x")
print()
p = profile(f"{run}/push.perf")
busy = sum(v[0] for k, v in p.items() if k != "swapper")
tcp = sum(v[1] for k, v in p.items() if k != "swapper")
tta = json.load(open(f"{run}/push.json"))["push"]["time_to_all_ms"]
print(f"Broadcast: 64 B to {bcast:,} connections, no heartbeats, 6 rounds 2 s apart, whole machine profiled for 12 s")
print(f"  time to all: median {tta['median']:.0f} ms (min {tta['min']:.0f}, max {tta['max']:.0f})")
print(f"  TCP send + receive: {100 * tcp / busy:.1f}% of the busy CPU; everything else (io_uring, file lookups, megaconn's own code): {100 * (busy - tcp) / busy:.1f}%")
print(f"  with everything else gone, a CPU-bound broadcast would take at least {tcp / busy:.2f}x its time"
      f" (against the bare-C floor: {tcp / busy:.2f} x the measured ratio)")
PY
