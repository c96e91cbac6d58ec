//! Hostile and excessive peers cost only themselves: the connection cap,
//! garbage next to good traffic, and graceful drain on SIGTERM.
use crate::common::*;
use std::io::{Read, Write};
use std::time::Duration;

#[test]
fn max_connections_holds_exactly_the_cap_and_counts_the_rest() {
    let ports = free_ports(4);
    let (mut s, _) = server(&["--ports", &ports.arg(), "--workers", "2", "--max-connections", "500"], None);
    let mut cmd = megaconn();
    cmd.args(["client", "--ports", &ports.arg(), "--connections", "1000", "--rate", "2000", "--heartbeat", "200ms", "--hold", "2s", "--allow-loss", "--json"]);
    let (code, out, err) = run(cmd, Duration::from_secs(60));
    // Refused connections are reset: some before the client saw its
    // handshake complete (failed), the rest right after (lost).
    assert_eq!(code, 1, "{err}");
    let c = serde_json::from_str::<serde_json::Value>(&out).unwrap()["summary"].clone();
    assert_eq!(c["held"], 500, "{c}");
    assert_eq!(c["failed_total"].as_u64().unwrap() + c["lost_total"].as_u64().unwrap(), 500, "{c}");
    let v = s.wait_for(Duration::from_secs(10), "refusals counted", |v| v["event"] == "stats" && v["refused_over_cap"] == 500);
    assert_eq!(v["accepted"], 500, "{v}");
    // Once the client is gone the places are free again.
    let v = s.wait_for(Duration::from_secs(10), "closed", |v| v["event"] == "stats" && v["active"] == 0);
    assert_eq!(v["refused_over_cap"], 500, "{v}");
    let mut cmd = megaconn();
    cmd.args(["client", "--ports", &ports.arg(), "--connections", "500", "--hold", "1s", "--json"]);
    let (code, _, err) = run(cmd, Duration::from_secs(60));
    assert_eq!(code, 0, "all 500 places free again: {err}");
    assert!(s.terminate().success());
}

/// SIGTERM while 50 HTTP requests with a 2 s service time are in
/// flight: every one is answered, then the connections close, and no
/// worker is left behind.
#[test]
fn sigterm_drains_in_flight_requests() {
    let port = free_port();
    let (mut s, _, ready) = server_ready(&["--ports", &port.to_string(), "--workers", "2", "--protocol", "http", "--service-time", "2s"], None);
    let workers = pids(&ready);
    let mut py = std::process::Command::new("python3");
    py.args([
        "-c",
        &format!(
            "import socket, sys\n\
             conns = [socket.create_connection(('127.0.0.1', {port})) for _ in range(50)]\n\
             for c in conns:\n\
             \x20   c.sendall(b'GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n')\n\
             print('sent', flush=True)\n\
             ok = closed = 0\n\
             for c in conns:\n\
             \x20   c.settimeout(10)\n\
             \x20   data = b''\n\
             \x20   while b'Hello world!' not in data:\n\
             \x20       chunk = c.recv(4096)\n\
             \x20       if not chunk: break\n\
             \x20       data += chunk\n\
             \x20   ok += data.startswith(b'HTTP/1.1 200')\n\
             \x20   closed += c.recv(4096) == b''\n\
             print('answered', ok, 'closed', closed, flush=True)\n"
        ),
    ]);
    let mut client = Peer::spawn("python http client", py);
    assert_eq!(client.line(Duration::from_secs(20), "requests sent"), "sent");
    // SIGTERM once the server has all 50 requests and has answered none
    // (each waits 2 s: many stats lines fall in between).
    s.wait_for(Duration::from_secs(10), "50 requests in flight", |v| v["event"] == "stats" && v["requests"] == 50 && v["replies"] == 0);
    let status = s.terminate();
    let rest = client.finish_ok(Duration::from_secs(30));
    assert_eq!(rest, ["answered 50 closed 50"]);
    assert!(status.success(), "{status:?}");
    let summary = s.wait_for(Duration::from_secs(5), "summary", |v| v["event"] == "summary");
    assert_eq!(summary["totals"]["replies"], 50, "{summary}");
    assert_eq!(summary["totals"]["close_reasons"]["server_drained"], 50, "{summary}");
    for pid in workers {
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists() || threads_of(pid) == 0, "worker {pid} left running");
    }
}

