# An HTTP authentication backend as EMQX's HTTP authenticator expects one
# (Python's http.server, not megaconn's code): POST JSON {username,
# password, clientid, peerhost, protocol}, answered by user name:
#   alice (password apw): 200 {"result": "allow"}; another password: deny
#   bob: 200 {"result": "deny"}      ig: 200 {"result": "ignore"}
#   err: 500                         slow: allow after 3 s
#   bad: 200 with a body that is not JSON
#   no user name: 204 (allows); with client id anon-root: allow, is_superuser
#   dev: allow with EMQX's acl: publish tele/${clientid}/#, subscribe
#        cmd/${username}/#, deny all else
#   root: allow, is_superuser, and an acl denying all (a superuser is not limited)
#   short: allow with expire_at two seconds from now
#   protocol ws or sse: allow when the cookie holds session=good (and the
#        headers carry it too), else deny
# Authorization requests (EMQX's HTTP authorizer: the body has "action"),
# answered by topic:
#   ok/...: allow        no/...: deny       ig/...: ignore     err/...: 500
#   bad/...: not JSON    slow/...: allow after 3 s
#   user root subscribing: allow (any filter); anything else: deny
# GET /seen: every request body received so far, as a JSON list.
# usage: python3 auth_http_backend.py PORT   (prints READY; runs until killed)
import json, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

seen, lock = [], threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, body=b"", kind="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        with lock:
            body = json.dumps(seen).encode()
        self.answer(200, body)

    def do_POST(self):
        ask = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with lock:
            seen.append(ask)
        user = ask.get("username", "")
        result = lambda r: self.answer(200, json.dumps({"result": r, "is_superuser": False}).encode())
        if "action" in ask:
            topic = ask["topic"]
            if user == "root" and ask["action"] == "subscribe":
                result("allow")
            elif topic.startswith("ok/"):
                result("allow")
            elif topic.startswith("slow/"):
                time.sleep(3)
                result("allow")
            elif topic.startswith("ig/"):
                result("ignore")
            elif topic.startswith("err/"):
                self.answer(500, b"backend error", "text/plain")
            elif topic.startswith("bad/"):
                self.answer(200, b"allow", "text/plain")
            else:
                result("deny")
        elif ask.get("protocol") in ("ws", "sse"):
            good = "session=good" in (ask.get("cookie") or "") and "session=good" in ask.get("headers", {}).get("cookie", "")
            result("allow" if good else "deny")
        elif user == "alice":
            result("allow" if ask.get("password") == "apw" else "deny")
        elif user == "bob":
            result("deny")
        elif user == "ig":
            result("ignore")
        elif user == "err":
            self.answer(500, b"backend error", "text/plain")
        elif user == "slow":
            time.sleep(3)
            result("allow")
        elif user == "bad":
            self.answer(200, b"allow", "text/plain")
        elif user == "" and ask.get("clientid") == "anon-root":
            self.answer(200, json.dumps({"result": "allow", "is_superuser": True}).encode())
        elif user == "":
            self.answer(204)
        elif user == "dev":
            acl = [{"permission": "allow", "action": "publish", "topic": "tele/${clientid}/#"},
                   {"permission": "allow", "action": "subscribe", "topic": "cmd/${username}/#"},
                   {"permission": "deny", "action": "all", "topic": "#"}]
            self.answer(200, json.dumps({"result": "allow", "acl": acl}).encode())
        elif user == "root":
            acl = [{"permission": "deny", "action": "all", "topic": "#"}]
            self.answer(200, json.dumps({"result": "allow", "is_superuser": True, "acl": acl}).encode())
        elif user == "short":
            self.answer(200, json.dumps({"result": "allow", "expire_at": int(time.time()) + 2}).encode())
        else:
            result("deny")


server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
print("READY", flush=True)
server.serve_forever()
