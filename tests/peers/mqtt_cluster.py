"""MQTT across a megaconn cluster (two nodes linked by nats-server), with
Eclipse paho-mqtt 2.1.0: what a publisher on node A sends reaches node B's
MQTT clients as it would on one node.

usage: mqtt_cluster.py PORT_A ADMIN_A PORT_B ADMIN_B
  - On B, s subscribes to cl/x at QoS 1 and w to the wildcard cw/# at QoS
    1 with identifier 5 (B then takes every topic's messages). Probes from
    A at QoS 0 until each gets one say B follows them.
  - A publishes cl/x at QoS 1, retained, with a Content Type and a User
    Property: s gets it at QoS 1 with both (live: retain flag 0).
    A publishes cw/y likewise: w gets it at QoS 1, with both and
    identifier 5.
  - B kept the retained message: a later subscriber on B gets cl/x with
    the retain flag and its properties.
  - d (Session Expiry 300) subscribes on B to cq/1, the only client of
    that topic anywhere, and drops: B's kept session now holds the topic
    and B keeps following it. QoS 1 probes from A until B queues one, then
    cq/1 "queued" with the properties: d comes back to B and gets it.
Probes carry the payload 'probe' and are skipped in every check.
Prints 'OK' when every check held.
"""
import queue
import sys
import time

from mqtt_peer import TIMEOUT, Client, PacketTypes, check, props, stats, stats_until

port_a, admin_a, port_b, admin_b = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
P = dict(ContentType="text/plain", UserProperty=[("k", "v")])


def client(port, name, **kw):
    c = Client(port, name, **kw)
    check(c.connack()[1] == 0, f"{name} connack")
    return c


def real(c):
    """The next message that is not a probe."""
    deadline = time.time() + TIMEOUT
    while True:
        m = c.messages.get(timeout=max(0.1, deadline - time.time()))
        if m.payload != b"probe":
            return m


def reached(pub, topic, sub):
    """Probe `topic` from `pub` until `sub` (on the other node) gets one."""
    deadline = time.time() + TIMEOUT
    while True:
        pub.publish(topic, b"probe", qos=0)
        try:
            if sub.messages.get(timeout=0.2).payload == b"probe":
                return
        except queue.Empty:
            pass
        check(time.time() < deadline, f"{topic} from node A never reached node B")


def queued_on_b():
    return stats(admin_b).get("mqtt_sessions", {}).get("queued", 0)


def has(m, **want):
    return all(getattr(m.properties, k, None) == v for k, v in want.items())


a = client(port_a, "pub")
s = client(port_b, "s")
check(s.subscribe("cl/x", 1) == [1], "s granted")
w = client(port_b, "w")
check(w.subscribe("cw/#", 1, props=props(PacketTypes.SUBSCRIBE, SubscriptionIdentifier=5)) == [1], "w granted")
reached(a, "cl/x", s)
reached(a, "cw/probe", w)

a.publish("cl/x", b"one", qos=1, props=props(PacketTypes.PUBLISH, **P), retain=True)
m = real(s)
check((m.topic, m.payload, m.qos, m.retain) == ("cl/x", b"one", 1, False), f"s gets cl/x at QoS 1: {m.topic} {m.payload} {m.qos} {m.retain}")
check(has(m, **P), f"with its properties: {m.properties}")
a.publish("cw/y", b"two", qos=1, props=props(PacketTypes.PUBLISH, **P))
m = real(w)
check((m.topic, m.payload, m.qos) == ("cw/y", b"two", 1), f"w gets cw/y at QoS 1 through its wildcard: {m.topic} {m.payload} {m.qos}")
check(has(m, SubscriptionIdentifier=[5], **P), f"with its properties and identifier 5: {m.properties}")

stats_until(admin_b, "B keeps cl/x retained", lambda st: st.get("mqtt_retained", {}).get("messages") == 1)
late = client(port_b, "late")
check(late.subscribe("cl/x", 1) == [1], "late granted")
m = real(late)
check((m.payload, m.retain) == (b"one", True), f"a later subscriber on B gets the retained cl/x: {m.payload} {m.retain}")
check(has(m, **P), f"retained with its properties: {m.properties}")

d = Client(port_b, "d", clean=False, connect_props=props(PacketTypes.CONNECT, SessionExpiryInterval=300))
check(d.connack()[1] == 0, "d connack")
check(d.subscribe("cq/1", 1) == [1], "d granted")
reached(a, "cq/1", d)
d.drop()
stats_until(admin_b, "d's session kept", lambda st: st.get("mqtt_sessions", {}).get("kept") == 1)
# B follows cq/1 for the kept session: a QoS 1 probe from A gets queued.
before, deadline = queued_on_b(), time.time() + TIMEOUT
while queued_on_b() == before:
    check(time.time() < deadline, "nothing published on A reached d's kept session on B")
    a.publish("cq/1", b"probe", qos=1)
    time.sleep(0.1)
before = queued_on_b()
a.publish("cq/1", b"queued", qos=1, props=props(PacketTypes.PUBLISH, **P))
stats_until(admin_b, "cq/1 queued for d", lambda st: st.get("mqtt_sessions", {}).get("queued", 0) > before)
d = Client(port_b, "d", clean=False, connect_props=props(PacketTypes.CONNECT, SessionExpiryInterval=300))
check(d.connack()[:2] == (True, 0), "d's session present on B")
m = real(d)
check((m.topic, m.payload, m.qos) == ("cq/1", b"queued", 1), f"d gets what A published while it was away: {m.topic} {m.payload}")
check(has(m, **P), f"queued with its properties: {m.properties}")

for x in (a, s, w, late, d):
    x.stop()
print("OK", flush=True)
