//! MQTT timed end to end (issue 44): stamped publishes from one
//! `megaconn client --protocol mqtt` run, timed and counted per QoS at
//! every subscriber of another, against megaconn's MQTT server (QoS 1 and
//! QoS 2 both ways) and Debian's mosquitto; lost and duplicated messages
//! found against a fake broker that skips and resends on purpose; and
//! `bench --protocol mqtt --scenario push` delivering every broadcast to
//! every connection.
use crate::common::*;
use crate::mqtt::mqtt_server;
use crate::mqtt_client::{mqtt_client, Mosquitto};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

/// Subscribers subscribed to `fleet` at `qos` on `port`; once they all
/// are, a second client run publishes `--request-rate 5/s` stamped
/// messages at `qos` from 2 connections for 2 s. Returns (subscribers'
/// summary, publisher's summary).
fn subscribers_and_publisher(port: u16, qos: &str, extra: &[&str]) -> (Value, Value) {
    let n = 20;
    let mut args = vec!["--connections", "20", "--rate", "2000", "--heartbeat", "1s", "--hold", "12s", "--subscribe", "fleet", "--mqtt-qos", qos];
    args.extend_from_slice(extra);
    let mut publisher = Value::Null;
    let (code, subs, err) = mqtt_client(port, &args, n, || {
        let mut cmd = megaconn();
        cmd.args(["client", "--protocol", "mqtt", "--ports", &port.to_string(), "--workers", "1", "--json", "--connections", "2"]);
        cmd.args(["--mqtt-client-id", "pub-{conn}", "--mqtt-publish-topic", "fleet", "--mqtt-qos", qos, "--request-rate", "5/s", "--hold", "2s"]);
        cmd.args(extra);
        let (code, out, err) = run(cmd, Duration::from_secs(60));
        assert_eq!(code, 0, "the publisher failed: {err}\n{out}");
        publisher = serde_json::from_str::<Value>(&out).unwrap()["summary"].clone();
    });
    assert_eq!(code, 0, "{err}\n{subs}");
    (subs, publisher)
}

/// Every stamped publish reached every subscriber once, timed; nothing
/// lost or duplicated; every publish acknowledged (and so timed).
fn assert_every_publish_everywhere(subs: &Value, publisher: &Value, qos: &str) {
    let published = publisher["mqtt_published"][qos].as_u64().unwrap_or(0);
    assert!(published >= 2, "both publishers published: {publisher}");
    let r = &publisher["requests"];
    assert_eq!((r["sent"].as_u64(), r["replies"].as_u64()), (Some(published), Some(published)), "each publish acknowledged: {publisher}");
    assert!(r["latency_ms"]["count"].as_u64().unwrap_or(0) >= published, "each acknowledgement timed: {publisher}");
    assert_eq!(subs["mqtt_received"][qos].as_u64(), Some(20 * published), "every subscriber got every publish: {subs}");
    assert_eq!(subs["push"]["received"].as_u64(), Some(20 * published), "{subs}");
    assert_eq!(subs["push"]["latency_ms"]["count"].as_u64(), Some(20 * published), "every delivery timed: {subs}");
    assert!(subs["push"]["latency_ms"]["max_ms"].as_f64().unwrap() > 0.0, "{subs}");
    for k in ["mqtt_lost", "mqtt_duplicated"] {
        assert!(subs[k].as_object().is_none_or(|m| m.values().all(|v| v == 0)), "{k}: {subs}");
    }
    assert_eq!((subs["mqtt_unstamped"].as_u64(), subs["mqtt_qos2_resent_in"].as_u64()), (Some(0), Some(0)), "{subs}");
}

#[test]
fn stamped_qos1_publishes_are_timed_at_every_subscriber_of_megaconns_server() {
    let (mut srv, _, port) = mqtt_server(&[]);
    let (subs, publisher) = subscribers_and_publisher(port, "1", &[]);
    assert_every_publish_everywhere(&subs, &publisher, "1");
    srv.terminate();
}

#[test]
fn qos2_goes_both_ways_through_megaconns_server_once_each() {
    let (mut srv, admin, port) = mqtt_server(&[]);
    let (subs, publisher) = subscribers_and_publisher(port, "2", &["--mqtt-version", "5"]);
    assert_every_publish_everywhere(&subs, &publisher, "2");
    // The server's side of both: PUBRELs from the publishers, PUBRECs and
    // PUBCOMPs from the subscribers.
    let (_, body) = http(&admin, "GET", "/stats", b"", None);
    let st: Value = serde_json::from_str(&body).unwrap();
    let published = publisher["mqtt_published"]["2"].as_u64().unwrap();
    let acks = &st["mqtt_acks_in"];
    assert_eq!((acks["pubrel"].as_u64(), acks["pubcomp"].as_u64()), (Some(published), Some(20 * published)), "{st}");
    srv.terminate();
}

#[test]
fn stamped_qos2_publishes_are_timed_through_mosquitto() {
    let broker = Mosquitto::start();
    let (subs, publisher) = subscribers_and_publisher(broker.port, "2", &[]);
    assert_every_publish_everywhere(&subs, &publisher, "2");
}

/// A 3.1.1 PUBLISH written by hand (the fake broker's, not the codec's).
fn publish(qos: u8, dup: bool, id: u16, payload: &[u8]) -> Vec<u8> {
    let mut body = vec![0, 5];
    body.extend_from_slice(b"dev/0");
    if qos > 0 {
        body.extend_from_slice(&id.to_be_bytes());
    }
    body.extend_from_slice(payload);
    assert!(body.len() < 128, "one length byte");
    let mut p = vec![0x30 | (dup as u8) << 3 | qos << 1, body.len() as u8];
    p.extend(body);
    p
}

