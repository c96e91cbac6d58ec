"""Python `websockets` clients with tokens minted by PyJWT, against a
`megaconn server --protocol ws --auth jwt`.

usage: auth_ws.py PORT ADMIN_ADDR KEYDIR MODE
  KEYDIR holds secret (HS256), rsa.pem / rsa.pub.pem and ec.pem (the
  server verifies with the one MODE names).
  MODE hs: a token by header, by subprotocol and by ?token= is accepted;
           no token, expired, another secret, alg none, garbage: 401 with
           the reason in WWW-Authenticate; subscribe outside the topics
           claim is refused, inside is answered; refresh for the same user
           is taken, for another refused; a token that expires while
           connected closes it with 4001.
  MODE rs: RS256 by the public key is accepted; HS256 signed with the
           public key's PEM as HMAC secret (the HS/RS confusion) and a
           token by another RSA key are refused.
  MODE jwks: an ES256 token whose kid is in the JWKS is accepted; an
           unknown kid is refused.
  MODE notices: (--presence-notices) alice in chat.room hears bob join and
           leave: {"type":"join"|"leave","topic":"chat.room","user":"bob"}.
  MODE users: three connections of alice, one of bob; the admin API's
           per-user push reaches each of alice's once and bob's never; the
           listing names the user; disconnect closes alice's with 4000.
Prints 'OK' when every check held.
"""
import asyncio
import hashlib
import hmac
import base64
import json
import os
import sys
import time
import urllib.error
import urllib.request

import jwt
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

port, admin, keydir, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
URL = f"ws://127.0.0.1:{port}/"


def read(name):
    with open(os.path.join(keydir, name), "rb") as f:
        return f.read()


SECRET = read("secret").rstrip(b"\n")


def claims(sub, ttl=60, topics=("chat.*",), **extra):
    return {"sub": sub, "exp": int(time.time()) + ttl, "topics": list(topics), **extra}


def hs(sub, **kw):
    return jwt.encode(claims(sub, **kw), SECRET, algorithm="HS256")


async def recv(ws):
    return json.loads(await asyncio.wait_for(ws.recv(), 10))


async def refused(url, reason, headers=None):
    try:
        async with connect(url, additional_headers=headers or {}, open_timeout=10):
            raise AssertionError(f"accepted; expected 401 {reason}")
    except InvalidStatus as e:
        r = e.response
        assert r.status_code == 401, (reason, r.status_code)
        assert f'error_description="{reason}"' in r.headers["WWW-Authenticate"], (reason, r.headers)


