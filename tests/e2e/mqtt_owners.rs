//! Nobody in where they don't belong (issue 62), on the release binary
//! over loopback: paho-mqtt clients with PyJWT tokens
//! (tests/peers/mqtt_owners.py) find another user's client id, session
//! and will out of reach, on one node and across two nodes on
//! nats-server; filters are judged by every topic they can match; one
//! user's sessions cannot push out another's. Hand-written clients for
//! what a library will not do: a QoS 2 PUBLISH resent after a reconnect,
//! a refused CONNECT's will, a recycled slot's command budget, a `$SYS`
//! publish; an event stream on an http port without a token; paho-mqtt 5
//! for the DISCONNECT's session expiry and the Server Keep Alive
//! (tests/peers/mqtt_v5_session.py).
use crate::common::mqtt_raw::{frame, packet, publish_body, subscribe_packet};
use crate::common::*;
use crate::mqtt::{count, mosquitto_sub_first, mqtt_server, stats_when};
use crate::mqtt_sessions::{connected, rest};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// A directory holding a fresh HS256 secret (PyJWT's side makes it).
pub(crate) fn secret(tag: &str) -> (PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("megaconn-owners-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut keys = Command::new("python3");
    keys.arg(peer("jwt_keys.py")).arg("keys").arg(&dir);
    Peer::spawn("jwt_keys.py", keys).finish_ok(Duration::from_secs(60));
    let file = dir.join("secret").display().to_string();
    (dir, file)
}

/// Run tests/peers/mqtt_owners.py in `mode` with `args`; it prints OK.
pub(crate) fn owners(mode: &str, args: &[String]) {
    let mut py = Command::new("python3");
    py.arg(peer("mqtt_owners.py")).arg(mode).args(args);
    assert_eq!(Peer::spawn(&format!("mqtt_owners.py {mode}"), py).finish_ok(Duration::from_secs(120)), ["OK"]);
}

/// An MQTT server with `--auth jwt` by `secret` and two workers (a client
/// coming back may land on the other): (process, admin, port).
fn authed(secret: &str, extra: &[&str]) -> (Running, String, u16) {
    let mut args = vec!["--auth", "jwt", "--jwt-secret-file", secret];
    args.extend_from_slice(extra);
    two_workers(&args)
}

/// An MQTT server with two workers on a free port: (process, admin, port).
fn two_workers(extra: &[&str]) -> (Running, String, u16) {
    let port = free_port();
    let p = port.to_string();
    let mut args = vec!["--protocol", "mqtt", "--ports", &p, "--workers", "2"];
    args.extend_from_slice(extra);
    let (s, _, ready) = server_ready(&args, None);
    (s, ready["admin"].as_str().unwrap().to_string(), port)
}

/// Finding 1: mallory cannot take alice's client id, her queued command,
/// her live connection or her will; alice resumes and stays connected.
#[test]
fn another_user_cannot_take_over_a_client_id_its_session_or_its_will() {
    let (dir, secret) = secret("hijack");
    let (mut s, admin, port) = authed(&secret, &[]);
    owners("hijack", &[port.to_string(), admin.clone(), secret]);
    let v = stats_when(&admin, "refusals counted", |v| v["mqtt_sessions"]["refused"]["owner"].as_u64() >= Some(3));
    assert_eq!(v["mqtt_sessions"]["resumed"], 1, "alice's session resumed once: {}", v["mqtt_sessions"]);
    s.terminate();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Finding 2: `#`, `+/secret`, `+/#` and `$share/g/#` touch `ops/*`
/// (`--admin-topics`) and are refused a `*` token; `sensors/#` is refused
/// a `sensors/*` token because it matches `sensors`; nobody hears them.
#[test]
fn filters_are_permitted_by_every_topic_they_can_match() {
    let (dir, secret) = secret("filters");
    let (mut s, admin, port) = authed(&secret, &["--admin-topics", "ops/*"]);
    owners("filters", &[port.to_string(), admin.clone(), secret]);
    stats_when(&admin, "five refusals", |v| count(v, "subscribe_refused", "not_permitted") == 5);
    s.terminate();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Finding 5: sixty sessions of another user leave alice's session and
/// its queued command in place at `--mqtt-sessions 50`.
#[test]
fn one_users_sessions_cannot_push_out_anothers() {
    let (dir, secret) = secret("quota");
    let (mut s, admin, port) = authed(&secret, &["--mqtt-sessions", "50"]);
    owners("quota", &[port.to_string(), admin.clone(), secret]);
    let v = stats_when(&admin, "mallory held to her share", |v| v["mqtt_sessions"]["expired"]["identity"].as_u64() >= Some(55));
    assert!(v["mqtt_sessions"]["expired"].get("full").is_none(), "nobody was refused for a full node: {}", v["mqtt_sessions"]);
    s.terminate();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Finding 4: a publisher with a kept session sends QoS 2 id 7, never
/// sees its PUBREC (it leaves), comes back (session present) and resends
/// it with DUP as MQTT requires: answered PUBREC, not forwarded again:
/// the subscriber gets one copy.
#[test]
fn a_qos2_publish_resent_after_a_reconnect_is_delivered_once() {
    let (mut s, admin, port) = two_workers(&[]);
    let (mut sub, _, _) = connected(port, 4, "till", true);
    sub.write_all(&subscribe_packet(false, 1, &[("pay/#", 2)])).unwrap();
    assert_eq!(packet(&mut sub).0, 0x90, "SUBACK");
    let charge = publish_body(false, "pay/card", Some(7), b"charge card 42 EUR");
    let (mut payer, _, code) = connected(port, 4, "payer", false);
    assert_eq!(code, 0);
    payer.write_all(&frame(0x34, &charge)).unwrap();
    assert_eq!(packet(&mut payer), (0x50, vec![0, 7]), "PUBREC, which the payer 'loses'");
    drop(payer);
    stats_when(&admin, "the payer's session kept", |v| v["mqtt_sessions"]["kept"] == 1);
    let (mut payer, present, _) = connected(port, 4, "payer", false);
    assert!(present, "session present");
    payer.write_all(&frame(0x3C, &charge)).unwrap();
    assert_eq!(packet(&mut payer), (0x50, vec![0, 7]), "PUBREC again");
    payer.write_all(&frame(0x62, &[0, 7])).unwrap();
    assert_eq!(packet(&mut payer), (0x70, vec![0, 7]), "PUBCOMP: the id was still awaiting PUBREL");
    payer.write_all(&frame(0x30, &publish_body(false, "pay/end", None, b"end"))).unwrap();
    // QoS 2 to the subscriber: PUBREC, PUBREL comes, PUBCOMP; the end
    // marker may come before that PUBREL.
    let (mut copies, mut ended, mut released) = (0, false, Vec::new());
    let mut awaiting: Vec<[u8; 2]> = Vec::new();
    while !ended || !awaiting.is_empty() {
        let (first, body) = packet(&mut sub);
        match first & 0xF0 {
            0x30 if body.ends_with(b"end") => ended = true,
            0x30 => {
                assert!(body.ends_with(b"charge card 42 EUR"), "{body:?}");
                copies += 1;
                if first & 0x06 == 0x04 {
                    let id = [body[10], body[11]];
                    sub.write_all(&frame(0x50, &id)).unwrap();
                    awaiting.push(id);
                }
            }
            0x60 => {
                assert!(awaiting.iter().any(|id| id[..] == body[..]), "a PUBREL of an id sent PUBREC: {body:?}");
                awaiting.retain(|id| id[..] != body[..]);
                sub.write_all(&frame(0x70, &body)).unwrap();
                released.push(body);
            }
            other => panic!("only PUBLISHes and PUBRELs come: {other:#x}"),
        }
    }
    assert_eq!(released.len(), copies, "every QoS 2 copy released");
    assert_eq!(copies, 1, "the card is charged once");
    stats_when(&admin, "the resend counted", |v| v["mqtt_qos2_resent"] == 1 && count(v, "mqtt_publishes_in", "2") == 1);
    s.terminate();
}

/// A 3.1.1 CONNECT of `id` (clean) with a QoS 1 will to `topic`.
fn connect_with_will(id: &str, topic: &str, will: &[u8]) -> Vec<u8> {
    let mut body = b"\x00\x04MQTT\x04\x0E\x00\x3C".to_vec();
    for field in [id.as_bytes(), topic.as_bytes(), will] {
        body.extend_from_slice(&(field.len() as u16).to_be_bytes());
        body.extend_from_slice(field);
    }
    frame(0x10, &body)
}

/// Finding 6: a CONNECT the registry refuses (`--mqtt-client-ids 1`,
/// device-a's; mosquitto_sub 2.0 sends an empty id, which takes none)
/// publishes no will: the subscriber of `alarm/#` hears the marker only.
#[test]
fn a_refused_connect_publishes_no_will() {
    let (mut s, admin, port) = mqtt_server(&["--mqtt-client-ids", "1"]);
    let watch = std::thread::spawn(move || mosquitto_sub_first(port, "alarm/#", 1));
    wait_until("mosquitto_sub subscribed", Duration::from_secs(10), || crate::mqtt::stats(&admin)["subscriptions"].as_u64() >= Some(1));
    let (_holder, _, code) = connected(port, 4, "device-a", true);
    assert_eq!(code, 0);
    let mut b = TcpStream::connect(("127.0.0.1", port)).unwrap();
    b.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    b.write_all(&connect_with_will("device-b", "alarm/b", b"device-b is OFFLINE")).unwrap();
    assert_eq!(packet(&mut b), (0x20, vec![0, 3]), "refused: server unavailable");
    assert!(rest(b).is_empty(), "closed after the CONNACK");
    stats_when(&admin, "the refusal counted", |v| v["mqtt_sessions"]["refused"]["ids"] == 1 && v["active"] == 2);
    let (status, _) = http(&admin, "POST", "/publish?topic=alarm/marker", b"marker", None);
    assert_eq!(status, 200);
    assert_eq!(watch.join().unwrap(), ["0 alarm/marker marker"], "no will came before the marker");
    assert_eq!(crate::mqtt::stats(&admin)["mqtt_wills_sent"], 0);
    s.terminate();
}

/// Finding 7: a connection in a recycled slab slot starts with a budget
/// of its own (`--max-commands-per-second 3`): the one before spent its
/// three SUBSCRIBEs and left; the next one's first SUBSCRIBE is answered.
#[test]
fn a_recycled_slot_gets_a_fresh_command_budget() {
    let (mut s, admin, port) = mqtt_server(&["--max-commands-per-second", "3"]);
    let (mut first, _, _) = connected(port, 4, "", true);
    for i in 0..3u16 {
        first.write_all(&subscribe_packet(false, i + 1, &[(&format!("t/{i}"), 0)])).unwrap();
        assert_eq!(packet(&mut first).0, 0x90);
    }
    drop(first);
    stats_when(&admin, "the first one closed", |v| v["active"] == 0);
    let (mut next, _, _) = connected(port, 4, "", true);
    next.write_all(&subscribe_packet(false, 9, &[("t/9", 0)])).unwrap();
    assert_eq!(packet(&mut next), (0x90, vec![0, 9, 0]), "SUBACK, not a close for too many commands");
    assert_eq!(count(&crate::mqtt::stats(&admin), "close_reasons", "too_many_commands"), 0);
    s.terminate();
}

/// Finding 9: `$SYS` is the server's. A v5 client's QoS 1 publish there
/// is refused 0x87, a 3.1.1 client's dropped (acknowledged, as mosquitto
/// does); the subscriber of `$SYS/#` hears only the application's marker.
#[test]
fn clients_cannot_publish_to_sys_topics() {
    let (mut s, admin, port) = mqtt_server(&[]);
    // `$SYS/+`: every topic a client could forge, not the broker's own `$SYS/broker/...`.
    let watch = std::thread::spawn(move || mosquitto_sub_first(port, "$SYS/+", 1));
    wait_until("mosquitto_sub subscribed", Duration::from_secs(10), || crate::mqtt::stats(&admin)["subscriptions"].as_u64() >= Some(1));
    let (mut old, _, _) = connected(port, 4, "old", true);
    old.write_all(&frame(0x32, &publish_body(false, "$SYS/x", Some(3), b"forged"))).unwrap();
    assert_eq!(packet(&mut old), (0x40, vec![0, 3]), "3.1.1: acknowledged and dropped");
    let mut v5 = TcpStream::connect(("127.0.0.1", port)).unwrap();
    v5.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    v5.write_all(&frame(0x10, b"\x00\x04MQTT\x05\x02\x00\x3C\x00\x00\x02v5")).unwrap();
    assert_eq!(packet(&mut v5).0, 0x20);
    let mut body = (6u16).to_be_bytes().to_vec();
    body.extend_from_slice(b"$SYS/y\x00\x05\x00forged");
    v5.write_all(&frame(0x32, &body)).unwrap();
    let (kind, ack) = packet(&mut v5);
    assert_eq!((kind, &ack[..3]), (0x40, &[0, 5, 0x87][..]), "v5: PUBACK 0x87 Not authorized");
    stats_when(&admin, "both refused", |v| count(v, "mqtt_publish_refused", "mqtt_sys_topic") == 2);
    let (status, _) = http(&admin, "POST", "/publish?topic=$SYS/marker", b"marker", None);
    assert_eq!(status, 200, "the server's own publish goes");
    assert_eq!(watch.join().unwrap(), ["0 $SYS/marker marker"], "no client's message reached the subscriber");
    s.terminate();
}

/// Finding 11: paho-mqtt 5 is told the Server Keep Alive past
/// `--mqtt-max-keep-alive` (a 3.1.1 client refused, as mosquitto does),
/// and a DISCONNECT's Session Expiry Interval decides whether the session
/// outlives the connection.
#[test]
fn paho_v5_gets_the_server_keep_alive_and_a_disconnect_sets_the_session_expiry() {
    let (mut s, admin, port) = mqtt_server(&["--mqtt-max-keep-alive", "30"]);
    for mode in [&["keepalive", "30"][..], &["expiry"]] {
        let mut py = Command::new("python3");
        py.arg(peer("mqtt_v5_session.py")).arg(mode[0]).args([&port.to_string(), &admin]).args(&mode[1..]);
        assert_eq!(Peer::spawn(&format!("mqtt_v5_session.py {mode:?}"), py).finish_ok(Duration::from_secs(60)), ["OK"]);
    }
    stats_when(&admin, "the 3.1.1 refusal counted", |v| count(v, "close_reasons", "mqtt_keep_alive_refused") == 1);
    s.terminate();
}

/// Finding 11: a v5 DISCONNECT giving a Session Expiry Interval to a
/// session its CONNECT gave 0 is a protocol error: DISCONNECT 0x82.
#[test]
fn a_disconnect_cannot_give_expiry_to_a_session_that_had_none() {
    let (mut s, admin, port) = mqtt_server(&[]);
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c.write_all(&frame(0x10, b"\x00\x04MQTT\x05\x02\x00\x3C\x00\x00\x01z")).unwrap();
    assert_eq!(packet(&mut c).0, 0x20);
    c.write_all(&frame(0xE0, &[0, 5, 0x11, 0, 0, 0, 60])).unwrap();
    let (kind, body) = packet(&mut c);
    assert_eq!((kind, body.first()), (0xE0, Some(&0x82)), "DISCONNECT 0x82");
    assert!(rest(c).is_empty());
    stats_when(&admin, "counted", |v| count(v, "close_reasons", "mqtt_session_expiry_after_zero") == 1);
    s.terminate();
}

/// Finding 3: with `--auth jwt`, an event stream on an http port shows a
/// token as a WebSocket does: without one it is answered 401 and hears
/// nothing, live or from the history; with one it gets the broadcast.
#[test]
fn an_event_stream_on_an_http_port_needs_a_token() {
    let (dir, secret) = secret("sse");
    let (http_port, ws_port) = (free_port(), free_port());
    let (h, w) = (format!("http={http_port}"), format!("ws={ws_port}"));
    let args = ["--serve", &h, "--serve", &w, "--auth", "jwt", "--jwt-secret-file", &secret, "--history", "16", "--workers", "1"];
    let (mut s, _, ready) = server_ready(&args, None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    let (status, _) = http(&admin, "POST", "/broadcast", b"before", None);
    assert_eq!(status, 200);
    let open = |auth: &str, last: &str| {
        let mut c = TcpStream::connect(("127.0.0.1", http_port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let head = format!("GET / HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n{auth}{last}\r\n");
        c.write_all(head.as_bytes()).unwrap();
        c
    };
    let mut anonymous = rest(open("", "Last-Event-ID: *:0:0\r\n"));
    anonymous.truncate(200);
    let text = String::from_utf8_lossy(&anonymous);
    assert!(text.starts_with("HTTP/1.1 401"), "{text}");
    assert!(!text.contains("before"), "no history: {text}");
    let out = Command::new("python3").arg(peer("jwt_keys.py")).arg("mint").arg(&dir).args(["reader", "600", "*"]).output().unwrap();
    let token = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let mut named = open(&format!("Authorization: Bearer {token}\r\n"), "");
    let mut head = [0u8; 12];
    named.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    let v = stats_when(&admin, "one stream open, one refused", |v| v["sse_streams"] == 1 && count(v, "auth_refused", "auth_missing") == 1);
    assert_eq!(v["authenticated"], 1);
    s.terminate();
    let _ = std::fs::remove_dir_all(&dir);
}
