"""The chat example's backend: logs users in (mints their JWT), serves the
page, hears what browsers say through megaconn's --upstream webhook and
publishes it to the room through megaconn's admin API.

usage: backend.py PORT ADMIN WS_PORT SECRET_FILE   (see README.md)
"""
import json
import sys
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import jwt

PORT, ADMIN, WS_PORT = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
SECRET = Path(sys.argv[4]).read_bytes().rstrip(b"\n")
PAGE = (Path(__file__).parent / "index.html").read_bytes()


def admin(method, path, body=None):
    req = urllib.request.Request(f"http://{ADMIN}{path}", data=body, method=method,
                                 headers={"Content-Type": "application/octet-stream"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def publish(room, event):
    admin("POST", f"/publish?topic=room.{room}", json.dumps(event).encode())


class Backend(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, status, body=b"", kind="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        if url.path == "/":
            return self.reply(200, PAGE, "text/html; charset=utf-8")
        if url.path == "/online":
            room = urllib.parse.parse_qs(url.query).get("room", [""])[0]
            users = admin("GET", f"/presence?topic=room.{urllib.parse.quote(room)}")["users"]
            return self.reply(200, json.dumps([u["user"] for u in users]).encode())
        self.reply(404)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/login":
            name = json.loads(body).get("name", "")
            if not name.isalnum() or len(name) > 32:
                return self.reply(400, b'{"error": "a name is 1-32 letters or digits"}')
            claims = {"sub": name, "exp": int(time.time()) + 3600, "topics": ["room.*"], "info": {"name": name}}
            token = jwt.encode(claims, SECRET, algorithm="HS256")
            return self.reply(200, json.dumps({"token": token, "ws": f"ws://{self.headers['Host'].split(':')[0]}:{WS_PORT}/chat"}).encode())
        if self.path == "/hook":
            # megaconn's upstream: what browsers said, and who came and went.
            self.reply(204)
            for m in json.loads(body)["messages"]:
                room = (m.get("topic") or "").removeprefix("room.")
                if not room:
                    continue
                if m["type"] == "message":
                    publish(room, {"from": m["user"], "text": m.get("data", "")[:1000]})
                else:
                    publish(room, {"event": m["type"], "user": m["user"]})
            return
        self.reply(404)


ThreadingHTTPServer(("127.0.0.1", PORT), Backend).serve_forever()
