"""Shared subscriptions (`$share/{group}/{filter}`) with Eclipse paho-mqtt
2.1.0 against a `megaconn server --protocol mqtt` with several workers.

usage: mqtt_shared.py PORT ADMIN_ADDR
  The v5 CONNACK announces Shared Subscription Available 1. Four members
  of group g on `$share/g/sh/+` (three MQTT 5, one 3.1.1, spread over the
  workers as the kernel spreads connections), one member of group h on
  `$share/h/sh/#` and a plain subscriber of `sh/#`; 40 QoS 1 messages
  to sh/x: every one reaches exactly one member of g (10 each, round
  robin), h's member and the plain subscriber get all 40. One member of
  g leaves: 30 more reach the other three, 10 each. Each client also
  subscribes to its own marker topic, published behind the messages, so
  what it got is known whole without waiting on a clock.
Prints 'OK' when every check held.
"""
import sys

from mqtt_peer import Client, PacketTypes, check, mqtt, stats_until

port, admin = int(sys.argv[1]), sys.argv[2]


def members(n):
    stats_until(admin, f"{n} members", lambda s: s.get("mqtt_shared", {}).get("members") == n)


def connected(name, version=mqtt.MQTTv5):
    c = Client(port, name, version=version)
    present, rc, props = c.connack()
    check(rc == 0, f"{name} connack {rc}")
    if version == mqtt.MQTTv5:
        check(getattr(props, "SharedSubscriptionAvailable", None) == 1, f"Shared Subscription Available 1: {props}")
    c.subscribe(f"mark/{name}", 0)
    return c


def collect(clients, pub, names):
    got = {}
    for name in names:
        pub.publish(f"mark/{name}", b"marker")
    for name in names:
        got[name] = [m.payload.decode() for m in clients[name].until_marker(f"mark/{name}")]
    return got


g = [f"g{i}" for i in range(4)]
clients = {n: connected(n, mqtt.MQTTv311 if n == "g3" else mqtt.MQTTv5) for n in g}
for n in g:
    check(clients[n].subscribe("$share/g/sh/+", 1) == [1], f"{n} granted QoS 1")
clients["h0"] = connected("h0")
check(clients["h0"].subscribe("$share/h/sh/#", 1) == [1], "h0 granted")
clients["all"] = connected("all")
clients["all"].subscribe("sh/#", 1)
members(5)
pub = connected("pub")

sent = [f"m{i}" for i in range(40)]
for body in sent:
    pub.publish("sh/x", body.encode())
got = collect(clients, pub, g + ["h0", "all"])
together = sorted(b for n in g for b in got[n])
check(together == sorted(sent), f"each message to exactly one member of g: {got}")
check(all(len(got[n]) == 10 for n in g), f"round robin, 10 each: { {n: len(got[n]) for n in g} }")
check(got["h0"] == sent, f"group h's only member gets all 40 in order: {got['h0']}")
check(got["all"] == sent, f"the plain subscriber gets all 40 in order: {got['all']}")

clients["g0"].stop()
members(4)
more = [f"n{i}" for i in range(30)]
for body in more:
    pub.publish("sh/x", body.encode())
rest = g[1:]
got = collect(clients, pub, rest)
check(sorted(b for n in rest for b in got[n]) == sorted(more), f"the 30 among the three left: {got}")
check(all(len(got[n]) == 10 for n in rest), f"10 each: { {n: len(got[n]) for n in rest} }")
s = stats_until(admin, "picks counted", lambda s: s["mqtt_shared"]["picked"] == 40 * 2 + 30 * 2)
check(s["mqtt_shared"]["groups"] == 2, f"two groups: {s['mqtt_shared']}")
for c in clients.values():
    if c is not clients["g0"]:
        c.stop()
pub.stop()
members(0)
print("OK", flush=True)