def admin_call(method, path, data=b""):
    req = urllib.request.Request(f"http://{admin}{path}", data=data if method == "POST" else None, method=method,
                                 headers={"Content-Type": "application/octet-stream"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def unsigned(header, payload, key):
    """A token signed by hand: HMAC-SHA256 of header.payload with `key`."""
    enc = lambda d: base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=")
    msg = enc(header) + b"." + enc(payload)
    sig = base64.urlsafe_b64encode(hmac.new(key, msg, hashlib.sha256).digest()).rstrip(b"=")
    return (msg + b"." + sig).decode()


async def mode_hs():
    # Three ways to carry the token.
    async with connect(URL + "?subscribe=chat.a", additional_headers={"Authorization": "Bearer " + hs("alice")}) as ws:
        await ws.send(json.dumps({"type": "subscribe", "topic": "news"}))
        m = await recv(ws)
        assert m["type"] == "error" and m["reason"] == "not_permitted" and m["topic"] == "news", m
        await ws.send(json.dumps({"type": "subscribe", "topic": "chat.b"}))
        m = await recv(ws)
        assert m["type"] == "subscribed" and m["topic"] == "chat.b", m
        await ws.send(json.dumps({"type": "refresh", "token": hs("alice", ttl=120)}))
        m = await recv(ws)
        assert m["type"] == "refreshed" and m["exp"] >= int(time.time()) + 100, m
        await ws.send(json.dumps({"type": "refresh", "token": hs("bob")}))
        m = await recv(ws)
        assert m["type"] == "error" and m["reason"] == "auth_other_user", m
    async with connect(URL, subprotocols=["megaconn", "bearer." + hs("alice")]) as ws:
        assert ws.subprotocol == "megaconn", ws.subprotocol
    async with connect(URL + "?token=" + hs("alice")) as ws:
        await ws.send("hello")
        assert await asyncio.wait_for(ws.recv(), 10) == "hello"
    # Refused, each for its reason.
    await refused(URL, "auth_missing")
    await refused(URL + "?token=" + hs("a", ttl=-30), "auth_expired")
    await refused(URL + "?token=" + jwt.encode(claims("a"), b"another secret of the same length!!", algorithm="HS256"), "auth_bad_signature")
    await refused(URL + "?token=" + jwt.encode(claims("a"), None, algorithm="none"), "auth_bad_algorithm")
    await refused(URL + "?token=" + jwt.encode({"exp": int(time.time()) + 60}, SECRET, algorithm="HS256"), "auth_bad_claims")
    await refused(URL + "?token=not.a.jwt", "auth_malformed")
    # A ?subscribe= the token does not allow: 403.
    try:
        async with connect(URL + "?subscribe=news&token=" + hs("a")):
            raise AssertionError("a forbidden ?subscribe= was accepted")
    except InvalidStatus as e:
        assert e.response.status_code == 403, e.response.status_code
    # Expiry while connected: closed with 4001 within a few seconds.
    async with connect(URL, additional_headers={"Authorization": "Bearer " + hs("carol", ttl=2)}) as ws:
        t0 = time.time()
        try:
            while True:
                await asyncio.wait_for(ws.recv(), 10)
        except ConnectionClosed as e:
            assert e.rcvd is not None and e.rcvd.code == 4001, e
            assert time.time() - t0 < 8, time.time() - t0


async def mode_rs():
    rsa_private, rsa_public = read("rsa.pem"), read("rsa.pub.pem")
    async with connect(URL + "?token=" + jwt.encode(claims("alice"), rsa_private, algorithm="RS256")) as ws:
        await ws.send("x")
        assert await asyncio.wait_for(ws.recv(), 10) == "x"
    # The public key used as an HMAC secret: the classic confusion.
    confused = unsigned({"alg": "HS256", "typ": "JWT"}, claims("mallory"), rsa_public)
    await refused(URL + "?token=" + confused, "auth_bad_algorithm")
    from cryptography.hazmat.primitives.asymmetric import rsa
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    await refused(URL + "?token=" + jwt.encode(claims("mallory"), other, algorithm="RS256"), "auth_bad_signature")
    await refused(URL + "?token=" + hs("mallory"), "auth_bad_algorithm")


async def mode_jwks():
    ec_private = read("ec.pem")
    good = jwt.encode(claims("alice"), ec_private, algorithm="ES256", headers={"kid": "k2"})
    async with connect(URL + "?token=" + good) as ws:
        await ws.send("x")
        assert await asyncio.wait_for(ws.recv(), 10) == "x"
    unknown = jwt.encode(claims("alice"), ec_private, algorithm="ES256", headers={"kid": "nope"})
    await refused(URL + "?token=" + unknown, "auth_unknown_key")


async def mode_users():
    alice = [await connect(URL + "?token=" + hs("alice", info={"name": "Alice"})) for _ in range(3)]
    bob = await connect(URL + "?token=" + hs("bob"))
    status, body = admin_call("GET", "/connections?user=alice")
    assert status == 200 and len(body["connections"]) == 3, body
    assert all(c["user"] == "alice" and c["info"] == {"name": "Alice"} for c in body["connections"]), body
    status, body = admin_call("POST", "/push/user/alice", b"hi alice")
    assert status == 200 and body["queued"] == 3, (status, body)
    for ws in alice:
        m = await recv(ws)
        assert m["stream"] == "unicast" and m["data"] == "hi alice", m
    # Bob got nothing: the next thing he hears is his own echo.
    await bob.send("ping")
    assert await asyncio.wait_for(bob.recv(), 10) == "ping"
    status, body = admin_call("POST", "/push/user/nobody", b"x")
    assert status == 404, (status, body)
    status, body = admin_call("POST", "/disconnect/user/alice")
    assert status == 200 and body["disconnected"] == 3, (status, body)
    for ws in alice:
        try:
            await asyncio.wait_for(ws.recv(), 10)
            raise AssertionError("still open after disconnect")
        except ConnectionClosed as e:
            assert e.rcvd is not None and e.rcvd.code == 4000, e
    await bob.send("still here")
    assert await asyncio.wait_for(bob.recv(), 10) == "still here"
    await bob.close()


async def mode_notices():
    alice = await connect(URL + "?subscribe=chat.room&token=" + hs("alice"))
    got = []

    async def until(kind, user):
        while True:
            m = await recv(alice)
            got.append(m)
            if m.get("type") == kind and m.get("user") == user:
                return m
    bob = await connect(URL + "?subscribe=chat.room&token=" + hs("bob"))
    m = await until("join", "bob")
    assert m == {"type": "join", "topic": "chat.room", "user": "bob"}, m
    await bob.close()
    m = await until("leave", "bob")
    assert m["topic"] == "chat.room", m
    # Each worker tells its joins once a second: alice's own join (her
    # worker) may come before or after bob's (his).
    assert [g["user"] for g in got if g.get("type") in ("join", "leave")] in (["bob", "bob"], ["alice", "bob", "bob"], ["bob", "alice", "bob"]), got
    await alice.close()


asyncio.run({"notices": mode_notices, "hs": mode_hs, "rs": mode_rs, "jwks": mode_jwks, "users": mode_users}[mode]())
print("OK")
