//! Push through the admin API on real sockets: /metrics read by
//! Prometheus's own parser, unicast/broadcast/topic reaching exactly their
//! targets, slow consumers closed without hurting the others, and the
//! admin API's guard rails.
use crate::common::*;
use serde_json::Value;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn admin_addr(ready: &Value) -> String {
    ready["admin"].as_str().expect("the server reports its admin address").to_string()
}

fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = ((payload.len() + 1) as u16).to_be_bytes().to_vec();
    f.push(kind);
    f.extend_from_slice(payload);
    f
}

/// Data of every push frame in `buf` (kind 8: stream, topic, seq, stamp, epoch, data).
fn pushes(buf: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut pos = 0;
    while buf.len() >= pos + 3 {
        let len = u16::from_be_bytes([buf[pos], buf[pos + 1]]) as usize;
        if buf.len() < pos + 2 + len {
            break;
        }
        let (kind, payload) = (buf[pos + 2], &buf[pos + 3..pos + 2 + len]);
        if kind == 8 {
            let tlen = payload[1] as usize;
            out.push(payload[2 + tlen + 20..].to_vec());
        }
        pos += 2 + len;
    }
    out
}

/// Read (non-blocking sweeps) until the pushes received on every socket
/// satisfy `done`; panic after 20 s naming `what`. Absence is proven by
/// order: a push that should not have reached a socket would arrive
/// before a later one that did (one worker queues a connection's pushes
/// in order), so tests wait for a marker sent after what they check.
fn collect(socks: &mut [TcpStream], bufs: &mut [Vec<u8>], what: &str, done: impl Fn(&[Vec<Vec<u8>>]) -> bool) -> Vec<Vec<Vec<u8>>> {
    let end = Instant::now() + Duration::from_secs(20);
    let mut chunk = [0u8; 65536];
    loop {
        for (s, b) in socks.iter_mut().zip(bufs.iter_mut()) {
            while let Ok(n) = s.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                b.extend_from_slice(&chunk[..n]);
            }
        }
        let got: Vec<Vec<Vec<u8>>> = bufs.iter().map(|b| pushes(b)).collect();
        if done(&got) {
            return got;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// GET /metrics and parse it with Prometheus's own OpenMetrics parser
/// (Python prometheus_client); (families, value of `gauge`).
fn scrape(addr: &str, gauge: &str) -> (usize, f64) {
    let (status, text) = http(addr, "GET", "/metrics", b"", None);
    assert_eq!(status, 200, "{text}");
    let script = format!(
        "import sys\nfrom prometheus_client.openmetrics.parser import text_string_to_metric_families as p\n\
         fams = {{f.name: f for f in p(sys.stdin.read())}}\nprint(len(fams), fams['{gauge}'].samples[0].value)"
    );
    let mut py = std::process::Command::new("python3");
    py.args(["-c", &script]).stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let mut child = py.spawn().expect("python3");
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the OpenMetrics parser rejected /metrics: {}\n{text}", String::from_utf8_lossy(&out.stderr));
    let parsed = String::from_utf8_lossy(&out.stdout).to_string();
    let mut it = parsed.split_whitespace();
    (it.next().unwrap().parse().unwrap(), it.next().unwrap().parse().unwrap())
}

#[test]
fn metrics_parse_with_prometheus_and_agree_with_the_client() {
    let ports = free_ports(2);
    let (mut srv, _, ready) = server_ready(&["--ports", &ports.arg()], None);
    let admin = admin_addr(&ready);
    let client_admin = format!("127.0.0.1:{}", free_port());
    let mut cmd = megaconn();
    cmd.args(["client", "--ports", &ports.arg(), "--connections", "2000", "--rate", "5000", "--heartbeat", "1s", "--hold", "5s", "--json"]);
    cmd.args(["--admin", &client_admin]);
    let load = std::thread::spawn(move || run(cmd, Duration::from_secs(60)));
    srv.wait_for(Duration::from_secs(30), "2000 held", |v| v["event"] == "stats" && v["active"] == 2000);
    let (families, value) = scrape(&admin, "megaconn_connections");
    assert_eq!(value, 2000.0);
    assert!(families >= 15, "{families} metric families");
    // The load generator's own /metrics, read the same way.
    let (families, value) = scrape(&client_admin, "megaconn_client_connections");
    assert_eq!(value, 2000.0);
    assert!(families >= 10, "{families} metric families");
    let (status, stats) = http(&admin, "GET", "/stats", b"", None);
    assert_eq!(status, 200);
    let stats: Value = serde_json::from_str(&stats).unwrap();
    assert_eq!(stats["active"], 2000, "{stats}");
    let (code, out, err) = load.join().unwrap();
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["summary"]["held"], 2000);
    assert_eq!(http(&admin, "GET", "/healthz", b"", None).0, 200);
    assert!(srv.terminate().success());
}

#[test]
fn unicast_broadcast_and_topic_reach_exactly_their_targets() {
    raise_fd_limit();
    let port = free_port();
    let (mut srv, _, ready) = server_ready(&["--ports", &port.to_string(), "--workers", "2"], None);
    let admin = admin_addr(&ready);
    let mut socks: Vec<TcpStream> = (0..1000).map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap()).collect();
    for (i, s) in socks.iter_mut().enumerate() {
        s.write_all(&frame(6, if i % 2 == 0 { b"even" } else { b"odd" })).unwrap();
        s.set_nonblocking(true).unwrap();
    }
    srv.wait_for(Duration::from_secs(20), "1000 subscribed", |v| v["event"] == "stats" && v["active"] == 1000 && v["subscriptions"] == 1000);
    let (status, list) = http(&admin, "GET", "/connections?limit=1000", b"", None);
    assert_eq!(status, 200, "{list}");
    let list: Value = serde_json::from_str(&list).unwrap();
    let by_peer: HashMap<String, u64> =
        list["connections"].as_array().unwrap().iter().map(|c| (c["peer"].as_str().unwrap().to_string(), c["id"].as_u64().unwrap())).collect();
    assert_eq!(by_peer.len(), 1000);
    let mut bufs = vec![Vec::new(); 1000];
    // Unicast to connection 17 by its id, then a broadcast: once every
    // connection has the broadcast, only 17 may have anything before it.
    let id = by_peer[&socks[17].local_addr().unwrap().to_string()];
    let (status, r) = http(&admin, "POST", &format!("/push/{id}"), b"solo", None);
    assert_eq!(status, 200, "{r}");
    assert_eq!(serde_json::from_str::<Value>(&r).unwrap()["queued"], 1, "{r}");
    let (status, r) = http(&admin, "POST", "/broadcast", b"all", None);
    assert_eq!(status, 200, "{r}");
    assert_eq!(serde_json::from_str::<Value>(&r).unwrap()["queued"], 1000, "{r}");
    let all = b"all".to_vec();
    let got = collect(&mut socks, &mut bufs, "the broadcast on every connection", |g| g.iter().all(|p| p.contains(&all)));
    for (i, p) in got.iter().enumerate() {
        let want: Vec<&[u8]> = if i == 17 { vec![b"solo", b"all"] } else { vec![b"all"] };
        assert_eq!(p, &want, "connection {i}: the unicast reaches only 17, the broadcast everyone once");
    }
    bufs.iter_mut().for_each(Vec::clear);
    // A topic: exactly its subscribers; a broadcast after it marks the end.
    let (status, r) = http(&admin, "POST", "/publish?topic=even", b"e", None);
    assert_eq!((status, serde_json::from_str::<Value>(&r).unwrap()["queued"].as_u64()), (200, Some(500)), "{r}");
    let (status, _) = http(&admin, "POST", "/broadcast", b"end", None);
    assert_eq!(status, 200);
    let end = b"end".to_vec();
    let got = collect(&mut socks, &mut bufs, "the end marker on every connection", |g| g.iter().all(|p| p.contains(&end)));
    for (i, p) in got.iter().enumerate() {
        let want: Vec<&[u8]> = if i % 2 == 0 { vec![b"e", b"end"] } else { vec![b"end"] };
        assert_eq!(p, &want, "connection {i}");
    }
    // A connection id nobody has.
    assert_eq!(http(&admin, "POST", &format!("/push/{}", 999u64 << 48), b"x", None).0, 404);
    assert!(srv.terminate().success());
}

