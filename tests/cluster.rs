//! Two server nodes in two network namespaces, joined through a real
//! nats-server (Debian's package): a publish on node A reaches the
//! subscribers on A and B exactly once, a unicast through A reaches a
//! connection on B, stopping nats-server makes publishes fail with 503 and
//! /healthz say why, and restarting it restores delivery.
mod common;
use common::*;
use serde_json::Value;
use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::time::{Duration, Instant};

const NATS: &str = "10.203.0.1";
const NATS_PORT: &str = "4222";

/// Namespaces `mctest-<pid>-a`/`-b` joined by a veth pair (10.203.0.1 and
/// .2); removed when dropped, also when the test fails.
struct Pair {
    a: String,
    b: String,
}

impl Pair {
    fn make() -> Result<Pair, String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root".into());
        }
        let pid = std::process::id();
        let p = Pair { a: format!("mctest-{pid}-a"), b: format!("mctest-{pid}-b") };
        let (va, vb) = (format!("mct{pid}a"), format!("mct{pid}b"));
        for args in [
            vec!["netns", "add", &p.a],
            vec!["netns", "add", &p.b],
            vec!["-n", &p.a, "link", "set", "lo", "up"],
            vec!["-n", &p.b, "link", "set", "lo", "up"],
            vec!["link", "add", &va, "type", "veth", "peer", "name", &vb],
            vec!["link", "set", &va, "netns", &p.a],
            vec!["link", "set", &vb, "netns", &p.b],
            vec!["-n", &p.a, "addr", "add", "10.203.0.1/24", "dev", &va],
            vec!["-n", &p.b, "addr", "add", "10.203.0.2/24", "dev", &vb],
            vec!["-n", &p.a, "link", "set", &va, "up"],
            vec!["-n", &p.b, "link", "set", &vb, "up"],
        ] {
            let out = Command::new("ip").args(&args).output().map_err(|e| format!("no ip command: {e}"))?;
            if !out.status.success() {
                return Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()));
            }
        }
        Ok(p)
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for n in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

/// Run `f` on a thread inside namespace `ns`: sockets it makes live there.
fn in_ns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let fd = File::open(&path).expect("namespace exists");
        // SAFETY: setns on a namespace fd, for this thread only.
        assert_eq!(unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) }, 0, "setns {path}");
        f()
    })
    .join()
    .expect("namespace thread")
}

/// An admin request to a node (its API on the namespace's loopback).
fn admin(ns: &str, method: &str, path: &str, body: &[u8]) -> (u16, Value) {
    let (m, p, b) = (method.to_string(), path.to_string(), body.to_vec());
    // Not listening yet (start-up) reads as status 0.
    let (status, text) = in_ns(ns, move || match TcpStream::connect("127.0.0.1:9100") {
        Ok(_) => http("127.0.0.1:9100", &m, &p, &b, None),
        Err(e) => (0, e.to_string()),
    });
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

fn nats_server(ns: &str) -> Running {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns, "nats-server", "-a", NATS, "-p", NATS_PORT]);
    Running::spawn(cmd)
}

fn node(ns: &str, id: &str) -> Running {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns, env!("CARGO_BIN_EXE_megaconn"), "server", "--ports", "8000-8001", "--workers", "2", "--admin", "127.0.0.1:9100"]);
    cmd.args(["--cluster", &format!("nats://{NATS}:{NATS_PORT}"), "--node-id", id, "--json", "--stats-interval", "200ms", "--duration", "120s"]);
    Running::spawn(cmd)
}

fn wait_until(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    let end = Instant::now() + timeout;
    while !ok() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = ((payload.len() + 1) as u16).to_be_bytes().to_vec();
    f.push(kind);
    f.extend_from_slice(payload);
    f
}

/// Open `n` connections to the node in `ns`; the first `subscribed`
/// subscribe to topic "news".
fn connect(ns: &str, n: usize, subscribed: usize) -> Vec<TcpStream> {
    in_ns(ns, move || {
        (0..n)
            .map(|i| {
                let mut s = TcpStream::connect(("127.0.0.1", 8000 + (i % 2) as u16)).expect("connect to the node");
                if i < subscribed {
                    s.write_all(&frame(6, b"news")).unwrap();
                }
                s.set_nonblocking(true).unwrap();
                s
            })
            .collect()
    })
}

