"""A Python `websockets` subscriber of one topic on a megaconn ws port.

usage: ws_topic.py PORT TOPIC N
Subscribes with ?subscribe=TOPIC, prints 'ready' once open, then prints
'TOPIC DATA' for each of the N text pushes it receives (30 s each) and
'OK' after the last.
"""
import asyncio
import json
import sys

from websockets.asyncio.client import connect

port, topic, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])


async def main():
    async with connect(f"ws://127.0.0.1:{port}/push?subscribe={topic}", compression=None) as ws:
        print("ready", flush=True)
        for _ in range(n):
            m = json.loads(await asyncio.wait_for(ws.recv(), 30))
            print(m["topic"], m["data"], flush=True)
    print("OK", flush=True)


asyncio.run(main())
