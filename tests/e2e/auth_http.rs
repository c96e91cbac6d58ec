//! `--mqtt-auth-http`: MQTT CONNECTs decided by an HTTP backend written
//! for EMQX's HTTP authentication (Python's http.server here, not
//! megaconn's code): its allow, deny and ignore, an error status, a slow
//! answer past the timeout and one that is not JSON, each with its CONNACK
//! and counted; what it is asked; answers reused from the cache; a
//! backend that cannot be reached fails closed, or open when told.
use crate::common::mqtt_raw::{frame, login_packet, packet, publish_body, subscribe_packet};
use crate::common::*;
use crate::mqtt::stats_when;
use serde_json::Value;
use std::io::Write;
use std::process::Command;
use std::time::Duration;

/// An MQTT CONNECT (`level` 4 or 5, clean) with this client id, user
/// name and password: the CONNACK's code and its whole body.
fn connack(port: u16, level: u8, id: &str, login: Option<(&str, &str)>) -> (u8, Vec<u8>) {
    let (_, code, ack) = connected(port, level, id, login);
    (code, ack)
}

/// [`connack`], and the connection.
fn connected(port: u16, level: u8, id: &str, login: Option<(&str, &str)>) -> (std::net::TcpStream, u8, Vec<u8>) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(&login_packet(level, id, login, None)).unwrap();
    let (kind, ack) = packet(&mut s);
    assert_eq!(kind, 0x20, "a CONNACK");
    (s, ack[1], ack)
}

/// The backend up (it says READY) on a port of its own.
pub(crate) fn backend() -> (Peer, u16) {
    let port = free_port();
    let mut py = Command::new("python3");
    py.arg(peer("auth_http_backend.py")).arg(port.to_string());
    let mut p = Peer::spawn("auth_http_backend.py", py);
    assert_eq!(p.line(Duration::from_secs(30), "the backend listening"), "READY");
    (p, port)
}

#[test]
fn an_emqx_http_auth_backend_decides_every_connect() {
    let (_backend, hook) = backend();
    let url = format!("http://127.0.0.1:{hook}/auth");
    let (mut s, admin, port) = crate::mqtt::mqtt_server(&["--mqtt-auth-http", &url, "--mqtt-auth-http-timeout", "1s"]);
    assert_eq!(connack(port, 4, "a1", Some(("alice", "apw"))).0, 0, "allow");
    assert_eq!(connack(port, 4, "a2", Some(("alice", "wrong"))).0, 5, "deny");
    for user in ["bob", "ig", "err", "slow", "bad"] {
        assert_eq!(connack(port, 4, user, Some((user, "x"))).0, 5, "{user} refused (not authorized)");
    }
    // No user name: the backend's 204 allows; a 5.0 CONNECT without a
    // client id is told the one it was given.
    let (code, ack) = connack(port, 5, "", None);
    assert_eq!(code, 0, "204 allows");
    assert!(ack.windows(9).any(|w| w == b"megaconn-"), "the assigned client id in the CONNACK: {ack:?}");
    // The same login again: from the cache, the backend not asked.
    assert_eq!(connack(port, 4, "a1", Some(("alice", "apw"))).0, 0, "allow, cached");
    let (status, seen) = http(&format!("127.0.0.1:{hook}"), "GET", "/seen", b"", None);
    assert_eq!(status, 200);
    let seen: Vec<Value> = serde_json::from_str(&seen).unwrap();
    assert_eq!(seen.len(), 8, "asked once per login: {seen:?}");
    assert_eq!(seen[0], serde_json::json!({"username": "alice", "password": "apw", "clientid": "a1", "peerhost": "127.0.0.1", "protocol": "mqtt"}));
    let v = stats_when(&admin, "every decision counted", |v| v["close_reasons"]["mqtt_auth_http_refused"] == 6);
    let h = &v["mqtt_auth_http"];
    assert_eq!(h["asked"], 8, "{h}");
    let decided = serde_json::json!({"allow": 2, "deny": 2, "ignore": 1, "status": 1, "timeout": 1, "bad_answer": 1});
    assert_eq!(h["decided"], decided, "{h}");
    assert_eq!(h["cached"], serde_json::json!({"allow": 1}), "{h}");
    assert_eq!(v["auth_refused"]["mqtt_auth_http_refused"], 6, "{v}");
    let (_, metrics) = http(&admin, "GET", "/metrics", b"", None);
    assert_eq!(sample(&metrics, "megaconn_mqtt_auth_http_decisions_total{outcome=\"timeout\"}"), Some(1.0), "{metrics}");
    assert!(s.terminate().success());
}

