//! The message path under load it must shrug off (issue 63), on the
//! release binary over loopback with hand-written MQTT clients: retained
//! lookups a client asks for many times over, filters that cannot match a
//! publish, a worker that stops reading its shards while QoS 1 messages
//! keep coming.
use crate::common::mqtt_raw::{connect_packet, frame, packet, publish_body, raw_client, subscribe, subscribe_packet};
use crate::common::*;
use crate::mqtt::{count, stats_when};
use crate::mqtt_sessions::connected_from;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// An MQTT server with `workers` workers and `extra` flags: (process,
/// ready event, admin address, port).
fn broker(workers: &str, extra: &[&str]) -> (Running, Value, String, u16) {
    let port = free_port();
    let p = port.to_string();
    let mut args = vec!["--protocol", "mqtt", "--ports", &p, "--workers", workers];
    args.extend_from_slice(extra);
    let (s, _, ready) = server_ready(&args, None);
    let admin = ready["admin"].as_str().unwrap().to_string();
    (s, ready, admin, port)
}

/// utime + stime of the server's process tree (supervisor and workers),
/// in seconds.
fn tree_cpu_seconds(s: &Running, ready: &Value) -> f64 {
    let mut all = pids(ready);
    all.push(s.child.id() as u64);
    let ticks: f64 = all
        .iter()
        .map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let rest = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or("");
            let f: Vec<&str> = rest.split_whitespace().collect();
            f.get(11).and_then(|u| u.parse::<f64>().ok()).unwrap_or(0.0) + f.get(12).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0)
        })
        .sum();
    // SAFETY: sysconf has no preconditions.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// Time one admin publish takes to be answered.
fn admin_publish_takes(admin: &str, topic: &str, qos: u8) -> Duration {
    let t = Instant::now();
    let (status, body) = http(admin, "POST", &format!("/publish?topic={topic}&qos={qos}"), b"cmd", None);
    assert_eq!(status, 200, "{body}");
    t.elapsed()
}

/// Six 133-byte SUBSCRIBEs of 32 × `#` beside 1,000 retained messages of
/// 4 KiB ask for the retained set once per distinct filter, not 192
/// times: meanwhile an admin publish and another client's PINGREQ are
/// answered at once and a kept session comes back with its queued
/// message. (31a6cd6: 3.6 s for the admin publish, 3.7 s for the
/// CONNACK; the bounds below are five times the goals, for a
/// shared machine, and still fail there.)
#[test]
fn six_subscribes_of_32_hashes_beside_1000_retained_leave_the_node_responsive() {
    let (mut s, _, admin, port) = broker("2", &[]);
    // A kept session with a QoS 1 command queued for it.
    let (mut keeper, present, code) = connected_from("127.0.0.1", port, 4, "keeper", false);
    assert_eq!((present, code), (false, 0));
    subscribe(&mut keeper, false, "k/cmd", 1);
    keeper.write_all(&[0xE0, 0]).unwrap();
    drop(keeper);
    stats_when(&admin, "the session kept", |v| v["mqtt_sessions"]["kept"].as_u64() == Some(1));
    assert!(admin_publish_takes(&admin, "k/cmd", 1) < Duration::from_secs(5));
    // 1,000 retained messages of 4 KiB.
    // (from two addresses: one may hold a tenth of --mqtt-retained)
    let payload = vec![b'r'; 4096];
    for (from, part) in [("127.0.0.2", 0..500), ("127.0.0.3", 500..1000)] {
        let (mut setter, _, code) = connected_from(from, port, 4, &format!("setter{from}"), true);
        assert_eq!(code, 0);
        let all: Vec<u8> = part.flat_map(|i| frame(0x31, &publish_body(false, &format!("r/{i}"), None, &payload))).collect();
        setter.write_all(&all).unwrap();
    }
    stats_when(&admin, "1,000 retained", |v| v["mqtt_retained"]["messages"].as_u64() == Some(1000));
    let mut other = raw_client(port, 4, "other", &[]);
    // The six SUBSCRIBEs, in one write; the attacker never reads.
    let filters = [("#", 0u8); 32];
    let storm: Vec<u8> = (1..=6).flat_map(|id| subscribe_packet(false, id, &filters)).collect();
    assert_eq!(storm.len(), 6 * 133, "six 133-byte packets");
    let mut attacker = TcpStream::connect(("127.0.0.1", port)).unwrap();
    attacker.write_all(&[connect_packet(4, "attacker", true, &[]), storm].concat()).unwrap();
    // The node goes on answering.
    let admin_took = admin_publish_takes(&admin, "a/b", 0);
    let t = Instant::now();
    other.write_all(&[0xC0, 0]).unwrap();
    assert_eq!(packet(&mut other), (0xD0, vec![]), "PINGRESP");
    let ping_took = t.elapsed();
    let t = Instant::now();
    let (mut keeper, present, code) = connected_from("127.0.0.1", port, 4, "keeper", false);
    let connack_took = t.elapsed();
    assert_eq!((present, code), (true, 0), "the session was kept");
    let (first, body) = packet(&mut keeper);
    assert_eq!((first & 0xF6, &body[..7], &body[9..]), (0x32, &b"\x00\x05k/cmd"[..], &b"cmd"[..]), "its queued command");
    let queued_took = t.elapsed();
    assert!(admin_took < Duration::from_secs(1), "admin publish took {admin_took:?}");
    assert!(ping_took < Duration::from_secs(1), "PINGREQ answered after {ping_took:?}");
    assert!(connack_took < Duration::from_secs(5) && queued_took < Duration::from_secs(5), "CONNACK after {connack_took:?}, its message after {queued_took:?}");
    // One lookup per shard for the 32 × 6 filters (the repeats in a packet
    // and in one read are one), each bounded in bytes.
    let v = stats_when(&admin, "the lookups answered", |v| v["broker"]["retained_asked"].as_u64() >= Some(1));
    let shards = v["broker"]["shards"].as_u64().unwrap();
    let asked = v["broker"]["retained_asked"].as_u64().unwrap();
    assert!(asked <= 6 * shards + 1, "at most one lookup per SUBSCRIBE per shard (and the keeper's), not one per filter: {asked} with {shards} shards");
    drop(attacker);
    s.terminate();
}

