"""permessage-deflate at the byte level against megaconn: frames written
by hand (masked, RSV1 set as the test needs), compression by Python's
zlib (raw deflate, the 00 00 FF FF tail stripped, RFC 7692 §7.2.1).

usage: ws_deflate_raw.py PORT CASE [N]
  bomb          a 16 KB message that inflates to 16 MB: closed with 1009
  rsv1-ping     RSV1 on a ping: closed with 1002
  rsv1-cont     RSV1 on a continuation frame: closed with 1002
  fragments     a compressed message in 3 fragments with a ping between
                them: the pong, then the echo (compressed) equal
  identical N   N subscribers of topic room: prints 'ready', then each
                reads one push; prints 'identical <hex of the frame>' if
                every connection got the same bytes with RSV1 set
Prints 'OK' at the end.
"""
import os
import socket
import sys
import zlib

port, case = int(sys.argv[1]), sys.argv[2]
OFFER = "permessage-deflate; client_max_window_bits"


def deflate(data):
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    out = c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH)
    assert out.endswith(b"\x00\x00\xff\xff")
    return out[:-4]


def inflate(data):
    return zlib.decompressobj(-15).decompress(data + b"\x00\x00\xff\xff")


def frame(b0, payload):
    mask = os.urandom(4)
    n = len(payload)
    head = bytes([b0])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head += bytes([0x80 | 127]) + n.to_bytes(8, "big")
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


class Conn:
    def __init__(self, path="/"):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=20)
        self.s.sendall(
            f"GET {path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
            f"Sec-WebSocket-Extensions: {OFFER}\r\n\r\n".encode()
        )
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            self.buf += self.s.recv(4096)
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 101"), head
        assert b"Sec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover; client_no_context_takeover" in head, head

    def need(self, n):
        while len(self.buf) < n:
            more = self.s.recv(65536)
            assert more, "closed early"
            self.buf += more

    def read(self):
        """One frame: (first byte, payload, its raw bytes)."""
        self.need(2)
        b0, b1 = self.buf[0], self.buf[1]
        n, at = b1 & 0x7F, 2
        if n == 126:
            self.need(4)
            n, at = int.from_bytes(self.buf[2:4], "big"), 4
        elif n == 127:
            self.need(10)
            n, at = int.from_bytes(self.buf[2:10], "big"), 10
        self.need(at + n)
        raw, self.buf = self.buf[: at + n], self.buf[at + n:]
        return b0, raw[at:], raw

    def close_code(self):
        b0, payload, _ = self.read()
        assert b0 & 0x0F == 8, hex(b0)
        return int.from_bytes(payload[:2], "big")


if case == "bomb":
    c = Conn()
    bomb = deflate(b"\0" * (16 << 20))
    assert len(bomb) < 20_000, len(bomb)
    c.s.sendall(frame(0xC2, bomb))
    code = c.close_code()
    print("close", code, flush=True)
    assert code == 1009
elif case == "rsv1-ping":
    c = Conn()
    c.s.sendall(frame(0xC9, b"x"))
    code = c.close_code()
    print("close", code, flush=True)
    assert code == 1002
elif case == "rsv1-cont":
    c = Conn()
    z = deflate(b"hello " * 50)
    c.s.sendall(frame(0x41, z[:5]) + frame(0xC0, z[5:]))
    code = c.close_code()
    print("close", code, flush=True)
    assert code == 1002
elif case == "fragments":
    c = Conn()
    body = b"fragmented " * 100
    z = deflate(body)
    c.s.sendall(frame(0x41, z[:7]) + frame(0x89, b"between") + frame(0x00, z[7:20]) + frame(0x80, z[20:]))
    b0, payload, _ = c.read()
    assert b0 == 0x8A and payload == b"between", (hex(b0), payload)
    b0, payload, _ = c.read()
    assert b0 == 0xC1, hex(b0)
    assert inflate(payload) == body
    print("echo", len(body), "in", len(payload), flush=True)
elif case == "identical":
    n = int(sys.argv[3])
    conns = [Conn("/?subscribe=room") for _ in range(n)]
    print("ready", flush=True)
    frames, message = set(), b""
    for c in conns:
        b0, payload, raw = c.read()
        assert b0 == 0xC1, hex(b0)
        message = inflate(payload)
        frames.add(raw)
    assert len(frames) == 1, f"{len(frames)} different frames"
    (raw,) = frames
    print("identical", len(raw), "bytes on the wire for a message of", len(message), flush=True)
else:
    sys.exit(f"unknown case {case}")
print("OK", flush=True)