/// Ctrl-C on the client: outstanding requests are waited for, the
/// summary still comes out, and it says the run was interrupted.
#[test]
fn client_ctrl_c_drains_and_still_reports() {
    let port = free_port().to_string();
    let (mut s, _) = server(&["--ports", &port, "--workers", "1", "--service-time", "200ms"], None);
    let mut cmd = megaconn();
    cmd.args(["client", "--ports", &port, "--connections", "100", "--request-rate", "10/s", "--hold", "60s", "--json"]);
    let mut client = Peer::spawn("megaconn client", cmd);
    // Ctrl-C once the server has answered 600 requests (about 0.6 s of
    // the hold), so that more than 500 were sent.
    s.wait_for(Duration::from_secs(30), "600 requests answered", |v| v["event"] == "stats" && v["replies"].as_u64() >= Some(600));
    // SAFETY: signalling our own child by PID (not reaped yet).
    unsafe { libc::kill(client.child.id() as i32, libc::SIGINT) };
    let (status, out) = client.finish(Duration::from_secs(30));
    assert_eq!(status.code(), Some(1), "an interrupted run is not a pass");
    let v: serde_json::Value = serde_json::from_str(&out.join("\n")).unwrap();
    let s2 = &v["summary"];
    assert_eq!(s2["interrupted"], true, "{s2}");
    let r = &s2["requests"];
    assert!(r["sent"].as_u64().unwrap() > 500, "{r}");
    assert_eq!(r["replies"], r["sent"], "every request in flight at Ctrl-C was answered: {r}");
    assert_eq!(r["timeouts"], 0, "{r}");
    assert!(s.terminate().success());
}

