//! `--mqtt-auth-http`: MQTT CONNECTs decided by an HTTP backend written
//! for EMQX's HTTP authentication (Python's http.server here, not
//! megaconn's code): its allow, deny and ignore, an error status, a slow
//! answer past the timeout and one that is not JSON, each with its CONNACK
//! and counted; what it is asked; answers reused from the cache; a
//! backend that cannot be reached fails closed, or open when told.
use crate::common::mqtt_raw::{frame, packet};
use crate::common::*;
use crate::mqtt::stats_when;
use serde_json::Value;
use std::io::Write;
use std::process::Command;
use std::time::Duration;

/// An MQTT CONNECT (`level` 4 or 5, clean) with this client id, user
/// name and password: the CONNACK's code and its whole body.
fn connack(port: u16, level: u8, id: &str, login: Option<(&str, &str)>) -> (u8, Vec<u8>) {
    let flags = if login.is_some() { 0xc2 } else { 0x02 };
    let mut body = b"\x00\x04MQTT".to_vec();
    body.extend_from_slice(&[level, flags, 0, 60]);
    if level == 5 {
        body.push(0);
    }
    let mut field = |f: &[u8]| {
        body.extend_from_slice(&(f.len() as u16).to_be_bytes());
        body.extend_from_slice(f);
    };
    field(id.as_bytes());
    if let Some((user, password)) = login {
        field(user.as_bytes());
        field(password.as_bytes());
    }
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(&frame(0x10, &body)).unwrap();
    let (kind, ack) = packet(&mut s);
    assert_eq!(kind, 0x20, "a CONNACK");
    (ack[1], ack)
}

/// The backend up (it says READY) on a port of its own.
fn backend() -> (Peer, u16) {
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