/// A megaconn stamp (proto/stamp.rs's layout, written out here), sent 1 ms ago.
fn stamp(publisher: u64, seq: u64) -> Vec<u8> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as u64;
    let mut s = b"mcS1".to_vec();
    for v in [publisher, seq, now - 1000] {
        s.extend_from_slice(&v.to_be_bytes());
    }
    s
}

/// A broker that accepts one MQTT client, grants its SUBSCRIBE, then
/// skips, resends and repeats on purpose; returns what the client sent.
fn misbehaving_broker(l: TcpListener) -> Vec<u8> {
    let (mut s, _) = l.accept().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut got = Vec::new();
    let read_until = |s: &mut TcpStream, first: u8, got: &mut Vec<u8>| {
        let mut buf = [0u8; 512];
        while !got.contains(&first) {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "the client closed early");
            got.extend_from_slice(&buf[..n]);
        }
    };
    read_until(&mut s, 0x10, &mut got); // CONNECT
    s.write_all(&[0x20, 2, 0, 0]).unwrap();
    read_until(&mut s, 0x82, &mut got); // SUBSCRIBE
    got.clear();
    s.write_all(&[0x90, 3, 0xFF, 0xFF, 1]).unwrap();
    let mut w = Vec::new();
    // Publisher 5 at QoS 1: 1, 2, 2 again (a duplicate), 5 (3 and 4 lost).
    for (id, seq, dup) in [(1, 1, false), (2, 2, false), (2, 2, true), (3, 5, false)] {
        w.extend(publish(1, dup, id, &stamp(5, seq)));
    }
    // Publisher 9 at QoS 2: id 7 (seq 1), resent before its PUBREL (once),
    // released, then id 7 again (seq 2, a new message).
    w.extend(publish(2, false, 7, &stamp(9, 1)));
    w.extend(publish(2, true, 7, &stamp(9, 1)));
    w.extend([0x62, 2, 0, 7]);
    w.extend(publish(2, false, 7, &stamp(9, 2)));
    // Someone else's message: no stamp.
    w.extend(publish(0, false, 0, b"not stamped"));
    s.write_all(&w).unwrap();
    let mut buf = [0u8; 512];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    got
}

#[test]
fn a_broker_that_skips_and_resends_is_counted_lost_and_duplicated_per_qos() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let broker = std::thread::spawn(move || misbehaving_broker(l));
    let (_, s, err) = mqtt_client(port, &["--connections", "1", "--hold", "2s", "--subscribe", "dev/0"], 1, || {});
    let by = |k: &str, q: &str| s[k][q].as_u64().unwrap_or(0);
    assert_eq!((by("mqtt_received", "1"), by("mqtt_lost", "1"), by("mqtt_duplicated", "1")), (4, 2, 1), "{err}\n{s}");
    assert_eq!((by("mqtt_received", "2"), by("mqtt_lost", "2"), by("mqtt_duplicated", "2")), (2, 0, 0), "the QoS 2 resend is one delivery: {s}");
    assert_eq!((s["mqtt_qos2_resent_in"].as_u64(), s["mqtt_unstamped"].as_u64()), (Some(1), Some(1)), "{s}");
    assert_eq!((s["push"]["received"].as_u64(), s["push"]["gaps"].as_u64(), s["push"]["duplicates"].as_u64()), (Some(7), Some(2), Some(1)), "{s}");
    assert_eq!(s["push"]["latency_ms"]["count"].as_u64(), Some(6), "every stamped one timed: {s}");
    // What the client answered: PUBACK 1, 2, 2, 3; PUBREC 7 twice, PUBCOMP 7,
    // PUBREC 7 (its PINGREQs, which this broker ignores, aside).
    let sent = broker.join().unwrap();
    let mut answers = Vec::new();
    let mut rest = &sent[..];
    while let [kind, len, ..] = rest {
        let (packet, more) = rest.split_at(2 + *len as usize);
        if *kind != 0xC0 {
            answers.push(packet.to_vec());
        }
        rest = more;
    }
    let want: Vec<Vec<u8>> =
        [(0x40, 1), (0x40, 2), (0x40, 2), (0x40, 3), (0x50, 7), (0x50, 7), (0x70, 7), (0x50, 7)].iter().map(|(k, id)| vec![*k, 2, 0, *id]).collect();
    assert_eq!(answers[..want.len().min(answers.len())], want[..], "{sent:02x?}");
}

#[test]
fn the_mqtt_push_bench_delivers_every_broadcast_to_every_connection() {
    let ports = free_ports(2);
    let mut cmd = megaconn();
    cmd.args(["bench", "--protocol", "mqtt", "--scenario", "push", "--connections", "300", "--broadcasts", "3", "--broadcast-interval", "300ms"]);
    cmd.args(["--mqtt-qos", "1", "--ports", &ports.arg(), "--hold", "6s", "--heartbeat", "1s", "--json"]);
    let (code, out, err) = run(cmd, Duration::from_secs(90));
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let p = &v["push"];
    assert_eq!((p["broadcasts"].as_u64(), p["expected_deliveries"].as_u64(), p["deliveries"].as_u64()), (Some(3), Some(900), Some(900)), "{p}");
    assert_eq!((p["dropped"].as_u64(), p["duplicates"].as_u64(), p["gaps"].as_u64()), (Some(0), Some(0), Some(0)), "{p}");
    for r in p["rounds"].as_array().unwrap() {
        assert_eq!(r["deliveries"], 300, "{r}");
        assert!(r["time_to_all_ms"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert_eq!(p["delivery_ms"]["count"], 900, "{p}");
    let c = &v["client"];
    assert_eq!(c["mqtt_received"]["1"], 900, "delivered at QoS 1: {c}");
    assert_eq!(c["mqtt_subscriptions"]["granted"], 300, "{c}");
}
