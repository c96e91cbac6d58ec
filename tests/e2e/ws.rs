//! `--protocol ws` against WebSocket implementations nobody here wrote:
//! Python `websockets` (conformance, pushes), and bad upgrades answered
//! with the right HTTP status.
use crate::common::*;
use std::io::{Read, Write};
use std::process::Command;
use std::time::Duration;

#[test]
fn python_websockets_client_conformance() {
    let port = free_port().to_string();
    let (mut s, _) = server(&["--ports", &port, "--workers", "1", "--protocol", "ws"], None);
    let mut py = Command::new("python3");
    py.args([&peer("ws_conformance.py"), &port]);
    let (code, out, err) = run(py, Duration::from_secs(60));
    assert!(code == 0 && out.ends_with("ALL OK\n"), "ws_conformance.py exited {code}: {out}{err}");
    let v = s.wait_for(Duration::from_secs(10), "closes counted", |v| {
        v["event"] == "stats" && v["close_reasons"]["ws_bad_utf8"] == 1 && v["close_reasons"]["ws_message_too_big"] == 2
    });
    assert_eq!(v["close_reasons"]["ws_unmasked_frame"], 1, "{v}");
    assert_eq!(v["close_reasons"]["ws_peer_close"], 1, "{v}");
    assert_eq!(v["ws_upgrades"], 5, "{v}");
    assert!(s.terminate().success());
}

#[test]
fn bad_upgrades_get_an_http_status_and_a_close() {
    let port = free_port();
    let (mut s, _) = server(&["--ports", &port.to_string(), "--workers", "1", "--protocol", "ws"], None);
    let (status, body) = http(&format!("127.0.0.1:{port}"), "GET", "/", b"", None);
    assert_eq!(status, 426, "{body}");
    assert!(body.contains("Upgrade: websocket"), "{body}");
    // A refused POST whose body is still coming: the server answers, then
    // lingers (reads and drops the body until the peer closes) instead of
    // closing into a reset that would fail the client's writes before it
    // reads the answer. The body goes out only after the answer is here,
    // and each 100 KB is read by the server (ss: received, nothing left
    // queued) before the next.
    for _ in 0..5 {
        let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let me = c.local_addr().unwrap().port();
        let head = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 400000\r\n\r\n";
        c.write_all(head).unwrap();
        c.peek(&mut [0u8; 1]).expect("the server answers the refused upgrade before its body arrives");
        let mut sent = head.len() as u64;
        for _ in 0..4 {
            c.write_all(&[b'x'; 100_000]).expect("the server still takes the body it refused");
            sent += 100_000;
            wait_until(&format!("the lingering server read {sent} bytes"), Duration::from_secs(10), || {
                tcp_socket(port, me).is_some_and(|s| s.bytes_received == sent && s.recv_q == 0)
            });
        }
        let mut answer = Vec::new();
        c.read_to_end(&mut answer).expect("the answer arrives whole, then a FIN");
        let text = String::from_utf8_lossy(&answer);
        assert!(text.starts_with("HTTP/1.1 405"), "{text}");
    }
    // curl, sending a 2 MB body, reads the answer (not "connection reset").
    let body = std::env::temp_dir().join(format!("megaconn-refused-body-{}", std::process::id()));
    std::fs::write(&body, vec![b'x'; 2_000_000]).unwrap();
    let out = Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "20", "--data-binary"])
        .arg(format!("@{}", body.display()))
        .arg(format!("http://127.0.0.1:{port}/"))
        .output()
        .expect("curl is installed (scripts/setup.sh)");
    let _ = std::fs::remove_file(&body);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "405", "curl: {}", String::from_utf8_lossy(&out.stderr));
    let v = s.wait_for(Duration::from_secs(10), "refusals counted", |v| v["event"] == "stats" && v["close_reasons"]["ws_handshake_method"] == 6);
    assert_eq!(v["close_reasons"]["ws_handshake_not_upgrade"], 1, "{v}");
    assert_eq!(v["ws_upgrades"], 0);
    assert!(s.terminate().success());
}