#[test]
fn a_reader_too_slow_for_its_pushes_is_closed_and_the_others_get_everything() {
    let port = free_port().to_string();
    let (mut srv, _, ready) = server_ready(&["--ports", &port, "--workers", "1", "--max-pending-bytes", "65536"], None);
    let admin = admin_addr(&ready);
    // One connection that never reads, with a small receive buffer.
    let slow = TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
    let small: libc::c_int = 4096;
    // SAFETY: setsockopt with an int on a socket we own.
    unsafe { libc::setsockopt(std::os::fd::AsRawFd::as_raw_fd(&slow), libc::SOL_SOCKET, libc::SO_RCVBUF, (&small as *const libc::c_int).cast(), 4) };
    let mut cmd = megaconn();
    cmd.args(["client", "--ports", &port, "--connections", "99", "--heartbeat", "off", "--hold", "12s", "--json"]);
    let load = std::thread::spawn(move || run(cmd, Duration::from_secs(90)));
    srv.wait_for(Duration::from_secs(20), "100 connections", |v| v["event"] == "stats" && v["active"] == 100);
    // 10 MB of pushes: 2,500 broadcasts of 4,000 bytes.
    let msg = vec![b'p'; 4000];
    for _ in 0..2500 {
        let (status, r) = http(&admin, "POST", "/broadcast", &msg, None);
        assert_eq!(status, 200, "{r}");
    }
    let closed = srv.wait_for(Duration::from_secs(20), "slow consumer closed", |v| v["event"] == "stats" && v["close_reasons"]["slow_consumer"] == 1);
    assert!(closed["rss_bytes"].as_u64().unwrap() < 64 << 20, "server memory stays bounded: {closed}");
    let (code, out, err) = load.join().unwrap();
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let p = &v["summary"]["push"];
    assert_eq!(p["received"], 99 * 2500, "{p}");
    assert_eq!(p["duplicates"], 0, "{p}");
    assert_eq!(p["gaps"], 0, "{p}");
    drop(slow);
    assert!(srv.terminate().success());
}

