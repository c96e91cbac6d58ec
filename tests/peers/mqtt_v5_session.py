"""MQTT 5 session expiry at DISCONNECT and the Server Keep Alive, with
Eclipse paho-mqtt 2.1 against a `megaconn server --protocol mqtt`.

usage: mqtt_v5_session.py keepalive PORT ADMIN MAX
         The server runs with --mqtt-max-keep-alive MAX: a v5 client
         asking for more (MAX * 4) or for none (0) is told MAX in its
         CONNACK's Server Keep Alive; one asking for less is told nothing
         (it keeps its own); a 3.1.1 client asking for more is refused
         (return code 2, as mosquitto refuses it).
       mqtt_v5_session.py expiry PORT ADMIN
         A client with a Session Expiry Interval of 600 s subscribes and
         ends with a DISCONNECT whose Session Expiry Interval is 0: its
         session ends with it (§3.14.2.2.2): back, session present 0. One
         that connected with 0 and ends with 0: the same. One whose
         DISCONNECT keeps 600: session present 1.
Prints 'OK' when every check held.
"""
import sys

from mqtt_peer import Client, PacketTypes, check, mqtt, props, stats_until

mode, port, admin = sys.argv[1], int(sys.argv[2]), sys.argv[3]


def keepalive(most):
    for asked, told in ((most * 4, most), (0, most), (max(1, most // 2), None)):
        c = Client(port, f"ka-{asked}", keepalive=asked)
        _, code, p = c.connack()
        got = getattr(p, "ServerKeepAlive", None)
        check(code == 0 and got == told, f"keep-alive {asked}: code {code}, Server Keep Alive {got}, not {told}")
        c.stop()
    old = Client(port, "ka-311", version=mqtt.MQTTv311, keepalive=most * 4)
    _, code, _ = old.connack()
    # paho reports a 3.1.1 return code 2 as the v5 reason 0x85 it means.
    check(code in (2, 0x85), f"3.1.1 asking {most * 4} refused with 2, not {code}")
    old.drop()


def session(name, connect_expiry, disconnect_expiry):
    c = Client(port, name, clean=False, connect_props=props(PacketTypes.CONNECT, SessionExpiryInterval=connect_expiry))
    check(c.connack()[1] == 0 and c.subscribe(f"exp/{name}", 1) == [1], f"{name} subscribes")
    c.c.disconnect(properties=props(PacketTypes.DISCONNECT, SessionExpiryInterval=disconnect_expiry))
    c.event("disconnect")
    c.c.loop_stop()


def back(name):
    c = Client(port, name, clean=False, connect_props=props(PacketTypes.CONNECT, SessionExpiryInterval=600))
    present, code, _ = c.connack()
    c.stop()
    return present, code


def expiry():
    session("ends", 600, 0)
    session("kept", 600, 600)
    stats_until(admin, "both ended", lambda s: s["mqtt_sessions"]["online"] == 0)
    check(back("ends") == (False, 0), "a DISCONNECT's expiry 0 ended the session")
    check(back("kept") == (True, 0), "a DISCONNECT's expiry 600 kept it")


{"keepalive": lambda: keepalive(int(sys.argv[4])), "expiry": expiry}[mode]()
print("OK", flush=True)
