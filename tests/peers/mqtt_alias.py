"""v5 topic aliases from client to server with Eclipse paho-mqtt 2.1.0
against a `megaconn server --protocol mqtt` with several workers.

usage: mqtt_alias.py PORT ADMIN_ADDR
  The CONNACK announces Topic Alias Maximum 16. A publisher sets alias 1
  to al/x and alias 16 to al/y with their first PUBLISH (QoS 1), then
  publishes with an empty topic and only the alias (QoS 0, 1 and 2), and
  re-points alias 1 to al/z: a subscriber of al/# gets every message
  under its real topic, in order. Then alias 17 (over the maximum): the
  server closes the connection (DISCONNECT 0x94: counted as
  mqtt_topic_alias_invalid).
Prints 'OK' when every check held.
"""
import queue
import sys

from mqtt_peer import TIMEOUT, Client, PacketTypes, check, props, stats_until

port, admin = int(sys.argv[1]), sys.argv[2]


def alias(n):
    return props(PacketTypes.PUBLISH, TopicAlias=n)


sub = Client(port, "alias-sub")
check(sub.connack()[1] == 0, "subscriber connack")
sub.subscribe("al/#", 2)
sub.subscribe("mark", 0)
pub = Client(port, "alias-pub")
present, rc, cprops = pub.connack()
check(rc == 0 and getattr(cprops, "TopicAliasMaximum", None) == 16, f"Topic Alias Maximum 16: {cprops}")

pub.publish("al/x", b"1", qos=1, props=alias(1))
pub.publish("al/y", b"2", qos=1, props=alias(16))
pub.publish("", b"3", qos=0, props=alias(1))
pub.publish("", b"4", qos=1, props=alias(16))
pub.publish("", b"5", qos=2, props=alias(1))
pub.publish("al/z", b"6", qos=1, props=alias(1))
pub.publish("", b"7", qos=1, props=alias(1))
want = [("al/x", "1"), ("al/y", "2"), ("al/x", "3"), ("al/y", "4"), ("al/x", "5"), ("al/z", "6"), ("al/z", "7")]
# MQTT orders a topic's messages per QoS (§4.6), and nothing across
# topics: 5 (QoS 2) may pass 3 (QoS 0) and 6, or a marker published on
# another topic after it. So: as many messages as were sent (each wait
# bounded), every one once under its topic, the QoS 1 ones of each topic
# in their order; then a marker, and nothing more before it.
got = []
while len(got) < len(want):
    try:
        m = sub.messages.get(timeout=TIMEOUT)
    except queue.Empty:
        check(False, f"all {len(want)} aliased messages within {TIMEOUT} s each: {got}")
    got.append((m.topic, m.payload.decode()))
check(sorted(got) == sorted(want), f"every message once under its topic: {got}")
pub.publish("mark", b"marker", qos=1)
extra = [(m.topic, m.payload.decode()) for m in sub.until_marker("mark")]
check(extra == [], f"nothing after the {len(want)} (a duplicate?): {extra}")
for first, then in [("2", "4"), ("6", "7")]:
    order = [p for _, p in got]
    check(order.index(first) < order.index(then), f"QoS 1 order within a topic ({first} before {then}): {got}")

pub.c.publish("al/x", b"8", qos=0, properties=alias(17))
# paho reports the server's DISCONNECT as a lost connection: the server's
# count of the close says which (its bytes are checked by a raw client).
pub.event("disconnect")
pub.c.loop_stop()
stats_until(admin, "closed for the alias", lambda s: s.get("close_reasons", {}).get("mqtt_topic_alias_invalid") == 1)
sub.stop()
print("OK", flush=True)
