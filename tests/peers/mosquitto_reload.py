"""SIGHUP reads mosquitto's password and ACL files again, as paho-mqtt
2.1 clients see it on `megaconn server --mqtt-password-file P
--mqtt-acl-file A` (no --mqtt-allow-anonymous). The files are the ones
tests/e2e/mosquitto_files.rs made; this peer changes them, prints
'HUP <step>' and waits for a line on stdin (the test sent SIGHUP and saw
the server read them).

usage: mosquitto_reload.py PORT PASSWD ACL
  - a CONNECT without a user name is refused (0x87);
  - bob taken out of the password file: his connection is closed with
    DISCONNECT 0x98 (administrative action) and he cannot come back;
  - bob back, and a rule letting alice write 'other': root (subscribed
    to '#') hears alice's 'other', which it did not before;
  - the password file broken: the reload is refused, alice and bob still
    log in with the files read before.
Prints 'OK' when every check held.
"""
import sys

from mqtt_peer import Client, check, mqtt

port, passwd, acl = int(sys.argv[1]), sys.argv[2], sys.argv[3]
PASSWORDS = {"alice": "apw", "bob": "bpw", "root": "rpw"}


def connect(name, client_id):
    login = None if name is None else (name, PASSWORDS[name])
    c = Client(port, client_id, version=mqtt.MQTTv5, login=login)
    return c, c.connack()[1]


def hup(step):
    print(f"HUP {step}", flush=True)
    check(sys.stdin.readline().strip() == "done", f"the test's word after {step}")


def heard_after(root, publisher, topic):
    """Whether root hears `publisher`'s `topic` before its own marker."""
    publisher.publish(topic, b"x", qos=1)
    root.publish("sync/r1", b"marker", qos=1)
    return [m.topic for m in root.until_marker("sync/r1")] == [topic]


anon, code = connect(None, "n1")
check(code == 135, f"no user name, no --mqtt-allow-anonymous: refused 0x87, not {code}")
anon.drop()
root, code = connect("root", "r1")
check(code == 0 and root.subscribe("#", 1) == [1], f"root connects and subscribes: {code}")
alice, code = connect("alice", "a1")
check(code == 0, f"alice connects: {code}")
bob, code = connect("bob", "b1")
check(code == 0, f"bob connects: {code}")
check(not heard_after(root, alice, "other"), "alice may not write 'other' yet")

original = open(passwd).read()
with open(passwd, "w") as f:
    f.write("".join(line for line in original.splitlines(keepends=True) if not line.startswith("bob:")))
hup("bob removed")
rc = bob.event("disconnect")[1]
check(int(getattr(rc, "value", rc)) == 152, "bob is told 0x98 (administrative action)")
again, code = connect("bob", "b2")
check(code == 135, f"bob cannot come back: {code}")
again.drop()

with open(passwd, "w") as f:
    f.write(original)
with open(acl, "a") as f:
    f.write("\nuser alice\ntopic write other\n")
hup("bob back, alice may write other")
check(heard_after(root, alice, "other"), "alice's new rule holds for her next publish")
bob, code = connect("bob", "b3")
check(code == 0, f"bob is back: {code}")

with open(passwd, "w") as f:
    f.write("alice:plain\n")
hup("broken")
for name in ("alice", "bob"):
    c, code = connect(name, f"{name}-after")
    check(code == 0, f"{name} logs in by the files read before: {code}")
    c.stop()
for c in (root, alice, bob):
    c.stop()
print("OK", flush=True)
