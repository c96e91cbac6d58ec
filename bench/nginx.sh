# Sourced by bench/http.sh and bench/https.sh: the nginx they compare with,
# configured the same way for both, and wrk's latency in milliseconds.

# nginx_conf WORKDIR PORT WORKERS [CERT KEY]: write WORKDIR/nginx.conf
# ("Hello world!" on every path, or $NGINX_RETURN's status and body;
# keep-alive without limit; with CERT and KEY: TLS 1.3 only, no session
# cache, as megaconn's ticket-only server).
nginx_conf() {
  local work=$1 port=$2 workers=$3 cert=${4:-} key=${5:-} ssl="" tls="" answer=${NGINX_RETURN:-'200 "Hello world!"'}
  if [ -n "$cert" ]; then
    ssl=" ssl"
    tls="ssl_protocols TLSv1.3; ssl_session_cache off; ssl_certificate $cert; ssl_certificate_key $key;"
  fi
  cat > "$work/nginx.conf" <<CONF
worker_processes $workers;
daemon off;
pid $work/nginx.pid;
error_log $work/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 100000000;
  keepalive_timeout 65;
  server {
    listen 127.0.0.1:$port$ssl reuseport backlog=65535;
    $tls
    location / { default_type text/plain; return $answer; }
  }
}
CONF
}

# wrk's "99%" column (us/ms/s) in milliseconds.
to_ms() { awk '{v=$1; if (v ~ /us$/) {sub(/us$/,"",v); print v/1000} else if (v ~ /ms$/) {sub(/ms$/,"",v); print v} else if (v ~ /s$/) {sub(/s$/,"",v); print v*1000} else print v}'; }

# A scratch directory ($work) and the processes to stop on exit ($pids).
start_workdir() {
  work="$(mktemp -d)"
  pids=()
  trap cleanup EXIT INT TERM
}
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}

# need_tools CMD:PACKAGE...: install (Debian) the packages of missing commands.
need_tools() {
  local missing=() t
  for t in "$@"; do command -v "${t%%:*}" >/dev/null 2>&1 || missing+=("${t#*:}"); done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "installing ${missing[*]} (Debian packages)" >&2
    apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}
