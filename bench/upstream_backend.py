"""The webhook backend of bench/upstream.sh: takes megaconn's --upstream
batches and measures, per message, the time from the client's send (the
monotonic µs stamp megaconn client --message '\\{ts}' put in it) to its
arrival here. After STALL_AT seconds of traffic it holds one batch STALL
seconds (a backend that stalls; 0: never); megaconn must lose nothing meanwhile.

usage: upstream_backend.py PORT STALL_AT STALL OUT_JSON
Writes OUT_JSON (count, duplicates, latency percentiles) on SIGTERM.
"""
import json
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port, stall_at, stall, out = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
lock = threading.Lock()
lat_us = []
seen = set()
dups = [0]
first = [None]
stalled = [False]


class Hook(BaseHTTPRequestHandler):
    # Keep-alive: megaconn sends every batch on one connection.
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        now = time.monotonic_ns() // 1000
        if first[0] is None:
            first[0] = time.monotonic()
        if stall > 0 and not stalled[0] and time.monotonic() - first[0] >= stall_at:
            stalled[0] = True
            time.sleep(stall)
        msgs = json.loads(body)["messages"]
        with lock:
            for m in msgs:
                d = m.get("data", "")
                key = (m["conn"], d)
                if key in seen:
                    dups[0] += 1
                seen.add(key)
                stamp = d[-20:]
                if stamp.isdigit():
                    lat_us.append(now - int(stamp))
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()


def finish(*_):
    with lock:
        v = sorted(lat_us)
        pct = lambda p: v[min(len(v) - 1, int(p * len(v)))] / 1000 if v else None
        json.dump({"messages": len(seen) + dups[0], "unique": len(seen), "duplicates": dups[0], "stalled": stalled[0],
                   "latency_ms": {"p50": pct(0.5), "p99": pct(0.99), "p999": pct(0.999), "max": v[-1] / 1000 if v else None}}, open(out, "w"))
    sys.exit(0)


signal.signal(signal.SIGTERM, finish)
server = ThreadingHTTPServer(("127.0.0.1", port), Hook)
print("backend ready", flush=True)
server.serve_forever()
