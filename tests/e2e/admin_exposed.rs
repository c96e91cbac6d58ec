//! The admin API reachable by anyone: idle and oversized requests, stalled
//! bodies, web pages the operator opens, and where the token comes from.
//! Each of these knocked over or misused the previous admin server.
use crate::common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Resident memory of a process, in bytes.
fn rss_of(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("process alive");
    let kb: u64 = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()).and_then(|n| n.parse().ok()).expect("VmRSS");
    kb * 1024
}

/// Send raw bytes as one request; (status, body).
fn raw(addr: &str, request: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("admin API reachable");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(request).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default())
}

/// 2,000 idle sockets with half a request line each, and one 10 MB header
/// line: the supervisor neither starts a thread per socket nor buffers the
/// header, and the probe still gets its answer.
#[test]
fn idle_sockets_and_a_huge_header_neither_exhaust_nor_grow_the_admin() {
    raise_fd_limit();
    let port = free_port().to_string();
    let (mut s, _, ready) = server_ready(&["--ports", &port, "--workers", "1"], None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    let sup = s.child.id();
    assert_eq!(http(&admin, "GET", "/healthz", b"", None).0, 200);
    let before = rss_of(sup);
    let mut idle = Vec::new();
    for _ in 0..2000 {
        let mut c = TcpStream::connect(&admin).expect("connect");
        c.write_all(b"GET /heal").unwrap();
        idle.push(c);
    }
    let huge = {
        let admin = admin.clone();
        std::thread::spawn(move || {
            let mut c = TcpStream::connect(&admin).expect("connect");
            c.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
            let chunk = vec![b'a'; 64 * 1024];
            let mut sent = c.write_all(b"GET /healthz HTTP/1.1\r\nX: ").map(|_| 0).unwrap_or(0);
            while sent < 10 << 20 {
                match c.write(&chunk) {
                    Ok(n) => sent += n,
                    Err(_) => break,
                }
            }
            sent
        })
    };
    let sent = huge.join().unwrap();
    let t = Instant::now();
    let (status, body) = http(&admin, "GET", "/healthz", b"", None);
    let probe = t.elapsed();
    assert_eq!(status, 200, "{body}");
    let grew = rss_of(sup).saturating_sub(before);
    let threads = threads_of(sup as u64);
    eprintln!("probe answered in {probe:?}; supervisor grew {} KiB, {threads} threads; {sent} header bytes taken", grew / 1024);
    assert!(grew < 20 << 20, "the supervisor grew {} MiB", grew >> 20);
    assert!(threads < 64, "a thread per admin connection: {threads}");
    assert!(sent < 10 << 20, "the 10 MB header line was read whole ({sent} bytes)");
    // The flood shows: at most 512 held, the idlest closed to make room.
    let (_, metrics) = http(&admin, "GET", "/metrics", b"", None);
    let evicted: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("megaconn_admin_connections_evicted_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no eviction count: {metrics}"));
    assert!(evicted >= 2000 - 512, "{evicted} idle admin connections evicted");
    drop(idle);
    assert!(s.terminate().success());
}

/// Requests that never send their bodies hold no slot: 64 GET /healthz
/// announcing a megabyte, 64 POSTs whose body never comes, and the 129th
/// request (a probe, then a stats read) is answered.
#[test]
fn stalled_bodies_hold_no_request_slot() {
    let port = free_port().to_string();
    let (mut s, _, ready) = server_ready(&["--ports", &port, "--workers", "1"], None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    let mut stalled = Vec::new();
    for i in 0..128 {
        let mut c = TcpStream::connect(&admin).expect("connect");
        let head = if i % 2 == 0 {
            format!("GET /healthz HTTP/1.1\r\nHost: {admin}\r\nContent-Length: 1000000\r\n\r\n")
        } else {
            format!("POST /broadcast HTTP/1.1\r\nHost: {admin}\r\nContent-Type: application/octet-stream\r\nContent-Length: 1000\r\n\r\nabc")
        };
        c.write_all(head.as_bytes()).unwrap();
        stalled.push(c);
    }
    // The GETs are refused at once, without reading what they announce.
    let mut answer = String::new();
    stalled[0].set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let _ = stalled[0].read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("carries no body"), "{answer}");
    let (status, body) = http(&admin, "GET", "/healthz", b"", None);
    assert_eq!(status, 200, "{body}");
    let (status, body) = http(&admin, "GET", "/stats", b"", None);
    assert_eq!(status, 200, "{body}");
    drop(stalled);
    assert!(s.terminate().success());
}

