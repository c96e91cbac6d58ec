//! `server --protocol mqtt`'s MQTT 5 features with several workers,
//! against Eclipse paho-mqtt 2.1.0 (a peer script per feature in
//! tests/peers: mqtt_shared.py, ...) and against hostile peers written by
//! hand, each held to its bound and counted.
use crate::common::*;
use crate::mqtt::stats_when;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

/// An MQTT server with three workers on a free port: groups, wills and
/// sessions must cross them. (process, admin address, port).
fn server(extra: &[&str]) -> (Running, String, u16) {
    let port = free_port();
    let p = port.to_string();
    let mut args = vec!["--protocol", "mqtt", "--ports", &p, "--workers", "3"];
    args.extend_from_slice(extra);
    let (s, _, ready) = server_ready(&args, None);
    (s, ready["admin"].as_str().unwrap().to_string(), port)
}

/// Run tests/peers/`script` against the server; it prints OK.
fn paho(script: &str, port: u16, admin: &str, args: &[&str]) {
    let mut py = Command::new("python3");
    py.arg(peer(script)).args([&port.to_string(), admin]).args(args);
    assert_eq!(Peer::spawn(&format!("{script} {args:?}"), py).finish_ok(Duration::from_secs(120)), ["OK"]);
}

/// One packet: its first byte, the remaining length, the body.
fn packet(first: u8, body: &[u8]) -> Vec<u8> {
    let mut p = vec![first];
    let mut n = body.len();
    loop {
        let b = (n % 128) as u8;
        n /= 128;
        p.push(if n > 0 { b | 0x80 } else { b });
        if n == 0 {
            break;
        }
    }
    p.extend_from_slice(body);
    p
}

fn string(s: &str) -> Vec<u8> {
    let mut v = (s.len() as u16).to_be_bytes().to_vec();
    v.extend_from_slice(s.as_bytes());
    v
}

/// A v5 client connected with `id` and `props` (the CONNECT's property
/// block, without its length); its CONNACK read.
fn v5_client(port: u16, id: &str, props: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut body = b"\x00\x04MQTT\x05\x02\x00\x3c".to_vec();
    body.push(props.len() as u8);
    body.extend_from_slice(props);
    body.extend(string(id));
    s.write_all(&packet(0x10, &body)).unwrap();
    let head = read_packet(&mut s);
    assert_eq!((head.0, head.1.get(1)), (0x20, Some(&0)), "CONNACK accepted, not {head:?}");
    s
}

/// One whole packet from the server: (first byte, body).
fn read_packet(s: &mut TcpStream) -> (u8, Vec<u8>) {
    let mut first = [0u8; 1];
    s.read_exact(&mut first).expect("a packet");
    let (mut len, mut shift) = (0usize, 0);
    loop {
        let mut b = [0u8; 1];
        s.read_exact(&mut b).unwrap();
        len |= ((b[0] & 0x7F) as usize) << shift;
        shift += 7;
        if b[0] & 0x80 == 0 {
            break;
        }
    }
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).unwrap();
    (first[0], body)
}

/// A v5 SUBSCRIBE of `filters` at QoS 0, packet id 1; the SUBACK's codes.
fn subscribe(s: &mut TcpStream, filters: &[String]) -> Vec<u8> {
    let mut body = vec![0, 1, 0];
    for f in filters {
        body.extend(string(f));
        body.push(0);
    }
    s.write_all(&packet(0x82, &body)).unwrap();
    let (first, body) = read_packet(s);
    assert_eq!(first, 0x90, "SUBACK");
    // Packet id, then an empty property block.
    body[3..].to_vec()
}

/// paho: every message reaches one member of each shared group (round
/// robin across workers, 3.1.1 members too), members leaving are skipped,
/// the v5 CONNACK announces them (tests/peers/mqtt_shared.py).
#[test]
fn paho_shared_subscriptions_deliver_once_per_group_round_robin() {
    let (mut s, admin, port) = server(&[]);
    paho("mqtt_shared.py", port, &admin, &[]);
    s.terminate();
}

