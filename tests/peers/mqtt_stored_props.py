"""MQTT 5 properties of the messages a server keeps, with Eclipse
paho-mqtt 2.1.0 against a `megaconn server --protocol mqtt` with several
workers: retained messages, a persistent session's offline queue and a
will keep their publisher's properties, and each its Message Expiry.

usage: mqtt_stored_props.py PORT ADMIN_ADDR
  - Retained: a publishes rp/x retained with a Payload Format Indicator,
    Message Expiry 60 s, Content Type, Response Topic, Correlation Data
    and two User Properties. b then subscribes to rp/# with identifier 9:
    it gets rp/x retained, every property, the expiry as what is left (59
    or 60) and identifier 9.
  - Retained expiry: rp/gone retained with a Message Expiry of 1 s. Once
    its second has passed, c subscribes to rp/#: it gets rp/x, not
    rp/gone, and mqtt_retained.expired counts it.
  - Offline queue: d (Session Expiry 300, clean start 0) subscribes to
    q/# at QoS 1 and drops. a publishes q/1 with the properties and q/2
    with a Message Expiry of 1 s, and q/r retained; all are queued. Once
    that second has passed, d comes back: it gets q/1 with every
    property, not q/2 (counted in mqtt_expired_dropped), then q/r with
    the retain flag 0 (it matched an established subscription).
  - Will: e connects with a will on w/e carrying a Content Type, a User
    Property and a Message Expiry of 60 s, and drops. f, subscribed to
    w/#, gets the will with them.
  - Session options: g (Session Expiry 300) subscribes to so/# with No
    Local, Retain As Published and identifier 11, drops, so/q is queued,
    and it comes back: so/q carries identifier 11, its own publish does
    not come back, a retained publish keeps its flag and carries 11.
Prints 'OK' when every check held.
"""
import sys
import time

from paho.mqtt.subscribeoptions import SubscribeOptions

from mqtt_peer import Client, PacketTypes, check, props, stats, stats_until

port, admin = int(sys.argv[1]), sys.argv[2]

SENT = dict(
    PayloadFormatIndicator=1,
    ContentType="text/plain",
    ResponseTopic="rp/reply",
    CorrelationData=b"c1",
    UserProperty=[("k", "v"), ("k", "w")],
)


def publish_props(expiry):
    return props(PacketTypes.PUBLISH, MessageExpiryInterval=expiry, **SENT)


def attrs(m):
    return {k: getattr(m.properties, k, None) for k in SENT}


def expiry(m):
    return getattr(m.properties, "MessageExpiryInterval", None)


def connected(name, **kw):
    c = Client(port, name, **kw)
    check(c.connack()[1] == 0, f"{name} connack")
    c.subscribe(f"mark/{name}", 0)
    return c


a = connected("a")

# Retained, with its properties and the new subscription's identifier.
a.publish("rp/x", b"kept", qos=1, props=publish_props(60), retain=True)
stats_until(admin, "rp/x retained", lambda s: s.get("mqtt_retained", {}).get("messages") == 1)
b = connected("b")
check(b.subscribe("rp/#", 1, props=props(PacketTypes.SUBSCRIBE, SubscriptionIdentifier=9)) == [1], "b granted")
# The answer comes from the supervisor, maybe after a marker published
# now would: wait for the message itself.
got = [b.messages.get(timeout=20)]
check([(m.topic, m.payload, m.retain) for m in got] == [("rp/x", b"kept", True)], f"b gets rp/x retained: {[(m.topic, m.retain) for m in got]}")
check(attrs(got[0]) == SENT, f"every property kept: {attrs(got[0])}")
check(expiry(got[0]) in (59, 60), f"the expiry left: {got[0].properties}")
check(getattr(got[0].properties, "SubscriptionIdentifier", None) == [9], f"identifier 9: {got[0].properties}")

# A retained message past its expiry is gone.
a.publish("rp/gone", b"soon gone", qos=1, props=props(PacketTypes.PUBLISH, MessageExpiryInterval=1), retain=True)
stats_until(admin, "rp/gone retained", lambda s: s.get("mqtt_retained", {}).get("messages") == 2)
# The interval under test is the wait: rp/gone's second passes.
time.sleep(1.5)
c = connected("c")
check(c.subscribe("rp/#", 1) == [1], "c granted")
# In topic order rp/gone would come first, in the same answer.
got = [c.messages.get(timeout=20)]
check([m.topic for m in got] == ["rp/x"], f"c gets rp/x, not the expired rp/gone: {[m.topic for m in got]}")
stats_until(admin, "the expired retained message counted", lambda s: s.get("mqtt_retained", {}).get("expired") == 1)

