"""Who may take what on a `megaconn server --protocol mqtt --auth jwt`,
checked with Eclipse paho-mqtt 2.1, tokens minted with PyJWT from the
server's --jwt-secret-file (the user name is not looked at; the password
is the token).

usage: mqtt_owners.py hijack PORT ADMIN SECRET [PORT_B ADMIN_B]
         alice (topics alice/*) keeps a v5 session (expiry 300 s) with a
         QoS 1 command queued for it; mallory (topics mallory/*) connects
         with alice's client id, v5 then 3.1.1, Clean Start 0 (on PORT_B,
         another cluster node, when given): refused 0x87 / 5. alice comes
         back (there too): session present, the command once. mallory
         again while alice is connected: refused; alice's connection lives
         on (the next command reaches it), no connection was taken over,
         and a watcher of alice's will topic hears no will.
       mqtt_owners.py filters PORT ADMIN SECRET
         --admin-topics 'ops/*': eve (topics *) is refused #, +/secret,
         +/# and $share/g/# (0x87) and granted news/#; sam (sensors/*) is
         refused sensors/# (it matches sensors) and granted sensors/+.
         The application publishes to ops/secret, sensors, news/x and
         sensors/t1: each hears only what it was granted.
       mqtt_owners.py quota PORT ADMIN SECRET
         --mqtt-sessions 50: alice keeps a session with a command queued;
         mallory keeps 60 sessions (ids m-0..m-59); alice's session and
         command are still there.
Prints 'OK' when every check held.
"""
import sys
import time

import jwt

from mqtt_peer import Client, PacketTypes, check, mqtt, props, publish_admin, stats, stats_until

mode, port, admin, secret_file = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
port_b, admin_b = (int(sys.argv[5]), sys.argv[6]) if len(sys.argv) > 6 else (port, admin)
with open(secret_file, "rb") as f:
    SECRET = f.read().rstrip(b"\n")


def login(sub, topics):
    return (sub, jwt.encode({"sub": sub, "exp": int(time.time()) + 600, "topics": topics}, SECRET, algorithm="HS256"))


def kept(name, sub, topics, at=None, version=mqtt.MQTTv5, will=None):
    """A client of a session kept 300 s (3.1.1: Clean Session 0), connected: (client, session present, code)."""
    expiry = props(PacketTypes.CONNECT, SessionExpiryInterval=300) if version == mqtt.MQTTv5 else None
    c = Client(at or port, name, version=version, connect_props=expiry, clean=False, login=login(sub, topics), will=will)
    present, code, _ = c.connack()
    return c, present, code


def hijack():
    offline = (b"alice is OFFLINE", None)
    alice, _, code = kept("door-4711", "alice", ["alice/*"], will=("alice/status", *offline))
    check(code == 0, f"alice connects: {code}")
    check(alice.subscribe("alice/cmd", 1) == [1], "alice subscribes")
    watcher = Client(port_b, "watcher", login=login("ops", ["alice/*"]))
    check(watcher.connack()[1] == 0 and watcher.subscribe("alice/status", 1) == [1], "the watcher subscribes")
    alice.stop()
    stats_until(admin, "alice's session kept", lambda s: s["mqtt_sessions"]["kept"] >= 1)
    publish_admin(admin, "alice/cmd", "unlock-door-4711")
    stats_until(admin, "the command queued", lambda s: s["mqtt_sessions"]["queued"] >= 1)
    # paho reports a 3.1.1 return code 5 as the v5 reason 0x87 it means.
    for version in (mqtt.MQTTv5, mqtt.MQTTv311):
        mallory, present, code = kept("door-4711", "mallory", ["mallory/*"], at=port_b, version=version)
        check((code, present) == (0x87, False), f"mallory ({version}) refused Not authorized, not {code:#x} (present {present})")
        mallory.drop()
    stats_until(admin_b, "the refusals counted", lambda s: s["mqtt_sessions"]["refused"].get("owner", 0) >= 2)
    check(stats(admin)["mqtt_sessions"]["kept"] >= 1, "alice's session still kept")
    alice, present, code = kept("door-4711", "alice", ["alice/*"], at=port_b, will=("alice/status", *offline))
    check((code, present) == (0, True), f"alice resumes: {code}, present {present}")
    check(alice.next("the queued command") == ("alice/cmd", "unlock-door-4711"), "alice gets her command")
    # Connected now: mallory again touches nothing.
    mallory, _, code = kept("door-4711", "mallory", ["mallory/*"], at=port_b)
    check(code == 0x87, f"mallory refused while alice is connected: {code:#x}")
    mallory.drop()
    publish_admin(admin_b, "alice/cmd", "lock-door-4711")
    check(alice.next("the next command") == ("alice/cmd", "lock-door-4711"), "alice's connection lives on")
    alice.none_left("alice got each command once")
    s = stats(admin_b)["mqtt_sessions"]
    check(s["taken_over"] == 0, f"nothing taken over: {s}")
    publish_admin(admin_b, "alice/status", "marker")
    check(watcher.next("the marker") == ("alice/status", "marker"), "the watcher heard no will before the marker")
    alice.stop()
    watcher.stop()


def filters():
    eve = Client(port, "eve", login=login("eve", ["*"]))
    check(eve.connack()[1] == 0, "eve connects")
    for f in ("#", "+/secret", "+/#", "$share/g/#"):
        check(eve.subscribe(f, 1) == [0x87], f"eve refused {f}")
    check(eve.subscribe("news/#", 1) == [1], "eve granted news/#")
    sam = Client(port, "sam", login=login("sam", ["sensors/*"]))
    check(sam.connack()[1] == 0, "sam connects")
    check(sam.subscribe("sensors/#", 1) == [0x87], "sam refused sensors/# (it matches sensors)")
    check(sam.subscribe("sensors/+", 1) == [1], "sam granted sensors/+")
    for topic in ("ops/secret", "sensors", "news/x", "sensors/t1"):
        publish_admin(admin, topic, f"to {topic}")
    check(eve.next("news/x") == ("news/x", "to news/x"), "eve hears news/x first")
    check(sam.next("sensors/t1") == ("sensors/t1", "to sensors/t1"), "sam hears sensors/t1 first")
    eve.none_left("eve heard nothing of ops/* or sensors")
    sam.none_left("sam never heard sensors")
    eve.stop()
    sam.stop()


def quota():
    alice, _, code = kept("alice-dev", "alice", ["alice/*"])
    check(code == 0 and alice.subscribe("alice/cmd", 1) == [1], "alice subscribes")
    alice.stop()
    stats_until(admin, "alice's session kept", lambda s: s["mqtt_sessions"]["kept"] >= 1)
    publish_admin(admin, "alice/cmd", "unlock")
    for i in range(60):
        m, _, code = kept(f"m-{i}", "mallory", ["mallory/*"])
        check(code == 0, f"mallory's session {i}")
        m.stop()
    s = stats_until(admin, "mallory's sessions kept and bounded", lambda s: s["mqtt_sessions"]["stored"] >= 61)["mqtt_sessions"]
    check(s["kept"] <= 50, f"at most the node's bound: {s}")
    alice, present, code = kept("alice-dev", "alice", ["alice/*"])
    check((code, present) == (0, True), f"alice's session is there: {code}, present {present}")
    check(alice.next("alice's command") == ("alice/cmd", "unlock"), "alice's command is there")
    alice.stop()


{"hijack": hijack, "filters": filters, "quota": quota}[mode]()
print("OK", flush=True)