/// 1,000 connections sending garbage next to 1,000 good ones: the bad
/// ones are closed by reason, every good request is answered.
#[test]
fn garbage_peers_do_not_disturb_good_ones() {
    raise_fd_limit();
    let ports = free_ports(2);
    let (mut s, _) = server(&["--ports", &ports.arg(), "--workers", "2"], None);
    let mut good = megaconn();
    good.args(["client", "--ports", &ports.arg(), "--connections", "1000", "--rate", "2000", "--request-rate", "5/s", "--hold", "4s", "--json"]);
    let mut good = Peer::spawn("megaconn client (good)", good);
    let mut py = std::process::Command::new("python3");
    py.args([
        "-c",
        &format!(
            "import socket, os, random, sys\n\
             random.seed(7)  # kind 0: random bytes behind a length no frame may have\n\
             conns = []\n\
             for i in range(1000):\n\
             \x20   s = socket.create_connection(('127.0.0.1', {first} + i % 2))\n\
             \x20   conns.append(s)\n\
             print('connected', flush=True)\n\
             assert sys.stdin.readline() == 'go\\n'\n\
             for i, s in enumerate(conns):\n\
             \x20   kind = i % 4\n\
             \x20   try:\n\
             \x20       if kind == 0: s.sendall(b'\\xf0' + random.randbytes(random.randint(1, 5000)))\n\
             \x20       elif kind == 1: s.sendall(b'\\xff\\xff\\x03' + b'x' * 100)\n\
             \x20       elif kind == 2: s.sendall(b'\\x00\\x00')\n\
             \x20       else: s.sendall(b'\\x00\\x05\\x63abcd')\n\
             \x20   except OSError:\n\
             \x20       pass\n\
             closed = 0\n\
             for s in conns:\n\
             \x20   s.settimeout(5)\n\
             \x20   try:\n\
             \x20       while s.recv(65536): pass\n\
             \x20       closed += 1\n\
             \x20   except ConnectionResetError:\n\
             \x20       closed += 1\n\
             \x20   except socket.timeout:\n\
             \x20       pass\n\
             print('closed', closed, flush=True)\n",
            first = ports.first
        ),
    ]);
    py.stdin(std::process::Stdio::piped());
    let mut bad = Peer::spawn("python garbage peers", py);
    assert_eq!(bad.line(Duration::from_secs(30), "garbage peers connected"), "connected");
    // The garbage goes out while the good connections are all held.
    s.wait_for(Duration::from_secs(30), "1000 good and 1000 garbage connections", |v| v["event"] == "stats" && v["active"] == 2000);
    bad.stdin().write_all(b"go\n").unwrap();
    assert_eq!(bad.finish_ok(Duration::from_secs(60)), ["closed 1000"], "every garbage connection was closed by the server");
    let (status, out) = good.finish(Duration::from_secs(60));
    assert_eq!(status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_str(&out.join("\n")).unwrap();
    let c = &v["summary"];
    assert_eq!(c["held"], 1000, "{c}");
    let r = &c["requests"];
    assert_eq!(r["replies"], r["sent"], "{r}");
    assert_eq!(r["timeouts"], 0, "{r}");
    let st = s.wait_for(Duration::from_secs(10), "bad frames counted", |v| {
        v["event"] == "stats"
            && v["close_reasons"]
                .as_object()
                .is_some_and(|m| m.iter().filter(|(k, _)| k.starts_with("bad_frame")).map(|(_, n)| n.as_u64().unwrap()).sum::<u64>() >= 750)
    });
    assert!(st["close_reasons"]["bad_frame_too_long"].as_u64().unwrap() >= 250, "{st}");
    assert!(s.terminate().success());
}

/// A peer pushing up to 100 MB: the server closes it at the documented
/// bound, by reason, and its memory stays flat.
fn flood(args: &[&str], mode: &str, reason: &str) {
    let p = free_port().to_string();
    let mut all = vec!["--ports", &p, "--workers", "1"];
    all.extend_from_slice(args);
    let (mut s, _) = server(&all, None);
    let before = s.wait_for(Duration::from_secs(10), "baseline", |v| v["event"] == "stats")["rss_bytes"].as_u64().unwrap();
    let mut py = std::process::Command::new("python3");
    py.args([&peer("flood.py"), &p, mode]);
    let (code, text, err) = run(py, Duration::from_secs(120));
    assert_eq!(code, 0, "flood.py {mode}: {err}");
    assert!(text.ends_with("closed\n"), "{mode}: the server must close the flooding peer: {text}");
    let v = s.wait_for(Duration::from_secs(10), reason, |v| v["event"] == "stats" && v["close_reasons"][reason] == 1);
    let after = v["rss_bytes"].as_u64().unwrap();
    assert!(after < before + 32 * 1024 * 1024, "{mode}: RSS {before} -> {after} bytes while {text}");
    assert!(s.terminate().success());
}

#[test]
fn a_peer_that_never_reads_is_closed_at_the_output_bound() {
    flood(&[], "framed-noread", "slow_reader");
}

#[test]
fn pipelining_behind_a_deferred_reply_is_bounded() {
    flood(&["--protocol", "http", "--service-time", "5s"], "http-pipeline", "http_pipeline_overflow");
}

#[test]
fn requests_piling_up_in_the_async_stage_are_refused_not_buffered() {
    // 100 MB of 1 KB requests with a 30 s service time: beyond --queue
    // (1,000 here) they are rejected; the peer that never reads the
    // rejections is then closed as a slow reader.
    flood(&["--service-time", "30s", "--queue", "1000"], "framed-requests", "slow_reader");
}

/// `--churn`: connections closed and reopened on purpose while the rest
/// are held; the server sees every reopen as a new accept and ends with
/// exactly the planned count.
#[test]
fn churn_closes_and_reopens_while_holding() {
    let ports = free_ports(4);
    let (mut s, _) = server(&["--ports", &ports.arg(), "--workers", "2"], None);
    let mut cmd = megaconn();
    cmd.args([
        "client",
        "--ports",
        &ports.arg(),
        "--connections",
        "2000",
        "--rate",
        "4000",
        "--churn",
        "500/s",
        "--heartbeat",
        "500ms",
        "--hold",
        "3s",
        "--json",
    ]);
    let (code, out, err) = run(cmd, Duration::from_secs(60));
    assert_eq!(code, 0, "{err}");
    let c = serde_json::from_str::<serde_json::Value>(&out).unwrap()["summary"].clone();
    let closed = c["churn_closed"].as_u64().unwrap();
    assert!(closed >= 1000, "~500/s over a 3 s hold: {c}");
    assert_eq!(c["churn_reopened"].as_u64(), Some(closed), "{c}");
    assert_eq!(c["churn_failed"], serde_json::json!({}), "{c}");
    assert_eq!(c["held"], 2000, "{c}");
    assert_eq!(c["failed_total"], 0, "{c}");
    let v = s.wait_for(Duration::from_secs(10), "all closed", |v| v["event"] == "stats" && v["active"] == 0 && v["accepted"].as_u64() >= Some(2000 + closed));
    assert_eq!(v["accepted"].as_u64(), Some(2000 + closed), "{v}");
    assert!(s.terminate().success());
}

/// Half-open or silent peers: `--idle-timeout` closes connections that
/// stopped sending, and only those.
#[test]
fn idle_timeout_closes_only_silent_peers() {
    let port = free_port();
    let (mut s, _) = server(&["--ports", &port.to_string(), "--workers", "1", "--idle-timeout", "1s"], None);
    let opened = std::time::Instant::now();
    let mut silent: Vec<std::net::TcpStream> = (0..10).map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).unwrap()).collect();
    let mut cmd = megaconn();
    cmd.args(["client", "--ports", &port.to_string(), "--connections", "10", "--heartbeat", "300ms", "--hold", "4s", "--json"]);
    let load = std::thread::spawn(move || run(cmd, Duration::from_secs(60)));
    // The silent ten are closed, and not before their second of silence...
    let v = s.wait_for(Duration::from_secs(10), "the silent ones closed", |v| v["event"] == "stats" && v["close_reasons"]["idle_timeout"] == 10);
    assert!(opened.elapsed() >= Duration::from_secs(1), "closed after {:?}, before the 1 s idle timeout: {v}", opened.elapsed());
    assert_eq!(v["active"], 10, "the heartbeating ten are still open: {v}");
    for (i, c) in silent.iter_mut().enumerate() {
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        match c.read(&mut [0u8; 16]) {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!("silent connection {i} should be closed by the server: {other:?}"),
        }
    }
    // ...and the heartbeating ten are kept for the whole hold.
    let (code, out, err) = load.join().unwrap();
    assert_eq!(code, 0, "heartbeating connections are kept: {err}");
    let c = serde_json::from_str::<serde_json::Value>(&out).unwrap()["summary"].clone();
    assert_eq!((c["held"].as_u64(), c["lost_total"].as_u64()), (Some(10), Some(0)), "{c}");
    let v = s.wait_for(Duration::from_secs(10), "the client's connections closed", |v| v["event"] == "stats" && v["active"] == 0);
    assert_eq!(v["close_reasons"]["idle_timeout"], 10, "only the silent ones timed out: {v}");
    assert!(s.terminate().success());
}
