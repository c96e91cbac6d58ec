"""What the MQTT 5 feature peers (mqtt_shared.py, mqtt_will_delay.py,
mqtt_alias.py, mqtt_v5props.py, mqtt_owners.py) share: a paho-mqtt 2.1.0 client whose
callbacks land in queues, /stats polled until a condition holds, and
`check`, which prints FAIL and exits on a broken promise."""
import json
import queue
import sys
import time
import urllib.parse
import urllib.request

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

TIMEOUT = 20


def check(cond, what):
    if not cond:
        print(f"FAIL {what}", flush=True)
        sys.exit(1)


def stats(admin):
    with urllib.request.urlopen(f"http://{admin}/stats", timeout=TIMEOUT) as r:
        return json.loads(r.read())


def stats_until(admin, what, ok):
    """Poll /stats until `ok(stats)` holds (a condition, not a guess)."""
    deadline = time.time() + TIMEOUT
    while True:
        s = stats(admin)
        if ok(s):
            return s
        check(time.time() < deadline, f"{what}: {json.dumps({k: v for k, v in s.items() if k.startswith('mqtt')})}")
        time.sleep(0.05)


class Client:
    """A paho client (MQTT 5 unless `version` says otherwise) connected to
    127.0.0.1:`port`; `connect_props` are its CONNECT properties, `will`
    (topic, payload, Properties) its will, `login` (user, password) its
    credentials (a token as password with --auth jwt); `transport`
    "websockets" speaks MQTT over WebSocket (path /mqtt) to a ws port."""

    def __init__(self, port, name, version=mqtt.MQTTv5, connect_props=None, will=None, clean=True, login=None, keepalive=60, transport="tcp"):
        self.v5 = version == mqtt.MQTTv5
        kw = {} if self.v5 else {"clean_session": clean}
        self.c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=name, protocol=version, transport=transport, **kw)
        if transport == "websockets":
            self.c.ws_set_options(path="/mqtt")
        self.events = queue.Queue()
        self.messages = queue.Queue()
        self.c.on_connect = lambda c, u, flags, rc, props: self.events.put(("connack", flags, rc, props))
        self.c.on_subscribe = lambda c, u, mid, rcs, props: self.events.put(("suback", mid, rcs))
        self.c.on_publish = lambda c, u, mid, rc, props: self.events.put(("puback", mid, rc))
        self.c.on_disconnect = lambda c, u, flags, rc, props: self.events.put(("disconnect", rc))
        self.c.on_message = lambda c, u, m: self.messages.put(m)
        if will is not None:
            self.c.will_set(will[0], will[1], qos=1, properties=will[2])
        if login is not None:
            self.c.username_pw_set(*login)
        if self.v5:
            self.c.connect_async("127.0.0.1", port, keepalive=keepalive, clean_start=clean, properties=connect_props)
        else:
            self.c.connect_async("127.0.0.1", port, keepalive=keepalive)
        self.c.loop_start()

    def event(self, kind):
        deadline = time.time() + TIMEOUT
        while True:
            ev = self.events.get(timeout=max(0.1, deadline - time.time()))
            if ev[0] == kind:
                return ev

    def connack(self):
        """(session present, reason code, properties) of the CONNACK."""
        _, flags, rc, props = self.event("connack")
        return flags.session_present, int(getattr(rc, "value", rc)), props

    def subscribe(self, topic, qos, props=None, options=None):
        """Subscribe; the SUBACK's codes."""
        if options is not None:
            self.c.subscribe((topic, options), properties=props)
        else:
            self.c.subscribe(topic, qos, properties=props)
        return [int(getattr(r, "value", r)) for r in self.event("suback")[2]]

    def publish(self, topic, body, qos=1, props=None, retain=False):
        info = self.c.publish(topic, body, qos=qos, retain=retain, properties=props)
        if qos > 0:
            while self.event("puback")[1] != info.mid:
                pass

    def next(self, what):
        """The next message as (topic, payload text)."""
        try:
            m = self.messages.get(timeout=TIMEOUT)
        except queue.Empty:
            check(False, f"no message: {what}")
        return m.topic, m.payload.decode()

    def none_left(self, what):
        check(self.messages.empty(), f"{what}: {[(m.topic, m.payload) for m in self.messages.queue]}")

    def until_marker(self, topic):
        """Every message before the marker on `topic` (without it)."""
        got = []
        while True:
            m = self.messages.get(timeout=TIMEOUT)
            if (m.topic, m.payload) == (topic, b"marker"):
                return got
            got.append(m)

    def stop(self):
        self.c.disconnect()
        self.c.loop_stop()

    def drop(self):
        """End the connection without DISCONNECT (as a device losing power)."""
        self.c.loop_stop()
        sock = self.c.socket()
        if sock is not None:  # a refused CONNECT's is closed already
            sock.close()


def publish_admin(admin, topic, data, qos=1):
    """POST /publish?topic= on the admin API (the application publishing)."""
    url = f"http://{admin}/publish?topic={urllib.parse.quote(topic, safe='/$')}&qos={qos}"
    req = urllib.request.Request(url, data=data.encode(), method="POST", headers={"Content-Type": "application/octet-stream"})
    with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
        check(r.status == 200, f"publish {topic}: {r.status}")


def props(kind, **fields):
    p = Properties(kind)
    for k, v in fields.items():
        setattr(p, k, v)
    return p


__all__ = ["check", "stats", "stats_until", "Client", "props", "publish_admin", "PacketTypes", "mqtt"]
