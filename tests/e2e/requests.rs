//! Requests, open-loop latency, business stages and echo8, end to end.
use crate::common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

#[test]
fn every_request_is_answered_with_its_own_timestamp() {
    let ports = free_ports(2);
    let (mut srv, _) = server(&["--ports", &ports.arg(), "--workers", "1", "--business", "async", "--service-time", "0"], None);
    let mut cmd = megaconn();
    cmd.args(["client", "--ports", &ports.arg(), "--connections", "200", "--rate", "2000", "--request-rate", "5/s"]);
    cmd.args(["--heartbeat", "off", "--hold", "3s", "--payload", "16", "--workers", "2", "--json"]);
    let (code, out, err) = run(cmd, Duration::from_secs(60));
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let r = &v["summary"]["requests"];
    let sent = r["sent"].as_u64().unwrap();
    assert!(sent >= 200 * 5 * 3, "3 s hold at 5/s x 200 connections: {r}");
    assert_eq!(r["replies"].as_u64().unwrap(), sent, "{r}");
    assert_eq!(r["timeouts"], 0, "{r}");
    assert_eq!(r["bad_echo"], 0, "every echoed timestamp is one we sent: {r}");
    assert_eq!(r["latency_ms"]["count"].as_u64().unwrap(), sent, "histogram count equals replies: {r}");
    let stats = srv.wait_for(Duration::from_secs(10), "server request count", |v| v["event"] == "stats" && v["replies"].as_u64() == Some(sent));
    assert_eq!(stats["rejected"], 0);
    assert!(srv.terminate().success());
}

/// Requests sent at once in the concurrency test, and each one's service
/// time: served one after another they take 2 s, concurrently ~0.1 s.
const AT_ONCE: usize = 20;
const SERVICE_MS: u64 = 100;

/// Once the server holds `n` connections, send one framed request on each
/// at the same instant and return the times (since the first write) at
/// which each reply arrived.
fn simultaneous_requests(srv: &Running, port: u16, n: usize) -> Vec<Duration> {
    let mut conns: Vec<TcpStream> = (0..n).map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap()).collect();
    srv.wait_for(Duration::from_secs(10), "every connection accepted", |v| v["event"] == "stats" && v["active"] == n);
    let t0 = Instant::now();
    for c in conns.iter_mut() {
        c.write_all(&[0, 9, 3, 0, 0, 0, 0, 0, 0, 0, 1]).unwrap();
    }
    conns
        .iter_mut()
        .map(|c| {
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut reply = [0u8; 11];
            c.read_exact(&mut reply).unwrap();
            assert_eq!(reply[2], 4, "a reply frame");
            t0.elapsed()
        })
        .collect()
}

#[test]
fn inline_serialises_while_pool_and_async_do_not() {
    // The bounds are the two models, not a guess at this machine's speed:
    // serialised, the last reply cannot come before AT_ONCE x SERVICE_MS;
    // concurrent, it comes after about one service time, so anything
    // under half the serial time proves the requests overlapped.
    let serial = Duration::from_millis(SERVICE_MS * AT_ONCE as u64);
    for mode in ["inline", "pool:20", "async"] {
        let port = free_port();
        let service = format!("{SERVICE_MS}ms");
        let (mut srv, _) = server(&["--ports", &port.to_string(), "--workers", "1", "--business", mode, "--service-time", &service], None);
        let times = simultaneous_requests(&srv, port, AT_ONCE);
        let last = *times.iter().max().unwrap();
        if mode == "inline" {
            assert!(last >= serial, "inline must serialise {AT_ONCE} x {SERVICE_MS} ms: last reply at {last:?}");
        } else {
            assert!(last < serial / 2, "{mode} must run them concurrently: last reply at {last:?}, serial would be {serial:?}");
        }
        assert!(srv.terminate().success());
    }
}

#[test]
fn full_pool_queue_rejects_explicitly_and_counts() {
    let port = free_port();
    let (mut srv, _) = server(&["--ports", &port.to_string(), "--workers", "1", "--business", "pool:2", "--queue", "2", "--service-time", "300ms"], None);
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut burst = Vec::new();
    for i in 0..10u8 {
        burst.extend_from_slice(&[0, 9, 3, 0, 0, 0, 0, 0, 0, 0, i]);
    }
    c.write_all(&burst).unwrap();
    let (mut replies, mut rejected) = (0, 0);
    for _ in 0..10 {
        let mut f = [0u8; 11];
        c.read_exact(&mut f).unwrap();
        match f[2] {
            4 => replies += 1,
            5 => rejected += 1,
            k => panic!("unexpected kind {k}"),
        }
    }
    // 2 threads busy + 2 queued are accepted; the other 6 are refused.
    assert_eq!((replies, rejected), (4, 6));
    srv.wait_for(Duration::from_secs(10), "rejections counted", |v| v["event"] == "stats" && v["rejected"] == 6);
    assert!(srv.terminate().success());
}

