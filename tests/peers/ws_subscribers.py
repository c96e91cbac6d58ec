"""Python `websockets` clients receiving megaconn pushes.

usage: ws_subscribers.py PORT N FORMAT
N connections, the even ones with ?subscribe=room. Prints 'ready' once all
are open, then expects on every connection a broadcast "all", and on the
even ones also a topic message "héllo" (published after the broadcast).
Prints 'received X' with the number of pushes seen, and 'OK' if all were
as expected.
"""
import asyncio
import json
import struct
import sys

from websockets.asyncio.client import connect

port, n, fmt = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]


def decode(msg):
    if fmt == "text":
        assert isinstance(msg, str), msg
        m = json.loads(msg)
        return m["stream"], m["topic"], m["data"], m["seq"], m["ts"]
    assert isinstance(msg, bytes) and msg[0] == 8, msg
    stream = ["broadcast", "topic", "unicast"][msg[1]]
    tlen = msg[2]
    topic = msg[3:3 + tlen].decode()
    seq, ts, _epoch = struct.unpack(">QQI", msg[3 + tlen:23 + tlen])
    return stream, topic, msg[23 + tlen:].decode(), seq, ts


async def one(i, opened):
    path = "/push?subscribe=room" if i % 2 == 0 else "/push"
    async with connect(f"ws://127.0.0.1:{port}{path}", compression=None) as ws:
        opened.append(i)
        got = [decode(await asyncio.wait_for(ws.recv(), 30))]
        if i % 2 == 0:
            got.append(decode(await asyncio.wait_for(ws.recv(), 30)))
        return got


async def main():
    opened = []
    tasks = [asyncio.create_task(one(i, opened)) for i in range(n)]
    while len(opened) < n:
        await asyncio.sleep(0.05)
    print("ready", flush=True)
    results = await asyncio.gather(*tasks)
    total = sum(len(r) for r in results)
    print("received", total)
    for i, r in enumerate(results):
        assert r[0][0] == "broadcast" and r[0][2] == "all", r
        assert r[0][4] > 1_600_000_000_000_000, "ts is wall-clock µs"
        if i % 2 == 0:
            assert r[1][:3] == ("topic", "room", "héllo"), r
    print("OK", flush=True)


asyncio.run(main())
