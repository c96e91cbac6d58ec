"""Eclipse paho-mqtt (2.1.0) clients, MQTT 3.1.1 and 5.0, against a
`megaconn server --protocol mqtt`.

usage: mqtt_paho.py PORT ADMIN_ADDR basic
         both versions: CONNACK (v5: maximum QoS 1, retain unavailable,
         wildcards yes, shared no); SUBSCRIBE a/+ (QoS 1) and # (QoS 2,
         granted 1); an admin POST /publish to $SYS/x then a/b: a/b arrives
         first (# does not match $SYS/x); a QoS 1 PUBLISH to a/c gets its
         PUBACK, reaches the subscriber and is in the topic's history (the
         admin publish path every protocol's subscribers are fed from);
         refused subscriptions ($share/g/a, "a b") with their codes; a
         2 s keep-alive kept by two PINGREQ/PINGRESP rounds; a raw CONNECT
         of protocol level 6 answered CONNACK 0x01 and a v5 client id over
         128 bytes CONNACK 0x85; a second CONNECT answered DISCONNECT 0x82.
       mqtt_paho.py PORT ADMIN_ADDR jwt KEYDIR
         (--auth jwt, HS256 secret in KEYDIR) both versions: the token as
         password is accepted and its topics claim (a/*) is the ACL (a/x
         subscribed, b/x refused 0x87 / 0x80); no password: CONNACK 4 /
         0x86; a token by another secret: 5 / 0x87 (paho shows 3.1.1's
         return codes as the 5.0 ones).
Prints 'OK' when every check held.
"""
import json
import os
import queue
import socket
import sys
import time
import urllib.request

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.properties import Properties
from paho.mqtt.packettypes import PacketTypes

port, admin, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
TIMEOUT = 20


def code(rc):
    """A paho ReasonCode (or a plain int) as its number."""
    return int(getattr(rc, "value", rc))


def check(cond, what):
    if not cond:
        print(f"FAIL {what}", flush=True)
        sys.exit(1)


class Client:
    """A paho client whose callbacks land in queues."""

    def __init__(self, version, name, keepalive=30, password=None):
        self.version = version
        self.c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=name, protocol=version)
        self.events = queue.Queue()
        self.messages = queue.Queue()
        self.pingresps = 0
        self.c.on_connect = lambda c, u, flags, rc, props: self.events.put(("connack", rc, props))
        self.c.on_disconnect = lambda c, u, flags, rc, props: self.events.put(("disconnect", rc, props))
        self.c.on_subscribe = lambda c, u, mid, rcs, props: self.events.put(("suback", mid, rcs))
        self.c.on_message = lambda c, u, m: self.messages.put((m.topic, m.payload, m.qos, m.retain))
        self.c.on_publish = lambda c, u, mid, rc, props: self.events.put(("puback", mid, rc))
        self.c.on_log = self.log
        if password is not None:
            self.c.username_pw_set("ignored", password)
        self.c.connect_async("127.0.0.1", port, keepalive=keepalive)
        self.c.loop_start()

    def log(self, c, u, level, text):
        if "Received PINGRESP" in text:
            self.pingresps += 1

    def event(self, kind):
        deadline = time.time() + TIMEOUT
        while True:
            ev = self.events.get(timeout=max(0.1, deadline - time.time()))
            if ev[0] == kind:
                return ev
            check(ev[0] != "disconnect", f"{self.version}: disconnected ({ev}) waiting for {kind}")

    def connack(self):
        _, rc, props = self.event("connack")
        return rc, props

    def subscribe(self, subs):
        _, mid = self.c.subscribe(subs)
        _, got, rcs = self.event("suback")
        check(got == mid, "suback id")
        return [code(r) for r in rcs]

    def message(self):
        return self.messages.get(timeout=TIMEOUT)

    def stop(self):
        self.c.disconnect()
        self.c.loop_stop()


def post(path, body=b""):
    req = urllib.request.Request(f"http://{admin}{path}", data=body, method="POST", headers={"Content-Type": "application/octet-stream"})
    with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
        return r.status, r.read()


def get(path):
    with urllib.request.urlopen(f"http://{admin}{path}", timeout=TIMEOUT) as r:
        return json.loads(r.read())


def raw(data):
    """Send bytes on a fresh socket; what comes back until the server closes."""
    s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    s.sendall(data)
    out = b""
    while True:
        b = s.recv(4096)
        if not b:
            return out
        out += b


def raw_connect(level, client_id=b"x", props=b""):
    body = b"\x00\x04MQTT" + bytes([level, 0x02, 0x00, 0x1E]) + props + len(client_id).to_bytes(2, "big") + client_id
    return bytes([0x10, len(body)]) + body if len(body) < 128 else bytes([0x10, (len(body) & 0x7F) | 0x80, len(body) >> 7]) + body


