"""A draining megaconn MQTT server's reconnect hint, as Eclipse paho-mqtt
2.1.0 reads it.

usage: mqtt_drain.py PORT
  1. a v5 and a 3.1.1 client connect, then 'READY' is printed; the test
     sends the server SIGTERM;
  2. the v5 client gets DISCONNECT 0x8B (Server shutting down) whose
     Reason String is {"type":"goaway","retry_ms":N}, 0 <= N <= 1000;
  3. the 3.1.1 client's connection is closed (3.1.1 has no packet for it).
Prints 'OK' when every check held.
"""
import json
import queue
import sys

import paho.mqtt.client as mqtt
from mqtt_peer import TIMEOUT, Client, check

port = int(sys.argv[1])


def ends(c):
    """The reason code and properties of the client's disconnect, as paho reports them."""
    q = queue.Queue()
    c.c.on_disconnect = lambda cl, u, flags, rc, props: q.put((rc, props))
    return q


v5 = Client(port, "drain-v5")
check(v5.connack()[1] == 0, "v5 connack")
v3 = Client(port, "drain-v3", version=mqtt.MQTTv311)
check(v3.connack()[1] == 0, "3.1.1 connack")
v5_end, v3_end = ends(v5), ends(v3)
print("READY", flush=True)

rc, props = v5_end.get(timeout=TIMEOUT)
check(int(getattr(rc, "value", rc)) == 0x8B, f"v5: DISCONNECT 0x8B (Server shutting down), not {rc}")
hint = json.loads(getattr(props, "ReasonString", "{}"))
check(hint.get("type") == "goaway" and 0 <= hint.get("retry_ms", -1) <= 1000, f"v5: the goaway hint as Reason String: {props}")
rc, _ = v3_end.get(timeout=TIMEOUT)
check(int(getattr(rc, "value", rc)) != 0, f"3.1.1: the connection closed under it: {rc}")
for c in (v5, v3):
    c.c.loop_stop()
print("OK", flush=True)