#[test]
fn a_backend_that_cannot_be_reached_fails_closed_unless_told_open() {
    let url = format!("http://127.0.0.1:{}/auth", free_port());
    let (mut closed, admin, port) = crate::mqtt::mqtt_server(&["--mqtt-auth-http", &url]);
    assert_eq!(connack(port, 4, "d1", Some(("alice", "apw"))).0, 5, "fail closed");
    stats_when(&admin, "counted", |v| v["mqtt_auth_http"]["decided"]["unreachable"] == 1);
    assert!(closed.terminate().success());
    let (mut open, admin, port) = crate::mqtt::mqtt_server(&["--mqtt-auth-http", &url, "--mqtt-auth-http-fail-open"]);
    assert_eq!(connack(port, 4, "d1", Some(("alice", "apw"))).0, 0, "fail open");
    stats_when(&admin, "counted", |v| v["mqtt_auth_http"]["decided"]["unreachable"] == 1);
    assert!(open.terminate().success());
}

/// The SUBACK codes a SUBSCRIBE (v5) of `filters` at QoS 1 gets.
fn suback(s: &mut std::net::TcpStream, id: u16, filters: &[&str]) -> Vec<u8> {
    let f: Vec<(&str, u8)> = filters.iter().map(|f| (*f, 1)).collect();
    s.write_all(&subscribe_packet(true, id, &f)).unwrap();
    let (kind, body) = packet(s);
    assert_eq!(kind, 0x90, "a SUBACK");
    // Packet id, properties length 0, the codes.
    body[3..].to_vec()
}

#[test]
fn the_backends_acl_decides_what_each_client_publishes_and_subscribes_to() {
    let (_backend, hook) = backend();
    let url = format!("http://127.0.0.1:{hook}/auth");
    let (_s, admin, port) = crate::mqtt::mqtt_server(&["--mqtt-auth-http", &url]);
    // A superuser's own acl denies everything: it is not limited by it.
    let (mut root, code, _) = connected(port, 5, "watcher", Some(("root", "x")));
    assert_eq!(code, 0);
    assert_eq!(suback(&mut root, 1, &["#"]), [1], "a superuser subscribes to everything");
    let (mut dev, code, _) = connected(port, 5, "d1", Some(("dev", "x")));
    assert_eq!(code, 0);
    // cmd/${username}/# allows its own commands; a wildcard that would
    // reach others', and anything else, is refused (0x87).
    assert_eq!(suback(&mut dev, 1, &["cmd/dev/#", "cmd/dev/+/x", "cmd/#", "cmd/+/reboot", "tele/d1/x"]), [1, 1, 0x87, 0x87, 0x87]);
    // tele/${clientid}/# lets it publish its own telemetry only.
    for (id, topic) in [(2u16, "tele/d1/temp"), (3, "tele/d2/temp"), (4, "cmd/dev/x")] {
        dev.write_all(&frame(0x32, &publish_body(true, topic, Some(id), topic.as_bytes()))).unwrap();
        let (kind, ack) = packet(&mut dev);
        let reason = ack.get(2).copied().unwrap_or(0);
        assert_eq!((kind, reason), (0x40, if topic == "tele/d1/temp" { 0 } else { 0x87 }), "PUBACK of {topic}");
    }
    // The watcher hears the allowed one only.
    let (kind, body) = packet(&mut root);
    assert_eq!(kind & 0xF0, 0x30);
    assert!(body.ends_with(b"tele/d1/temp"), "{body:?}");
    root.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let mut more = [0u8; 1];
    assert!(std::io::Read::read(&mut root, &mut more).is_err(), "the refused publishes reached nobody");
    let v = stats_when(&admin, "the refusals counted", |v| v["mqtt_publish_refused"]["mqtt_acl_denied"] == 2);
    assert_eq!(v["mqtt_auth_http"]["decided"]["allow"], 2, "{}", v["mqtt_auth_http"]);
}

