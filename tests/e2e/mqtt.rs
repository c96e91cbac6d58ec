//! `server --protocol mqtt` against MQTT clients nobody here wrote:
//! Eclipse paho-mqtt in Python (3.1.1 and 5.0, tests/peers/mqtt_paho.py)
//! and Debian's mosquitto_sub (plain and over TLS); and against hostile
//! bytes written by hand: a malformed packet, a packet over the size
//! limit, a socket that never sends its CONNECT, a client silent past its
//! keep-alive, each closed and counted under its reason in /stats.
use crate::common::pki::Pki;
use crate::common::*;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

pub(crate) fn stats(admin: &str) -> Value {
    let (status, body) = http(admin, "GET", "/stats", b"", None);
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// /stats once `ok` holds (workers report every 200 ms).
/// A timeout says what /stats last showed (its MQTT sessions first).
pub(crate) fn stats_when(admin: &str, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let end = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let last = stats(admin);
        if ok(&last) {
            return last;
        }
        if std::time::Instant::now() >= end {
            panic!("timed out after 15 s waiting for {what}; last /stats: mqtt_sessions {}; all: {last}", last["mqtt_sessions"]);
        }
        std::thread::sleep(Duration::from_millis(50)); // the poll's pace, not a wait for the condition
    }
}

pub(crate) fn count(s: &Value, map: &str, key: &str) -> u64 {
    s[map][key].as_u64().unwrap_or(0)
}

/// An MQTT server on a free port; (process, admin address, port).
pub(crate) fn mqtt_server(extra: &[&str]) -> (Running, String, u16) {
    let port = free_port();
    let p = port.to_string();
    let mut args = vec!["--protocol", "mqtt", "--ports", &p, "--workers", "1"];
    args.extend_from_slice(extra);
    let (s, _, ready) = server_ready(&args, None);
    (s, ready["admin"].as_str().unwrap().to_string(), port)
}

