"""MQTT 5 No Local, subscription identifiers, forwarded PUBLISH properties
and message expiry, with Eclipse paho-mqtt 2.1.0 against a
`megaconn server --protocol mqtt` with several workers.

usage: mqtt_v5props.py PORT ADMIN_ADDR
  - The CONNACK announces Subscription Identifiers Available 1.
  - a subscribes to np/# with No Local and identifier 7; b to np/+
    (identifier 3) and np/x (identifier 4). a publishes to np/x with a
    Payload Format Indicator, Message Expiry 60 s, Content Type, Response
    Topic, Correlation Data and two User Properties: b gets every one of
    them (the expiry as what is left: 59 or 60) and identifiers 3 and 4;
    a does not get its own message (its marker comes first). b publishes
    to np/y: a gets it with identifier 7.
  - c (Receive Maximum 1, acknowledging by hand) gets ex/1 and holds its
    PUBACK; ex/2 with a Message Expiry of 1 s waits behind the window.
    Once its second has passed, c acknowledges ex/1: ex/2 is dropped
    (counted in mqtt_expired_dropped), and only the marker follows.
Prints 'OK' when every check held.
"""
import sys
import time

from paho.mqtt.subscribeoptions import SubscribeOptions

from mqtt_peer import Client, PacketTypes, check, mqtt, props, stats, stats_until

port, admin = int(sys.argv[1]), sys.argv[2]


def connected(name, **kw):
    c = Client(port, name, **kw)
    _, rc, p = c.connack()
    check(rc == 0, f"{name} connack")
    check(getattr(p, "SubscriptionIdentifierAvailable", None) == 1, f"Subscription Identifiers Available 1: {p}")
    c.subscribe(f"mark/{name}", 0)
    return c


def sid(n):
    return props(PacketTypes.SUBSCRIBE, SubscriptionIdentifier=n)


def attrs(m):
    p = m.properties
    return {k: getattr(p, k, None) for k in ("PayloadFormatIndicator", "ContentType", "ResponseTopic", "CorrelationData", "UserProperty", "SubscriptionIdentifier")}


a = connected("a")
b = connected("b")
check(a.subscribe("np/#", 1, props=sid(7), options=SubscribeOptions(qos=1, noLocal=True)) == [1], "a granted")
check(b.subscribe("np/+", 1, props=sid(3)) == [1], "b np/+ granted")
check(b.subscribe("np/x", 1, props=sid(4)) == [1], "b np/x granted")

sent = props(
    PacketTypes.PUBLISH,
    PayloadFormatIndicator=1,
    MessageExpiryInterval=60,
    ContentType="text/plain",
    ResponseTopic="np/reply",
    CorrelationData=b"c1",
    UserProperty=[("k", "v"), ("k", "w")],
)
a.publish("np/x", b"from a", qos=1, props=sent)
a.publish("mark/b", b"marker")
a.publish("mark/a", b"marker")
got_b = b.until_marker("mark/b")
check([m.payload for m in got_b] == [b"from a"], f"b gets a's message once: {[m.payload for m in got_b]}")
m = got_b[0]
want = {
    "PayloadFormatIndicator": 1,
    "ContentType": "text/plain",
    "ResponseTopic": "np/reply",
    "CorrelationData": b"c1",
    "UserProperty": [("k", "v"), ("k", "w")],
    "SubscriptionIdentifier": [3, 4],
}
check(attrs(m) == want, f"every property forwarded, identifiers 3 and 4: {attrs(m)}")
check(getattr(m.properties, "MessageExpiryInterval", None) in (59, 60), f"the expiry left: {m.properties}")
check(a.until_marker("mark/a") == [], "No Local: a does not get its own")

b.publish("np/y", b"from b", qos=1)
b.publish("mark/a", b"marker")
got_a = a.until_marker("mark/a")
check([(x.payload, attrs(x)["SubscriptionIdentifier"]) for x in got_a] == [(b"from b", [7])], f"a gets b's with identifier 7: {got_a}")

# Message expiry behind a full window.
c = Client(port, "c", connect_props=props(PacketTypes.CONNECT, ReceiveMaximum=1))
c.c.manual_ack_set(True)
check(c.connack()[1] == 0, "c connack")
c.subscribe("ex/#", 1)
c.subscribe("mark/c", 1)
b.publish("ex/1", b"first", qos=1)
first = c.messages.get(timeout=20)
check(first.payload == b"first", f"c gets ex/1: {first.payload}")
before = stats(admin).get("mqtt_expired_dropped", 0)
b.publish("ex/2", b"expires", qos=1, props=props(PacketTypes.PUBLISH, MessageExpiryInterval=1))
# The interval under test is the wait: ex/2 waits behind the window for it.
time.sleep(1.5)
c.c.ack(first.mid, 1)
b.publish("mark/c", b"marker", qos=1)
rest = c.until_marker("mark/c")
check(rest == [], f"ex/2 expired while held: {[x.payload for x in rest]}")
stats_until(admin, "the expired one counted", lambda s: s.get("mqtt_expired_dropped", 0) == before + 1)
for x in (a, b, c):
    x.stop()
print("OK", flush=True)