/// A web page on another origin tries what a page can do without asking:
/// no-cors POSTs with text/plain, a typeless Blob and a form. Each reaches
/// the admin API and is refused; nothing is published.
#[test]
fn a_web_page_cannot_publish_through_a_loopback_admin() {
    let port = free_port().to_string();
    let (mut s, _, ready) = server_ready(&["--ports", &port, "--workers", "1", "--protocol", "ws"], None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    let mut node = std::process::Command::new("node");
    node.args([&peer("chromium_csrf.js"), &admin]);
    let mut browser = Peer::spawn("node chromium_csrf.js (chromium)", node);
    let rest = browser.finish_ok(Duration::from_secs(60));
    let result: serde_json::Value = serde_json::from_str(rest.last().unwrap_or_else(|| panic!("the page's result: {rest:?}"))).unwrap();
    // "opaque": a response came back, so the request reached the server.
    assert_eq!(result["outcomes"], serde_json::json!(["opaque", "opaque", "opaque"]), "{result}");
    let (status, stats) = http(&admin, "GET", "/stats", b"", None);
    assert_eq!(status, 200);
    let stats: serde_json::Value = serde_json::from_str(&stats).unwrap();
    assert_eq!(stats["push_published"], 0, "a web page published: {stats}");
    // The same refusals, spelled out: a page's Origin, a rebound Host
    // name, a simple content type. An operator's request goes through.
    let post = |extra: &str| raw(&admin, format!("POST /broadcast HTTP/1.1\r\nConnection: close\r\n{extra}Content-Length: 1\r\n\r\nx").as_bytes());
    let (status, body) = post(&format!("Host: {admin}\r\nOrigin: http://evil.example\r\nContent-Type: application/json\r\n"));
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("Origin"), "{body}");
    let (status, body) = post("Host: evil.example:9100\r\nContent-Type: application/json\r\n");
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("DNS rebinding"), "{body}");
    let (status, body) = post(&format!("Host: {admin}\r\nContent-Type: text/plain\r\n"));
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("Content-Type"), "{body}");
    let (status, body) = post(&format!("Host: {admin}\r\nContent-Type: application/octet-stream\r\n"));
    assert_eq!(status, 200, "{body}");
    // Every refusal is counted: three from the page, three spelled out.
    let (_, stats) = http(&admin, "GET", "/stats", b"", None);
    let stats: serde_json::Value = serde_json::from_str(&stats).unwrap();
    assert_eq!(stats["admin"]["requests"]["403"], 6, "{}", stats["admin"]);
    // A signed length is not a length.
    let (status, body) =
        raw(&admin, format!("POST /broadcast HTTP/1.1\r\nHost: {admin}\r\nContent-Type: application/json\r\nContent-Length: +1\r\n\r\nx").as_bytes());
    assert_eq!(status, 400, "{body}");
    assert!(s.terminate().success());
}