# A persistent session's offline queue.
d = Client(port, "d", clean=False, connect_props=props(PacketTypes.CONNECT, SessionExpiryInterval=300))
check(d.connack()[1] == 0, "d connack")
check(d.subscribe("q/#", 1) == [1], "d granted")
d.subscribe("mark/d", 1)
d.drop()
stats_until(admin, "d's session kept", lambda s: s.get("mqtt_sessions", {}).get("kept") == 1)
before = stats(admin).get("mqtt_expired_dropped", 0)
a.publish("q/1", b"queued", qos=1, props=publish_props(60))
a.publish("q/2", b"expires", qos=1, props=props(PacketTypes.PUBLISH, MessageExpiryInterval=1))
a.publish("q/r", b"published retained", qos=1, retain=True)
stats_until(admin, "all three queued", lambda s: s.get("mqtt_sessions", {}).get("queued") == 3)
# The interval under test is the wait: q/2's second passes while d is away.
time.sleep(1.5)
d = Client(port, "d", clean=False, connect_props=props(PacketTypes.CONNECT, SessionExpiryInterval=300))
check(d.connack()[:2] == (True, 0), "d's session present")
a.publish("mark/d", b"marker")
got = d.until_marker("mark/d")
check([(m.topic, m.payload) for m in got] == [("q/1", b"queued"), ("q/r", b"published retained")], f"d gets q/1 and q/r: {[(m.topic, m.payload) for m in got]}")
check(not got[1].retain, "a queued message matched an established subscription: retain flag 0 (no Retain As Published)")
check(attrs(got[0]) == SENT, f"every property queued: {attrs(got[0])}")
check(expiry(got[0]) is not None and 1 <= expiry(got[0]) <= 60, f"the expiry left: {got[0].properties}")
stats_until(admin, "q/2 expired while queued", lambda s: s.get("mqtt_expired_dropped", 0) == before + 1)

# A will with properties.
f = connected("f")
check(f.subscribe("w/#", 1) == [1], "f granted")
will_props = props(PacketTypes.WILLMESSAGE, ContentType="text/plain", UserProperty=[("why", "power")], MessageExpiryInterval=60)
e = Client(port, "e", will=("w/e", b"gone", will_props))
check(e.connack()[1] == 0, "e connack")
e.drop()
m = f.messages.get(timeout=20)
check((m.topic, m.payload) == ("w/e", b"gone"), f"f gets e's will: {m.topic} {m.payload}")
check(getattr(m.properties, "ContentType", None) == "text/plain", f"the will's content type: {m.properties}")
check(getattr(m.properties, "UserProperty", None) == [("why", "power")], f"the will's user property: {m.properties}")
check(expiry(m) in (59, 60), f"the will's expiry left: {m.properties}")

# A kept session keeps its subscriptions' options.
g = Client(port, "g", clean=False, connect_props=props(PacketTypes.CONNECT, SessionExpiryInterval=300))
check(g.connack()[1] == 0, "g connack")
opts = SubscribeOptions(qos=1, noLocal=True, retainAsPublished=True)
check(g.subscribe("so/#", 1, props=props(PacketTypes.SUBSCRIBE, SubscriptionIdentifier=11), options=opts) == [1], "g granted")
g.drop()
stats_until(admin, "g's session kept", lambda s: s.get("mqtt_sessions", {}).get("kept") == 1)
before = stats(admin).get("mqtt_sessions", {}).get("queued", 0)
a.publish("so/q", b"while away", qos=1)
stats_until(admin, "so/q queued for g", lambda s: s.get("mqtt_sessions", {}).get("queued") == before + 1)
g = Client(port, "g", clean=False, connect_props=props(PacketTypes.CONNECT, SessionExpiryInterval=300))
check(g.connack()[:2] == (True, 0), "g's session present")
m = g.messages.get(timeout=20)
check((m.topic, m.payload) == ("so/q", b"while away"), f"g gets what was queued: {m.topic} {m.payload}")
check(getattr(m.properties, "SubscriptionIdentifier", None) == [11], f"a queued message carries identifier 11: {m.properties}")
g.publish("so/own", b"mine", qos=1)
a.publish("so/x", b"kept flag", qos=1, retain=True)
m = g.messages.get(timeout=20)
check((m.topic, m.payload) == ("so/x", b"kept flag"), f"No Local kept: g does not get its own so/own first: {m.topic} {m.payload}")
check(m.retain, "Retain As Published kept: the flag stays")
check(getattr(m.properties, "SubscriptionIdentifier", None) == [11], f"identifier 11 kept: {m.properties}")

for x in (a, b, c, d, f, g):
    x.stop()
print("OK", flush=True)
