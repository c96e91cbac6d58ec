"""Python `websockets` (an implementation nobody here wrote) against a
megaconn --protocol ws server: echo, UTF-8, fragments, ping/pong, the
close handshake, and the close codes of three violations.

usage: ws_conformance.py PORT [CAFILE]   (prints one line per check, 'ALL OK'
last; with CAFILE: over wss://localhost, trusting that CA)
"""
import asyncio
import os
import ssl
import struct
import sys

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

if len(sys.argv) > 2:
    URL = f"wss://localhost:{sys.argv[1]}/conformance"
    SSL = {"ssl": ssl.create_default_context(cafile=sys.argv[2])}
else:
    URL = f"ws://127.0.0.1:{sys.argv[1]}/conformance"
    SSL = {}


def frame(opcode, payload, mask=True, fin=True):
    """A raw client frame, for what the library refuses to send."""
    head = bytes([(0x80 if fin else 0) | opcode])
    n = len(payload)
    m = 0x80 if mask else 0
    if n < 126:
        head += bytes([m | n])
    elif n < 65536:
        head += bytes([m | 126]) + struct.pack(">H", n)
    else:
        head += bytes([m | 127]) + struct.pack(">Q", n)
    if not mask:
        return head + payload
    key = os.urandom(4)
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


async def close_code_after(raw):
    """Write raw bytes after the handshake; return the server's close code."""
    async with connect(URL, compression=None, **SSL) as ws:
        ws.transport.write(raw)
        try:
            await asyncio.wait_for(ws.recv(), 5)
        except ConnectionClosed as e:
            return e.rcvd.code if e.rcvd else None
    return None


async def main():
    async with connect(URL, compression=None, max_size=None, **SSL) as ws:
        assert ws.response.status_code == 101
        assert "Sec-WebSocket-Extensions" not in ws.response.headers, "deflate must not be negotiated"
        for i in range(1000):
            msg = os.urandom(1 + i % 300)
            await ws.send(msg)
            assert await ws.recv() == msg, i
        print("1000 binary echoed")
        text = "héllo wörld — 你好 😀"
        await ws.send(text)
        got = await ws.recv()
        assert got == text and isinstance(got, str), got
        print("utf-8 text echoed")
        await ws.send(["frag", "mén", "ted 😀"])
        assert await ws.recv() == "fragménted 😀"
        await ws.send([b"\x00" * 100, b"\x01" * 100])
        assert await ws.recv() == b"\x00" * 100 + b"\x01" * 100
        print("fragmented echoed")
        latency = await asyncio.wait_for(await ws.ping(b"stamp"), 5)
        print(f"pong in {latency * 1000:.2f} ms")
        await ws.close(code=4001, reason="done")
        assert ws.close_code == 4001, ws.close_code
        print("clean close 4001")

    assert await close_code_after(frame(1, b"\xc3\x28 bad utf-8")) == 1007
    print("invalid utf-8 -> 1007")
    assert await close_code_after(frame(2, b"unmasked", mask=False)) == 1002
    print("unmasked -> 1002")
    assert await close_code_after(frame(2, b"x" * 70000)) == 1009
    print("oversized -> 1009")
    async with connect(URL, compression=None, max_size=None, **SSL) as ws:
        try:
            await ws.send(b"y" * 70000)
            await asyncio.wait_for(ws.recv(), 5)
            raise AssertionError("oversized message was answered")
        except ConnectionClosed as e:
            assert e.rcvd and e.rcvd.code == 1009, e
    print("oversized via library -> 1009")
    print("ALL OK")


asyncio.run(main())
