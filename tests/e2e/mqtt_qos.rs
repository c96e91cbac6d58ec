//! `server --protocol mqtt`'s QoS 1 and 2, retained messages and wills
//! against MQTT clients nobody here wrote (paho-mqtt 3.1.1 and 5.0 in
//! tests/peers/mqtt_paho.py, Debian's mosquitto_pub and mosquitto_sub),
//! every acknowledgement counted in /stats; and against misbehaving peers
//! written by hand: a subscriber that never acknowledges (the inflight
//! window and the held queue bound what it is sent), a client that
//! resends a QoS 2 publish and releases ids it never used.
use crate::common::mqtt_raw::{frame, packet, publish_body, raw_client, subscribe};
use crate::common::*;
use crate::mqtt::{count, mqtt_server, stats_when};
use serde_json::Value;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Run tests/peers/mqtt_paho.py in `mode` against the server; it prints OK.
fn paho(port: u16, admin: &str, mode: &str) {
    let mut py = Command::new("python3");
    py.arg(peer("mqtt_paho.py")).args([&port.to_string(), admin, mode]);
    assert_eq!(Peer::spawn(&format!("mqtt_paho.py {mode}"), py).finish_ok(Duration::from_secs(120)), ["OK"]);
}

/// Every count of `map` equals `want` exactly (absent: 0).
fn counts_are(v: &Value, map: &str, want: &[(&str, u64)]) -> bool {
    want.iter().all(|(k, n)| count(v, map, k) == *n)
}

/// paho's QoS 0, 1 and 2 both ways, both versions: each message once at
/// the QoS the subscription allows, and every acknowledgement the
/// exchange takes counted (per version: the subscriber PUBACKs 3
/// deliveries and PUBRECs/PUBCOMPs 1; the publisher PUBRELs its 3 QoS 2
/// publishes and is PUBACKed 2).
#[test]
fn paho_qos_1_and_2_both_ways_with_every_ack_counted() {
    let (mut s, admin, port) = mqtt_server(&[]);
    paho(port, &admin, "qos");
    stats_when(&admin, "every ack of both versions counted", |v| {
        counts_are(v, "mqtt_acks_in", &[("puback", 6), ("pubrec", 2), ("pubcomp", 2), ("pubrel", 6)])
            && counts_are(v, "mqtt_publishes_in", &[("0", 6), ("1", 4), ("2", 6)])
            && counts_are(v, "mqtt_publishes_out", &[("0", 8), ("1", 6), ("2", 2)])
            && v["mqtt_unknown_packet_ids"].as_object().is_none_or(|m| m.is_empty())
    });
    s.terminate();
}

/// paho's retained messages: set, replaced, cleared, delivered on
/// subscribe with the retain flag (not to `#` for `$` topics), v5 Retain
/// Handling and Retain As Published; the supervisor counted them.
#[test]
fn paho_retained_messages_set_clear_and_reach_new_subscriptions() {
    let (mut s, admin, port) = mqtt_server(&[]);
    paho(port, &admin, "retained");
    stats_when(&admin, "retained counted", |v| {
        let r = &v["mqtt_retained"];
        // Everything the peer set it cleared again at the end.
        r["messages"] == 0 && r["cleared"].as_u64() >= Some(2 * 4) && v["mqtt_retained_out"].as_u64() >= Some(2 * 4 + 2)
    });
    s.terminate();
}

/// paho's wills: a killed client's and a keep-alive expiry's are
/// published, a clean DISCONNECT's not, a v5 DISCONNECT 0x04's is.
#[test]
fn paho_wills_on_a_killed_connection_not_on_disconnect() {
    let (mut s, admin, port) = mqtt_server(&[]);
    paho(port, &admin, "will");
    stats_when(&admin, "five wills", |v| v["mqtt_wills_sent"] == 5 && count(v, "close_reasons", "mqtt_keepalive_timeout") == 2);
    s.terminate();
}

