//! Rolling restarts on real sockets: SIGTERM turns `/healthz` to
//! draining, stops accepting, and closes every long-lived connection
//! spread over `--drain-period`, each after a reconnect hint that peers
//! nobody here wrote read (Python `websockets`: close 1012 with a JSON
//! reason; a raw-socket SSE reader: `retry:` and a `goaway` event;
//! Eclipse paho-mqtt: v5 DISCONNECT 0x8B with the hint as its Reason
//! String); megaconn's client honours the framed hint and moves to the other
//! server with `--reconnect-to`, losing nothing.
use crate::common::*;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

fn sigterm(s: &Running) {
    // SAFETY: signalling our own child by PID.
    unsafe { libc::kill(s.child.id() as i32, libc::SIGTERM) };
}

/// Wait (bounded) for a process told to stop.
fn exited(s: &mut Running, within: Duration) -> ExitStatus {
    let end = Instant::now() + within;
    loop {
        if let Some(st) = s.child.try_wait().unwrap() {
            return st;
        }
        assert!(Instant::now() < end, "still running {within:?} after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stats(admin: &str) -> Value {
    serde_json::from_str(&http(admin, "GET", "/stats", b"", None).1).unwrap()
}

/// Each connection read to its end on a thread of its own: what each got.
/// Their closes must spread over at least a second (of a 2 s period).
fn read_all_spread(conns: Vec<TcpStream>) -> Vec<Vec<u8>> {
    let t0 = Instant::now();
    let readers: Vec<_> = conns
        .into_iter()
        .map(|mut c| {
            std::thread::spawn(move || {
                let mut got = Vec::new();
                // A reset after the hint ends it too; what came is kept.
                let _ = c.read_to_end(&mut got);
                (t0.elapsed(), got)
            })
        })
        .collect();
    let (mut times, mut gots) = (Vec::new(), Vec::new());
    for r in readers {
        let (at, got) = r.join().unwrap();
        times.push(at);
        gots.push(got);
    }
    times.sort();
    let span = times[times.len() - 1] - times[0];
    assert!(span >= Duration::from_secs(1), "closes spread over the 2 s period, not all at once: {times:?}");
    gots
}

/// An MQTT 5 connection with an empty client id (the server assigns
/// one), its CONNACK read and accepting.
fn mqtt_v5_connected(port: u16) -> TcpStream {
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    c.write_all(b"\x10\x0d\x00\x04MQTT\x05\x02\x00\x00\x00\x00\x00").unwrap();
    let mut head = [0u8; 2];
    c.read_exact(&mut head).unwrap();
    assert_eq!(head[0], 0x20, "a CONNACK");
    let mut rest = vec![0u8; head[1] as usize];
    c.read_exact(&mut rest).unwrap();
    assert_eq!(rest[1], 0, "accepted");
    c
}

#[test]
fn a_draining_server_says_so_hints_every_peer_and_spreads_its_closes_over_the_period() {
    let port = free_port();
    let (mut s, _, ready) = server_ready(&["--protocol", "ws", "--ports", &port.to_string(), "--workers", "2", "--drain-period", "2s"], None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    let mut py = Command::new("python3");
    py.args([&peer("drain_hints.py"), &port.to_string()]);
    let mut peer = Peer::spawn("drain_hints.py", py);
    assert_eq!(peer.line(Duration::from_secs(30), "READY"), "READY");
    let conns: Vec<TcpStream> = (0..20).map(|_| ws_handshake(&format!("127.0.0.1:{port}"))).collect();
    wait_until("22 connections held", Duration::from_secs(20), || stats(&admin)["active"] == 22);
    assert_eq!(http(&admin, "GET", "/healthz", b"", None).0, 200);
    sigterm(&s);
    wait_until("/healthz says draining", Duration::from_secs(10), || {
        let (code, body) = http(&admin, "GET", "/healthz", b"", None);
        code == 503 && body.contains("\"draining\"")
    });
    // /healthz flips at the signal; each worker closes its listeners when
    // it reads its close command, a moment later on a loaded machine.
    wait_until("no new connections while draining", Duration::from_secs(5), || TcpStream::connect(("127.0.0.1", port)).is_err());
    for got in read_all_spread(conns) {
        assert!(got.len() >= 4 && got[0] == 0x88, "a close frame: {got:?}");
        let len = (got[1] & 0x7f) as usize;
        assert_eq!(u16::from_be_bytes([got[2], got[3]]), 1012, "Service Restart");
        let hint: Value = serde_json::from_slice(&got[4..2 + len]).unwrap();
        assert!(hint["type"] == "goaway" && hint["retry_ms"].as_u64().unwrap() <= 1000, "{hint}");
    }
    assert_eq!(peer.finish_ok(Duration::from_secs(30)), ["OK"]);
    assert!(exited(&mut s, Duration::from_secs(20)).success());
}

/// 200 of megaconn's client connections (`client` the protocol's
/// arguments) on server A, which drains (`server` its protocol's): every
/// one honours its hint and moves to B, nothing lost. The JSON summary.
fn client_moves_to_the_other_server_on_a_goaway(server: &[&str], client: &[&str]) -> Value {
    let port = free_port();
    let p = port.to_string();
    let on = |listen: &'static str, drain: &[&'static str]| {
        let mut args = vec!["--listen", listen, "--ports", &p, "--workers", "1"];
        args.extend_from_slice(server);
        args.extend_from_slice(drain);
        server_ready(&args, None)
    };
    let (mut a, _, ready_a) = on("127.0.0.1", &["--drain-period", "2s"]);
    let (mut b, _, ready_b) = on("127.0.0.2", &[]);
    let (admin_a, admin_b) = (ready_a["admin"].as_str().unwrap().to_string(), ready_b["admin"].as_str().unwrap().to_string());
    let mut cmd = megaconn();
    cmd.args(["client", "--target", "127.0.0.1", "--ports", &p, "--connections", "200", "--reconnect", "--reconnect-to", "127.0.0.2"]);
    cmd.args(["--hold", "8s", "--heartbeat", "500ms", "--json"]).args(client);
    let client = std::thread::spawn(move || run(cmd, Duration::from_secs(60)));
    wait_until("200 connections on A", Duration::from_secs(20), || stats(&admin_a)["active"] == 200);
    sigterm(&a);
    assert!(exited(&mut a, Duration::from_secs(20)).success());
    wait_until("all 200 on B", Duration::from_secs(20), || stats(&admin_b)["active"] == 200);
    let (code, out, err) = client.join().unwrap();
    assert_eq!(code, 0, "{err}");
    let c = serde_json::from_str::<Value>(&out).unwrap()["summary"].clone();
    assert_eq!((c["goaways"].as_u64(), c["reconnects"].as_u64(), c["held"].as_u64()), (Some(200), Some(200), Some(200)), "{c}");
    assert_eq!(c["lost_total"], 0, "moved, not lost: {c}");
    assert_eq!(c["rehome_ms"]["count"], 200, "{c}");
    assert!(b.terminate().success());
    c
}

#[test]
fn megaconn_client_moves_to_the_other_server_on_a_framed_goaway_and_loses_nothing() {
    client_moves_to_the_other_server_on_a_goaway(&[], &[]);
}

/// MQTT 5: the hint is DISCONNECT 0x8B; each client subscribes again on B.
#[test]
fn megaconn_mqtt_client_moves_to_the_other_server_on_a_disconnect_0x8b_and_loses_nothing() {
    let c =
        client_moves_to_the_other_server_on_a_goaway(&["--protocol", "mqtt"], &["--protocol", "mqtt", "--mqtt-version", "5", "--mqtt-subscribe", "dev/{conn}"]);
    assert_eq!(c["mqtt_subscriptions"]["granted"].as_u64(), Some(400), "on A, then again on B: {c}");
}

#[test]
fn an_event_stream_on_an_http_port_is_told_to_go_away() {
    let port = free_port();
    let (mut s, _, ready) = server_ready(&["--protocol", "http", "--ports", &port.to_string(), "--workers", "1", "--drain-period", "2s"], None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    let mut sse = TcpStream::connect(("127.0.0.1", port)).unwrap();
    sse.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    sse.write_all(b"GET /events?subscribe=news HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("event: subscribed") {
        let n = sse.read(&mut buf).unwrap();
        assert!(n > 0, "the stream opened: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    assert!(got.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&got));
    wait_until("the stream is counted", Duration::from_secs(10), || stats(&admin)["sse_streams"] == 1);
    sigterm(&s);
    loop {
        match sse.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&got).to_string();
    let hint = text.split("\n\n").find(|e| e.contains("event: goaway")).unwrap_or_else(|| panic!("no goaway event: {text}"));
    assert!(hint.contains("retry: ") && hint.contains("\"type\":\"goaway\""), "{hint}");
    assert!(exited(&mut s, Duration::from_secs(20)).success());
}

/// An MQTT port's clients are closed over the period too: each v5 one
/// after DISCONNECT 0x8B (Server shutting down) with the JSON hint as its
/// Reason String, as paho reads it (tests/peers/mqtt_drain.py) and as the
/// bytes say; a 3.1.1 one by the close alone.
#[test]
fn a_draining_mqtt_server_tells_v5_clients_it_shuts_down_and_spreads_their_closes() {
    let port = free_port();
    let (mut s, _, ready) = server_ready(&["--protocol", "mqtt", "--ports", &port.to_string(), "--workers", "2", "--drain-period", "2s"], None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    let mut py = Command::new("python3");
    py.args([&peer("mqtt_drain.py"), &port.to_string()]);
    let mut peer = Peer::spawn("mqtt_drain.py", py);
    assert_eq!(peer.line(Duration::from_secs(30), "READY"), "READY");
    let conns: Vec<TcpStream> = (0..20).map(|_| mqtt_v5_connected(port)).collect();
    wait_until("22 connections held", Duration::from_secs(20), || stats(&admin)["active"] == 22);
    sigterm(&s);
    for got in read_all_spread(conns) {
        // DISCONNECT, remaining length, 0x8B, property length, Reason String (0x1F) and its length.
        assert!(got.len() > 7 && got[0] == 0xE0 && got[1] as usize == got.len() - 2, "one DISCONNECT: {got:?}");
        assert_eq!((got[2], got[4]), (0x8B, 0x1F), "Server shutting down, with a Reason String: {got:?}");
        let hint: Value = serde_json::from_slice(&got[7..]).unwrap();
        assert!(hint["type"] == "goaway" && hint["retry_ms"].as_u64().unwrap() <= 1000, "{hint}");
    }
    assert_eq!(peer.finish_ok(Duration::from_secs(30)), ["OK"]);
    assert!(exited(&mut s, Duration::from_secs(20)).success());
}

/// Clients that leave by themselves while their server drains end the
/// drain: a 60 s period is not waited out once nobody is left.
#[test]
fn a_drain_whose_clients_all_left_ends_without_waiting_out_the_period() {
    let port = free_port();
    let (mut s, _, ready) = server_ready(&["--protocol", "mqtt", "--ports", &port.to_string(), "--workers", "1", "--drain-period", "60s"], None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    let conns: Vec<TcpStream> = (0..5).map(|_| mqtt_v5_connected(port)).collect();
    wait_until("5 connections held", Duration::from_secs(20), || stats(&admin)["active"] == 5);
    sigterm(&s);
    wait_until("/healthz says draining", Duration::from_secs(10), || http(&admin, "GET", "/healthz", b"", None).0 == 503);
    drop(conns);
    assert!(exited(&mut s, Duration::from_secs(20)).success());
}
