"""Eclipse paho-mqtt (2.1.0, MQTT 5.0) over WebSocket (transport
"websockets", path /mqtt) against `megaconn server --protocol ws
--mqtt-authz-http` with tests/peers/auth_http_backend.py as the backend.

usage: mqtt_ws_authz.py PORT
  a subscriber's SUBSCRIBE of ok/#, no/# and slow/# is granted 1, refused
  0x87, granted 1; a publisher's QoS 1 publishes to slow/1 (answered by
  the backend after 3 s), ok/1 and no/1, sent back to back, complete in
  that order with 0, 0 and 0x87; the subscriber gets slow/1 then ok/1 and
  nothing of no/1 before a marker published after them.
Prints 'OK' when every check held.
"""
import sys

from mqtt_peer import Client, check

port = int(sys.argv[1])


def client(name):
    c = Client(port, name, login=(name, "x"), transport="websockets")
    check(c.connack()[1] == 0, f"{name} connack")
    return c


def code(rc):
    return int(getattr(rc, "value", rc))


sub = client("wsub")
_, mid = sub.c.subscribe([("ok/#", 1), ("no/#", 1), ("slow/#", 1)])
_, got, rcs = sub.event("suback")
check(got == mid and [code(r) for r in rcs] == [1, 0x87, 1], f"granted {[code(r) for r in rcs]}")
pub = client("wpub")
mids = [pub.c.publish(t, t.encode(), qos=1).mid for t in ("slow/1", "ok/1", "no/1")]
acks = [pub.event("puback") for _ in mids]
check([a[1] for a in acks] == mids, f"acknowledged in order: {[a[1] for a in acks]} for {mids}")
check([code(a[2]) for a in acks] == [0, 0, 0x87], f"reason codes {[code(a[2]) for a in acks]}")
# A marker behind them on the same connection: whatever the subscriber
# was to hear has come before it.
pub.c.publish("ok/marker", b"marker", qos=1)
heard = [m.topic for m in sub.until_marker("ok/marker")]
check(heard == ["slow/1", "ok/1"], f"heard {heard}: slow/1 then ok/1, nothing of no/1")
for c in (sub, pub):
    c.stop()
print("OK", flush=True)