fn pushes_reach_python_subscribers(format: &str) {
    let p = free_port().to_string();
    let (mut s, _, ready) = server_ready(&["--ports", &p, "--workers", "2", "--protocol", "ws", "--push-format", format], None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    let mut py = Command::new("python3");
    py.args([&peer("ws_subscribers.py"), &p, "200", format]);
    let mut subscribers = Peer::spawn("ws_subscribers.py", py);
    assert_eq!(subscribers.line(Duration::from_secs(60), "200 subscribers open"), "ready");
    let (status, r) = http(&admin, "POST", "/broadcast", b"all", None);
    assert_eq!(status, 200, "{r}");
    let (status, r) = http(&admin, "POST", "/publish?topic=room", "héllo".as_bytes(), None);
    assert_eq!(status, 200, "{r}");
    // The script asserts what each connection got: exit 0 and "OK" or fail.
    assert_eq!(subscribers.finish_ok(Duration::from_secs(60)), ["received 300", "OK"]);
    assert!(s.terminate().success());
}

#[test]
fn pushes_reach_python_subscribers_as_json_text() {
    pushes_reach_python_subscribers("text");
}

#[test]
fn pushes_reach_python_subscribers_as_binary() {
    pushes_reach_python_subscribers("binary");
}

/// megaconn's ws client against an echo server nobody here wrote: 2,000
/// connections held, every ping answered, every request echoed.
fn client_against(server: &[&str], port: u16) {
    let mut peer = Command::new(server[0]);
    peer.args(&server[1..]);
    let mut echo = Peer::spawn(&format!("{} echo server", server[0]), peer);
    assert_eq!(echo.line(Duration::from_secs(30), "the echo server listening"), "ready");
    let mut cmd = megaconn();
    let url = format!("ws://127.0.0.1:{port}/echo");
    cmd.args(["client", "--url", &url, "--connections", "2000", "--rate", "2000", "--heartbeat", "1s", "--request-rate", "1/s", "--hold", "4s", "--json"]);
    let (code, out, err) = run(cmd, Duration::from_secs(90));
    drop(echo);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let s = &v["summary"];
    assert_eq!(s["established"], 2000, "{s}");
    assert_eq!(s["held"], 2000, "{s}");
    let beats = s["heartbeats_sent"].as_u64().unwrap();
    assert!(beats >= 2000 * 3, "{s}");
    assert_eq!(s["heartbeats_answered"].as_u64(), Some(beats), "every ping got its pong: {s}");
    assert_eq!(s["heartbeat_rtt_ms"]["count"].as_u64(), Some(beats), "{s}");
    let r = &s["requests"];
    assert!(r["sent"].as_u64().unwrap() >= 2000 * 3, "{r}");
    assert_eq!(r["replies"], r["sent"], "{r}");
    assert_eq!(r["bad_echo"], 0, "{r}");
    assert_eq!(r["latency_ms"]["count"], r["sent"], "{r}");
}

#[test]
fn the_ws_client_holds_2000_against_node_ws() {
    raise_fd_limit();
    let port = free_port();
    client_against(&["node", &peer("ws_echo_server.js"), &port.to_string(), "60"], port);
}

#[test]
fn the_ws_client_holds_2000_against_python_websockets_and_answers_its_pings() {
    raise_fd_limit();
    let port = free_port();
    client_against(&["python3", &peer("ws_echo_server.py"), &port.to_string(), "60"], port);
}

/// `--message` on WebSockets against Python `websockets` (an echo server
/// nobody here wrote): an application's JSON text with per-connection
/// substitutions as heartbeats, then binary frames as requests (pings
/// stay the heartbeats); every echo recognised and timed by its {ts}.
#[test]
fn the_ws_client_sends_its_own_messages_with_substitutions() {
    raise_fd_limit();
    let port = free_port();
    let mut peer_cmd = Command::new("python3");
    peer_cmd.args([&peer("ws_echo_server.py"), &port.to_string(), "60"]);
    let mut echo = Peer::spawn("python websockets echo server", peer_cmd);
    assert_eq!(echo.line(Duration::from_secs(30), "the echo server listening"), "ready");
    let url = format!("ws://127.0.0.1:{port}/app");
    let run_client = |extra: &[&str]| {
        let mut cmd = megaconn();
        cmd.args(["client", "--url", &url, "--connections", "200", "--rate", "2000", "--hold", "2s", "--workers", "1", "--json"]);
        cmd.args(extra);
        let (code, out, err) = run(cmd, Duration::from_secs(60));
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<serde_json::Value>(&out).unwrap()["summary"].clone()
    };
    let s = run_client(&["--message", r#"{"op":"hi","conn":{conn},"n":{seq},"ts":{ts}}"#, "--heartbeat", "400ms"]);
    let sent = s["heartbeats_sent"].as_u64().unwrap();
    assert!(sent >= 200 * 4, "{s}");
    assert_eq!(s["heartbeats_answered"].as_u64(), Some(sent), "every message echoed and recognised: {s}");
    assert_eq!(s["heartbeat_rtt_ms"]["count"].as_u64(), Some(sent), "and timed: {s}");
    assert_eq!(s["raw_messages_in"].as_u64(), Some(sent), "{s}");
    let s = run_client(&["--message", "bin {conn} {ts}", "--ws-binary", "--request-rate", "5/s", "--heartbeat", "500ms"]);
    let r = &s["requests"];
    assert!(r["sent"].as_u64() >= Some(200 * 5), "{s}");
    assert_eq!(r["replies"], r["sent"], "{s}");
    assert_eq!(r["latency_ms"]["count"], r["sent"], "{s}");
    assert!(s["heartbeats_sent"].as_u64() >= Some(200 * 3), "pings go on as heartbeats: {s}");
    assert_eq!(s["heartbeats_answered"], s["heartbeats_sent"], "{s}");
    drop(echo);
}

/// IPv6 end to end, in a namespace of the test's own: Python
/// `websockets` listening on fd00::1, megaconn's client given the URL with
/// the address in brackets and four IPv6 source addresses. Every
/// connection is held, every ping answered, and the server saw all four
/// sources.
#[test]
fn the_ws_client_connects_over_ipv6_from_ipv6_sources() {
    let lab = crate::common::lab::Lab::make("v6", 207, 1).unwrap_or_else(|why| panic!("the IPv6 test's namespace: {why}"));
    lab.add_ipv6(0, &["fd00::1", "fd00::2", "fd00::3", "fd00::4", "fd00::5"]);
    let port = free_port().to_string();
    let mut peer_cmd = lab.command(0, "python3");
    peer_cmd.args([&peer("ws_echo_server.py"), &port, "60", "fd00::1"]);
    let mut echo = Peer::spawn("python websockets echo server on fd00::1", peer_cmd);
    assert_eq!(echo.line(Duration::from_secs(30), "the echo server listening"), "ready");
    let mut cmd = lab.command(0, env!("CARGO_BIN_EXE_megaconn"));
    let url = format!("ws://[fd00::1]:{port}/v6");
    cmd.args(["client", "--url", &url, "--source-ips", "fd00::2-fd00::5", "--connections", "400", "--rate", "2000"]);
    cmd.args(["--heartbeat", "500ms", "--hold", "2s", "--json"]);
    let s = client_held_all(cmd, 400);
    assert!(s["heartbeats_sent"].as_u64() >= Some(400 * 3), "{s}");
    assert_eq!(s["mode"].as_str().map(|m| m.contains("ws://[fd00::1]")), Some(true), "{s}");
    let mut sources: Vec<String> = (0..4).map(|_| echo.line(Duration::from_secs(10), "the sources the server saw")).collect();
    sources.sort();
    assert_eq!(sources, ["peer fd00::2", "peer fd00::3", "peer fd00::4", "peer fd00::5"]);
    drop(echo);
}

/// A headless Chromium page (Debian's chromium) opens 200 WebSockets,
/// subscribed through the URL, and receives one publish on each.
#[test]
fn chromium_receives_a_publish_on_200_websockets() {
    crate::common::browser::chromium_receives_a_publish(&[], 200, None);
}

/// Binary messages go through the business stage like framed requests:
/// a 5 ms pool service time shows in every reply's latency.
#[test]
fn ws_requests_run_through_the_business_stage() {
    let port = free_port();
    let (mut s, _) = server(&["--ports", &port.to_string(), "--workers", "1", "--protocol", "ws", "--business", "pool:4", "--service-time", "5ms"], None);
    let url = format!("ws://127.0.0.1:{port}/rpc");
    let mut cmd = megaconn();
    cmd.args(["client", "--url", &url, "--connections", "200", "--request-rate", "5/s", "--payload", "100"]);
    cmd.args(["--heartbeat", "off", "--hold", "2s", "--json"]);
    let (code, out, err) = run(cmd, Duration::from_secs(60));
    assert_eq!(code, 0, "{err}");
    let r = serde_json::from_str::<serde_json::Value>(&out).unwrap()["summary"]["requests"].clone();
    assert!(r["sent"].as_u64().unwrap() >= 200 * 5 * 2, "{r}");
    assert_eq!(r["replies"], r["sent"], "{r}");
    assert!(r["latency_ms"]["p50_ms"].as_f64().unwrap() >= 5.0, "service time applied: {r}");
    let v = s.wait_for(Duration::from_secs(10), "server counted", |v| v["event"] == "stats" && v["replies"] == r["replies"]);
    assert_eq!(v["ws_upgrades"], 200, "{v}");
    assert!(s.terminate().success());
}

/// The push bench over WebSocket: every broadcast reaches every
/// connection once, as a JSON text message.
#[test]
fn the_push_bench_runs_over_websocket() {
    let mut cmd = megaconn();
    cmd.args(["bench", "--protocol", "ws", "--scenario", "push", "--connections", "2000", "--broadcasts", "2", "--broadcast-interval", "300ms"]);
    let ports = free_ports(4);
    cmd.args(["--ports", &ports.arg(), "--hold", "5s", "--heartbeat", "1s", "--json"]);
    let (code, out, err) = run(cmd, Duration::from_secs(90));
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let p = &v["push"];
    assert_eq!(p["deliveries"], 4000, "{p}");
    assert_eq!(p["duplicates"], 0, "{p}");
    assert_eq!(p["delivery_ms"]["count"], 4000, "{p}");
    assert_eq!(v["client"]["heartbeats_answered"], v["client"]["heartbeats_sent"], "pings answered during pushes");
    assert!(v["client"]["mode"].as_str().unwrap().starts_with("ws:"), "{v}");
    assert_eq!(sockets_on(ports.first, ports.last), 0);
}

#[test]
fn an_upgrade_that_never_completes_is_closed_at_the_header_timeout() {
    let port = free_port();
    let (mut s, _, ready) = server_ready(&["--protocol", "ws", "--ports", &port.to_string(), "--workers", "1", "--header-timeout", "1s"], None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    // Half a request head, then silence (a slowloris); and nothing at all.
    let mut half = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    half.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n").unwrap();
    let mut mute = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let t0 = std::time::Instant::now();
    for c in [&mut half, &mut mute] {
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        assert_eq!(c.read(&mut [0u8; 64]).unwrap_or(0), 0, "closed");
    }
    assert!(t0.elapsed() < Duration::from_secs(5), "closed after {:?}", t0.elapsed());
    // A connection that upgraded in time stays.
    let _ok = ws_handshake(&format!("127.0.0.1:{port}"));
    wait_until("both counted as header_timeout", Duration::from_secs(10), || {
        let (_, body) = http(&admin, "GET", "/stats", b"", None);
        serde_json::from_str::<serde_json::Value>(&body).is_ok_and(|v| v["close_reasons"]["header_timeout"] == 2 && v["active"] == 1)
    });
    assert!(s.terminate().success());
}

/// The Autobahn testsuite's large-message cases (9.1.4-9.1.6, 9.2.4-9.2.6)
/// against `--max-message-bytes 16777216`.
const MAX_MESSAGE: &str = "16777216";

/// Finding 15 of issue 42: echoes of 4, 8 and 16 MiB text and binary
/// messages were closed `slow_reader` (the 256 KiB reply bound counted the
/// echo the peer was reading). Python `websockets`, reading through a
/// 64 KiB receive buffer, gets each back in kind and byte-exact on both
/// reactors, in plaintext and over TLS, and closes the connection itself.
#[test]
fn echoes_up_to_max_message_bytes_reach_a_peer_that_reads_them_on_both_reactors() {
    let pki = pki::Pki::new("ec");
    for io in ["epoll", "uring"] {
        for tls in [false, true] {
            let port = free_port().to_string();
            let mut flags = vec!["--ports", &port, "--workers", "1", "--protocol", "ws", "--max-message-bytes", MAX_MESSAGE, "--io", io];
            if tls {
                flags.extend(["--tls-cert", &pki.cert, "--tls-key", &pki.key]);
            }
            let (mut s, _, _) = server_ready(&flags, None);
            let mut py = Command::new("python3");
            py.arg(peer("ws_large_echo.py")).arg(&port);
            if tls {
                py.arg(&pki.ca);
            }
            let (code, out, err) = run(py, Duration::from_secs(180));
            assert!(code == 0 && out.ends_with("OK\n"), "--io {io}, TLS {tls}: ws_large_echo.py exited {code}: {out}{err}");
            let v = s.wait_for(Duration::from_secs(10), "the peer's close counted", |v| v["event"] == "stats" && v["closed"] == 1);
            assert_eq!(v["close_reasons"]["ws_peer_close"], 1, "--io {io}, TLS {tls}: {v}");
            assert!(v["close_reasons"]["slow_reader"].is_null(), "--io {io}, TLS {tls}: {v}");
            assert!(s.terminate().success());
        }
    }
}

/// What still makes a slow reader: not the size of its reply but a
/// backlog that stops moving. A peer that sends one 16 MiB message and
/// never reads its echo is closed by `--stall-timeout`, counted
/// `stalled{what=backlog}`, on both reactors.
#[test]
fn a_peer_that_never_reads_a_large_echo_is_closed_by_the_stall_timeout() {
    /// One masked binary frame of 16 MiB (mask 0: the payload as sent).
    fn big_frame() -> Vec<u8> {
        let n: usize = MAX_MESSAGE.parse().unwrap();
        let mut f = vec![0x82, 0x80 | 127];
        f.extend_from_slice(&(n as u64).to_be_bytes());
        f.extend_from_slice(&[0; 4]);
        f.resize(f.len() + n, 7);
        f
    }
    let frame = big_frame();
    for io in ["epoll", "uring"] {
        let port = free_port();
        let flags =
            ["--ports", &port.to_string(), "--workers", "1", "--protocol", "ws", "--max-message-bytes", MAX_MESSAGE, "--stall-timeout", "2s", "--io", io];
        let (mut s, _, _) = server_ready(&flags, None);
        let mut c = ws_handshake(&format!("127.0.0.1:{port}"));
        c.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
        // The server reads all of it (its reads do not wait for its
        // writes); the echo fills both socket buffers and the rest waits.
        c.write_all(&frame).expect("the server reads the whole message");
        let v = s.wait_for(Duration::from_secs(20), "the stalled reader closed", |v| v["event"] == "stats" && v["closed"] == 1);
        assert_eq!(v["close_reasons"]["stall_timeout"], 1, "--io {io}: {v}");
        assert_eq!(v["stalled"]["backlog"], 1, "--io {io}: {v}");
        assert!(v["close_reasons"]["slow_reader"].is_null(), "--io {io}: {v}");
        drop(c);
        assert!(s.terminate().success());
    }
}
