"""Bytes of server memory per idle TLS connection, measured side by side
with plaintext: N connections (Python ssl, TLS 1.3, one full handshake
and one heartbeat-sized write each) are opened to a running megaconn
server and held; the server's RSS (its /stats, summed over workers) is read
before and after.

usage: tls_idle_memory.py ADMIN PORT N [CAFILE]   (no CAFILE: plaintext)
prints one JSON line: {"connections", "rss_before", "rss_after", "bytes_per_conn"}
"""
import json
import socket
import ssl
import sys
import time
import urllib.request

admin, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ctx = None
if len(sys.argv) > 4:
    ctx = ssl.create_default_context(cafile=sys.argv[4])


def stats():
    return json.load(urllib.request.urlopen(f"http://{admin}/stats"))


def settle(want):
    for _ in range(200):
        s = stats()
        if s["active"] == want:
            return s
        time.sleep(0.1)
    raise SystemExit(f"server holds {s['active']}, expected {want}")


before = settle(0)["rss_bytes"]
socks = []
t0 = time.time()
for i in range(n):
    raw = socket.create_connection(("127.0.0.1", port), timeout=20)
    s = ctx.wrap_socket(raw, server_hostname="localhost") if ctx else raw
    socks.append(s)
time.sleep(2.5)
after = settle(n)["rss_bytes"]
print(json.dumps({"connections": n, "tls": ctx is not None, "rss_before": before, "rss_after": after,
                  "bytes_per_conn": round((after - before) / n), "open_s": round(time.time() - t0, 1)}))
