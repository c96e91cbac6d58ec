//! MQTT over WebSocket on a `server --protocol ws` port, against clients
//! nobody here wrote: Eclipse paho-mqtt with `transport="websockets"`
//! (3.1.1 and 5.0, QoS 0/1/2, a JSON WebSocket subscriber of the same
//! port getting its publishes, tests/peers/mqtt_ws_paho.py) and mqtt.js
//! (tests/peers/mqtt_ws_node.js); megaconn's own client over ws:// against
//! it; and hostile frames written by hand: half a packet in a frame then
//! silence (`--stall-timeout`), a packet too large announced across
//! frames, a text message, a CONNECT without the `mqtt` offer, each
//! closed with its close code and counted.
use crate::common::*;
use crate::mqtt::{count, stats_when};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

/// A ws server on a free port; (process, admin address, port).
fn ws_server(extra: &[&str]) -> (Running, String, u16) {
    let port = free_port();
    let p = port.to_string();
    let mut args = vec!["--protocol", "ws", "--ports", &p, "--workers", "1"];
    args.extend_from_slice(extra);
    let (s, _, ready) = server_ready(&args, None);
    (s, ready["admin"].as_str().unwrap().to_string(), port)
}

/// A client's masked frame.
fn frame(first: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![first];
    assert!(payload.len() < 126);
    out.push(0x80 | payload.len() as u8);
    let mask = [7u8, 1, 2, 3];
    out.extend_from_slice(&mask);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    out
}

/// A socket upgraded offering `protocols`, the 101 read; its head.
fn upgraded(port: u16, protocols: &str) -> (TcpStream, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(s, "GET /mqtt HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: {protocols}\r\n\r\n").unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut b).unwrap(), 1, "the 101");
        head.push(b[0]);
    }
    (s, String::from_utf8(head).unwrap())
}