/// Publish `n` QoS 0 messages to `topic` from `publisher`, read them all
/// on `subscriber`: the server tree's CPU seconds for it.
fn cpu_for_publishes(s: &Running, ready: &Value, publisher: &mut TcpStream, subscriber: &mut TcpStream, topic: &str, n: usize) -> f64 {
    let before = tree_cpu_seconds(s, ready);
    let one = frame(0x30, &publish_body(false, topic, None, b"0123456789abcdef"));
    let batch: Vec<u8> = one.iter().copied().cycle().take(one.len() * 500).collect();
    let (mut got, mut bytes, mut sent) = (0, 0, 0);
    let mut buf = vec![0u8; 1 << 16];
    subscriber.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while got < n {
        assert!(Instant::now() < deadline, "{got} of {n} delivered in 60 s");
        // At most two batches ahead of the reader: a publisher that
        // outruns it leaves more than --max-pending-bytes unread and the
        // subscriber is closed as a slow consumer (a busy CI machine
        // did, after 2,049).
        if sent < n && sent - got < 1_000 {
            publisher.write_all(&batch).unwrap();
            sent += 500;
        }
        match subscriber.read(&mut buf) {
            Ok(0) => panic!("the subscriber was closed after {got}"),
            Ok(k) => {
                bytes += k;
                got = bytes / one.len();
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if sent >= n || sent - got >= 1_000 {
                    std::thread::sleep(Duration::from_millis(5)); // the read loop's pace, not a wait for the condition
                }
            }
            Err(e) => panic!("{e}"),
        }
    }
    subscriber.set_nonblocking(false).unwrap();
    assert_eq!(got, n, "every publish delivered once");
    tree_cpu_seconds(s, ready) - before
}

