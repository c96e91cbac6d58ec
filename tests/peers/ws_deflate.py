"""Python `websockets` (compression on, its default) against megaconn's
permessage-deflate.

usage: ws_deflate.py PORT [CAFILE]
       ws_deflate.py PORT window BITS
       ws_deflate.py PORT resume EPOCH
(window: offers server_max_window_bits=BITS; websockets then inflates
the server's messages with a window of 2^BITS, so a message compressed
with a larger one fails; the echoed body repeats a random block further
back than 2^BITS bytes.)
(resume: subscribes to room with "since" offset 0 of EPOCH and prints
'replayed <data>' for each message the history answer brings, then the
'subscribed' answer's 'recovered <bool>'.)

Connects to ws://127.0.0.1:PORT/?subscribe=room (with CAFILE:
wss://localhost, trusting that CA) with websockets' default
offer, prints 'negotiated <the server's Sec-WebSocket-Extensions>' and the
parameters websockets read from it, then 'ready'. Expects a push on topic
room (published by the test) and prints 'push <data>'. Then sends a 1 KB
text message, whole and in fragments (compressed by websockets: RSV1 on
the first frame only), and expects each echoed back equal. Prints 'OK'.
"""
import asyncio
import json
import random
import ssl
import sys

from websockets.asyncio.client import connect
from websockets.extensions.permessage_deflate import ClientPerMessageDeflateFactory, PerMessageDeflate

port = int(sys.argv[1])
BLOCK = "".join(random.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(700))
if len(sys.argv) > 2 and sys.argv[2] == "resume":
    URL, SSL = f"ws://127.0.0.1:{port}/", {}
elif len(sys.argv) > 2 and sys.argv[2] == "window":
    bits = int(sys.argv[3])
    URL, SSL = f"ws://127.0.0.1:{port}/?subscribe=room", {"extensions": [ClientPerMessageDeflateFactory(server_max_window_bits=bits)]}
elif len(sys.argv) > 2:
    URL, SSL = f"wss://localhost:{port}/?subscribe=room", {"ssl": ssl.create_default_context(cafile=sys.argv[2])}
else:
    URL, SSL = f"ws://127.0.0.1:{port}/?subscribe=room", {}


async def main():
    async with connect(URL, **SSL) as ws:
        print("negotiated", ws.response.headers["Sec-WebSocket-Extensions"], flush=True)
        (ext,) = ws.protocol.extensions
        assert isinstance(ext, PerMessageDeflate), ext
        # Our no_context_takeover is the server's, and the reverse.
        print("remote_no_context_takeover", ext.remote_no_context_takeover, "local_no_context_takeover", ext.local_no_context_takeover, flush=True)
        print("ready", flush=True)
        push = json.loads(await asyncio.wait_for(ws.recv(), 30))
        print("push", push["data"], flush=True)
        body = "echo me " + "x" * 500 + " ".join(str(i) for i in range(150)) + BLOCK + "|" + BLOCK
        for attempt in range(3):
            await ws.send(body)
            assert await asyncio.wait_for(ws.recv(), 30) == body, "whole"
        await ws.send(iter([body[:300], body[300:700], body[700:]]))
        assert await asyncio.wait_for(ws.recv(), 30) == body, "fragmented"
        print("OK", flush=True)


async def resume(epoch):
    async with connect(URL, **SSL) as ws:
        await ws.send(json.dumps({"type": "subscribe", "topic": "room", "since": {"epoch": epoch, "offset": 0}}))
        while True:
            m = json.loads(await asyncio.wait_for(ws.recv(), 30))
            if m.get("type") == "subscribed":
                print("recovered", m["recovered"], flush=True)
                break
            print("replayed", m["data"], flush=True)
    print("OK", flush=True)


if len(sys.argv) > 2 and sys.argv[2] == "resume":
    asyncio.run(resume(int(sys.argv[3])))
else:
    asyncio.run(main())