/// The token comes from a file or the environment, never has to be on a
/// command line `ps` shows, and is required when given.
#[test]
fn admin_token_from_a_file_or_the_environment() {
    let dir = std::env::temp_dir().join(format!("megaconn-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("token");
    std::fs::write(&file, "f1le-t0ken\n").unwrap();
    let port = free_port().to_string();
    let (mut s, _, ready) = server_ready(&["--ports", &port, "--workers", "1", "--admin-token-file", file.to_str().unwrap()], None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    assert_eq!(http(&admin, "GET", "/stats", b"", None).0, 401);
    assert_eq!(http(&admin, "GET", "/stats", b"", Some("wrong")).0, 401);
    assert_eq!(http(&admin, "GET", "/stats", b"", Some("f1le-t0ken")).0, 200);
    assert_eq!(http(&admin, "GET", "/healthz", b"", None).0, 200, "probes need no token");
    assert!(s.terminate().success());

    let port = free_port().to_string();
    let mut cmd = megaconn();
    cmd.args(["server", "--ports", &port, "--workers", "1", "--admin", "127.0.0.1:0", "--json", "--duration", "60s"]).env("MEGACONN_ADMIN_TOKEN", "env-t0ken");
    let mut s = Running::spawn(cmd);
    let ready = s.wait_for(Duration::from_secs(20), "server ready", |v| v["event"] == "ready");
    let admin = ready["admin"].as_str().unwrap().to_string();
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", s.child.id())).unwrap();
    assert!(!String::from_utf8_lossy(&cmdline).contains("env-t0ken"));
    assert_eq!(http(&admin, "GET", "/stats", b"", None).0, 401);
    assert_eq!(http(&admin, "POST", "/broadcast", b"x", Some("env-t0ken")).0, 200);
    assert!(s.terminate().success());

    std::fs::write(&file, "\n").unwrap();
    let mut cmd = megaconn();
    cmd.args(["server", "--ports", &port, "--admin-token-file", file.to_str().unwrap()]);
    let (code, _, err) = run(cmd, Duration::from_secs(20));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--admin-token-file") && err.contains("empty"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A worker stopped with SIGSTOP (or stuck in a long inline stage) stops
/// reading its commands: the supervisor never blocks on it, probes and
/// publishes are answered without waiting for it (it is listed as
/// stalled), and once it runs again it delivers what it was sent.
#[test]
fn a_stopped_worker_blocks_neither_probes_nor_publishes() {
    let port = free_port().to_string();
    let (mut s, _, ready) = server_ready(&["--ports", &port, "--workers", "2"], None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    let workers = pids(&ready);
    let mut c = megaconn();
    c.args(["client", "--ports", &port, "--connections", "40", "--heartbeat", "off", "--hold", "90s", "--json"]);
    let _client = Running::spawn(c);
    s.wait_for(Duration::from_secs(20), "40 connections", |v| v["event"] == "stats" && v["active"] == 40);
    // SAFETY: stopping and resuming a worker of the server this test started.
    unsafe { libc::kill(workers[1] as i32, libc::SIGSTOP) };
    let publish = |data: &[u8]| {
        let head = format!(
            "POST /broadcast HTTP/1.1\r\nHost: {admin}\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            data.len()
        );
        let (status, body) = raw(&admin, &[head.as_bytes(), data].concat());
        assert_eq!(status, 200, "{body}");
        serde_json::from_str::<serde_json::Value>(&body).unwrap()
    };
    let data = vec![b'p'; 4000];
    let mut stalled_seen = 0;
    for _ in 0..41 {
        let r = publish(&data);
        // The running worker took it and answered (the shared listener
        // may have given it none of the 40 connections: no count asserted).
        assert!(r["workers"]["0"]["queued"].is_u64(), "the running worker answered: {r}");
        if r["stalled_workers"] == serde_json::json!([1]) {
            stalled_seen += 1;
        }
    }
    assert!(stalled_seen >= 40, "answers name the stopped worker as stalled ({stalled_seen} of 41)");
    let (status, body) = http(&admin, "GET", "/healthz", b"", None);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"stalled_workers\":[1]"), "{body}");
    s.wait_for(Duration::from_secs(10), "the stall reported", |v| v["event"] == "worker_stalled" && v["worker"] == 1);
    // SAFETY: signalling a worker PID our own server reported.
    unsafe { libc::kill(workers[1] as i32, libc::SIGCONT) };
    s.wait_for(Duration::from_secs(20), "the recovery reported", |v| v["event"] == "worker_recovered" && v["worker"] == 1);
    // Nothing it was sent while stopped was lost.
    s.wait_for(Duration::from_secs(20), "every push delivered", |v| v["event"] == "stats" && v["push_delivered"] == 41 * 40);
    assert!(s.terminate().success());
}

/// A listing costs what its limit says, not what clients chose: topics
/// are shown up to 16 per connection (with their count), and the limit
/// is at most 10,000.
#[test]
fn connection_listings_are_bounded_whatever_clients_subscribe() {
    let port = free_port().to_string();
    let (mut s, _, ready) = server_ready(&["--ports", &port, "--workers", "2", "--protocol", "ws", "--max-header-bytes", "65536"], None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    let topics: Vec<String> = (0..40).map(|i| format!("{i:02}{}", "t".repeat(200))).collect();
    let url = format!("ws://127.0.0.1:{port}/x?subscribe={}", topics.join(","));
    let mut c = megaconn();
    c.args(["client", "--url", &url, "--connections", "50", "--heartbeat", "off", "--hold", "90s", "--json"]);
    let _client = Running::spawn(c);
    s.wait_for(Duration::from_secs(20), "50 subscribers", |v| v["event"] == "stats" && v["active"] == 50 && v["subscriptions"] == 50 * 40);
    let (status, body) = http(&admin, "GET", "/connections?limit=10000", b"", None);
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let list = v["connections"].as_array().unwrap();
    assert_eq!(list.len(), 50, "{v}");
    assert!(list.iter().all(|c| c["topics"].as_array().unwrap().len() == 16 && c["topics_total"] == 40), "{}", list[0]);
    assert_eq!(v["truncated"], false);
    let (status, body) = http(&admin, "GET", "/connections?limit=100000", b"", None);
    assert_eq!(status, 400, "{body}");
    assert!(s.terminate().success());
}