#[test]
fn echo8_server_echoes_timestamps_split_across_writes() {
    let port = free_port();
    let (mut srv, _) = server(&["--ports", &port.to_string(), "--workers", "1", "--protocol", "echo8", "--business", "async", "--service-time", "1ms"], None);
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_nodelay(true).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let me = c.local_addr().unwrap().port();
    let stamps: Vec<u64> = (0..5).map(|i| 1_700_000_000_000 + i * 1234).collect();
    let bytes: Vec<u8> = stamps.iter().flat_map(|s| s.to_be_bytes()).collect();
    // Each 3-byte piece is read by the server (ss: its receive queue is
    // empty) before the next is written: stamps arrive split for real.
    let mut sent = 0;
    for piece in bytes.chunks(3) {
        c.write_all(piece).unwrap();
        sent += piece.len() as u64;
        wait_until(&format!("the server read byte {sent}"), Duration::from_secs(5), || {
            tcp_socket(port, me).is_some_and(|s| s.bytes_received == sent && s.recv_q == 0)
        });
    }
    let mut back = vec![0u8; 40];
    c.read_exact(&mut back).unwrap();
    let echoed: Vec<u64> = back.chunks(8).map(|b| u64::from_be_bytes(b.try_into().unwrap())).collect();
    assert_eq!(echoed, stamps);
    assert!(srv.terminate().success());
}

#[test]
fn echo8_client_measures_an_echo8_server() {
    let port = free_port().to_string();
    let (mut srv, _) = server(&["--ports", &port, "--workers", "1", "--protocol", "echo8", "--service-time", "0"], None);
    let mut cmd = megaconn();
    cmd.args(["client", "--ports", &port, "--protocol", "echo8", "--connections", "50", "--rate", "1000", "--request-rate", "10/s", "--hold", "2s", "--json"]);
    let (code, out, err) = run(cmd, Duration::from_secs(60));
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let r = &v["summary"]["requests"];
    assert!(r["sent"].as_u64().unwrap() >= 50 * 10 * 2, "{r}");
    assert_eq!(r["replies"], r["sent"], "{r}");
    assert_eq!(r["latency_ms"]["count"], r["sent"], "{r}");
    assert!(srv.terminate().success());
}

#[test]
fn bad_business_flags_exit_2() {
    for (flag, value, needle) in [
        ("--service-time", "1ms:90%,10ms:5%", "95%"),
        ("--service-time", "sometimes", "classic"),
        ("--business", "threads", "pool:N"),
        ("--business", "pool:0", "pool size"),
    ] {
        let mut cmd = megaconn();
        cmd.args(["server", "--ports", &free_port().to_string(), flag, value]);
        let (code, _, err) = run(cmd, Duration::from_secs(20));
        assert_eq!(code, 2, "{flag} {value}: {err}");
        assert!(err.contains(needle) && err.contains(flag), "{flag} {value}: {err}");
    }
    let mut cmd = megaconn();
    cmd.args(["client", "--connections", "10", "--request-rate", "-3/s"]);
    let (code, _, err) = run(cmd, Duration::from_secs(20));
    assert_eq!(code, 2, "{err}");
}

/// A client whose supervisor says `close` late (stopped across the end of
/// the hold here; starved on an overloaded machine) gets no request sent
/// after the hold's end: its workers were told when the hold ends as it
/// began, and nothing is due after that (issue 44: the QoS 1 bench sent
/// 6.2M publishes for a 3.5M schedule once it overloaded the machine).
#[test]
fn requests_stop_at_the_end_of_the_hold_even_when_close_comes_late() {
    use std::io::BufRead;
    let ports = free_ports(1);
    let (mut srv, _) = server(&["--ports", &ports.arg(), "--workers", "1"], None);
    let mut cmd = megaconn();
    cmd.args(["client", "--ports", &ports.arg(), "--connections", "10", "--request-rate", "100/s"]);
    cmd.args(["--heartbeat", "off", "--hold", "2s", "--workers", "1", "--json"]);
    let spawned = Instant::now();
    let mut child = cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().expect("start the client");
    let pid = child.id();
    let (line_tx, lines) = std::sync::mpsc::channel::<String>();
    let stderr = child.stderr.take().expect("piped");
    let log = std::thread::spawn(move || {
        let mut all = String::new();
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = line_tx.send(line.clone());
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    // The hold began (the line says so once the supervisor saw the ramp done).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) if line.contains("ramp done") => break,
            Ok(_) => {}
            Err(e) => panic!("no 'ramp done' line from the client: {e:?}"),
        }
    }
    let hold_began_s = spawned.elapsed().as_secs_f64();
    // SAFETY: signalling the client process this test started.
    unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    // Stopped for three times the hold: its end passes while the supervisor
    // cannot say `close`; its worker runs on.
    std::thread::sleep(Duration::from_secs(6));
    // SAFETY: as above.
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    let out = match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(out) => out.expect("the client's output"),
        Err(_) => {
            // SAFETY: signalling our own child by PID.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("the client did not end within 60 s of its return");
        }
    };
    let stderr = log.join().unwrap_or_default();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"));
    let s = &v["summary"];
    let sent = s["requests"]["sent"].as_u64().unwrap_or(0);
    // 10 connections x 100/s from the start to the hold's end (2 s after
    // it began, which was before the line), and a period's rounding per
    // connection. Sent until the late close, it would be ~6,000 more.
    let most = (1000.0 * (hold_began_s + 2.0)) as u64 + 10;
    assert!(sent >= 300 && sent <= most, "requests sent {sent}, at most {most} due by the end of the hold: {s}\n{stderr}");
    assert!(srv.terminate().success());
}
