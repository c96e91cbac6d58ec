"""Eclipse paho-mqtt (2.1.0) over WebSocket (transport="websockets", the
`mqtt` subprotocol, path /mqtt), MQTT 3.1.1 and 5.0, against a
`megaconn server --protocol ws`, with a JSON WebSocket subscriber of the
same port (Python websockets) beside it.

usage: mqtt_ws_paho.py PORT ADMIN_ADDR
  both versions: a paho subscriber of w/+ (QoS 2) gets a paho publisher's
  QoS 0, 1 and 2 messages to w/a once each at their QoS, the publisher's
  QoS 1 and 2 publishes complete (PUBACK; PUBREC, PUBREL, PUBCOMP); a
  JSON WebSocket client subscribed to w/a gets each of them too (its
  `data`); an admin POST /publish to w/a reaches both.
Prints 'OK' when every check held.
"""
import asyncio
import json
import queue
import sys
import threading
import time
import urllib.request

import paho.mqtt.client as mqtt
import websockets
from paho.mqtt.enums import CallbackAPIVersion

port, admin = int(sys.argv[1]), sys.argv[2]
TIMEOUT = 20


def check(cond, what):
    if not cond:
        print(f"FAIL {what}", flush=True)
        sys.exit(1)


def code(rc):
    return int(getattr(rc, "value", rc))


class Client:
    """A paho client over WebSocket whose callbacks land in queues."""

    def __init__(self, version, name):
        self.c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=name, protocol=version, transport="websockets")
        self.c.ws_set_options(path="/mqtt")
        self.events = queue.Queue()
        self.messages = queue.Queue()
        self.c.on_connect = lambda c, u, flags, rc, props: self.events.put(("connack", rc))
        self.c.on_disconnect = lambda c, u, flags, rc, props: self.events.put(("disconnect", rc))
        self.c.on_subscribe = lambda c, u, mid, rcs, props: self.events.put(("suback", mid, rcs))
        self.c.on_publish = lambda c, u, mid, rc, props: self.events.put(("puback", mid, rc))
        self.c.on_message = lambda c, u, m: self.messages.put((m.topic, m.payload, m.qos))
        self.c.connect_async("127.0.0.1", port, keepalive=30)
        self.c.loop_start()

    def event(self, kind):
        deadline = time.time() + TIMEOUT
        while True:
            ev = self.events.get(timeout=max(0.1, deadline - time.time()))
            if ev[0] == kind:
                return ev
            check(ev[0] != "disconnect", f"disconnected ({ev}) waiting for {kind}")

    def done(self, info):
        while True:
            _, mid, rc = self.event("puback")
            if mid == info.mid:
                return code(rc)

    def stop(self):
        self.c.disconnect()
        self.c.loop_stop()


class JsonSubscriber:
    """A plain WebSocket client of the same port, subscribed in its
    Upgrade (?subscribe=T); its pushes' data land in a queue."""

    def __init__(self, topic):
        self.data = queue.Queue()
        self.ready = threading.Event()
        threading.Thread(target=lambda: asyncio.run(self.run(topic)), daemon=True).start()
        check(self.ready.wait(TIMEOUT), "ws subscriber connected")

    async def run(self, topic):
        async with websockets.connect(f"ws://127.0.0.1:{port}/?subscribe={topic}") as ws:
            self.ready.set()
            async for m in ws:
                v = json.loads(m)
                if "data" in v and v.get("topic") == topic:
                    self.data.put(v["data"])


def post(path, body):
    req = urllib.request.Request(f"http://{admin}{path}", data=body, method="POST", headers={"Content-Type": "application/octet-stream"})
    with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
        return r.status


def subscribed(topic):
    """Whether some connection follows `topic` (GET /connections)."""
    with urllib.request.urlopen(f"http://{admin}/connections", timeout=TIMEOUT) as r:
        return f'"{topic}"' in r.read().decode()


def run(version, json_sub):
    tag = "v5" if version == mqtt.MQTTv5 else "v3"
    sub = Client(version, f"wsub-{tag}")
    check(code(sub.event("connack")[1]) == 0, f"{tag} connack")
    _, mid = sub.c.subscribe([("w/+", 2)])
    _, got, rcs = sub.event("suback")
    check(got == mid and [code(r) for r in rcs] == [2], f"{tag} granted {rcs}")
    pub = Client(version, f"wpub-{tag}")
    check(code(pub.event("connack")[1]) == 0, f"{tag} pub connack")
    for q in (0, 1, 2):
        body = f"{tag} qos {q}".encode()
        check(pub.done(pub.c.publish("w/a", body, qos=q)) == 0, f"{tag} publish QoS {q} completed")
        m = sub.messages.get(timeout=TIMEOUT)
        check(m == ("w/a", body, q), f"{tag} paho got {m}")
        d = json_sub.data.get(timeout=TIMEOUT)
        check(d == body.decode(), f"{tag} ws JSON subscriber got {d!r}")
    check(post("/publish?topic=w/a", f"admin {tag}".encode()) == 200, "admin publish")
    check(sub.messages.get(timeout=TIMEOUT) == ("w/a", f"admin {tag}".encode(), 0), f"{tag} admin publish to paho")
    check(json_sub.data.get(timeout=TIMEOUT) == f"admin {tag}", f"{tag} admin publish to the ws subscriber")
    pub.stop()
    sub.stop()


json_sub = JsonSubscriber("w/a")
deadline = time.time() + TIMEOUT
while not subscribed("w/a"):
    check(time.time() < deadline, "the ws subscriber never subscribed")
    time.sleep(0.05)
for v in (mqtt.MQTTv311, mqtt.MQTTv5):
    run(v, json_sub)
print("OK", flush=True)