/// Everything the server sends on `s` until it closes (read timeout 20 s).
fn until_closed(mut s: TcpStream) -> Vec<u8> {
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

/// A v5 CONNECT for client id `x`, keep-alive `keep_alive` s.
fn connect_v5(keep_alive: u16) -> Vec<u8> {
    let mut body = b"\x00\x04MQTT\x05\x02".to_vec();
    body.extend_from_slice(&keep_alive.to_be_bytes());
    body.extend_from_slice(b"\x00\x00\x01x");
    let mut p = vec![0x10, body.len() as u8];
    p.extend(body);
    p
}

/// paho (both versions) does everything the peer's `basic` mode lists;
/// the server counted both versions' connects, the refused subscriptions
/// and the client's QoS 1 publishes.
#[test]
fn paho_clients_of_both_versions_subscribe_publish_and_are_refused_with_codes() {
    let (mut s, admin, port) = mqtt_server(&[]);
    let mut py = Command::new("python3");
    py.arg(peer("mqtt_paho.py")).args([&port.to_string(), &admin, "basic"]);
    assert_eq!(Peer::spawn("mqtt_paho.py basic", py).finish_ok(Duration::from_secs(120)), ["OK"]);
    // One snapshot holding all of it (an earlier one may predate the last checks).
    stats_when(&admin, "counters of the paho run", |v| {
        ["3.1.1", "5.0"].iter().all(|version| count(v, "mqtt_connects", version) >= 2)
            && count(v, "mqtt_publishes_in", "1") >= 2
            && count(v, "subscribe_refused", "bad_topic") >= 2
            && ["mqtt_protocol_version", "mqtt_client_id_rejected", "mqtt_unexpected_packet"].iter().all(|r| count(v, "close_reasons", r) >= 1)
    });
    s.terminate();
}

/// `--auth jwt`: the token is the password; the peer's `jwt` mode.
#[test]
fn a_jwt_password_is_the_token_and_its_topics_claim_the_acl() {
    let dir = std::env::temp_dir().join(format!("megaconn-mqtt-keys-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut keys = Command::new("python3");
    keys.arg(peer("jwt_keys.py")).arg("keys").arg(&dir);
    Peer::spawn("jwt_keys.py", keys).finish_ok(Duration::from_secs(60));
    let secret = dir.join("secret").display().to_string();
    let (mut s, admin, port) = mqtt_server(&["--auth", "jwt", "--jwt-secret-file", &secret]);
    let mut py = Command::new("python3");
    py.arg(peer("mqtt_paho.py")).args([&port.to_string(), &admin, "jwt"]).arg(&dir);
    assert_eq!(Peer::spawn("mqtt_paho.py jwt", py).finish_ok(Duration::from_secs(120)), ["OK"]);
    stats_when(&admin, "auth refusals", |v| {
        count(v, "auth_refused", "auth_missing") >= 2
            && count(v, "auth_refused", "auth_bad_signature") >= 2
            && count(v, "subscribe_refused", "not_permitted") >= 2
    });
    let _ = std::fs::remove_dir_all(&dir);
    s.terminate();
}

/// The first `n` messages Debian's mosquitto_sub gets on `filter` from
/// the server on `port`, each "RETAIN-FLAG TOPIC PAYLOAD".
pub(crate) fn mosquitto_sub_first(port: u16, filter: &str, n: usize) -> Vec<String> {
    let mut cmd = Command::new("mosquitto_sub");
    cmd.args(["-h", "127.0.0.1", "-p", &port.to_string(), "-t", filter, "-C", &n.to_string(), "-W", "20", "-F", "%r %t %p"]);
    let mut sub = crate::common::proc::Peer::spawn(&format!("mosquitto_sub {filter}"), cmd);
    let lines = (0..n).map(|_| sub.line(Duration::from_secs(25), "a retained message")).collect();
    sub.finish_ok(Duration::from_secs(5));
    lines
}

/// `--mqtt-retained-file`: the retained set outlives a stop (written at
/// SIGTERM) and a crash (written within `--mqtt-retained-save-every`):
/// mosquitto_sub gets every message retained from the server started
/// again on the file. A damaged file refuses the start, naming the line
/// and the fix.
#[test]
fn retained_messages_outlive_a_stop_and_a_crash_in_the_retained_file() {
    let dir = std::env::temp_dir().join(format!("megaconn-test-{}-retained-file", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("retained.json").display().to_string();
    // Written only at the stop (the interval is an hour), then often.
    let (at_stop, often) = (
        ["--mqtt-retained-file", file.as_str(), "--mqtt-retained-save-every", "1h"],
        ["--mqtt-retained-file", file.as_str(), "--mqtt-retained-save-every", "100ms"],
    );
    let (mut s, admin, _) = mqtt_server(&at_stop);
    assert_eq!(http(&admin, "POST", "/publish?topic=keep/a&retain=1&qos=1", b"stop", None).0, 200);
    assert!(s.terminate().success());

    let (s, admin, port) = mqtt_server(&often);
    assert_eq!(mosquitto_sub_first(port, "keep/#", 1), ["1 keep/a stop"], "kept through a stop");
    let saves = stats(&admin)["mqtt_retained"]["saved"].as_u64().unwrap();
    assert_eq!(http(&admin, "POST", "/publish?topic=keep/b&retain=1", b"crash", None).0, 200);
    stats_when(&admin, "the set written again", |v| v["mqtt_retained"]["saved"].as_u64() > Some(saves));
    kill9(s.child.id() as u64);
    drop(s);

    let (_s, _, port) = mqtt_server(&often);
    // MQTT orders no retained messages of different topics (each comes
    // from its topic's shard).
    let mut got = mosquitto_sub_first(port, "keep/#", 2);
    got.sort();
    assert_eq!(got, ["1 keep/a stop", "1 keep/b crash"], "kept through a crash");

    std::fs::write(&file, b"{damaged\n").unwrap();
    let mut cmd = megaconn();
    cmd.args(["server", "--protocol", "mqtt", "--ports", &free_port().to_string(), "--mqtt-retained-file", &file]);
    let (code, _, err) = run(cmd, Duration::from_secs(20));
    assert!(code != 0 && err.contains("line 1") && err.contains("move it away"), "exit {code}: {err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// mosquitto_sub subscribed to `a/#` prints exactly what an admin
/// publish to `a/b` carried.
fn mosquitto_sub_gets_an_admin_push(admin: &str, port: u16, tls: &[&str]) {
    let mut cmd = Command::new("mosquitto_sub");
    cmd.args(["-p", &port.to_string(), "-t", "a/#", "-C", "1", "-W", "30"]).args(tls).stdout(Stdio::piped()).stderr(Stdio::piped());
    if tls.is_empty() {
        cmd.args(["-h", "127.0.0.1"]);
    }
    let child = cmd.spawn().expect("mosquitto_sub (scripts/setup.sh installs mosquitto-clients)");
    stats_when(admin, "mosquitto_sub subscribed", |v| v["totals"]["subscriptions"].as_u64().or(v["subscriptions"].as_u64()).unwrap_or(0) >= 1);
    let (status, body) = http(admin, "POST", "/publish?topic=a/b", b"hello \x01 mqtt", None);
    assert_eq!(status, 200, "{body}");
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.stdout, b"hello \x01 mqtt\n");
}

#[test]
fn mosquitto_sub_receives_an_admin_publish_byte_for_byte() {
    let (mut s, admin, port) = mqtt_server(&[]);
    mosquitto_sub_gets_an_admin_push(&admin, port, &[]);
    stats_when(&admin, "the push counted", |v| {
        count(v, "mqtt_publishes_out", "0") >= 1 && count(v, "mqtt_connects", "3.1.1") + count(v, "mqtt_connects", "5.0") >= 1
    });
    s.terminate();
}

/// The same over TLS (`--tls-cert/--tls-key`), mosquitto_sub checking
/// the certificate against the test CA.
#[test]
fn mosquitto_sub_over_tls_receives_an_admin_publish() {
    let pki = Pki::new("ec");
    let (mut s, admin, port) = mqtt_server(&["--tls-cert", &pki.cert, "--tls-key", &pki.key]);
    mosquitto_sub_gets_an_admin_push(&admin, port, &["-h", "localhost", "--cafile", &pki.ca]);
    stats_when(&admin, "the TLS handshake counted", |v| v["tls_handshakes"].as_u64().unwrap_or(0) >= 1);
    s.terminate();
}

/// Hostile bytes: each connection closed under its reason, and counted.
#[test]
fn malformed_oversize_silent_and_quiet_clients_are_closed_and_counted() {
    let (mut s, admin, port) = mqtt_server(&["--header-timeout", "1s"]);
    let addr = format!("127.0.0.1:{port}");
    // Packet type 0 first: no CONNACK (3.1.1 form, no version yet), closed.
    let mut c = TcpStream::connect(&addr).unwrap();
    c.write_all(b"\x00\x00").unwrap();
    assert_eq!(until_closed(c), b"");
    // Connected in v5, then a PUBLISH announcing 10 MB: DISCONNECT 0x95.
    let mut c = TcpStream::connect(&addr).unwrap();
    c.write_all(&connect_v5(0)).unwrap();
    c.write_all(&[0x30, 0x80, 0xAD, 0xE2, 0x04]).unwrap();
    let back = until_closed(c);
    let connack = 2 + back[1] as usize;
    assert_eq!((back[0], back[3]), (0x20, 0), "{back:x?}");
    assert_eq!((back[connack], back[connack + 2]), (0xE0, 0x95), "{back:x?}");
    // A topic alias above the Topic Alias Maximum (16) from a v5 client: DISCONNECT 0x94.
    let mut c = TcpStream::connect(&addr).unwrap();
    c.write_all(&connect_v5(0)).unwrap();
    c.write_all(b"\x30\x08\x00\x01a\x03\x23\x00\x11x").unwrap();
    let back = until_closed(c);
    let connack = 2 + back[1] as usize;
    assert_eq!((back[connack], back[connack + 2]), (0xE0, 0x94), "{back:x?}");
    // Never a CONNECT: closed at --header-timeout.
    assert_eq!(until_closed(TcpStream::connect(&addr).unwrap()), b"");
    // Keep-alive 1 s, then silence: closed after 1.5 s.
    let mut c = TcpStream::connect(&addr).unwrap();
    c.write_all(&connect_v5(1)).unwrap();
    assert_eq!(until_closed(c)[0], 0x20);
    let reasons = ["mqtt_unknown_packet_type", "mqtt_packet_too_large", "mqtt_topic_alias_invalid", "header_timeout", "mqtt_keepalive_timeout"];
    let st = stats_when(&admin, "every close counted", |v| reasons.iter().all(|r| count(v, "close_reasons", r) >= 1));
    for reason in reasons {
        assert_eq!(count(&st, "close_reasons", reason), 1, "{reason}: {st}");
    }
    s.terminate();
}