/// A hostile peer inventing group names for one filter: five
/// connections of 16 shared subscriptions each (the per-connection
/// bound); the supervisor keeps 64 groups of the filter and refuses and
/// counts the other 16; a 17th on one connection is refused 0x97.
#[test]
fn invented_share_groups_are_held_to_their_bounds() {
    let (mut s, admin, port) = server(&[]);
    let mut conns = Vec::new();
    for c in 0..5 {
        let mut conn = v5_client(port, &format!("groups-{c}"), &[]);
        let filters: Vec<String> = (0..16).map(|i| format!("$share/g{c}x{i}/t")).collect();
        assert_eq!(subscribe(&mut conn, &filters), vec![0; 16]);
        conns.push(conn);
    }
    assert_eq!(subscribe(&mut conns[0], &["$share/one-more/t".to_string()]), vec![0x97]);
    let v = stats_when(&admin, "64 groups kept, 16 refused", |v| {
        v["mqtt_shared"]["refused"]["groups_per_filter"] == 16 && crate::mqtt::count(v, "subscribe_refused", "mqtt_shared_per_connection") == 1
    });
    assert_eq!((v["mqtt_shared"]["groups"].as_u64(), v["mqtt_shared"]["members"].as_u64()), (Some(64), Some(64)), "{v}");
    drop(conns);
    stats_when(&admin, "every member left", |v| v["mqtt_shared"]["members"] == 0 && v["mqtt_shared"]["groups"] == 0);
    s.terminate();
}

/// paho: a v5 will waits its Will Delay Interval in the supervisor (at
/// most the session's expiry), a reconnect of the client id cancels it,
/// no session means no delay (tests/peers/mqtt_will_delay.py).
#[test]
fn paho_will_delay_interval_is_honoured_and_cancelled_by_a_reconnect() {
    let (mut s, admin, port) = server(&[]);
    paho("mqtt_will_delay.py", port, &admin, &[]);
    s.terminate();
}

/// A hostile peer leaving more delayed wills than `--mqtt-sessions` (5,
/// all of them its identity's share here): five wait, the rest are
/// published at once and counted `full`.
#[test]
fn delayed_wills_are_held_to_the_session_bound() {
    let (mut s, admin, port) = server(&["--mqtt-sessions", "5", "--mqtt-sessions-per-identity", "5"]);
    // Session Expiry 60 s; the will: QoS 0, Will Delay 3600 s, topic w/N.
    let expiry = [0x11, 0, 0, 0, 60];
    for i in 0..8 {
        let id = format!("will-{i}");
        let mut body = b"\x00\x04MQTT\x05\x06\x00\x3c".to_vec();
        body.push(expiry.len() as u8);
        body.extend_from_slice(&expiry);
        body.extend(string(&id));
        body.extend_from_slice(&[5, 0x18, 0, 0, 0x0E, 0x10]);
        body.extend(string(&format!("w/{i}")));
        body.extend(string("gone"));
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        c.write_all(&packet(0x10, &body)).unwrap();
        assert_eq!(read_packet(&mut c).0, 0x20);
    }
    let v = stats_when(&admin, "5 wait, 3 published", |v| v["mqtt_sessions"]["wills_delayed"] == 8);
    let m = &v["mqtt_sessions"];
    assert_eq!((m["wills_waiting"].as_u64(), m["wills_published"]["full"].as_u64()), (Some(5), Some(3)), "{m}");
    s.terminate();
}

/// paho: topic aliases set and used (QoS 0, 1, 2), re-pointed, and one
/// over the maximum answered DISCONNECT 0x94 (tests/peers/mqtt_alias.py).
#[test]
fn paho_topic_aliases_are_resolved_and_bounded() {
    let (mut s, admin, port) = server(&[]);
    paho("mqtt_alias.py", port, &admin, &[]);
    stats_when(&admin, "the bad alias counted", |v| crate::mqtt::count(v, "close_reasons", "mqtt_topic_alias_invalid") == 1);
    s.terminate();
}

