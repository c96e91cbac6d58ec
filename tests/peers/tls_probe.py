"""TLS peers for the megaconn server tests, on Python's `ssl` (OpenSSL):
nothing here shares code with megaconn's own client.

usage:
  tls_probe.py keepalive PORT CAFILE   one TLS connection, a keep-alive
      request, 'ok1 <subject CN>'; then waits for a line on stdin and
      sends a second request on the same connection: 'ok2'; holds it
      open until stdin ends
  tls_probe.py garbage PORT            a full handshake (no verification),
      then random bytes instead of records: prints 'closed' when the server
      closes, 'open' if it still holds the connection after 10 s
  tls_probe.py stall PORT N MODE       N connections that never finish the
      handshake (MODE silent: send nothing; truncated: half a ClientHello),
      'holding N'; then 'closed K' once every one was closed by the server
      (K = those that were), or after 60 s
"""
import os
import selectors
import socket
import ssl
import sys
import time


def request(s):
    s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
    data = b""
    while b"Hello world!" not in data:
        chunk = s.recv(4096)
        if not chunk:
            raise SystemExit(f"closed after {data!r}")
        data += chunk
    return data


def keepalive(port, cafile):
    ctx = ssl.create_default_context(cafile=cafile)
    with socket.create_connection(("127.0.0.1", port), timeout=20) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            request(s)
            cn = dict(x[0] for x in s.getpeercert()["subject"])["commonName"]
            print("ok1", cn, flush=True)
            sys.stdin.readline()
            request(s)
            print("ok2", flush=True)
            # Hold the connection until the test is done with it (stdin closes).
            sys.stdin.readline()


def garbage(port):
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_hostname="localhost")
    while True:
        try:
            obj.do_handshake()
            break
        except ssl.SSLWantReadError:
            raw.sendall(out.read())
            data = raw.recv(65536)
            if not data:
                raise SystemExit("server closed during the handshake")
            inc.write(data)
    raw.sendall(out.read())
    # An application-data record header, then noise: it cannot decrypt.
    raw.sendall(b"\x17\x03\x03\x00\x40" + os.urandom(64) + os.urandom(2000))
    raw.settimeout(10)
    try:
        while raw.recv(65536):
            pass
        print("closed", flush=True)
    except socket.timeout:
        print("open", flush=True)
    except ConnectionResetError:
        print("closed", flush=True)


def stall(port, n, mode):
    sel = selectors.DefaultSelector()
    # A ClientHello cut short: the record says 512 bytes, 40 arrive.
    partial = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + os.urandom(29)
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        if mode == "truncated":
            s.sendall(partial)
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
        socks.append(s)
    print("holding", n, flush=True)
    closed = 0
    deadline = time.time() + 60
    while closed < n and time.time() < deadline:
        for key, _ in sel.select(timeout=1):
            try:
                data = key.fileobj.recv(65536)
            except ConnectionResetError:
                data = b""
            if not data:
                sel.unregister(key.fileobj)
                key.fileobj.close()
                closed += 1
    print("closed", closed, flush=True)


if __name__ == "__main__":
    cmd, port = sys.argv[1], int(sys.argv[2])
    if cmd == "keepalive":
        keepalive(port, sys.argv[3])
    elif cmd == "garbage":
        garbage(port)
    elif cmd == "stall":
        stall(port, int(sys.argv[3]), sys.argv[4])
    else:
        raise SystemExit(f"unknown command {cmd}")