/// mosquitto_pub sets a retained QoS 2 message, the admin API a retained
/// one (`&retain=1`, QoS 0), and mosquitto_pub publishes a live one;
/// mosquitto_sub at QoS 1 prints the retained ones with their flag (the
/// QoS 2 one at QoS 1, the lower), then the live one without it.
#[test]
fn mosquitto_retained_and_qos_2() {
    let (mut s, admin, port) = mqtt_server(&[]);
    let p = port.to_string();
    let publish = |args: &[&str]| {
        let out = Command::new("mosquitto_pub").args(["-h", "127.0.0.1", "-p", &p, "-t", "m/x"]).args(args).output().expect("mosquitto_pub");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    publish(&["-q", "2", "-r", "-m", "kept"]);
    let (status, body) = http(&admin, "POST", "/publish?topic=m/adm&retain=1", b"from admin", None);
    assert_eq!(status, 200, "{body}");
    stats_when(&admin, "the retained messages stored", |v| v["mqtt_retained"]["messages"] == 2);
    let sub = Command::new("mosquitto_sub")
        .args(["-h", "127.0.0.1", "-p", &p, "-t", "m/#", "-q", "1", "-C", "3", "-W", "30", "-F", "%r %q %t %p"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mosquitto_sub");
    stats_when(&admin, "mosquitto_sub got the retained ones", |v| v["mqtt_retained_out"] == 2);
    publish(&["-q", "2", "-m", "live"]);
    let out = sub.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "1 0 m/adm from admin\n1 1 m/x kept\n0 1 m/x live\n");
    stats_when(&admin, "mosquitto's QoS 2 counted", |v| {
        counts_are(v, "mqtt_publishes_in", &[("2", 2)])
            && count(v, "mqtt_acks_in", "pubrel") == 2
            && count(v, "mqtt_acks_in", "puback") == 2
            && count(v, "mqtt_publishes_out", "0") == 1
    });
    s.terminate();
}

/// A v5 subscriber announcing Receive Maximum 3 that never acknowledges:
/// it is sent 3 QoS 1 PUBLISHes, 2 more are held (`--mqtt-queue 2`), the
/// other 5 of 10 dropped and counted; one PUBACK lets exactly the oldest
/// held one go, with the next packet id.
#[test]
fn a_subscriber_that_never_acks_gets_its_window_and_the_rest_is_bounded() {
    let (mut s, admin, port) = mqtt_server(&["--mqtt-queue", "2"]);
    let mut sub = raw_client(port, 5, "slow", &[0x21, 0, 3]);
    subscribe(&mut sub, true, "f/x", 1);
    let mut publisher = raw_client(port, 4, "fast", &[]);
    for i in 0..10u16 {
        publisher.write_all(&frame(0x32, &publish_body(false, "f/x", Some(i + 1), format!("m{i}").as_bytes()))).unwrap();
    }
    for i in 0..10u16 {
        assert_eq!(packet(&mut publisher), (0x40, (i + 1).to_be_bytes().to_vec()), "PUBACK {i}");
    }
    stats_when(&admin, "5 dropped, 3 sent", |v| count(v, "mqtt_inflight_dropped", "queue_full") == 5 && count(v, "mqtt_publishes_out", "1") == 3);
    for i in 0..3u16 {
        assert_eq!(packet(&mut sub), (0x32, publish_body(true, "f/x", Some(i + 1), format!("m{i}").as_bytes())), "delivery {i}");
    }
    sub.write_all(&frame(0x40, &[0, 1])).unwrap();
    assert_eq!(packet(&mut sub), (0x32, publish_body(true, "f/x", Some(4), b"m3")), "the oldest held one, as id 4");
    // Nothing else came: the next packet is the answer to a PINGREQ.
    sub.write_all(&[0xC0, 0]).unwrap();
    assert_eq!(packet(&mut sub), (0xD0, vec![]));
    stats_when(&admin, "4 sent", |v| count(v, "mqtt_publishes_out", "1") == 4 && count(v, "mqtt_acks_in", "puback") == 1);
    s.terminate();
}

/// A QoS 2 publish sent twice (DUP) before its PUBREL reaches the topic
/// space once; PUBREL for it gets PUBCOMP, for an id never used PUBCOMP
/// 0x92 in v5 (a plain one in 3.1.1), counted.
#[test]
fn a_resent_qos2_publish_is_forwarded_once_and_unknown_pubrels_answered() {
    let (mut s, admin, port) = mqtt_server(&[]);
    for (level, id) in [(4u8, "v3"), (5, "v5")] {
        let v5 = level == 5;
        let topic = format!("d/{id}");
        let mut c = raw_client(port, level, id, &[]);
        subscribe(&mut c, v5, &topic, 2);
        let once = publish_body(v5, &topic, Some(5), b"once");
        let marker = publish_body(v5, &topic, None, b"end");
        let out = [frame(0x34, &once), frame(0x3C, &once), frame(0x62, &[0, 5]), frame(0x62, &[0, 77]), frame(0x30, &marker)].concat();
        c.write_all(&out).unwrap();
        // Everything until the marker comes back (its own messages come
        // back through the topic space, in between the answers).
        let mut got = Vec::new();
        loop {
            let p = packet(&mut c);
            if p == (0x30, marker.clone()) {
                break;
            }
            got.push(p);
        }
        let of = |kind: u8| got.iter().filter(|(k, _)| *k == kind).map(|(_, b)| b.clone()).collect::<Vec<_>>();
        assert!(of(0x50).iter().all(|b| b[..2] == [0, 5]) && of(0x50).len() == 2, "two PUBRECs for 5: {got:?}");
        let comps = of(0x70);
        assert_eq!(comps.len(), 2, "{got:?}");
        assert_eq!(comps[0][..2], [0, 5]);
        assert!(comps[0].get(2).is_none_or(|r| *r == 0), "PUBCOMP 5 succeeds: {got:?}");
        assert_eq!(&comps[1][..], if v5 { &[0, 77, 0x92][..] } else { &[0, 77][..] }, "PUBCOMP for an unknown id");
        let deliveries: Vec<_> = got.iter().filter(|(k, _)| k & 0xF0 == 0x30).collect();
        assert_eq!(deliveries.len(), 1, "forwarded once: {got:?}");
        assert_eq!(deliveries[0].0, 0x34, "at QoS 2, not a duplicate");
        assert!(deliveries[0].1.ends_with(b"once"));
    }
    stats_when(&admin, "one forwarded per version, resends and unknown ids counted", |v| {
        count(v, "mqtt_publishes_in", "2") == 2 && v["mqtt_qos2_resent"] == 2 && count(v, "mqtt_unknown_packet_ids", "pubrel") == 2
    });
    s.terminate();
}
