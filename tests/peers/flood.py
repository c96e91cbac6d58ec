"""A hostile peer pushing up to 100 MB at a megaconn server.

usage: flood.py PORT MODE
  framed-noread    heartbeat frames, never reading the acks
  http-pipeline    pipelined GETs behind a reply the server still holds
  framed-requests  request frames (reads and drops the answers)
Prints 'sent <bytes> closed' when the server closed the connection, or
'sent <bytes> open' if all 100 MB went in and the connection stayed up.
"""
import socket
import struct
import sys
import threading

port, mode = int(sys.argv[1]), sys.argv[2]
TOTAL = 100 * 1024 * 1024
s = socket.create_connection(("127.0.0.1", port))
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
if mode == "framed-noread":
    unit = struct.pack(">HB", 65, 1) + b"\x00" * 64
elif mode == "http-pipeline":
    unit = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
else:
    unit = struct.pack(">HB", 1001, 3) + b"\x00" * 1000
    def drain():
        try:
            while s.recv(65536):
                pass
        except OSError:
            pass
    threading.Thread(target=drain, daemon=True).start()
chunk = unit * (65536 // len(unit))
sent = 0
state = "open"
s.settimeout(10)
try:
    while sent < TOTAL:
        sent += s.send(chunk)
except (BrokenPipeError, ConnectionResetError):
    state = "closed"
except socket.timeout:
    state = "stalled"
print("sent", sent, state, flush=True)
