"""Python `websockets` wss server that checks what a real gateway checks.

usage: wss_header_server.py PORT CERT KEY SECONDS
TLS with CERT/KEY; refuses an upgrade without `X-Api-Key: secret` (401)
or from another Origin than https://app.example (403); speaks only the
subprotocol `chat.v2`. Echoes messages, answers pings, and sends every
client one text message {"hello": N} once connected. Prints 'ready',
then at exit one line: "accepted N refused M subprotocol chat.v2=K".
"""
import asyncio
import http
import ssl
import sys

from websockets.asyncio.server import serve

counts = {"accepted": 0, "refused": 0, "chat": 0}


def check(conn, request):
    if request.headers.get("X-Api-Key") != "secret":
        counts["refused"] += 1
        return conn.respond(http.HTTPStatus.UNAUTHORIZED, "missing or wrong X-Api-Key\n")
    if request.headers.get("Origin") != "https://app.example":
        counts["refused"] += 1
        return conn.respond(http.HTTPStatus.FORBIDDEN, "origin not allowed\n")
    return None


async def handler(ws):
    counts["accepted"] += 1
    if ws.subprotocol == "chat.v2":
        counts["chat"] += 1
    await ws.send('{"hello": %d}' % counts["accepted"])
    async for msg in ws:
        await ws.send(msg)


async def main():
    port, cert, key, seconds = int(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4])
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    async with serve(handler, "127.0.0.1", port, ssl=ctx, process_request=check, subprotocols=["chat.v2"], compression=None, backlog=4096):
        print("ready", flush=True)
        await asyncio.sleep(seconds)
    print("accepted %d refused %d subprotocol chat.v2=%d" % (counts["accepted"], counts["refused"], counts["chat"]), flush=True)


asyncio.run(main())
