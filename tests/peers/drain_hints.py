"""A draining megaconn server's reconnect hints, as peers nobody here wrote
read them: Python `websockets` and a raw-socket Server-Sent Events reader.

usage: drain_hints.py PORT
  1. a websockets client and an event stream connect, then 'READY' is
     printed; the test sends the server SIGTERM;
  2. the WebSocket is closed with 1012 (Service Restart) and the JSON
     reason {"type":"goaway","retry_ms":N}, 0 <= N <= 1000;
  3. the event stream gets `retry: N` and a `goaway` event with the same
     JSON, then the end of the stream.
Prints 'OK' when every check held.
"""
import asyncio
import json
import socket
import sys

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

port = int(sys.argv[1])


def check_hint(text):
    hint = json.loads(text)
    assert hint["type"] == "goaway", hint
    assert 0 <= hint["retry_ms"] <= 1000, hint
    return hint["retry_ms"]


def sse_open():
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.sendall(b"GET /events?subscribe=news HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n\r\n")
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(4096)
        assert chunk, "closed before the head"
        buf += chunk
    assert buf.startswith(b"HTTP/1.1 200 OK"), buf
    return s, buf.split(b"\r\n\r\n", 1)[1]


def sse_until_closed(s, buf):
    while True:
        chunk = s.recv(4096)
        if not chunk:
            return buf.decode()
        buf += chunk


async def main():
    sse, rest = sse_open()
    async with connect(f"ws://127.0.0.1:{port}/", compression=None) as ws:
        await ws.send(json.dumps({"type": "subscribe", "topic": "news"}))
        answer = json.loads(await ws.recv())
        assert answer["type"] == "subscribed", answer
        print("READY", flush=True)
        try:
            while True:
                await asyncio.wait_for(ws.recv(), 60)
        except ConnectionClosed:
            pass
        assert ws.close_code == 1012, ws.close_code
        check_hint(ws.close_reason)
    text = await asyncio.get_running_loop().run_in_executor(None, sse_until_closed, sse, rest)
    events = [e for e in text.split("\n\n") if "event: goaway" in e]
    assert len(events) == 1, text
    fields = dict(line.split(": ", 1) for line in events[0].split("\n"))
    assert int(fields["retry"]) == check_hint(fields["data"]), fields
    print("OK", flush=True)


asyncio.run(main())