def basic(version):
    tag = "v5" if version == mqtt.MQTTv5 else "v3"
    v5 = version == mqtt.MQTTv5
    sub = Client(version, f"sub-{tag}", keepalive=2)
    rc, props = sub.connack()
    check(code(rc) == 0, f"{tag} connack {rc}")
    if v5:
        check(props.MaximumQoS == 1 and props.RetainAvailable == 0, f"v5 capabilities {props}")
        check(props.WildcardSubscriptionAvailable == 1 and props.SharedSubscriptionAvailable == 0, f"v5 wildcards {props}")
    check(sub.subscribe([("a/+", 1), ("#", 2)]) == [1, 1], f"{tag} granted QoS")
    refused = sub.subscribe([("$share/g/a", 0), ("a b", 0), ("a/ok", 0)])
    check(refused == ([0x9E, 0x8F, 0] if v5 else [0x80, 0x80, 0]), f"{tag} refused subscriptions {refused}")
    check(post("/publish?topic=$SYS/x", b"sys")[0] == 200, "admin publish $SYS/x")
    check(post("/publish?topic=a/b", b"from admin " + tag.encode())[0] == 200, "admin publish a/b")
    got = sub.message()
    check(got == ("a/b", b"from admin " + tag.encode(), 0, False), f"{tag} admin push {got} ($SYS/x must not match #)")
    pub = Client(version, f"pub-{tag}")
    check(code(pub.connack()[0]) == 0, f"{tag} publisher connack")
    payload = f"qos1 {tag} {time.time()}".encode()
    info = pub.c.publish("a/c", payload, qos=1)
    _, mid, rc = pub.event("puback")
    check(mid == info.mid and code(rc) == 0, f"{tag} puback {mid} {rc}")
    got = sub.message()
    check(got[:2] == ("a/c", payload), f"{tag} client publish delivered {got}")
    hist = get("/history?topic=a/c")
    check(any(payload.decode() in json.dumps(m) for m in hist.get("messages", [])), f"{tag} a/c in the history {hist}")
    # Keep-alive of 2 s: two ping rounds (past 1.5 x 2 s) and still connected.
    deadline = time.time() + TIMEOUT
    while sub.pingresps < 2 and time.time() < deadline:
        try:
            ev = sub.events.get(timeout=0.2)
            check(ev[0] != "disconnect", f"{tag} closed during keep-alive {ev}")
        except queue.Empty:
            pass
    check(sub.pingresps >= 2, f"{tag} pings answered: {sub.pingresps}")
    pub.stop()
    sub.stop()


def refusals():
    check(raw(raw_connect(6)) == b"\x20\x02\x00\x01", "protocol level 6: CONNACK 0x01")
    back = raw(raw_connect(5, b"i" * 200, props=b"\x00"))
    check(back[:1] == b"\x20" and back[3] == 0x85, f"v5 client id over the limit: {back.hex()}")
    back = raw(raw_connect(5, props=b"\x00") * 2)
    check(back[:1] == b"\x20" and back[3] == 0, f"first CONNECT accepted: {back.hex()}")
    rest = back[2 + back[1]:]
    check(rest[:1] == b"\xe0" and rest[2] == 0x82, f"second CONNECT: DISCONNECT 0x82, not {back.hex()}")


def jwt_mode(keydir):
    import jwt

    with open(os.path.join(keydir, "secret"), "rb") as f:
        secret = f.read().rstrip(b"\n")
    claims = {"sub": "dev1", "exp": int(time.time()) + 60, "topics": ["a/*"]}
    good = jwt.encode(claims, secret, algorithm="HS256")
    forged = jwt.encode(claims, b"another secret of at least 32 bytes!!", algorithm="HS256")
    for version in (mqtt.MQTTv311, mqtt.MQTTv5):
        v5 = version == mqtt.MQTTv5
        tag = "v5" if v5 else "v3"
        c = Client(version, f"ok-{tag}", password=good)
        check(code(c.connack()[0]) == 0, f"{tag} token accepted")
        check(c.subscribe([("a/x", 0), ("b/x", 0)]) == [0, 0x87 if v5 else 0x80], f"{tag} ACL")
        c.stop()
        # paho reports a 3.1.1 return code as its 5.0 reason code (4 as
        # 0x86, 5 as 0x87), a one-to-one mapping.
        for password, want in ((None, 0x86), (forged, 0x87)):
            c = Client(version, f"no-{tag}", password=password)
            rc = c.connack()[0]
            check(code(rc) == want, f"{tag} refused {password is None}: {rc}")
            c.c.loop_stop()


if mode == "basic":
    basic(mqtt.MQTTv311)
    basic(mqtt.MQTTv5)
    refusals()
elif mode == "jwt":
    jwt_mode(sys.argv[4])
else:
    check(False, f"mode {mode}")
print("OK", flush=True)