#[test]
fn a_superuser_without_a_user_name_is_not_held_by_admin_topics() {
    let (_backend, hook) = backend();
    let url = format!("http://127.0.0.1:{hook}/auth");
    let (_s, _, port) = crate::mqtt::mqtt_server(&["--mqtt-auth-http", &url, "--admin-topics", "ops/*"]);
    let (mut root, code, _) = connected(port, 5, "anon-root", None);
    assert_eq!(code, 0);
    assert_eq!(suback(&mut root, 1, &["ops/alerts"]), [1], "a superuser subscribes to an admin topic");
    let (mut plain, code, _) = connected(port, 5, "anon", None);
    assert_eq!(code, 0, "204 allows");
    assert_eq!(suback(&mut plain, 1, &["ops/alerts"]), [0x87], "anyone else is refused it");
}

#[test]
fn a_connection_ends_at_the_expire_at_its_backend_gave() {
    let (_backend, hook) = backend();
    let url = format!("http://127.0.0.1:{hook}/auth");
    let (_s, admin, port) = crate::mqtt::mqtt_server(&["--mqtt-auth-http", &url]);
    let (mut s, code, _) = connected(port, 4, "short", Some(("short", "x")));
    assert_eq!(code, 0);
    let started = std::time::Instant::now();
    let mut rest = Vec::new();
    let _ = std::io::Read::read_to_end(&mut s, &mut rest);
    assert!(started.elapsed() < Duration::from_secs(15), "closed at its expiry, not by the read timeout");
    stats_when(&admin, "the close counted as expired", |v| v["close_reasons"]["auth_expired"] == 1);
}

/// A request's answer head, from its first line to the blank line.
fn head_of(addr: &str, request: &str) -> (std::net::TcpStream, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(std::io::Read::read(&mut s, &mut b).unwrap(), 1, "answered: {}", String::from_utf8_lossy(&head));
        head.push(b[0]);
    }
    (s, String::from_utf8_lossy(&head).into_owned())
}

