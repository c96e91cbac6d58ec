"""v5 Will Delay Interval with Eclipse paho-mqtt 2.1.0 against a
`megaconn server --protocol mqtt` with several workers.

usage: mqtt_will_delay.py PORT ADMIN_ADDR
  A watcher subscribes to w/#. Each device below has a will on w/NAME
  and ends without DISCONNECT (its socket closed):
  - a: Session Expiry 60 s, Will Delay 1 s: the supervisor holds the will
    (counted delayed), then it reaches the watcher (counted published).
  - b: Session Expiry 60 s, Will Delay 3600 s: it reconnects with the same
    client id, which cancels the will (counted); the watcher never gets it
    (a marker published after the cancel comes first).
  - c: Will Delay 3600 s but Session Expiry 1 s: the will goes when the
    session ends.
  - d: Will Delay 3600 s, Session Expiry 0: no session outlives the
    connection, so the will goes at once (not held).
Prints 'OK' when every check held.
"""
import sys

from mqtt_peer import Client, PacketTypes, check, props, stats_until

port, admin = int(sys.argv[1]), sys.argv[2]


def sessions(s):
    return s.get("mqtt_sessions", {})


def device(name, expiry, delay, clean=True):
    will = (f"w/{name}", f"gone-{name}".encode(), props(PacketTypes.WILLMESSAGE, WillDelayInterval=delay))
    connect = props(PacketTypes.CONNECT, SessionExpiryInterval=expiry) if expiry else None
    c = Client(port, f"wd-{name}", connect_props=connect, will=will, clean=clean)
    check(c.connack()[1] == 0, f"{name} connack")
    return c


def next_will(watcher):
    m = watcher.messages.get(timeout=20)
    return m.topic, m.payload


watcher = Client(port, "watcher")
check(watcher.connack()[1] == 0, "watcher connack")
watcher.subscribe("w/#", 1)
watcher.subscribe("mark/watch", 1)

a = device("a", 60, 1)
a.drop()
stats_until(admin, "a's will held", lambda s: sessions(s).get("wills_delayed") == 1)
check(next_will(watcher) == ("w/a", b"gone-a"), "a's will after its delay")
stats_until(admin, "a's will published", lambda s: sessions(s).get("wills_published", {}).get("delay") == 1)

b = device("b", 60, 3600)
b.drop()
stats_until(admin, "b's will waiting", lambda s: sessions(s).get("wills_waiting") == 1)
back = device("b", 60, 3600, clean=False)
s = stats_until(admin, "b's will cancelled", lambda s: sessions(s).get("wills_cancelled") == 1)
check(sessions(s)["wills_waiting"] == 0, f"nothing waits: {sessions(s)}")
pub = Client(port, "marker")
check(pub.connack()[1] == 0, "marker connack")
pub.publish("mark/watch", b"marker")
got = [(m.topic, m.payload) for m in watcher.until_marker("mark/watch")]
check(got == [], f"no will of b: {got}")
back.stop()

c = device("c", 1, 3600)
c.drop()
check(next_will(watcher) == ("w/c", b"gone-c"), "c's will when its session expired")

d = device("d", 0, 3600)
d.drop()
check(next_will(watcher) == ("w/d", b"gone-d"), "d's will at once")
s = stats_until(admin, "counted", lambda s: sessions(s).get("wills_published", {}).get("delay") == 2)
check(sessions(s)["wills_delayed"] == 3, f"a, b and c held, not d: {sessions(s)}")
watcher.stop()
pub.stop()
print("OK", flush=True)