/// Everything the server sends until it closes.
fn until_closed(mut s: TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

/// A v5 CONNECT, client id `x`, no keep-alive.
const CONNECT_V5: &[u8] = b"\x10\x0e\x00\x04MQTT\x05\x02\x00\x00\x00\x00\x01x";

/// paho over WebSocket, both versions: QoS 0/1/2 both ways, a JSON ws
/// subscriber and an admin publish sharing the topic (the peer's checks).
#[test]
fn paho_over_websocket_shares_topics_with_json_websocket_clients() {
    let (mut s, admin, port) = ws_server(&[]);
    let mut py = Command::new("python3");
    py.arg(peer("mqtt_ws_paho.py")).args([&port.to_string(), &admin]);
    assert_eq!(Peer::spawn("mqtt_ws_paho.py", py).finish_ok(Duration::from_secs(120)), ["OK"]);
    let st = stats_when(&admin, "the MQTT publishes counted", |v| count(v, "mqtt_publishes_in", "2") >= 2);
    assert_eq!(count(&st, "mqtt_connects", "5.0"), 2, "{st}");
    s.terminate();
}

/// mqtt.js over WebSocket, both versions.
#[test]
fn mqtt_js_over_websocket_publishes_and_subscribes() {
    let (mut s, _, port) = ws_server(&[]);
    let mut node = Command::new("node");
    node.args([&peer("mqtt_ws_node.js"), &port.to_string()]);
    assert_eq!(Peer::spawn("node mqtt_ws_node.js", node).finish_ok(Duration::from_secs(60)), ["OK"]);
    s.terminate();
}

/// `megaconn client --protocol mqtt --url ws://...`: every connection
/// established over WebSocket, subscribed, every PINGREQ answered.
#[test]
fn the_megaconn_client_speaks_mqtt_over_websocket() {
    let (mut s, admin, port) = ws_server(&[]);
    let mut cmd = megaconn();
    let url = format!("ws://127.0.0.1:{port}/mqtt");
    cmd.args(["client", "--protocol", "mqtt", "--url", &url, "--connections", "20", "--mqtt-subscribe", "dev/{conn}", "--heartbeat", "300ms"]);
    cmd.args(["--hold", "1500ms", "--json"]);
    let summary = client_held_all(cmd, 20);
    assert_eq!(summary["mqtt_subscriptions"]["granted"].as_u64(), Some(20), "{summary}");
    stats_when(&admin, "20 CONNECTs counted", |v| count(v, "mqtt_connects", "3.1.1") == 20);
    s.terminate();
}

/// Hostile frames, each closed under its reason and counted: half a
/// PUBLISH in a whole frame then silence (`stall_timeout`, as partial
/// input), a PUBLISH announcing 2 MiB across frames (DISCONNECT 0x95 in a
/// binary message, close 1009), a text message (close 1003), a CONNECT on
/// a WebSocket that did not offer `mqtt` (close 1002).
#[test]
fn half_packets_oversize_packets_text_and_unoffered_mqtt_are_closed_and_counted() {
    let (mut s, admin, port) = ws_server(&["--stall-timeout", "1s"]);
    let (mut c, head) = upgraded(port, "mqtt");
    assert!(head.contains("Sec-WebSocket-Protocol: mqtt\r\n"), "{head}");
    c.write_all(&frame(0x82, CONNECT_V5)).unwrap();
    c.write_all(&frame(0x82, b"\x30\x10\x00\x03a/b")).unwrap();
    let back = until_closed(c);
    assert_eq!((back[0], back[2]), (0x82, 0x20), "the CONNACK in a binary message: {back:x?}");

    let (mut c, _) = upgraded(port, "mqtt");
    c.write_all(&frame(0x82, CONNECT_V5)).unwrap();
    c.write_all(&frame(0x02, b"\x30\x80\x80\x80\x01")).unwrap();
    c.write_all(&frame(0x80, b"\x00\x03a/b")).unwrap();
    let back = until_closed(c);
    let rest = &back[2 + back[1] as usize..];
    assert_eq!(rest, b"\x82\x03\xe0\x01\x95\x88\x02\x03\xf1", "DISCONNECT 0x95, close 1009: {back:x?}");

    let (mut c, _) = upgraded(port, "mqtt");
    c.write_all(&frame(0x81, b"hello")).unwrap();
    assert_eq!(until_closed(c), b"\x88\x02\x03\xeb", "close 1003");

    let (mut c, head) = upgraded(port, "megaconn");
    assert!(!head.contains("mqtt"), "{head}");
    c.write_all(&frame(0x82, CONNECT_V5)).unwrap();
    assert_eq!(until_closed(c), b"\x88\x02\x03\xea", "close 1002");

    let reasons = ["stall_timeout", "mqtt_packet_too_large", "mqtt_ws_text", "ws_mqtt_not_offered"];
    let st = stats_when(&admin, "every close counted", |v| reasons.iter().all(|r| count(v, "close_reasons", r) >= 1));
    for reason in reasons {
        assert_eq!(count(&st, "close_reasons", reason), 1, "{reason}: {st}");
    }
    assert_eq!(count(&st, "stalled", "partial_input"), 1, "{st}");
    s.terminate();
}

/// Chromium running mqtt.js's browser bundle: it subscribes and
/// publishes over WebSocket, and gets its own publish and an admin one.
#[test]
fn chromium_running_mqtt_js_gets_its_own_and_an_admin_publish() {
    let (mut s, admin, port) = ws_server(&[]);
    let mut node = Command::new("node");
    node.args([&peer("chromium_mqtt.js"), &port.to_string()]);
    let mut page = Peer::spawn("node chromium_mqtt.js (chromium)", node);
    assert_eq!(page.line(Duration::from_secs(60), "the page subscribed"), "ready");
    let (status, body) = http(&admin, "POST", "/publish?topic=b/admin", b"from the admin API", None);
    assert_eq!(status, 200, "{body}");
    let result: serde_json::Value = serde_json::from_str(&page.line(Duration::from_secs(40), "the page's result")).unwrap();
    assert_eq!(result["messages"], serde_json::json!(["b/admin from the admin API", "b/page from the browser"]), "{result}");
    s.terminate();
}

/// wss://: the megaconn client over TLS (checking the test CA) against a
/// ws server with `--tls-cert/--tls-key`, every connection held.
#[test]
fn the_megaconn_client_speaks_mqtt_over_wss() {
    let pki = crate::common::pki::Pki::new("ec");
    let (mut s, admin, port) = ws_server(&["--tls-cert", &pki.cert, "--tls-key", &pki.key]);
    let mut cmd = megaconn();
    let url = format!("wss://localhost:{port}/mqtt");
    cmd.args(["client", "--protocol", "mqtt", "--url", &url, "--tls-ca", &pki.ca, "--connections", "10", "--heartbeat", "300ms"]);
    cmd.args(["--hold", "1s", "--json"]);
    client_held_all(cmd, 10);
    stats_when(&admin, "10 TLS handshakes and CONNECTs", |v| v["tls_handshakes"].as_u64() >= Some(10) && count(v, "mqtt_connects", "3.1.1") == 10);
    s.terminate();
}

/// A WebSocket server that does not choose `mqtt` (Python websockets'
/// echo server chooses no subprotocol): every connection fails under
/// `mqtt_ws_subprotocol_refused`, and the run fails.
#[test]
fn the_megaconn_client_refuses_a_server_that_does_not_choose_mqtt() {
    let port = free_port();
    let mut py = Command::new("python3");
    py.args([&peer("ws_echo_server.py"), &port.to_string(), "60"]);
    let mut echo = Peer::spawn("python websockets echo server", py);
    assert_eq!(echo.line(Duration::from_secs(30), "the echo server listening"), "ready");
    let mut cmd = megaconn();
    let url = format!("ws://127.0.0.1:{port}/mqtt");
    cmd.args(["client", "--protocol", "mqtt", "--url", &url, "--connections", "5", "--hold", "0s", "--json"]);
    let (code, out, err) = run(cmd, Duration::from_secs(60));
    assert_ne!(code, 0, "{out}\n{err}");
    let s = serde_json::from_str::<serde_json::Value>(&out).unwrap()["summary"].clone();
    assert_eq!((s["established"].as_u64(), s["failed"]["mqtt_ws_subprotocol_refused"].as_u64()), (Some(0), Some(5)), "{s}");
}

/// A draining ws port's MQTT client: DISCONNECT 0x8B with the hint in a
/// binary message (what an MQTT library reads), then close 1012 with the
/// same hint, as the port's JSON WebSocket clients get it.
#[test]
fn a_draining_ws_port_tells_its_mqtt_client_in_mqtt_then_closes_1012() {
    let (mut s, _, port) = ws_server(&["--drain-period", "1s"]);
    let (mut c, _) = upgraded(port, "mqtt");
    c.write_all(&frame(0x82, CONNECT_V5)).unwrap();
    let mut connack = [0u8; 2];
    c.read_exact(&mut connack).unwrap();
    let mut rest = vec![0u8; connack[1] as usize];
    c.read_exact(&mut rest).unwrap();
    assert_eq!((connack[0], rest[0]), (0x82, 0x20), "the CONNACK in a binary message");
    // SAFETY: signalling our own child by PID.
    unsafe { libc::kill(s.child.id() as i32, libc::SIGTERM) };
    let back = until_closed(c);
    assert_eq!((back[0], back[2], back[4]), (0x82, 0xE0, 0x8B), "a binary message holding DISCONNECT 0x8B: {back:x?}");
    let message_end = 2 + back[1] as usize;
    let hint: serde_json::Value = serde_json::from_slice(&back[9..message_end]).unwrap();
    assert_eq!(hint["type"], "goaway", "its Reason String: {hint}");
    let close = &back[message_end..];
    assert_eq!((close[0], u16::from_be_bytes([close[2], close[3]])), (0x88, 1012), "then close 1012: {back:x?}");
    let mut status = None;
    wait_until("the drained server exits", Duration::from_secs(20), || {
        status = s.child.try_wait().unwrap();
        status.is_some()
    });
    assert!(status.unwrap().success());
}
