"""A raw-socket Server-Sent Events reader (no SSE library: the wire format
read by hand, as RFC/WHATWG describe it) that loses its stream and resumes
with Last-Event-ID.

usage: sse_resume.py PORT ADMIN_ADDR [ws|http]   (the server's --protocol)
  1. GET /events?subscribe=news with Accept: text/event-stream: 200,
     text/event-stream, `subscribed` events for news and *, then m1..m3;
  2. close; m4..m7 and a broadcast published; reconnect with the last id:
     exactly m4..m7 and the broadcast, then `subscribed` recovered true;
  3. a request without Accept: text/event-stream or Upgrade gets 426 on
     a WebSocket port, the usual 200 on an HTTP port.
Prints 'OK' when every check held.
"""
import json
import socket
import sys
import urllib.request

port, admin = int(sys.argv[1]), sys.argv[2]
mode = sys.argv[3] if len(sys.argv) > 3 else "ws"


def publish(path, data):
    req = urllib.request.Request(f"http://{admin}{path}", data=data.encode(), method="POST",
                                 headers={"Content-Type": "application/octet-stream"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200, r.status


class Stream:
    def __init__(self, last_event_id=None):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10)
        extra = f"Last-Event-ID: {last_event_id}\r\n" if last_event_id else ""
        self.s.sendall(f"GET /events?subscribe=news HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n{extra}\r\n".encode())
        self.buf = b""
        head = self._until(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        assert lines[0] == "HTTP/1.1 200 OK", lines
        assert "Content-Type: text/event-stream" in lines, lines

    def _until(self, sep):
        while sep not in self.buf:
            chunk = self.s.recv(65536)
            assert chunk, "the server closed the stream"
            self.buf += chunk
        part, self.buf = self.buf.split(sep, 1)
        return part

    def event(self):
        """The next event: (type, id, data); comments and retry skipped."""
        while True:
            block = self._until(b"\n\n").decode()
            kind, ident, data = "message", None, []
            for line in block.split("\n"):
                if line.startswith(":"):
                    continue
                field, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if field == "event":
                    kind = value
                elif field == "id":
                    ident = value
                elif field == "data":
                    data.append(value)
            if data:
                return kind, ident, json.loads("\n".join(data))


def main():
    st = Stream()
    subs = [st.event() for _ in range(2)]
    assert sorted(e[2]["topic"] for e in subs) == ["*", "news"] and all(e[0] == "subscribed" for e in subs), subs
    for i in (1, 2, 3):
        publish("/publish?topic=news", f"m{i}")
    got = [st.event() for _ in range(3)]
    assert [e[2]["data"] for e in got] == ["m1", "m2", "m3"], got
    last_id = got[-1][1]
    assert f"news:{got[-1][2]['epoch']}:3" in last_id.split(","), last_id
    st.s.close()
    for i in (4, 5, 6, 7):
        publish("/publish?topic=news", f"m{i}")
    publish("/broadcast", "all")
    st = Stream(last_id)
    got = []
    answers = 0
    while answers < 2:
        e = st.event()
        if e[0] == "subscribed":
            assert e[2]["recovered"] is True, e
            answers += 1
        else:
            got.append(e)
    news = [(e[2]["offset"], e[2]["data"]) for e in got if e[2]["stream"] == "topic"]
    assert news == [(4, "m4"), (5, "m5"), (6, "m6"), (7, "m7")], got
    assert [e[2]["data"] for e in got if e[2]["stream"] == "broadcast"] == ["all"], got
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"GET /events HTTP/1.1\r\nHost: localhost\r\n\r\n")
    answer = s.recv(4096).decode()
    if mode == "http":
        # An HTTP port answers a plain request as ever.
        assert answer.startswith("HTTP/1.1 200") and answer.endswith("Hello world!"), answer
    else:
        # Neither an upgrade nor an event stream: 426 naming both.
        assert answer.startswith("HTTP/1.1 426") and "text/event-stream" in answer, answer
    print("OK", flush=True)


main()
