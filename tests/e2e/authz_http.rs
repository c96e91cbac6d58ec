//! `--mqtt-authz-http`: each MQTT PUBLISH, SUBSCRIBE filter and will
//! decided by an HTTP backend written for EMQX's HTTP authorization
//! (Python's http.server here, not megaconn's code): what it is asked,
//! its allow, deny and ignore, an error status and an answer that is not
//! JSON (fail closed), a slow answer that holds the packet (and only its
//! connection) without reordering, answers reused from the cache, a
//! backend that cannot be reached failing closed or open when told.
use crate::auth_http::backend;
use crate::common::mqtt_raw::{frame, login_packet, packet, publish_body, subscribe_packet};
use crate::common::*;
use crate::mqtt::stats_when;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

/// A CONNECT (`level` 4 or 5, clean) with this client id and user name
/// (password "x"), and (3.1.1) a will to `will` if given: the connection, after
/// a CONNACK that accepts it.
fn client(port: u16, level: u8, id: &str, user: &str, will: Option<&str>) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(&login_packet(level, id, Some((user, "x")), will)).unwrap();
    let (kind, ack) = packet(&mut s);
    assert_eq!((kind, ack[1]), (0x20, 0), "an accepting CONNACK");
    s
}

/// The SUBACK codes of a SUBSCRIBE of `filters` at QoS 1.
fn suback(s: &mut TcpStream, v5: bool, id: u16, filters: &[&str]) -> Vec<u8> {
    let f: Vec<(&str, u8)> = filters.iter().map(|f| (*f, 1)).collect();
    s.write_all(&subscribe_packet(v5, id, &f)).unwrap();
    let (kind, body) = packet(s);
    assert_eq!(kind, 0x90, "a SUBACK");
    body[if v5 { 3 } else { 2 }..].to_vec()
}

/// A v5 QoS 1 PUBLISH to `topic` with packet id `id`.
fn publish(s: &mut TcpStream, topic: &str, id: u16) {
    s.write_all(&frame(0x32, &publish_body(true, topic, Some(id), topic.as_bytes()))).unwrap();
}

/// The next PUBACK: (packet id, reason code).
fn puback(s: &mut TcpStream) -> (u16, u8) {
    let (kind, ack) = packet(s);
    assert_eq!(kind, 0x40, "a PUBACK");
    (u16::from_be_bytes([ack[0], ack[1]]), ack.get(2).copied().unwrap_or(0))
}

/// The topic of the next PUBLISH on `s`, a v5 subscriber's.
fn heard(s: &mut TcpStream) -> String {
    let (kind, body) = packet(s);
    assert_eq!(kind & 0xF0, 0x30, "a PUBLISH");
    let len = u16::from_be_bytes([body[0], body[1]]) as usize;
    String::from_utf8(body[2..2 + len].to_vec()).unwrap()
}

/// Nothing more arrives on `s` within half a second.
fn quiet(s: &mut TcpStream, what: &str) {
    s.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let mut b = [0u8; 1];
    match s.read(&mut b) {
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
        other => panic!("{what}: expected nothing, got {other:?} {b:?}"),
    }
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
}

/// The authorization requests the backend received.
fn asked(hook: u16) -> Vec<Value> {
    let (status, seen) = http(&format!("127.0.0.1:{hook}"), "GET", "/seen", b"", None);
    assert_eq!(status, 200);
    let seen: Vec<Value> = serde_json::from_str(&seen).unwrap();
    seen.into_iter().filter(|a| a.get("action").is_some()).collect()
}

#[test]
fn an_emqx_http_authorizer_decides_each_publish_and_subscription_on_io_uring() {
    decides_each_publish_and_subscription("uring");
}

#[test]
fn an_emqx_http_authorizer_decides_each_publish_and_subscription_on_epoll() {
    decides_each_publish_and_subscription("epoll");
}

