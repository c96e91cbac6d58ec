//! Hostile and excessive peers cost only themselves: the connection cap,
//! garbage next to good traffic, and graceful drain on SIGTERM.
mod common;
use common::*;
use std::time::Duration;

#[test]
fn max_connections_holds_exactly_the_cap_and_counts_the_rest() {
    let (mut s, _) = server(&["--ports", "21900-21903", "--workers", "2", "--max-connections", "500"], None);
    let mut cmd = megaconn();
    cmd.args(["client", "--ports", "21900-21903", "--connections", "1000", "--rate", "2000", "--heartbeat", "200ms", "--hold", "2s", "--allow-loss", "--json"]);
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
    cmd.args(["client", "--ports", "21900-21903", "--connections", "500", "--hold", "1s", "--json"]);
    let (code, _, err) = run(cmd, Duration::from_secs(60));
    assert_eq!(code, 0, "all 500 places free again: {err}");
    assert!(s.terminate().success());
}

/// SIGTERM while 50 HTTP requests with a 200 ms service time are in
/// flight: every one is answered, then the connections close, and no
/// worker is left behind.
#[test]
fn sigterm_drains_in_flight_requests() {
    let (mut s, _, ready) = server_ready(&["--ports", "21910", "--workers", "2", "--protocol", "http", "--service-time", "200ms"], None);
    let workers = pids(&ready);
    let mut py = std::process::Command::new("python3");
    py.args([
        "-c",
        "import socket, sys\n\
         conns = [socket.create_connection(('127.0.0.1', 21910)) for _ in range(50)]\n\
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
         print('answered', ok, 'closed', closed, flush=True)\n",
    ]);
    py.stdout(std::process::Stdio::piped());
    let mut child = py.spawn().expect("python3");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
    assert_eq!(lines.next().unwrap().unwrap(), "sent");
    std::thread::sleep(Duration::from_millis(50));
    let status = s.terminate();
    let result = lines.next().unwrap().unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(result, "answered 50 closed 50");
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
    let (mut s, _) = server(&["--ports", "21911", "--workers", "1", "--service-time", "200ms"], None);
    let mut cmd = megaconn();
    cmd.args(["client", "--ports", "21911", "--connections", "100", "--request-rate", "10/s", "--hold", "60s", "--json"]);
    cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::null());
    let child = cmd.spawn().unwrap();
    std::thread::sleep(Duration::from_secs(3));
    // SAFETY: signalling our own child by PID.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "an interrupted run is not a pass");
    let text = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
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
    let (mut s, _) = server(&["--ports", "21920-21921", "--workers", "2"], None);
    let mut good = megaconn();
    good.args(["client", "--ports", "21920-21921", "--connections", "1000", "--rate", "2000", "--request-rate", "5/s", "--hold", "4s", "--json"]);
    good.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::null());
    let good = good.spawn().unwrap();
    let mut py = std::process::Command::new("python3");
    py.args([
        "-c",
        "import socket, os, random, time\n\
         random.seed(7)  # kind 0: random bytes behind a length no frame may have\n\
         conns = []\n\
         for i in range(1000):\n\
         \x20   s = socket.create_connection(('127.0.0.1', 21920 + i % 2))\n\
         \x20   conns.append(s)\n\
         time.sleep(1)\n\
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
    ]);
    let bad = py.output().expect("python3");
    let out = good.wait_with_output().unwrap();
    assert!(bad.status.success(), "{}", String::from_utf8_lossy(&bad.stderr));
    assert_eq!(String::from_utf8_lossy(&bad.stdout).trim(), "closed 1000", "every garbage connection was closed by the server");
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
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
fn flood(args: &[&str], port: u16, mode: &str, reason: &str) {
    let p = port.to_string();
    let mut all = vec!["--ports", &p, "--workers", "1"];
    all.extend_from_slice(args);
    let (mut s, _) = server(&all, None);
    let before = s.wait_for(Duration::from_secs(10), "baseline", |v| v["event"] == "stats")["rss_bytes"].as_u64().unwrap();
    let out = std::process::Command::new("timeout").args(["120", "python3", &peer("flood.py"), &p, mode]).output().expect("python3");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(text.ends_with("closed\n"), "{mode}: the server must close the flooding peer: {text}");
    let v = s.wait_for(Duration::from_secs(10), reason, |v| v["event"] == "stats" && v["close_reasons"][reason] == 1);
    let after = v["rss_bytes"].as_u64().unwrap();
    assert!(after < before + 32 * 1024 * 1024, "{mode}: RSS {before} -> {after} bytes while {text}");
    assert!(s.terminate().success());
}

#[test]
fn a_peer_that_never_reads_is_closed_at_the_output_bound() {
    flood(&[], 21930, "framed-noread", "slow_reader");
}

#[test]
fn pipelining_behind_a_deferred_reply_is_bounded() {
    flood(&["--protocol", "http", "--service-time", "5s"], 21931, "http-pipeline", "http_pipeline_overflow");
}

#[test]
fn requests_piling_up_in_the_async_stage_are_refused_not_buffered() {
    // 100 MB of 1 KB requests with a 30 s service time: beyond --queue
    // (1,000 here) they are rejected; the peer that never reads the
    // rejections is then closed as a slow reader.
    flood(&["--service-time", "30s", "--queue", "1000"], 21932, "framed-requests", "slow_reader");
}

/// `--churn`: connections closed and reopened on purpose while the rest
/// are held; the server sees every reopen as a new accept and ends with
/// exactly the planned count.
#[test]
fn churn_closes_and_reopens_while_holding() {
    let (mut s, _) = server(&["--ports", "21960-21963", "--workers", "2"], None);
    let mut cmd = megaconn();
    cmd.args([
        "client",
        "--ports",
        "21960-21963",
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
    let (mut s, _) = server(&["--ports", "21970", "--workers", "1", "--idle-timeout", "1s"], None);
    let silent: Vec<std::net::TcpStream> = (0..10).map(|_| std::net::TcpStream::connect("127.0.0.1:21970").unwrap()).collect();
    let mut cmd = megaconn();
    cmd.args(["client", "--ports", "21970", "--connections", "10", "--heartbeat", "300ms", "--hold", "4s", "--json"]);
    let (code, out, err) = run(cmd, Duration::from_secs(60));
    assert_eq!(code, 0, "heartbeating connections are kept: {err}");
    assert_eq!(serde_json::from_str::<serde_json::Value>(&out).unwrap()["summary"]["held"], 10);
    let v = s.wait_for(Duration::from_secs(10), "silent ones closed", |v| v["event"] == "stats" && v["close_reasons"]["idle_timeout"] == 10);
    assert_eq!(v["close_reasons"]["idle_timeout"], 10, "{v}");
    drop(silent);
    assert!(s.terminate().success());
}