#[test]
fn the_admin_api_guards_itself() {
    // Off loopback without a token: refused before anything starts.
    let mut cmd = megaconn();
    cmd.args(["server", "--ports", &free_port().to_string(), "--admin", "0.0.0.0:0"]);
    let (code, _, err) = run(cmd, Duration::from_secs(20));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--admin-token"), "{err}");
    // With a token, a request without it gets 401 (we talk to it over loopback).
    let (mut srv, _, ready) = server_ready(&["--ports", &free_port().to_string(), "--admin", "0.0.0.0:0", "--admin-token", "s3cret"], None);
    let port = admin_addr(&ready).rsplit(':').next().unwrap().to_string();
    let admin = format!("127.0.0.1:{port}");
    assert_eq!(http(&admin, "GET", "/stats", b"", None).0, 401);
    assert_eq!(http(&admin, "GET", "/stats", b"", Some("wrong")).0, 401);
    assert_eq!(http(&admin, "GET", "/stats", b"", Some("s3cret")).0, 200);
    // Probes (Kubernetes httpGet) carry no secret: /healthz answers them.
    assert_eq!(http(&admin, "GET", "/healthz", b"", None).0, 200);
    // Malformed requests: a 4xx with a one-line reason.
    for (method, path, body, want) in [
        ("POST", "/push/not-an-id", &b"x"[..], 400),
        ("POST", "/publish?topic=bad%20topic", b"x", 400),
        ("POST", "/broadcast", &[0u8; 65_537][..], 413),
        ("GET", "/nothing", b"", 404),
        ("GET", "/broadcast", b"", 405),
    ] {
        let (status, body) = http(&admin, method, path, body, Some("s3cret"));
        assert_eq!(status, want, "{method} {path}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert!(v["error"].as_str().is_some_and(|e| !e.is_empty() && !e.contains('\n')), "{body}");
    }
    assert!(srv.terminate().success());
}

#[test]
fn the_push_bench_times_every_broadcast_to_every_connection() {
    let ports = free_ports(4);
    let mut cmd = megaconn();
    cmd.args(["bench", "--scenario", "push", "--connections", "3000", "--broadcasts", "3", "--broadcast-interval", "300ms"]);
    cmd.args(["--ports", &ports.arg(), "--hold", "6s", "--heartbeat", "1s", "--json"]);
    let (code, out, err) = run(cmd, Duration::from_secs(90));
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let p = &v["push"];
    assert_eq!(p["broadcasts"], 3, "{p}");
    assert_eq!(p["expected_deliveries"], 9000, "{p}");
    assert_eq!(p["deliveries"], 9000, "{p}");
    assert_eq!(p["dropped"], 0, "{p}");
    assert_eq!(p["duplicates"], 0, "{p}");
    for r in p["rounds"].as_array().unwrap() {
        assert_eq!(r["deliveries"], 3000, "{r}");
        assert!(r["time_to_all_ms"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert_eq!(p["delivery_ms"]["count"], 9000, "{p}");
    assert_eq!(v["client"]["heartbeats_answered"], v["client"]["heartbeats_sent"], "heartbeats answered during pushes");
    // An io_uring server's sockets go when the kernel has torn its rings
    // down, which it finishes shortly after the process exits.
    wait_until("no socket left on the bench's ports", Duration::from_secs(10), || sockets_on(ports.first, ports.last) == 0);
}

#[test]
fn topics_spread_over_connections_reach_only_their_subscribers() {
    let mut cmd = megaconn();
    cmd.args(["bench", "--scenario", "push", "--connections", "1000", "--topics", "10", "--broadcasts", "2", "--broadcast-interval", "300ms"]);
    cmd.args(["--ports", &free_port().to_string(), "--hold", "5s", "--json"]);
    let (code, out, err) = run(cmd, Duration::from_secs(90));
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let p = &v["push"];
    // Each connection took one of 10 topics; each round published once to every topic.
    assert_eq!((p["deliveries"].as_u64(), p["expected_deliveries"].as_u64()), (Some(2000), Some(2000)), "{p}");
    let topics = v["client"]["push"]["topics"].as_object().unwrap();
    assert_eq!(topics.len(), 10, "{topics:?}");
    assert!(topics.values().all(|n| n.as_u64() == Some(200)), "100 subscribers x 2 rounds per topic: {topics:?}");
}

/// An event stream read by hand from the WHATWG format: each event's
/// bytes as they came.
struct EventStream {
    s: TcpStream,
    buf: Vec<u8>,
}

impl EventStream {
    fn open(port: u16, target: &str) -> EventStream {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        write!(s, "GET {target} HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n\r\n").unwrap();
        let mut e = EventStream { s, buf: Vec::new() };
        let head = String::from_utf8(e.until(b"\r\n\r\n")).unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n") && head.contains("Content-Type: text/event-stream"), "{head}");
        e
    }

    /// Bytes up to and with `sep`.
    fn until(&mut self, sep: &[u8]) -> Vec<u8> {
        loop {
            if let Some(at) = self.buf.windows(sep.len()).position(|w| w == sep) {
                let rest = self.buf.split_off(at + sep.len());
                return std::mem::replace(&mut self.buf, rest);
            }
            let mut chunk = [0u8; 4096];
            let n = self.s.read(&mut chunk).expect("more of the stream within 20 s");
            assert!(n > 0, "the server closed the stream");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// The next event, blank line included (blocks of comments and
    /// `retry` alone skipped).
    fn event(&mut self) -> String {
        loop {
            let block = String::from_utf8(self.until(b"\n\n")).unwrap();
            if block.lines().any(|l| l.starts_with("data:")) {
                return block;
            }
        }
    }
}

/// A broadcast reaches every event stream of a worker as the same bytes
/// from one encoding (`sse_encodes`): the five streams that follow only
/// the broadcasts get identical events, and the one that also follows a
/// topic the same data under its own id (its positions in both). On a
/// WebSocket port on epoll and an HTTP port on io_uring.
#[test]
fn a_broadcast_is_encoded_once_and_every_event_stream_gets_the_same_bytes() {
    for (protocol, io) in [("ws", "epoll"), ("http", "uring")] {
        let port = free_port();
        let args = ["--ports", &port.to_string(), "--workers", "1", "--protocol", protocol, "--io", io, "--history", "100"];
        let (mut srv, _, ready) = server_ready(&args, None);
        let admin = admin_addr(&ready);
        let mut streams: Vec<EventStream> = (0..5).map(|_| EventStream::open(port, "/events")).collect();
        streams.push(EventStream::open(port, "/events?subscribe=news"));
        // Each stream's starting positions first: the broadcast is then live.
        for (i, s) in streams.iter_mut().enumerate() {
            for _ in 0..if i == 5 { 2 } else { 1 } {
                let e = s.event();
                assert!(e.starts_with("event: subscribed\n"), "{protocol}: {e}");
            }
        }
        let (status, r) = http(&admin, "POST", "/broadcast", b"to every stream", None);
        assert_eq!((status, serde_json::from_str::<Value>(&r).unwrap()["queued"].as_u64()), (200, Some(6)), "{protocol}: {r}");
        let events: Vec<String> = streams.iter_mut().map(EventStream::event).collect();
        for (i, e) in events.iter().enumerate().take(5) {
            assert_eq!(e, &events[0], "{protocol}: stream {i} got other bytes");
        }
        let (id, data) = events[0].split_once('\n').unwrap();
        assert!(id.starts_with("id: *:") && data.starts_with("data: {") && data.contains(r#""data":"to every stream""#), "{protocol}: {}", events[0]);
        let (own_id, own_data) = events[5].split_once('\n').unwrap();
        let tokens: Vec<&str> = own_id.trim_start_matches("id: ").split(',').collect();
        assert!(
            tokens.len() == 2 && tokens.contains(&&id[4..]) && tokens.iter().any(|t| t.starts_with("news:")),
            "{protocol}: {own_id} carries both positions"
        );
        assert_eq!(own_data, data, "{protocol}: the same data under its own id");
        let v = srv.wait_for(Duration::from_secs(20), "the broadcast counted", |v| v["event"] == "stats" && v["push_delivered"] == 6);
        assert_eq!(v["sse_encodes"], 1, "{protocol}: one encoding for six streams: {v}");
        assert!(srv.terminate().success());
    }
}

/// `--until-pushes N` ends the hold once N pushes are in and says so; short
/// of them, the hold runs to its deadline and says how many came.
#[test]
fn until_pushes_ends_the_hold_once_they_are_in_and_names_a_shortfall() {
    let ports = free_ports(1);
    let (mut srv, _, ready) = server_ready(&["--ports", &ports.arg()], None);
    let admin = admin_addr(&ready);
    let client = |until: &str, hold: &str| {
        let mut cmd = megaconn();
        cmd.args(["client", "--ports", &ports.arg(), "--connections", "10", "--subscribe", "t", "--heartbeat", "off", "--json"]);
        cmd.args(["--until-pushes", until, "--hold", hold]);
        std::thread::spawn(move || run(cmd, Duration::from_secs(120)))
    };
    let publish = |n: usize| {
        for i in 0..n {
            let (status, body) = http(&admin, "POST", "/publish?topic=t", format!("m{i}").as_bytes(), None);
            assert_eq!(status, 200, "{body}");
        }
    };
    // 10 subscribers x 3 publishes: the hold (a minute at most) ends at 30.
    let load = client("30", "60s");
    srv.wait_for(Duration::from_secs(30), "10 subscribed", |v| v["event"] == "stats" && v["subscriptions"] == 10);
    publish(3);
    let (code, out, err) = load.join().unwrap();
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("hold ended: 30 pushes received (--until-pushes 30)"), "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["summary"]["push"]["received"], 30, "{}", v["summary"]["push"]);
    let hold = &v["summary"]["phases"][1];
    assert_eq!(hold["name"], "hold");
    assert!(hold["seconds"].as_f64().is_some_and(|s| s < 60.0), "the hold ended before its deadline: {hold}");
    srv.wait_for(Duration::from_secs(30), "the first client gone", |v| v["event"] == "stats" && v["active"] == 0);
    // One publish of the 100 waited for: the deadline ends it, and says so.
    let load = client("100", "3s");
    srv.wait_for(Duration::from_secs(30), "10 subscribed again", |v| v["event"] == "stats" && v["subscriptions"] == 10);
    publish(1);
    let (code, out, err) = load.join().unwrap();
    assert_eq!(code, 0, "{err}");
    // What came before the deadline (on a slow machine the publish may
    // miss the 3 s), as the summary counts it.
    let v: Value = serde_json::from_str(&out).unwrap();
    let got = v["summary"]["push"]["received"].as_u64().unwrap_or(0);
    assert!(err.contains(&format!("hold ended at its deadline with {got} of the 100 pushes --until-pushes waited for")), "{err}");
    assert!(srv.terminate().success());
}
