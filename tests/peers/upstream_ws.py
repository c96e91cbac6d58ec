"""A webhook backend (Python's http.server) and Python `websockets`
clients, around a `megaconn server --protocol ws --upstream
http://127.0.0.1:HOOK/hook`.

usage: upstream_ws.py PORT ADMIN HOOK MODE [N] [SECRET_FILE]
  Binds the webhook on HOOK first and prints READY; then waits for the
  server on PORT. With SECRET_FILE (the server's --upstream-secret-file),
  the webhook checks every POST's X-Megaconn-Timestamp (within 5 minutes)
  and X-Megaconn-Signature (sha256=HEX of HMAC-SHA256 over
  "TIMESTAMP.BODY", compared in constant time) as docs/upstream.md tells
  a backend to, answers 401 to any that fails, and the run fails.
  MODE all:   N clients each send 5 text messages and one
              {"type":"publish","topic":"room.K"} command; the webhook must
              receive exactly those N*6 messages, each once, with its
              connection id and topic; then the backend answers one client
              through POST /push/ID and that client receives it.
  MODE stall: the webhook answers its first two batches 503 and holds the
              third 5 s; 50 clients x 20 messages are all delivered, once.
  MODE presence: (--auth jwt, N is the secret file) alice twice and bob
              once in room.1 (tokens by PyJWT, info {"name":..}), carol in
              room.2: GET /presence?topic=room.1 lists alice (2) and bob (1)
              with their info; the webhook gets a join for each, then a
              leave as each unsubscribes or closes.
  MODE full:  the webhook holds every batch until told; one client sends
              200 messages into a queue of 20: it is closed with 1013; once
              the webhook answers, it prints 'DELIVERED n' for what it got.
  MODE limit: the webhook answers 413 to any body over N bytes (and holds
              its first batch 1 s, so a backlog builds); 40 clients x 25
              messages of ~1 KiB all arrive, once each, in bodies of at most
              N bytes; it prints 'REFUSED k' (the 413s it answered, > 0)
              and 'LARGEST b' (the largest body it took).
Prints 'OK' when every check held.
"""
import asyncio
import hashlib
import hmac
import json
import socket
import sys
import threading
import time
import urllib.request
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

port, admin, hook, mode = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
n = int(sys.argv[5]) if len(sys.argv) > 5 and mode != "presence" else 100
secret = open(sys.argv[6], "rb").read().rstrip(b"\r\n") if len(sys.argv) > 6 else None

got = []
lock = threading.Lock()
posts = [0]
release = threading.Event()
bad_signatures = []
refused_413 = [0]
largest = [0]