/// 20,000 publishes cost the same beside 8,192 filters that cannot match
/// them (4,096 live wildcard subscriptions on the worker, 4,096 kept
/// sessions' wildcard filters in the shards) as without: both compared
/// in one run, a ratio, no timing. (31a6cd6: every publish walked every
/// filter: ~75× the CPU.)
#[test]
fn publishes_cost_the_same_beside_8192_filters_that_cannot_match() {
    let (mut s, ready, admin, port) = broker("1", &["--max-commands-per-second", "100000", "--mqtt-queue", "100000", "--mqtt-queue-bytes", "64MiB"]);
    let mut subscriber = raw_client(port, 4, "reader", &[]);
    subscribe(&mut subscriber, false, "data/t", 0);
    let mut publisher = raw_client(port, 4, "writer", &[]);
    let n = 20_000;
    // Warm both ends up, then measure without the filters.
    cpu_for_publishes(&s, &ready, &mut publisher, &mut subscriber, "data/t", 2_000);
    let bare = cpu_for_publishes(&s, &ready, &mut publisher, &mut subscriber, "data/t", n);
    // 64 kept sessions × 64 wildcard filters, offline (first: while
    // connected their filters are the worker's too).
    for c in 0..64u16 {
        let from = format!("127.0.0.{}", 6 + c / 16);
        let (mut conn, _, code) = connected_from(&from, port, 4, &format!("kept{c}"), false);
        assert_eq!(code, 0);
        let names: Vec<String> = (0..64).map(|i| format!("kept/{c}/{i}/#")).collect();
        let filters: Vec<(&str, u8)> = names.iter().map(|f| (f.as_str(), 1)).collect();
        granted(&mut conn, &filters);
        conn.write_all(&[0xE0, 0]).unwrap();
    }
    stats_when(&admin, "64 kept sessions", |v| v["mqtt_sessions"]["kept"].as_u64() == Some(64));
    // Then 64 live connections × 64 wildcard filters, from four addresses
    // (an identity may create a quarter of the worker's 4,096).
    let mut live = Vec::new();
    for c in 0..64u16 {
        let from = format!("127.0.0.{}", 2 + c / 16);
        let (mut conn, _, code) = connected_from(&from, port, 4, &format!("live{c}"), true);
        assert_eq!(code, 0);
        let names: Vec<String> = (0..64).map(|i| format!("idle/{c}/{i}/+")).collect();
        let filters: Vec<(&str, u8)> = names.iter().map(|f| (f.as_str(), 0)).collect();
        granted(&mut conn, &filters);
        live.push(conn);
    }
    let refused = stats(&admin)["subscribe_refused"].clone();
    assert!(refused.as_object().is_none_or(|m| m.is_empty()), "every filter held: {refused}");
    let crowded = cpu_for_publishes(&s, &ready, &mut publisher, &mut subscriber, "data/t", n);
    assert!(crowded <= 2.0 * bare + 0.2, "{n} publishes took {crowded:.2} s of CPU beside 8,192 filters that cannot match, {bare:.2} s without");
    assert_eq!(count(&stats(&admin), "mqtt_inflight_dropped", "queue_full"), 0);
    drop(live);
    s.terminate();
}

/// SUBSCRIBE to `filters`, 32 a packet (MQTT's limit here), each granted its QoS.
fn granted(conn: &mut TcpStream, filters: &[(&str, u8)]) {
    for (id, part) in filters.chunks(32).enumerate() {
        conn.write_all(&subscribe_packet(false, id as u16 + 1, part)).unwrap();
        let (kind, body) = packet(conn);
        assert_eq!(kind, 0x90);
        assert_eq!(body[2..], part.iter().map(|(_, q)| *q).collect::<Vec<_>>(), "all granted");
    }
}

