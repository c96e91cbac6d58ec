"""Eclipse paho-mqtt (2.1.0) persistent sessions and session takeover
against a `megaconn server --protocol mqtt` (run with several workers, so
a reconnect may land on another worker than the one the session left).

usage: mqtt_sessions.py PORT ADMIN_ADDR resume [N=20]
         3.1.1 Clean Session 0 and 5.0 Clean Start 0 with a Session Expiry
         Interval of 60 s: a subscriber of s/VER at QoS 1 disconnects;
         another paho client publishes N QoS 1 messages to it; the
         subscriber reconnects: session present 1, and it gets all N
         exactly once and in order (a marker behind them proves none is
         missing or repeated), without subscribing again.
       mqtt_sessions.py PORT ADMIN_ADDR expiry
         5.0, Session Expiry Interval 1 s: once /stats counts the session
         expired, a reconnect with Clean Start 0 gets session present 0
         and none of the 3 messages published meanwhile.
       mqtt_sessions.py PORT ADMIN_ADDR queue N
         3.1.1, the server's --mqtt-session-queue is N: 3 more than N
         messages published while the subscriber is away; it gets the
         oldest N in order, and /stats counts 3 dropped (reason queue).
       mqtt_sessions.py PORT ADMIN_ADDR clean
         3.1.1: a kept session is discarded by a Clean Session 1 CONNECT
         (session present 0, nothing delivered).
Prints 'OK' when every check held.
"""
import json
import queue
import sys
import time
import urllib.request

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

port, admin, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
TIMEOUT = 20


def check(cond, what):
    if not cond:
        print(f"FAIL {what}", flush=True)
        sys.exit(1)


def stats():
    with urllib.request.urlopen(f"http://{admin}/stats", timeout=TIMEOUT) as r:
        return json.loads(r.read())


def stats_until(what, ok):
    """Poll /stats until `ok(stats)` holds (a condition, not a guess)."""
    deadline = time.time() + TIMEOUT
    while True:
        s = stats()
        if ok(s):
            return s
        check(time.time() < deadline, f"{what}: {json.dumps(s.get('mqtt_sessions'))}")
        time.sleep(0.05)


def kept(n):
    """Wait until the supervisor keeps `n` sessions (the last one's end reached it)."""
    stats_until(f"{n} sessions kept", lambda s: s.get("mqtt_sessions", {}).get("kept") == n)


class Client:
    """A paho client whose callbacks land in queues; `persistent` asks
    for the session to outlive the connection (3.1.1 Clean Session 0;
    5.0 Clean Start 0 and a Session Expiry Interval)."""

    def __init__(self, version, name, persistent, expiry=60):
        self.v5 = version == mqtt.MQTTv5
        kw = {} if self.v5 else {"clean_session": not persistent}
        self.c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=name, protocol=version, **kw)
        self.events = queue.Queue()
        self.messages = queue.Queue()
        self.c.on_connect = lambda c, u, flags, rc, props: self.events.put(("connack", flags, rc))
        self.c.on_subscribe = lambda c, u, mid, rcs, props: self.events.put(("suback", mid, rcs))
        self.c.on_publish = lambda c, u, mid, rc, props: self.events.put(("puback", mid, rc))
        self.c.on_message = lambda c, u, m: self.messages.put((m.topic, m.payload, m.qos))
        if self.v5:
            props = Properties(PacketTypes.CONNECT)
            if persistent:
                props.SessionExpiryInterval = expiry
            self.c.connect_async("127.0.0.1", port, clean_start=not persistent, properties=props)
        else:
            self.c.connect_async("127.0.0.1", port)
        self.c.loop_start()

    def event(self, kind):
        deadline = time.time() + TIMEOUT
        while True:
            ev = self.events.get(timeout=max(0.1, deadline - time.time()))
            if ev[0] == kind:
                return ev

    def connack(self):
        """(session present, reason code) of the CONNACK."""
        _, flags, rc = self.event("connack")
        return flags.session_present, int(getattr(rc, "value", rc))

    def subscribe(self, topic, qos):
        self.c.subscribe(topic, qos)
        self.event("suback")

    def publish(self, topic, body, qos=1):
        info = self.c.publish(topic, body, qos=qos)
        while self.event("puback")[1] != info.mid:
            pass

    def until_marker(self, topic):
        """Every message before the marker on `topic` (without it)."""
        got = []
        while True:
            m = self.messages.get(timeout=TIMEOUT)
            if m[:2] == (topic, b"marker"):
                return got
            got.append(m)

    def stop(self):
        self.c.disconnect()
        self.c.loop_stop()