#[test]
fn websocket_and_event_stream_requests_are_decided_by_their_cookie() {
    let (_backend, hook) = backend();
    let url = format!("http://127.0.0.1:{hook}/auth");
    let port = free_port();
    let serve = format!("ws={port}");
    let (_s, _, ready) = server_ready(&["--serve", &serve, "--workers", "1", "--mqtt-auth-http", &url], None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    let addr = format!("127.0.0.1:{port}");
    let upgrade = |cookie: &str| {
        format!("GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{cookie}\r\n")
    };
    // Allowed: upgraded, and it echoes as a WebSocket port without the hook does.
    let (mut ok, head) = head_of(&addr, &upgrade("Cookie: theme=dark; session=good\r\n"));
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    ok.write_all(&ws_frame(true, 1, b"hello")).unwrap();
    let mut echo = [0u8; 7];
    std::io::Read::read_exact(&mut ok, &mut echo).unwrap();
    assert_eq!(&echo[2..], b"hello");
    // Refused: 403, closed.
    let (_, head) = head_of(&addr, &upgrade("Cookie: session=stolen\r\n"));
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    let (_, head) = head_of(&addr, &upgrade(""));
    assert!(head.starts_with("HTTP/1.1 403"), "no cookie: {head}");
    // An event stream, asked by curl (a client nobody here wrote).
    let sse = |cookie: &str| {
        let mut c = Command::new("curl");
        c.args(["-s", "-N", "--max-time", "2", "-o", "/dev/null", "-w", "%{http_code} %{content_type}", "-H", "Accept: text/event-stream"]);
        if !cookie.is_empty() {
            c.args(["-b", cookie]);
        }
        c.arg(format!("http://{addr}/events?subscribe=news"));
        let out = c.output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(sse("session=good").starts_with("200 text/event-stream"), "{}", sse("session=good"));
    assert!(sse("session=bad").starts_with("403"), "{}", sse("session=bad"));
    // What the backend was asked: EMQX's fields, the protocol, the headers and the cookie.
    let (status, seen) = http(&format!("127.0.0.1:{hook}"), "GET", "/seen", b"", None);
    assert_eq!(status, 200);
    let seen: Vec<Value> = serde_json::from_str(&seen).unwrap();
    let first = &seen[0];
    assert_eq!((first["protocol"].as_str(), first["peerhost"].as_str(), first["clientid"].as_str()), (Some("ws"), Some("127.0.0.1"), Some("")), "{first}");
    assert_eq!(first["cookie"], "theme=dark; session=good", "{first}");
    assert_eq!(first["headers"]["upgrade"], "websocket", "{first}");
    assert!(seen.iter().any(|a| a["protocol"] == "sse"), "{seen:?}");
    let v = stats_when(&admin, "the refusals counted", |v| v["auth_refused"]["auth_http_refused"] == 3);
    assert_eq!(v["close_reasons"]["auth_http_refused"], 3, "{v}");
}

#[test]
fn event_streams_on_http_ports_are_decided_by_their_cookie() {
    let (_backend, hook) = backend();
    let url = format!("http://127.0.0.1:{hook}/auth");
    let port = free_port();
    let serve = format!("http={port}");
    let (_s, _, ready) = server_ready(&["--serve", &serve, "--workers", "1", "--mqtt-auth-http", &url], None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    let addr = format!("127.0.0.1:{port}");
    // curl (a client nobody here wrote): allowed by its cookie, or 403.
    let sse = |cookie: &str| {
        let out = Command::new("curl")
            .args(["-s", "-N", "--max-time", "2", "-o", "/dev/null", "-w", "%{http_code} %{content_type}", "-H", "Accept: text/event-stream", "-b", cookie])
            .arg(format!("http://{addr}/events?subscribe=news"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(sse("session=good").starts_with("200 text/event-stream"), "{}", sse("session=good"));
    assert!(sse("session=bad").starts_with("403"), "{}", sse("session=bad"));
    // A plain request is not asked about; one pipelined before a held
    // stream is answered first, the stream once the backend allowed it.
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /events?subscribe=news HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\nCookie: session=good\r\n\r\n",
    )
    .unwrap();
    let mut got = Vec::new();
    let mut b = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("text/event-stream") {
        let n = std::io::Read::read(&mut s, &mut b).expect("the answers");
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&b[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    assert_eq!(text.matches("HTTP/1.1 200").count(), 2, "{text}");
    assert!(text.find("HTTP/1.1 200").unwrap() < text.find("text/event-stream").unwrap(), "{text}");
    let (status, seen) = http(&format!("127.0.0.1:{hook}"), "GET", "/seen", b"", None);
    assert_eq!(status, 200);
    let seen: Vec<Value> = serde_json::from_str(&seen).unwrap();
    assert_eq!(seen.len(), 3, "one ask per stream (their headers differ), none for the plain request: {seen:?}");
    assert!(seen.iter().all(|a| a["protocol"] == "sse" && a["headers"]["accept"] == "text/event-stream"), "{seen:?}");
    stats_when(&admin, "the refusal counted", |v| v["auth_refused"]["auth_http_refused"] == 1);
}