/// Server-to-client topic aliases against mqtt.js, which resolves them
/// itself, over TCP and over WebSocket (one server serving both): a
/// subscriber that accepts two gets each topic's alias set, then used
/// alone, the least recently used taken over; one that accepts none gets
/// whole topics (tests/peers/mqtt_alias_node.js); each alias counted.
#[test]
fn mqtt_js_gets_the_topic_aliases_it_accepts_over_tcp_and_websocket() {
    let ports = free_ports(2);
    let (mqtt, ws) = (ports.nth(0), ports.nth(1));
    let serve = [format!("mqtt={mqtt}"), format!("ws={ws}")];
    let (mut s, _, ready) = server_ready(&["--workers", "2", "--serve", &serve[0], "--serve", &serve[1]], None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    for url in [format!("mqtt://127.0.0.1:{mqtt}"), format!("ws://127.0.0.1:{ws}/mqtt")] {
        let mut node = Command::new("node");
        node.args([&peer("mqtt_alias_node.js"), &url]);
        assert_eq!(Peer::spawn(&format!("node mqtt_alias_node.js {url}"), node).finish_ok(Duration::from_secs(60)), ["OK"]);
    }
    let count = crate::mqtt::count;
    stats_when(&admin, "4 set and 2 used per run", |v| count(v, "mqtt_topic_aliases_out", "set") == 8 && count(v, "mqtt_topic_aliases_out", "used") == 4);
    s.terminate();
}

/// A hostile peer using an alias it never set: DISCONNECT 0x94, closed.
#[test]
fn an_unknown_topic_alias_is_a_protocol_error() {
    let (mut s, admin, port) = server(&[]);
    let mut c = v5_client(port, "unknown-alias", &[]);
    // PUBLISH QoS 0, empty topic, Topic Alias 3.
    c.write_all(&packet(0x30, b"\x00\x00\x03\x23\x00\x03x")).unwrap();
    assert_eq!(read_packet(&mut c), (0xE0, vec![0x94]));
    stats_when(&admin, "counted", |v| crate::mqtt::count(v, "close_reasons", "mqtt_topic_alias_invalid") == 1);
    s.terminate();
}

/// paho: No Local, subscription identifiers, every forwarded property of
/// a v5 PUBLISH and its expiry (what is left forwarded; a held message
/// past it dropped and counted) across workers (tests/peers/mqtt_v5props.py).
#[test]
fn paho_v5_properties_no_local_and_subscription_ids_are_honoured() {
    let (mut s, admin, port) = server(&[]);
    paho("mqtt_v5props.py", port, &admin, &[]);
    s.terminate();
}

/// A hostile peer publishing more than 8 KiB of properties to forward (a
/// 4,000-byte user property, within the codec's bound per block, a
/// 3,000-byte content type, 2,000 bytes of correlation data): PUBACK 0x95
/// and counted, the connection kept.
#[test]
fn oversized_forwarded_properties_are_refused() {
    let (mut s, admin, port) = server(&[]);
    let mut c = v5_client(port, "big-props", &[]);
    let mut block = vec![0x26];
    block.extend(string("a"));
    block.extend(string(&"v".repeat(4000)));
    block.push(0x03);
    block.extend(string(&"t".repeat(3000)));
    block.push(0x09);
    block.extend(string(&"c".repeat(2000)));
    let mut body = string("t");
    body.extend_from_slice(&[0, 9]);
    let n = block.len();
    body.extend_from_slice(&[(n % 128) as u8 | 0x80, (n / 128) as u8]);
    body.extend(block);
    c.write_all(&packet(0x32, &body)).unwrap();
    assert_eq!(read_packet(&mut c), (0x40, vec![0, 9, 0x95]));
    c.write_all(&[0xC0, 0]).unwrap();
    assert_eq!(read_packet(&mut c).0, 0xD0, "still connected: PINGRESP");
    let v = stats_when(&admin, "counted", |v| crate::mqtt::count(v, "mqtt_publish_refused", "mqtt_properties_too_large") == 1);
    assert_eq!(crate::mqtt::count(&v, "close_reasons", "mqtt_properties_too_large"), 0);
    s.terminate();
}

/// paho: retained messages, a persistent session's offline queue and a
/// will keep their v5 properties and Message Expiry (what is left sent,
/// past it gone and counted); a retained message comes with the new
/// subscription's identifier (tests/peers/mqtt_stored_props.py).
#[test]
fn paho_v5_properties_stay_with_retained_queued_and_will_messages() {
    let (mut s, admin, port) = server(&[]);
    paho("mqtt_stored_props.py", port, &admin, &[]);
    s.terminate();
}
