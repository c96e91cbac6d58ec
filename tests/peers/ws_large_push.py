"""A Python `websockets` subscriber receiving a 1 MiB push intact.

usage: ws_large_push.py PORT ADMIN_ADDR   (server: --push-format binary)
Subscribes to "big", publishes 1 MiB of patterned bytes through the admin
API, and checks the binary push (kind 8, stream, topic, offset, publish
µs, epoch, data) carries exactly those bytes. Prints 'OK'.
"""
import asyncio
import hashlib
import struct
import sys
import urllib.request

from websockets.asyncio.client import connect

port, admin = int(sys.argv[1]), sys.argv[2]
DATA = bytes((i * 7 + i // 251) % 256 for i in range(1 << 20))


def publish():
    req = urllib.request.Request(f"http://{admin}/publish?topic=big", data=DATA, method="POST",
                                 headers={"Content-Type": "application/octet-stream"})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 200, r.status


async def main():
    async with connect(f"ws://127.0.0.1:{port}/?subscribe=big", compression=None, max_size=None) as ws:
        await asyncio.get_running_loop().run_in_executor(None, publish)
        msg = await asyncio.wait_for(ws.recv(), 30)
        assert isinstance(msg, bytes) and msg[0] == 8, msg[:16]
        tlen = msg[2]
        assert msg[3:3 + tlen] == b"big", msg[:16]
        offset, _ts, epoch = struct.unpack(">QQI", msg[3 + tlen:23 + tlen])
        data = msg[23 + tlen:]
        assert (offset, len(data)) == (1, len(DATA)), (offset, len(data))
        assert epoch != 0
        assert hashlib.sha256(data).digest() == hashlib.sha256(DATA).digest(), "the data changed on the way"
    print("OK", flush=True)


asyncio.run(main())
