"""Eclipse paho-mqtt (2.1.0) clients, MQTT 3.1.1 and 5.0, against a
`megaconn server --protocol mqtt`.

usage: mqtt_paho.py PORT ADMIN_ADDR basic
         both versions: CONNACK (v5: QoS 2 and retain available, i.e.
         not announced, wildcards yes, shared yes); SUBSCRIBE a/+ (QoS 1)
         and # (QoS 2, granted 2); an admin POST /publish to $SYS/x then a/b: a/b arrives
         first (# does not match $SYS/x); a QoS 1 PUBLISH to a/c gets its
         PUBACK, reaches the subscriber and is in the topic's history (the
         admin publish path every protocol's subscribers are fed from);
         a refused subscription ("a b") with its code beside two granted
         ($share/g/a, a/ok); a
         2 s keep-alive kept by two PINGREQ/PINGRESP rounds; a raw CONNECT
         of protocol level 6 answered CONNACK 0x01 and a v5 client id over
         128 bytes CONNACK 0x85; a second CONNECT answered DISCONNECT 0x82.
       mqtt_paho.py PORT ADMIN_ADDR jwt KEYDIR
         (--auth jwt, HS256 secret in KEYDIR) both versions: the token as
         password is accepted and its topics claim (a/*) is the ACL (a/x
         subscribed, b/x refused 0x87 / 0x80); no password: CONNACK 4 /
         0x86; a token by another secret: 5 / 0x87 (paho shows 3.1.1's
         return codes as the 5.0 ones).
       mqtt_paho.py PORT ADMIN_ADDR qos
         both versions: a subscriber of q/1 (QoS 1), q/2 (QoS 2) and q/#
         (QoS 0) gets a publisher's QoS 0, 1 and 2 messages each once, at
         min(publish, highest granted) QoS, paho acknowledging them (PUBACK;
         PUBREC, PUBREL, PUBCOMP); the publisher's QoS 1 and 2 publishes
         complete (PUBACK; PUBREC, PUBREL, PUBCOMP).
       mqtt_paho.py PORT ADMIN_ADDR retained
         both versions: retained r/a (QoS 1), r/b/c (QoS 0) and $SYS/r (the
         application's: clients may not publish to $SYS) are
         delivered to a new subscription with the retain flag (r/+ gets
         r/a; # gets r/a and r/b/c, not $SYS/r; $SYS/+ gets $SYS/r), at the
         lower of their QoS and the granted one; an empty retained publish
         clears r/a; a live message is delivered with retain 0. v5 only:
         Retain Handling 2 gets none, 1 none on a repeated subscription, 0
         them again; Retain As Published keeps the flag on a live message.
         A marker message published after each subscription proves what
         did not come (the retained answer precedes it).
       mqtt_paho.py PORT ADMIN_ADDR will
         both versions: a paho client with a will (QoS 1) killed with
         SIGKILL: the will reaches a subscriber; one that disconnects
         cleanly: no will (a marker proves it); a raw client silent past
         its 1 s keep-alive: its will; v5 DISCONNECT 0x04: its will.
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

    def __init__(self, version, name, keepalive=30, password=None, will=None):
        self.version = version
        self.c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=name, protocol=version)
        if will is not None:
            self.c.will_set(*will)
        self.events = queue.Queue()
        self.messages = queue.Queue()
        self.pingresps = 0
        self.c.on_connect = lambda c, u, flags, rc, props: self.events.put(("connack", rc, props))
        self.c.on_disconnect = lambda c, u, flags, rc, props: self.events.put(("disconnect", rc, props))
        self.c.on_subscribe = lambda c, u, mid, rcs, props: self.events.put(("suback", mid, rcs))
        self.c.on_message = lambda c, u, m: self.messages.put((m.topic, m.payload, m.qos, m.retain))
        self.c.on_publish = lambda c, u, mid, rc, props: self.events.put(("puback", mid, rc))
        self.c.on_unsubscribe = lambda c, u, mid, rcs, props: self.events.put(("unsuback", mid, rcs))
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

    def done(self, info):
        """Wait until the publish `info` completed (PUBACK, or PUBCOMP for
        QoS 2; paho reports a QoS 0 one once written); its reason code."""
        while True:
            _, mid, rc = self.event("puback")
            if mid == info.mid:
                return code(rc)

    def unsubscribe(self, topics):
        _, mid = self.c.unsubscribe(topics)
        while self.event("unsuback")[1] != mid:
            pass

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


def closed(reason):
    """Connections the server closed under `reason` so far (/stats)."""
    return get("/stats").get("close_reasons", {}).get(reason, 0)


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
        check(not hasattr(props, "MaximumQoS") and not hasattr(props, "RetainAvailable"), f"v5 capabilities {props}")
        check(props.WildcardSubscriptionAvailable == 1 and props.SharedSubscriptionAvailable == 1, f"v5 wildcards {props}")
    check(sub.subscribe([("a/+", 1), ("#", 2)]) == [1, 2], f"{tag} granted QoS")
    refused = sub.subscribe([("$share/g/a", 0), ("a b", 0), ("a/ok", 0)])
    check(refused == ([0, 0x8F, 0] if v5 else [0, 0x80, 0]), f"{tag} refused subscriptions {refused}")
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


def marker(sub, pub, topic):
    """Publish a marker on `topic` and collect every message `sub` got
    before it (without the marker)."""
    pub.c.publish(topic, b"marker", qos=0)
    got = []
    while True:
        m = sub.message()
        if m[0] == topic and m[1] == b"marker":
            return got
        got.append(m)


def qos_mode(version):
    tag = "v5" if version == mqtt.MQTTv5 else "v3"
    sub = Client(version, f"qsub-{tag}")
    check(code(sub.connack()[0]) == 0, f"{tag} connack")
    check(sub.subscribe([("q/1", 1), ("q/2", 2), ("q/#", 0)]) == [1, 2, 0], f"{tag} granted")
    pub = Client(version, f"qpub-{tag}")
    check(code(pub.connack()[0]) == 0, f"{tag} pub connack")
    sent = [("q/1", 0), ("q/1", 1), ("q/1", 2), ("q/2", 0), ("q/2", 1), ("q/2", 2), ("q/0", 2)]
    for i, (topic, q) in enumerate(sent):
        info = pub.c.publish(topic, f"{tag} {i}".encode(), qos=q)
        check(pub.done(info) == 0, f"{tag} publish {i} completed")
    got = marker(sub, pub, "q/end")
    # The QoS 2 one may come after the marker (paho hands it over at its
    # PUBREL): wait for it.
    while len(got) < len(sent):
        got.append(sub.message())
    want = [(topic, f"{tag} {i}".encode(), min(q, {"q/1": 1, "q/2": 2}.get(topic, 0)), False) for i, (topic, q) in enumerate(sent)]
    # In any order: paho hands a QoS 2 message over at its PUBREL, after
    # a QoS 0 one sent behind it may have been.
    check(sorted(got) == sorted(want), f"{tag} deliveries {got} != {want}")
    pub.stop()
    sub.stop()


def retained_mode(version):
    from paho.mqtt.subscribeoptions import SubscribeOptions

    v5 = version == mqtt.MQTTv5
    tag = "v5" if v5 else "v3"
    pub = Client(version, f"rpub-{tag}")
    check(code(pub.connack()[0]) == 0, f"{tag} connack")
    for topic, body, q in ((f"r{tag}/a", b"A", 1), (f"r{tag}/b/c", b"BC", 0)):
        check(pub.done(pub.c.publish(topic, body, qos=q, retain=True)) == 0, f"{tag} retained {topic}")
    check(post(f"/publish?topic=$SYS/r{tag}&retain=1", b"S")[0] == 200, f"{tag} the application retains $SYS/r{tag}")
    sub = Client(version, f"rsub-{tag}")
    check(code(sub.connack()[0]) == 0, f"{tag} sub connack")

    def retained(subs, want, what):
        sub.subscribe(subs)
        got = marker(sub, pub, f"r{tag}/end")
        check(sorted(got) == sorted(want), f"{tag} {what}: {got} != {want}")

    # The marker subscription first (its own retained: none).
    retained([(f"r{tag}/end", 0)], [], "marker")
    retained([(f"r{tag}/+", 2)], [(f"r{tag}/a", b"A", 1, True)], "r/+ at QoS 2 gets r/a at its QoS 1")
    retained([("#", 0)], [(f"r{tag}/a", b"A", 0, True), (f"r{tag}/b/c", b"BC", 0, True)], "# gets no $ topic")
    # `$SYS/+`: the application's, not the broker's own `$SYS/broker/...`.
    retained([("$SYS/+", 1)], [(f"$SYS/r{tag}", b"S", 0, True)], "$SYS/+ gets it")
    sub.unsubscribe(["#", "$SYS/+", f"r{tag}/+"])
    pub.done(pub.c.publish(f"r{tag}/a", b"", qos=1, retain=True))
    # Its PUBACK comes once the server took it, before it reached every
    # worker's subscribers: the marker behind it (same path, in order)
    # shows it was routed, so the new subscription below cannot get it
    # live, only as retained (and it must not be).
    check(marker(sub, pub, f"r{tag}/end") == [], f"{tag} nothing but the marker while subscribed to it alone")
    retained([(f"r{tag}/+", 1)], [], "cleared")
    pub.done(pub.c.publish(f"r{tag}/live", b"L", qos=1, retain=True))
    got = marker(sub, pub, f"r{tag}/end")
    check(got == [(f"r{tag}/live", b"L", 1, False)], f"{tag} a live retained message has retain 0: {got}")
    if v5:
        topic = f"r{tag}/b/c"
        for handling, again, want in ((2, False, []), (1, False, [(topic, b"BC", 0, True)]), (1, True, []), (0, True, [(topic, b"BC", 0, True)])):
            if not again:
                sub.unsubscribe(topic)
            retained([(topic, SubscribeOptions(qos=1, retainHandling=handling))], want, f"retain handling {handling} again={again}")
        sub.unsubscribe(topic)
        retained([(f"r{tag}/rap", SubscribeOptions(qos=1, retainAsPublished=True))], [], "rap subscription")
        pub.done(pub.c.publish(f"r{tag}/rap", b"R", qos=1, retain=True))
        got = marker(sub, pub, f"r{tag}/end")
        check(got == [(f"r{tag}/rap", b"R", 1, True)], f"retain as published keeps the flag: {got}")
    # Leave no retained message to the other version's run.
    for topic in (f"r{tag}/b/c", f"r{tag}/live", f"r{tag}/rap"):
        pub.done(pub.c.publish(topic, b"", qos=1, retain=True))
    check(post(f"/publish?topic=$SYS/r{tag}&retain=1")[0] == 200, f"{tag} the application clears $SYS/r{tag}")
    pub.stop()
    sub.stop()


def will_mode(version):
    import signal
    import subprocess

    v5 = version == mqtt.MQTTv5
    tag = "v5" if v5 else "v3"
    watcher = Client(version, f"watch-{tag}")
    check(code(watcher.connack()[0]) == 0, f"{tag} connack")
    check(watcher.subscribe([(f"will{tag}/#", 1)]) == [1], f"{tag} watcher")
    # A client killed: its will.
    child = subprocess.Popen([sys.executable, "-c", KILLED, str(port), str(version), f"will{tag}/killed"], stdout=subprocess.PIPE, text=True)
    check(child.stdout.readline().strip() == "connected", f"{tag} the killed client connected")
    child.send_signal(signal.SIGKILL)
    child.wait()
    got = watcher.message()
    check(got == (f"will{tag}/killed", b"bye", 1, False), f"{tag} will of the killed client: {got}")
    # A clean DISCONNECT: none.
    clean = Client(version, f"clean-{tag}", will=(f"will{tag}/clean", b"never", 1))
    check(code(clean.connack()[0]) == 0, f"{tag} clean connack")
    before = closed("mqtt_disconnect")
    clean.stop()
    # The server saw the DISCONNECT before the marker goes (a will it
    # sent wrongly would come before the marker).
    deadline = time.time() + TIMEOUT
    while closed("mqtt_disconnect") == before:
        check(time.time() < deadline, f"{tag} the clean DISCONNECT was never counted")
        time.sleep(0.05)
    got = marker(watcher, watcher, f"will{tag}/end")
    check(got == [], f"{tag} no will after a clean DISCONNECT: {got}")
    # Keep-alive expiry (a raw client: paho would ping): its will.
    will_flags = 0x02 | 0x04 | 0x08  # clean, will, will QoS 1
    props = b"\x00" if v5 else b""
    payload = b"\x00\x01k" + props + (len(f"will{tag}/silent")).to_bytes(2, "big") + f"will{tag}/silent".encode() + b"\x00\x03bye"
    body = b"\x00\x04MQTT" + bytes([5 if v5 else 4, will_flags, 0x00, 0x01]) + props + payload
    s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    s.sendall(bytes([0x10, len(body)]) + body)
    check(s.recv(64)[:1] == b"\x20", f"{tag} raw connack")
    got = watcher.message()
    check(got == (f"will{tag}/silent", b"bye", 1, False), f"{tag} will after the keep-alive: {got}")
    s.close()
    if v5:
        s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        body = body.replace(b"\x00\x01k", b"\x00\x01d").replace(b"\x00\x01", b"\x00\x1e", 1)
        s.sendall(bytes([0x10, len(body)]) + body)
        check(s.recv(64)[:1] == b"\x20", "v5 raw connack")
        s.sendall(b"\xe0\x01\x04")
        got = watcher.message()
        check(got == (f"will{tag}/silent", b"bye", 1, False), f"will after DISCONNECT 0x04: {got}")
        s.close()
    watcher.stop()


# The client killed in will mode: connects with a will, says so, waits.
KILLED = '''
import sys, time
import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
port, version, topic = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="killed", protocol=version)
c.will_set(topic, b"bye", 1)
c.on_connect = lambda *a: print("connected", flush=True)
c.connect("127.0.0.1", port, keepalive=60)
c.loop_forever()
'''


if mode == "basic":
    basic(mqtt.MQTTv311)
    basic(mqtt.MQTTv5)
    refusals()
elif mode in ("qos", "retained", "will"):
    f = {"qos": qos_mode, "retained": retained_mode, "will": will_mode}[mode]
    f(mqtt.MQTTv311)
    f(mqtt.MQTTv5)
elif mode == "jwt":
    jwt_mode(sys.argv[4])
else:
    check(False, f"mode {mode}")
print("OK", flush=True)
