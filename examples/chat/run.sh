#!/usr/bin/env bash
# The chat example on one machine: megaconn (WebSocket on 8800, admin API
# on 127.0.0.1:8801) and the backend (the page and the login on 8802).
# Open http://127.0.0.1:8802/ in two browser windows. Needs megaconn on
# the PATH and Python's PyJWT (pip install pyjwt). Ctrl-C stops both.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
secret=$(mktemp)
head -c 48 /dev/urandom | base64 > "$secret"
trap 'kill $(jobs -p) 2>/dev/null; rm -f "$secret"; wait' EXIT
megaconn server --protocol ws --ports 8800 --admin 127.0.0.1:8801 \
  --auth jwt --jwt-secret-file "$secret" \
  --upstream http://127.0.0.1:8802/hook --presence-events --history 100 &
python3 "$here/backend.py" 8802 127.0.0.1:8801 8800 "$secret" &
echo "chat: open http://127.0.0.1:8802/ in two browser windows"
wait
