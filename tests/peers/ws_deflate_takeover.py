"""Python `websockets` (its default offer keeps context both ways) against
`megaconn server --ws-deflate takeover`.

usage: ws_deflate_takeover.py PORT PUSHES

Connects to ws://127.0.0.1:PORT/?subscribe=room, prints 'negotiated <the
server's Sec-WebSocket-Extensions>', the parameters websockets read from
it, then 'ready'. Prints 'push <data>' for each of PUSHES pushes on room
(published by the test; websockets inflates them with the context it
keeps). Then sends the same 1 KB text message three times (compressed by
websockets with its context kept: the second and third refer back to
the first) and expects each echoed back equal. Prints 'OK'.
"""
import asyncio
import json
import sys

from websockets.asyncio.client import connect
from websockets.extensions.permessage_deflate import PerMessageDeflate

port, pushes = int(sys.argv[1]), int(sys.argv[2])


async def main():
    async with connect(f"ws://127.0.0.1:{port}/?subscribe=room") as ws:
        print("negotiated", ws.response.headers["Sec-WebSocket-Extensions"], flush=True)
        (ext,) = ws.protocol.extensions
        assert isinstance(ext, PerMessageDeflate), ext
        print(
            "remote_no_context_takeover", ext.remote_no_context_takeover,
            "local_no_context_takeover", ext.local_no_context_takeover,
            "remote_max_window_bits", ext.remote_max_window_bits,
            "local_max_window_bits", ext.local_max_window_bits,
            flush=True,
        )
        print("ready", flush=True)
        for _ in range(pushes):
            push = json.loads(await asyncio.wait_for(ws.recv(), 30))
            print("push", push["data"], flush=True)
        body = "echo me " + " ".join(f"quote {i} EURUSD 1.08{i % 100:02}" for i in range(40))
        for _ in range(3):
            await ws.send(body)
            assert await asyncio.wait_for(ws.recv(), 30) == body, "echo"
        print("OK", flush=True)


asyncio.run(main())