/// A held connection is not read: on epoll it is not asked for readiness
/// again, on io_uring its receive is cancelled.
fn decides_each_publish_and_subscription(io: &str) {
    let (_backend, hook) = backend();
    let url = format!("http://127.0.0.1:{hook}/authz");
    let (mut s, admin, port) = crate::mqtt::mqtt_server(&["--mqtt-authz-http", &url, "--mqtt-auth-http-timeout", "10s", "--io", io]);
    let mut watch = client(port, 5, "watch", "w", None);
    assert_eq!(suback(&mut watch, true, 1, &["ok/#", "no/#", "slow/#", "$share/g/ok/shared"]), [1, 0x87, 1, 1]);
    let mut dev = client(port, 5, "pub", "dev", None);
    // Allowed, denied (0x87), and what the backend cannot say refused (fail closed).
    for (id, topic, reason) in [(1u16, "ok/1", 0u8), (2, "no/1", 0x87), (3, "ig/1", 0x87), (4, "err/1", 0x87), (5, "bad/1", 0x87)] {
        publish(&mut dev, topic, id);
        assert_eq!(puback(&mut dev), (id, reason), "PUBACK of {topic}");
    }
    assert_eq!(heard(&mut watch), "ok/1");
    // A slow answer holds its publish, and the one behind it, in order;
    // another connection is served meanwhile.
    publish(&mut dev, "slow/1", 6);
    publish(&mut dev, "ok/1", 7);
    let mut other = client(port, 4, "other", "o", None);
    other.write_all(&[0xC0, 0]).unwrap();
    assert_eq!(packet(&mut other).0, 0xD0, "PINGRESP while a publish waits");
    dev.set_nonblocking(true).unwrap();
    let mut b = [0u8; 1];
    assert!(matches!(dev.read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock), "the held publish is not acknowledged yet");
    dev.set_nonblocking(false).unwrap();
    assert_eq!(puback(&mut dev), (6, 0));
    assert_eq!(puback(&mut dev), (7, 0));
    assert_eq!(heard(&mut watch), "slow/1");
    assert_eq!(heard(&mut watch), "ok/1");
    quiet(&mut watch, "the refused publishes reached nobody");
    // ok/1 at QoS 1 was asked once: the second came from the worker's cache.
    let asks = asked(hook);
    let ok1: Vec<&Value> = asks.iter().filter(|a| a["topic"] == "ok/1" && a["action"] == "publish").collect();
    assert_eq!(ok1.len(), 1, "{asks:?}");
    assert_eq!(
        *ok1[0],
        serde_json::json!({"username": "dev", "clientid": "pub", "peerhost": "127.0.0.1", "protocol": "mqtt", "topic": "ok/1", "action": "publish", "qos": 1, "retain": false})
    );
    // Asked at once (the backend's threads record them in any order).
    let mut filters: Vec<&str> = asks.iter().filter(|a| a["action"] == "subscribe").filter_map(|a| a["topic"].as_str()).collect();
    filters.sort_unstable();
    assert_eq!(filters, ["no/#", "ok/#", "ok/shared", "slow/#"], "a shared subscription is asked about its filter");
    let v = stats_when(&admin, "every refusal counted", |v| v["mqtt_publish_refused"]["mqtt_authz_http_denied"] == 4);
    assert_eq!(v["subscribe_refused"]["mqtt_authz_http_denied"], 1, "{v}");
    let h = &v["mqtt_authz_http"];
    assert_eq!(h["decided"], serde_json::json!({"allow": 5, "deny": 2, "ignore": 1, "status": 1, "bad_answer": 1}), "{h}");
    assert_eq!(h["asked"], 10, "{h}");
    let (_, metrics) = http(&admin, "GET", "/metrics", b"", None);
    assert_eq!(sample(&metrics, "megaconn_mqtt_authz_http_decisions_total{outcome=\"status\"}"), Some(1.0), "{metrics}");
    // 3.1.1 has no PUBACK code: a refused QoS 0 publish is dropped, the
    // connection kept (as EMQX's default deny action).
    let mut old = client(port, 4, "old", "o", None);
    old.write_all(&frame(0x30, &publish_body(false, "no/2", None, b"x"))).unwrap();
    old.write_all(&[0xC0, 0]).unwrap();
    assert_eq!(packet(&mut old).0, 0xD0, "still connected");
    quiet(&mut watch, "the 3.1.1 refused publish reached nobody");
    assert!(s.terminate().success());
}

#[test]
fn a_will_its_client_may_not_publish_is_dropped() {
    let (_backend, hook) = backend();
    let url = format!("http://127.0.0.1:{hook}/authz");
    let (_s, admin, port) = crate::mqtt::mqtt_server(&["--mqtt-authz-http", &url]);
    let mut root = client(port, 5, "root", "root", None);
    assert_eq!(suback(&mut root, true, 1, &["#"]), [1]);
    for (id, will) in [("w1", "no/will"), ("w2", "ok/will")] {
        let c = client(port, 4, id, "dev", Some(will));
        drop(c); // an end without DISCONNECT: its will goes, if it may
    }
    assert_eq!(heard(&mut root), "ok/will");
    quiet(&mut root, "the refused will was not sent");
    let wills: Vec<Value> = asked(hook).into_iter().filter(|a| a["action"] == "publish").collect();
    assert_eq!(wills.len(), 2, "{wills:?}");
    assert_eq!(wills[0]["clientid"], "w1");
    stats_when(&admin, "the dropped will counted", |v| v["mqtt_publish_refused"]["mqtt_authz_http_denied"] == 1);
}

#[test]
fn an_authorizer_that_cannot_be_reached_fails_closed_unless_told_open() {
    let url = format!("http://127.0.0.1:{}/authz", free_port());
    for (open, code) in [(false, 0x87u8), (true, 0)] {
        let mut args = vec!["--mqtt-authz-http", &url];
        if open {
            args.push("--mqtt-auth-http-fail-open");
        }
        let (mut s, admin, port) = crate::mqtt::mqtt_server(&args);
        let mut c = client(port, 5, "c", "u", None);
        assert_eq!(suback(&mut c, true, 1, &["a/#"]), [if open { 1 } else { 0x87 }], "open {open}");
        publish(&mut c, "a/1", 2);
        assert_eq!(puback(&mut c), (2, code), "open {open}");
        stats_when(&admin, "counted", |v| v["mqtt_authz_http"]["decided"]["unreachable"] == 2);
        assert!(s.terminate().success());
    }
}

#[test]
fn a_url_that_is_not_http_is_a_usage_error_naming_the_flag() {
    let out = megaconn().args(["server", "--mqtt-authz-http", "nats://127.0.0.1:4222/x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--mqtt-authz-http nats://127.0.0.1:4222/x: give an http:// URL") && !err.contains("JetStream"), "{err}");
}

#[test]
fn fail_open_without_a_backend_is_a_usage_error() {
    let out = megaconn().args(["server", "--mqtt-auth-http-fail-open"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--mqtt-authz-http URL"), "{err}");
}

#[test]
fn paho_over_websocket_waits_for_the_authorizer_in_order() {
    let (_backend, hook) = backend();
    let url = format!("http://127.0.0.1:{hook}/authz");
    let port = free_port();
    let p = port.to_string();
    let (_s, _, _) = server_ready(&["--protocol", "ws", "--ports", &p, "--workers", "1", "--mqtt-authz-http", &url], None);
    let mut py = Command::new("python3");
    py.arg(peer("mqtt_ws_authz.py")).arg(&p);
    assert_eq!(Peer::spawn("mqtt_ws_authz.py", py).finish_ok(Duration::from_secs(60)), ["OK"]);
}
