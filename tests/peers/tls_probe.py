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
  tls_probe.py echo PORT CAFILE MIB    one TLS connection to an echo
      server with a 64 KiB receive buffer: MIB MiB written before a byte
      is read back (the server's sends meet a full socket), then
      'echoed N <sha256>' of what came back and 'sent <sha256>' of what
      went (they must match); 'closed after N' if the echo stopped
"""
import hashlib
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


def echo(port, cafile, mib):
    data = bytes((i * 2654435761 >> 24) & 0xFF for i in range(1 << 16)) * (mib * 16)
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
    raw.settimeout(10)
    raw.connect(("127.0.0.1", port))
    raw.setblocking(False)
    ctx = ssl.create_default_context(cafile=cafile)
    # One thread, OpenSSL on memory buffers: writes and reads interleave
    # as the socket allows (an SSL object is not for two threads at once).
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_hostname="localhost")
    sel = selectors.DefaultSelector()
    sel.register(raw, selectors.EVENT_READ | selectors.EVENT_WRITE)
    handshaken, at, pending, n = False, 0, b"", 0
    got = hashlib.sha256()
    deadline = time.time() + 60
    while n < len(data):
        if time.time() > deadline:
            print("stuck after", n, flush=True)
            return
        if not handshaken:
            try:
                obj.do_handshake()
                handshaken = True
            except ssl.SSLWantReadError:
                pass
        if handshaken and at < len(data) and len(pending) < (256 << 10):
            at += obj.write(data[at : at + (16 << 10)])
        pending += out.read()
        for _, ev in sel.select(timeout=1):
            if ev & selectors.EVENT_WRITE and pending:
                try:
                    pending = pending[raw.send(pending) :]
                except BlockingIOError:
                    pass
            if ev & selectors.EVENT_READ:
                try:
                    chunk = raw.recv(1 << 16)
                except BlockingIOError:
                    continue
                if not chunk:
                    print("closed after", n, flush=True)
                    return
                inc.write(chunk)
                while True:
                    try:
                        plain = obj.read(1 << 16)
                    except ssl.SSLWantReadError:
                        break
                    got.update(plain)
                    n += len(plain)
    print("echoed", n, got.hexdigest(), flush=True)
    print("sent", hashlib.sha256(data).hexdigest(), flush=True)


if __name__ == "__main__":
    cmd, port = sys.argv[1], int(sys.argv[2])
    if cmd == "keepalive":
        keepalive(port, sys.argv[3])
    elif cmd == "garbage":
        garbage(port)
    elif cmd == "echo":
        echo(port, sys.argv[3], int(sys.argv[4]))
    elif cmd == "stall":
        stall(port, int(sys.argv[3]), sys.argv[4])
    else:
        raise SystemExit(f"unknown command {cmd}")