def signed(headers, body):
    """What docs/upstream.md tells a backend to check."""
    ts, sig = headers.get("X-Megaconn-Timestamp"), headers.get("X-Megaconn-Signature")
    if not ts or not sig or abs(time.time() * 1000 - int(ts)) > 300_000:
        return False
    want = "sha256=" + hmac.new(secret, ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(want, sig)


class Hook(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def answer(self, status):
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        if secret is not None and not signed(self.headers, raw):
            with lock:
                bad_signatures.append(dict(self.headers))
            return self.answer(401)
        body = json.loads(raw)
        with lock:
            posts[0] += 1
            k = posts[0]
        if mode == "limit":
            if len(raw) > n:
                with lock:
                    refused_413[0] += 1
                return self.answer(413)
            if k == 1:
                time.sleep(1)
            with lock:
                largest[0] = max(largest[0], len(raw))
        if mode == "stall" and k <= 2:
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if mode == "stall" and k == 3:
            time.sleep(5)
        if mode == "full":
            release.wait(30)
        with lock:
            got.extend(body["messages"])
        self.send_response(204)
        self.end_headers()


server = ThreadingHTTPServer(("127.0.0.1", hook), Hook)
threading.Thread(target=server.serve_forever, daemon=True).start()
print("READY", flush=True)

deadline = time.time() + 30
while True:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        break
    except OSError:
        assert time.time() < deadline, "the server never listened"
        time.sleep(0.05)


def wait_for(count, limit=30):
    end = time.time() + limit
    while time.time() < end:
        with lock:
            if len(got) >= count:
                return
        time.sleep(0.02)
    raise AssertionError(f"the webhook got {len(got)} of {count}")


def push(conn, data):
    req = urllib.request.Request(f"http://{admin}/push/{conn}", data=data.encode(), method="POST",
                                 headers={"Content-Type": "application/octet-stream"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200, r.status


async def mode_all():
    clients = [await connect(f"ws://127.0.0.1:{port}/") for _ in range(n)]
    sent = Counter()
    for i, ws in enumerate(clients):
        for j in range(5):
            await ws.send(f"c{i}-m{j}")
            sent[(None, f"c{i}-m{j}")] += 1
        await ws.send(json.dumps({"type": "publish", "topic": f"room.{i % 7}", "data": f"c{i}-p"}))
        sent[(f"room.{i % 7}", f"c{i}-p")] += 1
    wait_for(n * 6)
    time.sleep(0.3)  # anything extra would have arrived by now
    with lock:
        received = Counter((m.get("topic"), m["data"]) for m in got)
        kinds = {m["type"] for m in got}
        conns = {m["data"].split("-")[0]: m["conn"] for m in got}
    assert received == sent, (len(got), (received - sent).most_common(3), (sent - received).most_common(3))
    assert kinds == {"message"}, kinds
    assert len(set(conns.values())) == n, "one id per client"
    # The backend answers client 3 through the push API.
    push(conns["c3"], "answer for c3")
    m = json.loads(await asyncio.wait_for(clients[3].recv(), 10))
    assert m["stream"] == "unicast" and m["data"] == "answer for c3", m
    for ws in clients:
        await ws.close()


async def send_rounds(n, rounds, suffix=""):
    """n clients each send `rounds` messages "c{i}-m{r}{suffix}"; returns the
    clients once the webhook got every message, each once."""
    clients = [await connect(f"ws://127.0.0.1:{port}/") for _ in range(n)]
    for r in range(rounds):
        for i, ws in enumerate(clients):
            await ws.send(f"c{i}-m{r}{suffix}")
    wait_for(n * rounds, limit=60)
    time.sleep(0.3)
    with lock:
        c = Counter(m["data"] for m in got)
    assert len(c) == n * rounds and max(c.values()) == 1, (len(c), c.most_common(2))
    return clients


async def mode_stall():
    for ws in await send_rounds(50, 20):
        await ws.close()


async def mode_full():
    ws = await connect(f"ws://127.0.0.1:{port}/")
    code = None
    try:
        for j in range(200):
            await ws.send(f"m{j}")
        await asyncio.wait_for(ws.recv(), 10)
    except ConnectionClosed as e:
        code = e.rcvd.code if e.rcvd else None
    assert code == 1013, code
    release.set()
    time.sleep(1.5)
    with lock:
        print(f"DELIVERED {len(got)}", flush=True)
        data = [m["data"] for m in got]
    assert data == [f"m{j}" for j in range(len(data))], "in order, none skipped"


def presence():
    with urllib.request.urlopen(f"http://{admin}/presence?topic=room.1", timeout=10) as r:
        return json.loads(r.read())


async def mode_presence():
    import jwt
    secret = open(sys.argv[5], "rb").read().rstrip(b"\n")

    def url(sub, room):
        t = jwt.encode({"sub": sub, "exp": int(time.time()) + 60, "topics": ["room.*"], "info": {"name": sub.title()}}, secret, algorithm="HS256")
        return f"ws://127.0.0.1:{port}/?subscribe={room}&token={t}"
    alice = [await connect(url("alice", "room.1")) for _ in range(2)]
    bob = await connect(url("bob", "room.1"))
    carol = await connect(url("carol", "room.2"))
    # Joins and leaves are netted over a second per connection and topic:
    # the four joins are told before anyone leaves.
    wait_for(4)
    p = presence()
    assert p["connections"] == 3 and p["anonymous"] == 0 and p["users_total"] == 2, p
    assert p["users"] == [{"user": "alice", "connections": 2, "info": {"name": "Alice"}},
                          {"user": "bob", "connections": 1, "info": {"name": "Bob"}}], p
    await alice[0].send(json.dumps({"type": "unsubscribe", "topic": "room.1"}))
    assert json.loads(await asyncio.wait_for(alice[0].recv(), 10))["type"] == "unsubscribed"
    await bob.close()
    p = presence()
    assert p["users"] == [{"user": "alice", "connections": 1, "info": {"name": "Alice"}}], p
    for ws in alice + [carol]:
        await ws.close()
    wait_for(8)
    time.sleep(0.3)
    with lock:
        events = Counter((m["type"], m["user"], m["topic"]) for m in got)
    want = Counter({("join", "alice", "room.1"): 2, ("leave", "alice", "room.1"): 2, ("join", "bob", "room.1"): 1,
                    ("leave", "bob", "room.1"): 1, ("join", "carol", "room.2"): 1, ("leave", "carol", "room.2"): 1})
    assert events == want, events


async def mode_limit():
    clients = await send_rounds(40, 25, "-" + "x" * 1000)
    with lock:
        print(f"REFUSED {refused_413[0]}", flush=True)
        print(f"LARGEST {largest[0]}", flush=True)
    assert refused_413[0] > 0, "the backlog never made a body over the limit"
    assert largest[0] <= n, largest[0]
    for i in range(40):
        seen = [int(m["data"].split("-")[1][1:]) for m in got if m["data"].startswith(f"c{i}-")]
        assert seen == list(range(25)), (i, seen)
    for ws in clients:
        await ws.close()


asyncio.run({"presence": mode_presence, "all": mode_all, "stall": mode_stall, "full": mode_full, "limit": mode_limit}[mode]())
assert not bad_signatures, f"{len(bad_signatures)} POSTs without a valid signature, e.g. {bad_signatures[0]}"
print("OK", flush=True)