/// `/stats` now.
fn stats(admin: &str) -> Value {
    let (status, body) = http(admin, "GET", "/stats", b"", None);
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// The worker holding the only connection listed: its index in `pids`.
fn worker_of_the_connection(admin: &str) -> usize {
    let (status, body) = http(admin, "GET", "/connections", b"", None);
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    v["connections"][0]["worker"].as_u64().unwrap_or_else(|| panic!("one connection listed: {v}")) as usize
}

/// A worker stopped (SIGSTOP) while 5,000 QoS 1 messages of 8 KiB for
/// its subscriber keep coming, then continued: every message the admin
/// API accepted is delivered or counted as dropped (by the shard for the
/// stopped worker, or by the subscriber's queue), the node answers
/// meanwhile, and the client id is reusable with its session.
#[test]
fn a_stopped_worker_loses_nothing_uncounted_and_its_client_id_stays_usable() {
    let (mut s, ready, admin, port) = broker("2", &[]);
    let (mut sub, _, code) = connected_from("127.0.0.1", port, 4, "sleeper", false);
    assert_eq!(code, 0);
    subscribe(&mut sub, false, "cmd/sleeper", 1);
    let worker = worker_of_the_connection(&admin);
    let pid = pids(&ready)[worker];
    // SAFETY: signalling a worker PID our own server reported.
    unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    let n = 5_000;
    let data = vec![b'q'; 8192];
    for i in 0..n {
        let (status, body) = http(&admin, "POST", "/publish?topic=cmd/sleeper&qos=1", &data, None);
        assert_eq!(status, 200, "publish {i} while the worker is stopped: {body}");
    }
    // The node answers with the worker stopped.
    assert_eq!(http(&admin, "GET", "/healthz", b"", None).0, 200);
    // SAFETY: as above.
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    // Read what comes, acknowledging, until nothing more comes.
    sub.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut delivered = 0u64;
    loop {
        let mut b = [0u8; 1];
        match sub.read_exact(&mut b) {
            Ok(()) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => break,
            Err(e) => panic!("{e}"),
        }
        let (mut len, mut shift) = (0usize, 0);
        loop {
            sub.read_exact(&mut b).unwrap();
            len |= ((b[0] & 0x7F) as usize) << shift;
            shift += 7;
            if b[0] & 0x80 == 0 {
                break;
            }
        }
        let mut body = vec![0; len];
        sub.read_exact(&mut body).unwrap();
        assert_eq!(body.len(), 2 + 11 + 2 + 8192, "a whole delivery");
        let id = &body[13..15];
        sub.write_all(&frame(0x40, id)).unwrap();
        delivered += 1;
    }
    let v = stats_when(&admin, "the books balance", |v| {
        let dropped = count(v, "mqtt_inflight_dropped", "queue_full")
            + count(v, "mqtt_inflight_dropped", "queue_bytes")
            + v["broker"]["dropped"]["worker_full"].as_u64().unwrap_or(0);
        delivered + dropped == n
    });
    assert!(delivered > 0, "some were delivered: {v}");
    // The client id is reusable, its session kept.
    drop(sub);
    let (_again, present, code) = connected_from("127.0.0.1", port, 4, "sleeper", false);
    assert_eq!((present, code), (true, 0), "the client id and its session, after the stop");
    s.terminate();
}

/// A publish sent the moment a SUBACK arrives (by another client on
/// either worker, or through the admin API) reaches the new subscriber,
/// 300 times over, while four other clients keep every worker's bus busy
/// (frames waiting to share a write). (9ae4a74: a subscription's interest
/// waited for company while its SUBACK went out, and a shard could route
/// a publish read beside the interest before it.)
#[test]
fn a_publish_right_after_the_suback_reaches_the_new_subscriber() {
    let (mut s, _, admin, port) = broker("2", &["--max-commands-per-second", "100000"]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let noise = noise_clients(port, &stop);
    let mut subscriber = raw_client(port, 4, "fresh", &[]);
    subscriber.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut publishers: Vec<TcpStream> = (0..4).map(|i| raw_client(port, 4, &format!("quick{i}"), &[])).collect();
    for i in 0..300u16 {
        let topic = format!("fresh/{i}");
        subscribe(&mut subscriber, false, &topic, 0);
        let payload = format!("m{i}");
        if i % 5 == 4 {
            let (status, body) = http(&admin, "POST", &format!("/publish?topic={topic}"), payload.as_bytes(), None);
            assert_eq!(status, 200, "{body}");
        } else {
            let p = &mut publishers[i as usize % 4];
            p.write_all(&frame(0x30, &publish_body(false, &topic, None, payload.as_bytes()))).unwrap();
        }
        let mut b = [0u8; 1];
        if !matches!(subscriber.peek(&mut b), Ok(1)) {
            panic!("round {i}: nothing delivered within 5 s of the publish sent right after the SUBACK");
        }
        let (first, body) = packet(&mut subscriber);
        assert_eq!((first, &body[2 + topic.len()..]), (0x30, payload.as_bytes()), "round {i}: the publish sent right after the SUBACK");
        // Let it go (a connection holds 64 subscriptions at most).
        unsubscribe(&mut subscriber, &topic);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in noise {
        t.join().unwrap();
    }
    s.terminate();
}

/// The converse of the test above: a retained message whose PUBACK came
/// before a client subscribed reaches that client exactly once, live or
/// as the retained answer (a shard applying the subscription ahead of the
/// publish, and the retained want behind it, sends it twice: 80d39bc did,
/// once in 19 runs of the MQTT journey; here within three rounds, 3 of
/// 3 runs). Other clients follow `kept/#` on both workers, so the live
/// copy reaches the subscriber's worker whatever the shard's order: it is
/// held back until the retained answer came (without that, round 0 or 1
/// got two copies, 3 of 3 runs). Each round ends with a marker published
/// after the SUBACK, which the same shard routes behind anything the
/// round caused.
#[test]
fn a_retained_message_acknowledged_before_a_subscribe_arrives_once() {
    let (mut s, _, _, port) = broker("2", &["--max-commands-per-second", "100000"]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let noise = noise_clients(port, &stop);
    // Clients following every kept topic already, on either worker.
    let _holders: Vec<TcpStream> = (0..4)
        .map(|i| {
            let mut h = raw_client(port, 4, &format!("holder{i}"), &[]);
            subscribe(&mut h, false, "kept/#", 0);
            h
        })
        .collect();
    let mut subscriber = raw_client(port, 4, "late", &[]);
    subscriber.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut publishers: Vec<TcpStream> = (0..4).map(|i| raw_client(port, 4, &format!("keeper{i}"), &[])).collect();
    for i in 0..400u16 {
        let topic = format!("kept/{i}");
        let payload = format!("r{i}");
        let p = &mut publishers[i as usize % 4];
        p.write_all(&frame(0x33, &publish_body(false, &topic, Some(i + 1), payload.as_bytes()))).unwrap();
        assert_eq!(packet(p).0, 0x40, "round {i}: PUBACK");
        subscribe(&mut subscriber, false, &topic, 0);
        p.write_all(&frame(0x30, &publish_body(false, &topic, None, b"end"))).unwrap();
        let mut copies = 0;
        loop {
            let (first, body) = packet(&mut subscriber);
            assert_eq!(first & 0xF0, 0x30, "round {i}: a PUBLISH");
            match &body[2 + topic.len()..] {
                b"end" => break,
                got => {
                    assert_eq!(got, payload.as_bytes(), "round {i}");
                    copies += 1;
                }
            }
        }
        assert_eq!(copies, 1, "round {i}: the retained message acknowledged before the SUBSCRIBE, {copies} times");
        // Let it go (64 subscriptions a connection, and the retained set).
        p.write_all(&frame(0x31, &publish_body(false, &topic, None, b""))).unwrap();
        unsubscribe(&mut subscriber, &topic);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in noise {
        t.join().unwrap();
    }
    s.terminate();
}

/// Four clients publishing QoS 0 every 100 us until `stop` (two minutes
/// at most): both workers' bus buffers keep waiting for company.
fn noise_clients(port: u16, stop: &std::sync::Arc<std::sync::atomic::AtomicBool>) -> Vec<std::thread::JoinHandle<()>> {
    (0..4)
        .map(|i| {
            let (stop, mut c) = (stop.clone(), raw_client(port, 4, &format!("noise{i}"), &[]));
            std::thread::spawn(move || {
                let one = frame(0x30, &publish_body(false, &format!("noise/{i}"), None, b"n"));
                let deadline = Instant::now() + Duration::from_secs(120);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < deadline {
                    c.write_all(&one).unwrap();
                    std::thread::sleep(Duration::from_micros(100)); // the noise's pace
                }
            })
        })
        .collect()
}

/// UNSUBSCRIBE from `topic` and read the UNSUBACK.
fn unsubscribe(c: &mut TcpStream, topic: &str) {
    let mut unsub = 1u16.to_be_bytes().to_vec();
    unsub.extend_from_slice(&(topic.len() as u16).to_be_bytes());
    unsub.extend_from_slice(topic.as_bytes());
    c.write_all(&frame(0xA2, &unsub)).unwrap();
    assert_eq!(packet(c).0, 0xB0, "UNSUBACK");
}
