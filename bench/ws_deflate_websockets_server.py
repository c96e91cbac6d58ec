"""A Python `websockets` broadcast server for bench/ws_deflate_vs_websockets.sh.

usage: ws_deflate_websockets_server.py PORT on|off CONNECTIONS PUSHES INTERVAL_S WAIT_S

Serves ws://127.0.0.1:PORT/ with websockets' own server (permessage-deflate
as websockets configures it by default when `on`, none when `off`). Once
CONNECTIONS clients are connected (at most WAIT_S seconds), waits 2 s, prints
its RSS, then broadcasts PUSHES pushes INTERVAL_S apart with websockets'
`broadcast()`: each a ~1 KB JSON record in megaconn's push envelope
({"stream","topic","offset","epoch","seq","ts","data"}, `ts` the publish
time in µs), so `megaconn client` times its receipt as it times megaconn's.
Prints one JSON line at each step (`ready`, `rss`, `push`, `done`) and
keeps serving until killed.
"""
import asyncio
import json
import sys
import time

from websockets.asyncio.server import broadcast, serve

port, mode, want, pushes, interval, wait_s = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
clients = set()


def rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def quotes(n):
    """~n bytes of JSON quote records (the shape megaconn's push bench sends)."""
    out, i = [], 0
    while len(json.dumps(out)) < n:
        i += 1
        out.append({"seq": i, "symbol": f"S{(i * 7919) % 500:03}", "price": f"{50 + (i * 31) % 150}.{(i * 17) % 100:02}", "size": 100 * (1 + i % 50), "side": "buy" if i % 2 else "sell"})
    return json.dumps(out)[:n]


async def handler(ws):
    clients.add(ws)
    try:
        await ws.wait_closed()
    finally:
        clients.discard(ws)


def say(**kv):
    print(json.dumps(kv), flush=True)


async def main():
    compression = "deflate" if mode == "on" else None
    # A backlog and limits fit for thousands of idle clients.
    async with serve(handler, "127.0.0.1", port, compression=compression, ping_interval=None, max_queue=4, backlog=4096):
        say(event="ready", rss_bytes=rss_bytes())
        deadline = time.monotonic() + wait_s
        while len(clients) < want and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        await asyncio.sleep(2)
        say(event="rss", connections=len(clients), rss_bytes=rss_bytes())
        data = quotes(1000)
        for k in range(1, pushes + 1):
            ts = time.time_ns() // 1000
            msg = json.dumps({"stream": "broadcast", "topic": "", "offset": k, "epoch": 1, "seq": k, "ts": ts, "data": data}, separators=(",", ":"))
            t0 = time.perf_counter()
            broadcast(clients, msg)
            # broadcast() queues on every connection; the writes finish in the loop.
            await asyncio.sleep(0)
            say(event="push", seq=k, message_bytes=len(msg), queue_ms=round((time.perf_counter() - t0) * 1000, 2))
            await asyncio.sleep(interval)
        say(event="done", connections=len(clients), rss_bytes=rss_bytes())
        await asyncio.Future()


asyncio.run(main())
