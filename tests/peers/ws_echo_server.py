"""Python `websockets` echo server for megaconn's client tests.

usage: ws_echo_server.py PORT SECONDS
Echoes every message in kind and pings every client each second (a
client that does not answer is closed after 3 s). Prints 'ready'.
"""
import asyncio
import sys

from websockets.asyncio.server import serve


async def echo(ws):
    async for msg in ws:
        await ws.send(msg)


async def main():
    async with serve(echo, "127.0.0.1", int(sys.argv[1]), compression=None, ping_interval=1, ping_timeout=3, backlog=4096):
        print("ready", flush=True)
        await asyncio.sleep(float(sys.argv[2]))


asyncio.run(main())
