//! `server --auth jwt` on real sockets, with tokens minted by PyJWT (not
//! megaconn's code) and WebSocket clients from Python `websockets`: every
//! way of carrying a token, every refusal by its reason, HS/RS confusion,
//! JWKS, permissions, refresh, expiry, per-user push and disconnect; and
//! the framed protocol's auth frame, written by hand.
use crate::common::framed::{frame, resume, In, Reader};
use crate::common::*;
use crate::mqtt::{stats, stats_when};
use serde_json::Value;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// A fresh directory of keys (secret, RSA, EC, JWKS) made by PyJWT's side.
fn keys(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("megaconn-auth-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut cmd = Command::new("python3");
    cmd.arg(peer("jwt_keys.py")).arg("keys").arg(&dir);
    let mut p = Peer::spawn("jwt_keys.py", cmd);
    p.finish_ok(Duration::from_secs(60));
    dir
}

/// An HS256 token for `sub` by the directory's secret (PyJWT).
fn mint(dir: &std::path::Path, sub: &str, ttl: i64, topics: &str) -> String {
    let out = Command::new("python3").arg(peer("jwt_keys.py")).arg("mint").arg(dir).args([sub, &ttl.to_string(), topics]).output().expect("python3");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A ws server verifying with `key_args`; runs `auth_ws.py MODE` against it.
fn ws_peer(mode: &str, key_args: &[&str], workers: &str) -> (Running, String) {
    let dir = keys(mode);
    let port = free_port();
    let path = |a: &str| if a.starts_with("--") { a.to_string() } else { dir.join(a).display().to_string() };
    let mut args: Vec<String> =
        ["--protocol", "ws", "--ports", &port.to_string(), "--workers", workers, "--auth", "jwt"].iter().map(|s| s.to_string()).collect();
    args.extend(key_args.iter().map(|a| path(a)));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (s, _, ready) = server_ready(&args, None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    let mut py = Command::new("python3");
    py.arg(peer("auth_ws.py")).args([&port.to_string(), &admin]).arg(&dir).arg(mode);
    let mut p = Peer::spawn(&format!("auth_ws.py {mode}"), py);
    assert_eq!(p.finish_ok(Duration::from_secs(90)), ["OK"]);
    let _ = std::fs::remove_dir_all(&dir);
    (s, admin)
}

#[test]
fn hs256_tokens_are_taken_three_ways_and_refused_by_reason() {
    let (mut s, admin) = ws_peer("hs", &["--jwt-secret-file", "secret"], "1");
    // Every refusal the peer saw is counted under its reason.
    let want = ["auth_missing", "auth_expired", "auth_bad_signature", "auth_bad_algorithm", "auth_bad_claims", "auth_malformed", "auth_other_user"];
    // Two connections close as auth_expired: the expired token's (401),
    // and carol's, 2 s after it connected (4001), the peer's last step.
    let stats = stats_when(&admin, "every refusal counted once and both expiries closed", |s| {
        want.iter().all(|r| s["auth_refused"][r] == 1) && s["close_reasons"]["auth_expired"] == 2
    });
    assert_eq!(stats["auth_refreshed"], 1, "{stats}");
    assert_eq!(stats["subscribe_refused"]["not_permitted"], 2, "a command and a ?subscribe=: {stats}");
    let (_, metrics) = http(&admin, "GET", "/metrics", b"", None);
    assert_eq!(sample(&metrics, "megaconn_auth_refused_total{reason=\"auth_bad_signature\"}"), Some(1.0), "{metrics}");
    assert!(s.terminate().success());
}

#[test]
fn rs256_public_key_refuses_the_hs_rs_confusion() {
    let (mut s, admin) = ws_peer("rs", &["--jwt-public-key-file", "rsa.pub.pem"], "1");
    // Wait for all three refusals: the peer's later attempts may still be
    // in flight when the first one is counted.
    stats_when(&admin, "the refusals counted", |s| s["auth_refused"]["auth_bad_signature"] == 1 && s["auth_refused"]["auth_bad_algorithm"] == 2);
    assert!(s.terminate().success());
}

#[test]
fn a_jwks_picks_the_key_by_kid() {
    let (mut s, admin) = ws_peer("jwks", &["--jwt-jwks-file", "jwks.json"], "1");
    stats_when(&admin, "the unknown kid counted", |s| s["auth_refused"]["auth_unknown_key"] == 1);
    assert!(s.terminate().success());
}

#[test]
fn a_push_to_a_user_reaches_each_of_its_connections_once() {
    // Two workers: alice's three connections spread over both.
    let (mut s, admin) = ws_peer("users", &["--jwt-secret-file", "secret"], "2");
    stats_when(&admin, "alice's three connections closed as disconnected", |s| s["close_reasons"]["disconnected"] == 3);
    assert!(s.terminate().success());
}

#[test]
fn subscribers_hear_who_joins_and_leaves_with_presence_notices() {
    let (mut s, admin) = ws_peer("notices", &["--jwt-secret-file", "secret", "--presence-notices"], "2");
    stats_when(&admin, "the notices counted", |s| s["presence_notices"].as_u64().is_some_and(|n| n >= 2));
    assert!(s.terminate().success());
}

#[test]
fn a_framed_connection_shows_its_token_first() {
    let dir = keys("framed");
    let port = free_port();
    let secret = dir.join("secret").display().to_string();
    let (mut s, _, ready) = server_ready(&["--ports", &port.to_string(), "--workers", "1", "--auth", "jwt", "--jwt-secret-file", &secret], None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    // Anything before the token: closed.
    let mut early = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    early.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    early.write_all(&frame(6, b"chat.a")).unwrap();
    assert_eq!(early.read(&mut [0u8; 16]).unwrap_or(0), 0, "closed, nothing said");
    // A connection that has not shown its token hears no broadcast.
    let mut silent = Reader::connect(port);
    let mut alice = Reader::connect(port);
    alice.s.write_all(&frame(13, mint(&dir, "alice", 60, "chat.*").as_bytes())).unwrap();
    alice.s.write_all(&resume("chat.a", None)).unwrap();
    assert!(matches!(alice.until_subscribed()[..], [In::Subscribed(true, _, _)]));
    let (status, body) = http(&admin, "POST", "/broadcast", b"b1", None);
    assert_eq!(status, 200, "{body}");
    assert!(matches!(alice.next(), In::Push(_, _, ref d) if d == "b1"));
    let (status, body) = http(&admin, "POST", "/publish?topic=chat.a", b"t1", None);
    assert_eq!(status, 200, "{body}");
    assert!(matches!(alice.next(), In::Push(_, _, ref d) if d == "t1"));
    // Now it shows one: the first thing it hears is its own answer.
    silent.s.write_all(&frame(13, mint(&dir, "bob", 60, "news").as_bytes())).unwrap();
    silent.s.write_all(&resume("news", None)).unwrap();
    assert!(matches!(silent.until_subscribed()[..], [In::Subscribed(true, _, _)]), "no broadcast before its token");
    // Outside its topics claim: closed and counted.
    silent.s.write_all(&resume("chat.a", None)).unwrap();
    let mut rest = Vec::new();
    let _ = silent.s.read_to_end(&mut rest);
    // A bad token: closed, counted by reason.
    let mut forged = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    forged.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut t = mint(&dir, "eve", 60, "*");
    t.push('x');
    forged.write_all(&frame(13, t.as_bytes())).unwrap();
    assert_eq!(forged.read(&mut [0u8; 16]).unwrap_or(0), 0);
    let stats = stats_when(&admin, "the refusals counted", |s| {
        s["auth_refused"]["auth_missing"] == 1 && s["auth_refused"]["auth_bad_signature"] == 1 && s["subscribe_refused"]["not_permitted"] == 1
    });
    assert_eq!(stats["authenticated"], 1, "alice only: {stats}");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(s.terminate().success());
}

#[test]
fn auth_flags_say_what_is_missing() {
    let dir = std::env::temp_dir().join(format!("megaconn-auth-flags-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let short = dir.join("short");
    std::fs::write(&short, "too short\n").unwrap();
    let good = dir.join("good");
    std::fs::write(&good, "0123456789abcdef0123456789abcdef\n").unwrap();
    let not_pem = dir.join("not.pem");
    std::fs::write(&not_pem, "hello").unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["--auth".into(), "jwt".into()], "--auth jwt needs the key tokens are verified with"),
        (vec!["--auth".into(), "jwt".into(), "--jwt-secret-file".into(), short.display().to_string()], "HS256 needs at least 32"),
        (vec!["--auth".into(), "jwt".into(), "--jwt-public-key-file".into(), not_pem.display().to_string()], "not an RSA, EC or Ed25519 public key"),
        (vec!["--auth".into(), "jwt".into(), "--jwt-secret-file".into(), "/nonexistent/secret".into()], "cannot read it"),
        (vec!["--jwt-secret-file".into(), good.display().to_string()], "--auth <AUTH>"),
        (vec!["--admin-topics".into(), "bad topic".into()], "--admin-topics 'bad topic' is not a topic pattern"),
    ];
    for (args, want) in cases {
        let mut cmd = megaconn();
        cmd.args(["server", "--ports", &free_port().to_string(), "--duration", "5s", "--admin", "off"]).args(&args);
        let (code, _, err) = run(cmd, Duration::from_secs(20));
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_framed_connection_without_a_token_is_closed_after_the_header_timeout() {
    let dir = keys("timeout");
    let port = free_port();
    let secret = dir.join("secret").display().to_string();
    let (mut s, _, ready) =
        server_ready(&["--ports", &port.to_string(), "--workers", "1", "--auth", "jwt", "--jwt-secret-file", &secret, "--header-timeout", "1s"], None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    let mut silent = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    silent.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let t0 = std::time::Instant::now();
    assert_eq!(silent.read(&mut [0u8; 16]).unwrap_or(0), 0, "closed");
    assert!(t0.elapsed() < Duration::from_secs(5), "closed after {:?}", t0.elapsed());
    stats_when(&admin, "the close counted", |s| s["close_reasons"]["auth_timeout"] == 1);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(s.terminate().success());
}

/// While another client resumes (which makes every worker hold the first
/// broadcasts of new framed connections until their first read), a socket
/// that never shows a token, stays silent through a broadcast and then
/// sends any frame gets none of it: only its `auth_missing` close.
#[test]
fn a_silent_framed_socket_without_a_token_hears_no_held_broadcast() {
    let dir = keys("held");
    let port = free_port();
    let secret = dir.join("secret").display().to_string();
    let (mut s, _, ready) = server_ready(&["--ports", &port.to_string(), "--workers", "1", "--auth", "jwt", "--jwt-secret-file", &secret], None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    let mut alice = Reader::connect(port);
    alice.s.write_all(&frame(13, mint(&dir, "alice", 60, "chat.*").as_bytes())).unwrap();
    alice.s.write_all(&resume("chat.a", None)).unwrap();
    assert!(matches!(alice.until_subscribed()[..], [In::Subscribed(true, _, _)]));
    let mut silent = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    silent.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stats_when(&admin, "the silent socket accepted", |s| s["accepted"] == 2);
    let (status, body) = http(&admin, "POST", "/broadcast", b"for-the-authenticated", None);
    assert_eq!(status, 200, "{body}");
    assert!(matches!(alice.next(), In::Push(_, _, ref d) if d == "for-the-authenticated"));
    silent.write_all(&frame(1, b"12345678")).unwrap();
    let mut heard = Vec::new();
    let _ = silent.read_to_end(&mut heard);
    assert!(heard.is_empty(), "an unauthenticated socket heard {} bytes: {:?}", heard.len(), String::from_utf8_lossy(&heard));
    stats_when(&admin, "its refusal counted", |s| s["auth_refused"]["auth_missing"] == 1);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(s.terminate().success());
}

/// A WebSocket Upgrade to `port` with `token` as a Bearer header, answered 101.
fn ws_with_token(port: u16, token: &str) -> std::net::TcpStream {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = format!(
        "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nAuthorization: Bearer {token}\r\n\r\n"
    );
    s.write_all(head.as_bytes()).unwrap();
    let mut got = Vec::new();
    let mut b = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut b).unwrap(), 1, "handshake answered");
        got.push(b[0]);
    }
    assert!(got.starts_with(b"HTTP/1.1 101"), "{}", String::from_utf8_lossy(&got));
    s
}

/// The text messages a server sent on `s` until one contains `until`
/// (unmasked frames, each under 64 KiB).
fn ws_texts_until(s: &mut std::net::TcpStream, until: &str) -> Vec<String> {
    let mut buf = Vec::new();
    let mut texts = Vec::new();
    loop {
        while buf.len() >= 2 {
            let (len, at) = match buf[1] & 0x7f {
                126 if buf.len() >= 4 => (u16::from_be_bytes([buf[2], buf[3]]) as usize, 4),
                126 => break,
                n => (n as usize, 2),
            };
            if buf.len() < at + len {
                break;
            }
            let text = String::from_utf8_lossy(&buf[at..at + len]).into_owned();
            buf.drain(..at + len);
            let done = text.contains(until);
            texts.push(text);
            if done {
                return texts;
            }
        }
        let mut chunk = [0u8; 65536];
        let n = s.read(&mut chunk).unwrap_or_else(|e| panic!("reading for {until}: {e}; so far {texts:?}"));
        assert!(n > 0, "closed before {until}; so far {texts:?}");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// One authenticated client flipping a subscription as fast as it can
/// (--presence-notices on) is closed at the command bound; the topic's
/// other subscribers stay connected and hear at most a few notices, not
/// one per flip (issue 42, finding 2).
#[test]
fn a_subscription_flip_storm_closes_the_flipper_not_the_subscribers() {
    let dir = keys("storm");
    let port = free_port();
    let secret = dir.join("secret").display().to_string();
    let (mut s, _, ready) = server_ready(
        &["--protocol", "ws", "--ports", &port.to_string(), "--workers", "1", "--auth", "jwt", "--jwt-secret-file", &secret, "--presence-notices"],
        None,
    );
    let admin = ready["admin"].as_str().unwrap().to_string();
    let token = mint(&dir, "alice", 600, "*");
    let subscribe = crate::common::ws_frame(true, 1, br#"{"type":"subscribe","topic":"room"}"#);
    let unsubscribe = crate::common::ws_frame(true, 1, br#"{"type":"unsubscribe","topic":"room"}"#);
    let mut subscribers: Vec<std::net::TcpStream> = (0..20)
        .map(|_| {
            let mut c = ws_with_token(port, &token);
            c.write_all(&subscribe).unwrap();
            ws_texts_until(&mut c, "\"subscribed\"");
            c
        })
        .collect();
    let mut flipper = ws_with_token(port, &mint(&dir, "mallory", 600, "*"));
    let storm: Vec<u8> = (0..1000).flat_map(|_| subscribe.iter().chain(&unsubscribe).copied()).collect();
    for _ in 0..150 {
        if flipper.write_all(&storm).is_err() {
            break;
        }
    }
    let v = stats_when(&admin, "the flipper closed at the bound", |v| v["close_reasons"]["too_many_commands"] == 1);
    assert_eq!(v["active"], 20, "every subscriber still connected: {v}");
    let (status, body) = http(&admin, "POST", "/publish?topic=room", b"marker", None);
    assert_eq!(status, 200, "{body}");
    for (i, c) in subscribers.iter_mut().enumerate() {
        let heard = ws_texts_until(c, "marker");
        let notices = heard.iter().filter(|t| t.contains("\"mallory\"")).count();
        assert!(notices <= 4, "subscriber {i} heard {notices} notices of the storm: {:?}", &heard[..heard.len().min(10)]);
    }
    let v = stats(&admin);
    assert!(v["close_reasons"]["slow_consumer"].is_null(), "{v}");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(s.terminate().success());
}

/// A refresh whose token no longer permits a topic the connection
/// follows unsubscribes it, says so, and no push of it arrives after
/// (issue 42, finding 11).
#[test]
fn a_refresh_that_drops_a_topic_unsubscribes_it() {
    let dir = keys("revoke");
    let port = free_port();
    let secret = dir.join("secret").display().to_string();
    let (mut s, _, ready) =
        server_ready(&["--protocol", "ws", "--ports", &port.to_string(), "--workers", "1", "--auth", "jwt", "--jwt-secret-file", &secret], None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    let mut c = ws_with_token(port, &mint(&dir, "alice", 600, "chat.a,news"));
    for topic in ["chat.a", "news"] {
        c.write_all(&crate::common::ws_frame(true, 1, format!(r#"{{"type":"subscribe","topic":"{topic}"}}"#).as_bytes())).unwrap();
        ws_texts_until(&mut c, "\"subscribed\"");
    }
    let refresh = format!(r#"{{"type":"refresh","token":"{}"}}"#, mint(&dir, "alice", 600, "news"));
    // The token is longer than one small frame: send it as a 16-bit-length frame.
    let mut f = vec![0x81, 0x80 | 126];
    f.extend_from_slice(&(refresh.len() as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 0]);
    f.extend_from_slice(refresh.as_bytes());
    c.write_all(&f).unwrap();
    let heard = ws_texts_until(&mut c, "\"unsubscribed\"");
    assert!(heard.iter().any(|t| t.contains("\"refreshed\"")), "{heard:?}");
    let last: Value = serde_json::from_str(heard.last().unwrap()).unwrap();
    assert_eq!((last["topic"].as_str(), last["reason"].as_str()), (Some("chat.a"), Some("not_permitted")), "{heard:?}");
    for (topic, data) in [("chat.a", "revoked"), ("news", "still-here")] {
        let (status, body) = http(&admin, "POST", &format!("/publish?topic={topic}"), data.as_bytes(), None);
        assert_eq!(status, 200, "{body}");
    }
    let heard = ws_texts_until(&mut c, "still-here");
    assert!(!heard.iter().any(|t| t.contains("revoked")), "a push of the dropped topic arrived: {heard:?}");
    let v = stats_when(&admin, "the revocation counted", |v| v["subscribe_refused"]["not_permitted"] == 1 && v["auth_refreshed"] == 1);
    assert_eq!(v["subscriptions"], 1, "{v}");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(s.terminate().success());
}

/// An MQTT 3.1.1 CONNECT showing `token` as its password: the CONNACK's code.
fn mqtt_token_connack(port: u16, id: &str, token: &str) -> u8 {
    let mut body = b"\x00\x04MQTT\x04\xc2\x00\x3c".to_vec();
    for field in [id.as_bytes(), b"user", token.as_bytes()] {
        body.extend_from_slice(&(field.len() as u16).to_be_bytes());
        body.extend_from_slice(field);
    }
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(&crate::common::mqtt_raw::frame(0x10, &body)).unwrap();
    let (kind, ack) = crate::common::mqtt_raw::packet(&mut s);
    assert_eq!((kind, ack.len()), (0x20, 2), "a CONNACK");
    ack[1]
}

/// SIGHUP with a changed `--config`: the JWT key file it names is read
/// and every worker verifies new tokens with it (the old key's tokens
/// refused from then on), and a new max_connections is in force; both
/// named as applied.
#[test]
fn sighup_takes_a_new_jwt_key_and_cap_from_the_config_file() {
    let (a, b) = (keys("rotate-a"), keys("rotate-b"));
    let (old, new) = (mint(&a, "dev1", 600, "*"), mint(&b, "dev1", 600, "*"));
    let conf = a.join("server.toml");
    let write = |dir: &std::path::Path, cap: u32| {
        let text = format!("[auth]\nauth = \"jwt\"\njwt_secret_file = \"{}\"\n\n[limits]\nmax_connections = {cap}\n", dir.join("secret").display());
        std::fs::write(&conf, text).unwrap();
    };
    write(&a, 10);
    let (mut s, admin, port) = crate::mqtt::mqtt_server(&["--config", &conf.display().to_string()]);
    assert_eq!(mqtt_token_connack(port, "c1", &old), 0, "the key in force");
    assert_eq!(mqtt_token_connack(port, "c2", &new), 5, "another key's token");
    write(&b, 20);
    // SAFETY: signalling our own child (the server) by PID.
    unsafe { libc::kill(s.child.id() as i32, libc::SIGHUP) };
    let v = s.wait_for(Duration::from_secs(10), "the file read again", |v| v["event"] == "config_reloaded");
    assert!(v["message"].as_str().unwrap().contains("applied: jwt_secret_file, max_connections; need a restart: none"), "{v}");
    // The worker takes the key on its next command read: the refusal of
    // the old key's token shows it has.
    let mut n = 0;
    while mqtt_token_connack(port, &format!("old{n}"), &old) == 0 {
        n += 1;
        assert!(n < 200, "the old key's tokens still admitted");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(mqtt_token_connack(port, "c3", &new), 0, "the new key's token");
    stats_when(&admin, "the reading counted", |v| v["config"]["reloaded"] == 1 && v["config"]["applied"] == 2);
    assert!(s.terminate().success());
    let _ = std::fs::remove_dir_all(&a);
    let _ = std::fs::remove_dir_all(&b);
}
