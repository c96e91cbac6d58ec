"""A Python `websockets` client echoing 4, 8 and 16 MiB messages.

usage: ws_large_echo.py PORT [CAFILE]
(server: --protocol ws --max-message-bytes 16777216; with CAFILE: over
wss://localhost, trusting that CA)

The Autobahn testsuite's cases 9.1.4-9.1.6 and 9.2.4-9.2.6: a text and a
binary message of 4, 8 and 16 MiB, each sent in one frame, must come back
in kind and byte-exact. The socket's receive buffer is small (64 KiB), so
every echo waits in the server's backlog for many turns while this client
reads it: a peer that drains its reply, however large, is no slow reader.
Progress goes to stderr; prints 'OK' last.
"""
import asyncio
import base64
import os
import socket
import ssl
import sys
import time

from websockets.asyncio.client import connect

PORT = int(sys.argv[1])
CAFILE = sys.argv[2] if len(sys.argv) > 2 else None
MIB = 1 << 20
SIZES = [4 * MIB, 8 * MIB, 16 * MIB]
# Small enough that a 16 MiB echo takes hundreds of the server's writes.
RCVBUF = 64 * 1024
# One echo, generously: a few seconds on loopback, also on a loaded CI box.
ECHO_TIMEOUT_S = 60


def text_of(n):
    """n bytes of random ASCII (base64 never starts a JSON command)."""
    return base64.b64encode(os.urandom(n * 3 // 4 + 3)).decode()[:n]


async def main():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # Before connect, so the window the server sees is small from the start.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
    sock.connect(("127.0.0.1", PORT))
    if CAFILE:
        url, tls = f"wss://localhost:{PORT}/large", {"ssl": ssl.create_default_context(cafile=CAFILE), "server_hostname": "localhost"}
    else:
        url, tls = f"ws://127.0.0.1:{PORT}/large", {}
    async with connect(url, sock=sock, compression=None, max_size=None, proxy=None, **tls) as ws:
        for n in SIZES:
            for kind, msg in (("text", text_of(n)), ("binary", os.urandom(n))):
                start = time.monotonic()
                await ws.send(msg)
                back = await asyncio.wait_for(ws.recv(), ECHO_TIMEOUT_S)
                assert type(back) is type(msg), f"{kind} {n}: echoed as {type(back).__name__}"
                assert len(back) == n, f"{kind} {n}: {len(back)} bytes back"
                assert back == msg, f"{kind} {n}: the echo differs"
                print(f"{kind} {n // MIB} MiB echoed in {time.monotonic() - start:.2f} s", file=sys.stderr, flush=True)
    print("OK", flush=True)


asyncio.run(main())
