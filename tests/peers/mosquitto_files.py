"""What a broker running on mosquitto's password and ACL files lets
through, as Eclipse paho-mqtt 2.1 clients see it: run against Debian's
mosquitto and against megaconn with the same two files
(tests/e2e/mosquitto_files.rs makes the password file with Debian's
mosquitto_passwd), the two outputs must be equal.

usage: mosquitto_files.py PORT
  logins: the CONNACK code of each (name, version): alice with her
          password, with another, carol (not in the file), legacy (a $6$
          hash), and a client without a user name.
  heard:  root, alice, bob and an anonymous client connect (3.1.1) and
          subscribe to '#'; each publishes every topic of TOPICS at QoS 1
          (a message it may not write is acknowledged and dropped); then
          each publishes a marker to sync/<its client id> and reads until
          it: what each heard, as sorted 'topic<-publisher'.
  v5_denied: the PUBACK reason code a 5.0 client gets for a publish the
          ACL does not let it write.
Prints one JSON document.
"""
import json
import sys

from mqtt_peer import Client, check, mqtt

port = int(sys.argv[1])
PASSWORDS = {"alice": "apw", "bob": "bpw", "root": "rpw", "legacy": "lpw"}
TOPICS = [
    "home/kitchen",
    "home/secret",
    "alerts",
    "public/news",
    "anon/in",
    "devices/a1/cmd",
    "devices/a1/state",
    "devices/b1/cmd",
    "devices/n1/cmd",
    "users/alice/x",
    "users/bob/x",
    "other",
]


def connect(name, client_id, password=None, version=mqtt.MQTTv311):
    login = None if name is None else (name, password if password is not None else PASSWORDS[name])
    c = Client(port, client_id, version=version, login=login)
    _, code, _ = c.connack()
    return c, code


logins = {}
for (label, name, password) in [
    ("alice", "alice", None),
    ("alice-wrong", "alice", "nope"),
    ("carol", "carol", "cpw"),
    ("legacy", "legacy", None),
    ("anonymous", None, None),
]:
    for version, tag in [(mqtt.MQTTv311, "3.1.1"), (mqtt.MQTTv5, "5.0")]:
        c, code = connect(name, f"login-{label}-{tag}", password, version)
        logins[f"{label} {tag}"] = code
        c.stop() if code == 0 else c.drop()

clients = {}
for (label, name, client_id) in [("root", "root", "r1"), ("alice", "alice", "a1"), ("bob", "bob", "b1"), ("anon", None, "n1")]:
    c, code = connect(name, client_id)
    check(code == 0, f"{label} connects: {code}")
    check(c.subscribe("#", 1) == [1], f"{label} subscribes to # (granted whatever the ACL)")
    clients[label] = (c, client_id)

for label, (c, _) in clients.items():
    for t in TOPICS:
        c.publish(t, label.encode(), qos=1)

heard = {}
for label, (c, client_id) in clients.items():
    marker = f"sync/{client_id}"
    c.publish(marker, b"marker", qos=1)
    got = c.until_marker(marker)
    heard[label] = sorted(f"{m.topic}<-{m.payload.decode()}" for m in got)

v5, code = connect("bob", "b5", version=mqtt.MQTTv5)
check(code == 0, f"bob 5.0 connects: {code}")
info = v5.c.publish("home/kitchen", b"no", qos=1)
while True:
    _, mid, rc = v5.event("puback")
    if mid == info.mid:
        v5_denied = int(getattr(rc, "value", rc))
        break
v5.stop()
for c, _ in clients.values():
    c.stop()
print(json.dumps({"logins": logins, "heard": heard, "v5_denied": v5_denied}, sort_keys=True), flush=True)