/// Push payloads each socket received within `wait`.
fn received(socks: &mut [TcpStream], wait: Duration) -> Vec<Vec<String>> {
    let mut bufs = vec![Vec::new(); socks.len()];
    let end = Instant::now() + wait;
    let mut chunk = [0u8; 65536];
    while Instant::now() < end {
        for (s, b) in socks.iter_mut().zip(bufs.iter_mut()) {
            while let Ok(n) = s.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                b.extend_from_slice(&chunk[..n]);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bufs.iter()
        .map(|buf| {
            let (mut out, mut pos) = (Vec::new(), 0);
            while buf.len() >= pos + 3 {
                let len = u16::from_be_bytes([buf[pos], buf[pos + 1]]) as usize;
                let (kind, payload) = (buf[pos + 2], &buf[pos + 3..pos + 2 + len]);
                if kind == 8 {
                    let tlen = payload[1] as usize;
                    out.push(String::from_utf8_lossy(&payload[2 + tlen + 16..]).to_string());
                }
                pos += 2 + len;
            }
            out
        })
        .collect()
}

fn healthy(ns: &str) -> bool {
    admin(ns, "GET", "/healthz", b"").0 == 200
}

#[test]
fn two_nodes_through_nats_deliver_once_route_unicasts_and_survive_an_outage() {
    let Ok(pair) = Pair::make().map_err(|why| eprintln!("SKIPPED: namespaces cannot be made here ({why})")) else { return };
    assert!(Command::new("nats-server").arg("--version").output().is_ok_and(|o| o.status.success()), "nats-server is not installed: run scripts/setup.sh");
    let mut nats = nats_server(&pair.a);
    let (_na, _nb) = (node(&pair.a, "A"), node(&pair.b, "B"));
    wait_until("both nodes healthy with the link up", Duration::from_secs(20), || healthy(&pair.a) && healthy(&pair.b));
    let (mut on_a, mut on_b) = (connect(&pair.a, 4, 2), connect(&pair.b, 4, 2));
    // B subscribes to the topic's subject once it has a subscriber.
    wait_until("B subscribed to megaconn.topic.news", Duration::from_secs(10), || admin(&pair.b, "GET", "/stats", b"").1["cluster"]["topics"] == 1);
    let want = |n: usize, what: &str| -> Vec<Vec<String>> { (0..4).map(|i| if i < n { vec![what.to_string()] } else { vec![] }).collect() };

    // A topic published on A: its subscribers on A and B, once each.
    let (status, r) = admin(&pair.a, "POST", "/publish?topic=news", b"hello");
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["queued"], 2, "A's own subscribers: {r}");
    assert_eq!(received(&mut on_a, Duration::from_millis(600)), want(2, "hello"));
    assert_eq!(received(&mut on_b, Duration::from_millis(100)), want(2, "hello"));

    // A broadcast on A: every connection on both nodes, once.
    let (status, r) = admin(&pair.a, "POST", "/broadcast", b"all");
    assert_eq!(status, 200, "{r}");
    assert_eq!(received(&mut on_a, Duration::from_millis(600)), want(4, "all"));
    assert_eq!(received(&mut on_b, Duration::from_millis(100)), want(4, "all"));

    // Unicast through A to a connection on B, by its NODE.ID id.
    let (status, list) = admin(&pair.b, "GET", "/connections?limit=10", b"");
    assert_eq!(status, 200, "{list}");
    let ids: HashMap<String, String> =
        list["connections"].as_array().unwrap().iter().map(|c| (c["peer"].as_str().unwrap().to_string(), c["id"].as_str().unwrap().to_string())).collect();
    let id = &ids[&on_b[3].local_addr().unwrap().to_string()];
    assert!(id.starts_with("B."), "{id}");
    let (status, r) = admin(&pair.a, "POST", &format!("/push/{id}"), b"direct");
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["remote"][0]["status"], 200, "{r}");
    assert_eq!(received(&mut on_b, Duration::from_millis(600)), vec![vec![], vec![], vec![], vec!["direct".to_string()]]);
    assert_eq!(received(&mut on_a, Duration::from_millis(100)), want(0, ""));
    let (status, r) = admin(&pair.a, "POST", "/push/C.1", b"nobody");
    assert_eq!(status, 404, "{r}");
    assert!(r["remote"][0]["detail"]["error"].as_str().unwrap().contains("no node 'C'"), "{r}");

    // NATS goes away: publishes fail with 503, /healthz says why, nothing
    // is delivered anywhere.
    nats.child.kill().unwrap();
    nats.child.wait().unwrap();
    wait_until("A unhealthy", Duration::from_secs(10), || !healthy(&pair.a));
    let (status, h) = admin(&pair.a, "GET", "/healthz", b"");
    assert_eq!((status, h["status"].as_str()), (503, Some("degraded")), "{h}");
    assert!(h["reason"].as_str().unwrap().contains("nats://10.203.0.1:4222"), "{h}");
    let (status, r) = admin(&pair.a, "POST", "/broadcast", b"lost?");
    assert_eq!(status, 503, "{r}");
    assert!(r["error"].as_str().unwrap().contains("down"), "{r}");
    let (_, metrics) = in_ns(&pair.a, || http("127.0.0.1:9100", "GET", "/metrics", b"", None));
    assert!(metrics.contains("megaconn_cluster_link_up 0"), "{metrics}");
    assert!(metrics.contains("megaconn_cluster_publish_failures_total 1"), "{metrics}");
    assert_eq!(received(&mut on_a, Duration::from_millis(300)), want(0, ""));
    assert_eq!(received(&mut on_b, Duration::from_millis(100)), want(0, ""));

    // NATS back: both links reconnect by themselves and delivery resumes.
    let _nats = nats_server(&pair.a);
    wait_until("both nodes reconnected", Duration::from_secs(20), || healthy(&pair.a) && healthy(&pair.b));
    let (_, s) = admin(&pair.b, "GET", "/stats", b"");
    assert!(s["cluster"]["reconnects"].as_u64() >= Some(1), "{s}");
    // The subscriptions are restored on reconnect; give them a moment.
    std::thread::sleep(Duration::from_millis(300));
    let (status, r) = admin(&pair.a, "POST", "/publish?topic=news", b"back");
    assert_eq!(status, 200, "{r}");
    assert_eq!(received(&mut on_a, Duration::from_millis(600)), want(2, "back"));
    assert_eq!(received(&mut on_b, Duration::from_millis(100)), want(2, "back"));
    drop(pair);
}
