"""MQTT sessions moving between the nodes of a megaconn cluster (two
nodes linked by nats-server), with Eclipse paho-mqtt 2.1.0: a client that
comes back to the other node resumes its session there.

usage: mqtt_move.py PORT_A ADMIN_A PORT_B ADMIN_B
  - k (3.1.1, Clean Session 0) subscribes on A to mv/k at QoS 1 and
    drops: A keeps its session. A publisher on A sends mv/k "one" and
    "two" at QoS 1: queued on A.
  - k comes back to B: session present, and it gets "one" then "two"
    without subscribing again. A handed the session over and keeps none.
  - o (5.0, Session Expiry 300) subscribes on A to mv/o at QoS 1 and
    stays connected. o connects to B with Clean Start 0: A's connection
    is taken over (closed), B answers session present, and what
    A publishes to mv/o next reaches o on B (QoS 0 probes from A until one
    does say B follows the topic; they are skipped).
Prints 'OK' when every check held.
"""
import queue
import sys
import time

from mqtt_peer import Client, PacketTypes, check, mqtt, props, stats_until

port_a, admin_a, port_b, admin_b = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]


def sessions(admin, **want):
    return stats_until(admin, f"{admin}: mqtt_sessions {want}", lambda st: all(st.get("mqtt_sessions", {}).get(k) == v for k, v in want.items()))


pub = Client(port_a, "pub")
check(pub.connack()[1] == 0, "pub connack")

k = Client(port_a, "k", version=mqtt.MQTTv311, clean=False)
check(k.connack()[:2] == (False, 0), "k connack on A, a new session")
check(k.subscribe("mv/k", 1) == [1], "k granted on A")
k.drop()
sessions(admin_a, kept=1)
pub.publish("mv/k", b"one", qos=1)
pub.publish("mv/k", b"two", qos=1)
sessions(admin_a, queued=2)

k = Client(port_b, "k", version=mqtt.MQTTv311, clean=False)
check(k.connack()[:2] == (True, 0), "k's session present on B")
got = [k.messages.get(timeout=20) for _ in range(2)]
check([(m.topic, m.payload, m.qos) for m in got] == [("mv/k", b"one", 1), ("mv/k", b"two", 1)], f"k gets what A queued, in order: {[(m.topic, m.payload) for m in got]}")
sessions(admin_a, kept=0, handed_over=1)
sessions(admin_b, moved_in=1)

expiry = props(PacketTypes.CONNECT, SessionExpiryInterval=300)
o = Client(port_a, "o", clean=False, connect_props=expiry)
o.c.reconnect_delay_set(60, 120)
check(o.connack()[:2] == (False, 0), "o connack on A")
check(o.subscribe("mv/o", 1) == [1], "o granted on A")
o2 = Client(port_b, "o", clean=False, connect_props=expiry)
check(o2.connack()[:2] == (True, 0), "o's session present on B, taken from its live connection on A")
# A's DISCONNECT 0x8E carries a Reason String: paho 2.1 reads a
# DISCONNECT's reason only past 2 bytes of it (tests/e2e/cluster.rs reads
# the bytes themselves).
_, rc = o.event("disconnect")
check(int(getattr(rc, "value", rc)) == 0x8E, f"o on A: DISCONNECT 0x8E (Session taken over), not {rc}")
o.c.loop_stop()
sessions(admin_a, handed_over=2, online=1)
sessions(admin_b, moved_in=2)
# B follows mv/o once the session came: probe from A until o on B gets one.
deadline = time.time() + 20
while True:
    pub.publish("mv/o", b"probe", qos=0)
    try:
        if o2.messages.get(timeout=0.2).payload == b"probe":
            break
    except queue.Empty:
        pass
    check(time.time() < deadline, "nothing published on A to mv/o reached o on B")
pub.publish("mv/o", b"three", qos=1)
m = o2.messages.get(timeout=20)
while m.payload == b"probe":
    m = o2.messages.get(timeout=20)
check((m.topic, m.payload, m.qos) == ("mv/o", b"three", 1), f"o on B gets A's next publish: {m.topic} {m.payload} {m.qos}")

for x in (pub, k, o2):
    x.stop()
print("OK", flush=True)