def away_then_back(version, tag, topic, count, persistent=True, expiry=60):
    """A persistent subscriber of `topic` leaves; `count` QoS 1 messages
    are published; the subscriber's session as it comes back, with a
    publisher to send markers."""
    sub = Client(version, f"sess-{tag}", persistent=True, expiry=expiry)
    check(sub.connack() == (False, 0), f"{tag} first connack: a new session")
    sub.subscribe(topic, 1)
    sub.stop()
    kept(1)
    pub = Client(version, f"pub-{tag}", persistent=False)
    check(sub is not None and pub.connack()[1] == 0, f"{tag} publisher connack")
    for i in range(count):
        pub.publish(topic, f"{i}".encode())
    return pub


def resume_mode(count):
    for n, (version, tag) in enumerate(((mqtt.MQTTv311, "v3"), (mqtt.MQTTv5, "v5"))):
        topic = f"s/{tag}"
        pub = away_then_back(version, tag, topic, count)
        # A PUBACK says the server took a message, not that it reached the
        # session's queue yet: come back once all of them are queued (else
        # the last may go to the resumed connection live, in order but
        # not through the queue this checks).
        stats_until(f"{count} queued", lambda s: s.get("mqtt_sessions", {}).get("queued", 0) >= (n + 1) * count)
        back = Client(version, f"sess-{tag}", persistent=True)
        check(back.connack() == (True, 0), f"{tag} reconnect: session present")
        pub.publish(topic, b"marker")
        got = back.until_marker(topic)
        want = [(topic, f"{i}".encode(), 1) for i in range(count)]
        check(got == want, f"{tag} the {count} queued messages once in order: {got[:5]}...{got[-5:]} ({len(got)})")
        # Clean up: a clean CONNECT discards the session for the next round.
        back.stop()
        kept(1)
        gone = Client(version, f"sess-{tag}", persistent=False)
        check(gone.connack()[0] is False, f"{tag} clean connect: no session")
        gone.stop()
        kept(0)
        pub.stop()


def expiry_mode():
    topic = "e/v5"
    pub = away_then_back(mqtt.MQTTv5, "exp", topic, 3, expiry=1)
    stats_until("the session expired", lambda s: s.get("mqtt_sessions", {}).get("expired", {}).get("expiry", 0) >= 1)
    back = Client(mqtt.MQTTv5, "sess-exp", persistent=True)
    check(back.connack() == (False, 0), "after its expiry: session present 0")
    back.subscribe(topic, 1)
    pub.publish(topic, b"marker")
    check(back.until_marker(topic) == [], "none of the 3 published while it was kept")
    back.stop()
    pub.stop()


def queue_mode(bound):
    topic = "q/v3"
    pub = away_then_back(mqtt.MQTTv311, "queue", topic, bound + 3)
    # Back once the server has queued or dropped every one (a PUBACK says
    # it took a message, not that the session's queue has it yet).
    stats_until("all queued or dropped", lambda s: s.get("mqtt_sessions", {}).get("queued", 0) + s.get("mqtt_sessions", {}).get("queue_dropped", {}).get("queue", 0) >= bound + 3)
    back = Client(mqtt.MQTTv311, "sess-queue", persistent=True)
    check(back.connack() == (True, 0), "session present")
    pub.publish(topic, b"marker")
    got = back.until_marker(topic)
    check(got == [(topic, f"{i}".encode(), 1) for i in range(bound)], f"the oldest {bound}, in order: {got}")
    s = stats()
    check(s["mqtt_sessions"].get("queue_dropped", {}).get("queue") == 3, f"3 dropped: {s['mqtt_sessions']}")
    check(s["mqtt_sessions"]["queued"] == bound, f"{bound} queued: {s['mqtt_sessions']}")
    back.stop()
    pub.stop()


def clean_mode():
    topic = "c/v3"
    pub = away_then_back(mqtt.MQTTv311, "clean", topic, 2)
    back = Client(mqtt.MQTTv311, "sess-clean", persistent=False)
    check(back.connack() == (False, 0), "clean session: session present 0")
    back.subscribe("c/marker", 0)
    pub.publish("c/marker", b"marker")
    check(back.until_marker("c/marker") == [], "nothing of the discarded session")
    s = stats_until("discarded", lambda s: s.get("mqtt_sessions", {}).get("discarded") == 1)
    check(s["mqtt_sessions"]["kept"] == 0, "none kept")
    back.stop()
    pub.stop()


if mode == "resume":
    resume_mode(int(sys.argv[4]) if len(sys.argv) > 4 else 20)
elif mode == "expiry":
    expiry_mode()
elif mode == "queue":
    queue_mode(int(sys.argv[4]))
elif mode == "clean":
    clean_mode()
else:
    check(False, f"unknown mode {mode}")
print("OK", flush=True)
