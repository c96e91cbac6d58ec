"""Eclipse paho-mqtt (2.1.0, MQTT 5.0) over WebSocket (transport
"websockets", path /mqtt) against `megaconn server --protocol ws
--mqtt-authz-http` with tests/peers/auth_http_backend.py as the backend.

usage: mqtt_ws_authz.py PORT
  a subscriber's SUBSCRIBE of ok/#, no/# and slow/# is granted 1, refused
  0x87, granted 1; a publisher's QoS 1 publishes to slow/1 (answered by
  the backend after 3 s), ok/1 and no/1, sent back to back, complete in
  that order with 0, 0 and 0x87; the subscriber gets slow/1 then ok/1 and
  nothing of no/1.
Prints 'OK' when every check held.
"""
import queue
import sys
import time

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

port = int(sys.argv[1])
TIMEOUT = 20


def check(cond, what):
    if not cond:
        print(f"FAIL {what}", flush=True)
        sys.exit(1)


def code(rc):
    return int(getattr(rc, "value", rc))


class Client:
    """A paho v5 client over WebSocket whose callbacks land in queues."""

    def __init__(self, name):
        self.c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=name, protocol=mqtt.MQTTv5, transport="websockets")
        self.c.ws_set_options(path="/mqtt")
        self.c.username_pw_set(name, "x")
        self.events = queue.Queue()
        self.messages = queue.Queue()
        self.c.on_connect = lambda c, u, flags, rc, props: self.events.put(("connack", rc))
        self.c.on_disconnect = lambda c, u, flags, rc, props: self.events.put(("disconnect", rc))
        self.c.on_subscribe = lambda c, u, mid, rcs, props: self.events.put(("suback", mid, rcs))
        self.c.on_publish = lambda c, u, mid, rc, props: self.events.put(("puback", mid, rc))
        self.c.on_message = lambda c, u, m: self.messages.put(m.topic)
        self.c.connect_async("127.0.0.1", port, keepalive=30)
        self.c.loop_start()

    def event(self, kind):
        deadline = time.time() + TIMEOUT
        while True:
            ev = self.events.get(timeout=max(0.1, deadline - time.time()))
            if ev[0] == kind:
                return ev
            check(ev[0] != "disconnect", f"disconnected ({ev}) waiting for {kind}")


sub = Client("wsub")
check(code(sub.event("connack")[1]) == 0, "subscriber connack")
_, mid = sub.c.subscribe([("ok/#", 1), ("no/#", 1), ("slow/#", 1)])
_, got, rcs = sub.event("suback")
check(got == mid and [code(r) for r in rcs] == [1, 0x87, 1], f"granted {[code(r) for r in rcs]}")
pub = Client("wpub")
check(code(pub.event("connack")[1]) == 0, "publisher connack")
mids = [pub.c.publish(t, t.encode(), qos=1).mid for t in ("slow/1", "ok/1", "no/1")]
acks = [pub.event("puback") for _ in mids]
check([a[1] for a in acks] == mids, f"acknowledged in order: {[a[1] for a in acks]} for {mids}")
check([code(a[2]) for a in acks] == [0, 0, 0x87], f"reason codes {[code(a[2]) for a in acks]}")
heard = [sub.messages.get(timeout=TIMEOUT) for _ in range(2)]
check(heard == ["slow/1", "ok/1"], f"heard {heard}")
try:
    extra = sub.messages.get(timeout=0.5)
    check(False, f"a refused publish reached the subscriber: {extra}")
except queue.Empty:
    pass
for c in (sub, pub):
    c.c.disconnect()
    c.c.loop_stop()
print("OK", flush=True)
