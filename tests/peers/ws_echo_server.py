"""Python `websockets` echo server for megaconn's client tests.

usage: ws_echo_server.py PORT SECONDS [HOST]
Echoes every message in kind and pings every client each second (a
client that does not answer is closed after 3 s). Listens on HOST
(default 127.0.0.1; an IPv6 address works too). Prints 'ready', then
'peer ADDR' for each client address it sees for the first time.
"""
import asyncio
import sys

from websockets.asyncio.server import serve

seen = set()


async def echo(ws):
    addr = ws.remote_address[0]
    if addr not in seen:
        seen.add(addr)
        print("peer", addr, flush=True)
    async for msg in ws:
        await ws.send(msg)


async def main():
    host = sys.argv[3] if len(sys.argv) > 3 else "127.0.0.1"
    async with serve(echo, host, int(sys.argv[1]), compression=None, ping_interval=1, ping_timeout=3, backlog=4096):
        print("ready", flush=True)
        await asyncio.sleep(float(sys.argv[2]))


asyncio.run(main())
